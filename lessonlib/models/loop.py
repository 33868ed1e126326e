"""The training loop every trainer shares: ``fit`` (AdamW, the warm-up and cosine schedule
``lr_at``, resumable state, checkpoints, a time budget), its default step ``train_step`` and loss
``distillation_loss`` (ce, forward KL, TV), the random training windows ``Batches`` and the
held-out ``bits_per_byte``.

``STOP`` and ``PAUSED`` are the loop's controls: ``python -m lessonlib.models.train`` (``train``)
sets them from signals, and ``fit`` reads them after every step.
"""
from __future__ import annotations

import math
import os
import signal
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from lessonlib.core.validate import check_positive_number
from lessonlib.models import GPT, data
from lessonlib.models.steps import autocast, optimizer_step

# Set by SIGTERM / Ctrl-C under ``train.main``: ``fit`` ends after the step in progress, and the run is
# checkpointed and shipped as far as it got (``--resume`` continues it), like a ``--minutes`` stop.
STOP = threading.Event()
# SIGTSTP pauses a run (SIGCONT resumes it) without counting the pause as training time, so a
# shared machine can lend the run's cores to something else: ``kill -TSTP PID``, later ``kill -CONT PID``.
PAUSED = {"seconds": 0.0, "since": None}


def _pause(*_):
    PAUSED["since"] = time.time()
    os.kill(os.getpid(), signal.SIGSTOP)


def _resume(*_):
    if PAUSED["since"] is not None:
        PAUSED["seconds"] += time.time() - PAUSED["since"]
        PAUSED["since"] = None


# ----------------------------------------------------------------------------- losses

def distillation_loss(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Mean per-position loss between a student (draft) and a teacher (target).

    ce : cross-entropy of the student on the ground-truth ``labels`` (teacher unused)
    fkl: forward KL(p_T || q_T) = sum p_T (log p_T - log q_T), p = teacher, q = student
    tvd: total variation 1/2 sum |p_T - q_T| -- the loss whose minimum maximises alpha = 1 - TV
    Both distributions are tempered the same way: softmax(logits / temperature).
    """
    if kind not in ("ce", "fkl", "tvd"):
        raise ValueError(f"kind must be 'ce', 'fkl' or 'tvd', got {kind!r}")
    check_positive_number(temperature, "temperature")
    V = student_logits.shape[-1]
    s = student_logits.float().reshape(-1, V) / temperature
    if kind == "ce":
        if labels is None:
            raise ValueError("labels are required for kind='ce'")
        return F.cross_entropy(s, labels.reshape(-1))
    if teacher_logits is None or teacher_logits.shape != student_logits.shape:
        raise ValueError("teacher_logits must have the same shape as student_logits")
    t = teacher_logits.float().reshape(-1, V) / temperature
    log_q = F.log_softmax(s, -1)
    log_p = F.log_softmax(t, -1)
    if kind == "fkl":
        return (log_p.exp() * (log_p - log_q)).sum(-1).mean()
    return 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1).mean()


# ----------------------------------------------------------------------------- data

class Batches:
    """Random training windows from the train split of both corpora, weighted by size."""

    def __init__(self, block_size: int, batch_size: int, seed: int, split: str = "train"):
        self.arrays = [data.token_array(c, split) for c in data.CORPORA]
        sizes = np.array([len(a) for a in self.arrays], dtype=float)
        self.weights = sizes / sizes.sum()
        self.block_size, self.batch_size = block_size, batch_size
        self.rng = np.random.default_rng(seed)

    def __next__(self):
        which = self.rng.choice(len(self.arrays), size=self.batch_size, p=self.weights)
        rows = []
        for w in which:
            a = self.arrays[w]
            i = self.rng.integers(0, len(a) - self.block_size - 1)
            rows.append(a[i : i + self.block_size + 1])
        xy = torch.from_numpy(np.stack(rows).astype(np.int64))
        return xy[:, :-1], xy[:, 1:]

    def __iter__(self):
        return self


@torch.no_grad()
def bits_per_byte(model: GPT, corpus: str, max_tokens: int = 60_000, split: str = "heldout") -> float:
    """Held-out cross-entropy in bits per UTF-8 byte, over non-overlapping windows."""
    model.eval()
    tokens = data.token_array(corpus, split)[:max_tokens].astype(np.int64)
    T = model.config.block_size
    n = (len(tokens) - 1) // T * T
    x = torch.from_numpy(tokens[:n]).view(-1, T).to(model.device)
    y = torch.from_numpy(tokens[1 : n + 1]).view(-1, T).to(model.device)
    nll = 0.0
    for i in range(0, len(x), 16):
        with autocast(model.device):
            logits = model(x[i : i + 16])
        nll += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y[i : i + 16].reshape(-1),
                               reduction="sum").item()
    n_bytes = len(data.to_text(tokens[1 : n + 1]).encode())
    return nll / math.log(2) / n_bytes


# ----------------------------------------------------------------------------- the loop

def lr_at(step, total, peak):
    """Linear warm-up over min(200, total/10) steps, then cosine decay to 10 % of the peak."""
    warmup = max(1, min(200, total // 10))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup)))))


def train_step(model, optimizer, x, y, teacher=None, kind="ce"):
    """One optimizer step of the draft (or target) on a batch; returns the loss value."""
    with autocast(model.device):
        logits = model(x)
        teacher_logits = None
        if teacher is not None:
            with torch.no_grad():
                teacher_logits = teacher(x)
    return optimizer_step(model, optimizer, distillation_loss(logits, teacher_logits, kind, labels=y))


def fit(model, steps, batch_size, lr, seed, step_fn=train_step, teacher=None, kind="ce", state=None, time_budget_s=None,
        desc="train", checkpoint=None, checkpoint_every=500):
    """Run ``steps`` optimizer steps (or stop at ``time_budget_s``); returns the state dict.

    ``state`` holds ``step``, ``tokens``, ``seconds``, ``losses`` and the optimizer, so a
    stopped run resumes exactly where it left off.
    """
    device = model.device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    state = state or {"step": 0, "tokens": 0, "seconds": 0.0, "losses": []}
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    batches = Batches(model.config.block_size, batch_size, seed + state["step"])
    started, paused_before = time.time(), PAUSED["seconds"]

    def running():  # wall time, pauses excluded
        return time.time() - started - (PAUSED["seconds"] - paused_before)

    model.train()
    bar = tqdm(range(state["step"], steps), desc=desc, initial=state["step"], total=steps)
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        x, y = next(batches)
        loss = step_fn(model, optimizer, x.to(device), y.to(device), teacher=teacher, kind=kind)
        state["losses"].append(loss)
        state["step"] = step + 1
        state["tokens"] += x.numel()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss:.3f}")
        elapsed = running()
        if checkpoint and (step + 1) % checkpoint_every == 0:
            checkpoint(state | {"optimizer": optimizer.state_dict(), "seconds": state["seconds"] + elapsed})
        if STOP.is_set() or (time_budget_s is not None and elapsed > time_budget_s):
            break
    state["seconds"] += running()
    state["optimizer"] = optimizer.state_dict()
    model.eval()
    return state
