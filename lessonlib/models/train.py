"""Train the shipped models: ``python -m lessonlib.train {tokenizer,target,draft-ce,draft-kl,mini}``.

Every run is seeded, shows a progress bar, checkpoints its full state under ``.cache/runs``
so ``--resume`` continues where it stopped, and finally writes ``lessonlib/assets/NAME
.safetensors`` plus a JSON file with the config, corpus, tokens seen, held-out bits per byte,
training time, device and git revision.

On a CPU with bf16 matrix units (AVX512-BF16 / AMX) bf16 autocast trains several times
faster than float32; the weights and optimizer state stay float32.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import subprocess
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from lessonlib.models import data
from lessonlib.models.steps import autocast, optimizer_step  # noqa: F401 (re-exported for train_heads, notebooks)
from lessonlib.models import (CHECKPOINTS, GPT, GPTConfig, config_dict, default_device, load, load_state, read_meta,
                              round_trip, save, scaled_name)

# The target is deep and narrow (issue 17), so that on a CPU -- where a step costs per layer --
# a one-layer draft or head costs a few percent of a step, as a 1-layer head does beside a
# 7B-70B model on a GPU. Chosen with ``python -m lessonlib.bench shapes`` (outputs/benchmarks/shapes.md);
# the first course's 8 x 256 target gave a one-layer head 1/8 of a step or more.
TARGET_CONFIG = GPTConfig(n_layer=24, n_head=5, n_embd=160, block_size=256)
MTP_DEPTH = 2  # DeepSeek-V3 trains D = 1; two modules let the target draft two tokens for itself
# One layer: a draft step is dispatch-bound on a CPU, so its cost follows the number of layers,
# not the width (measured in the decoding loop: 0.164 ms for 1 x 128, 0.275 ms for 2 x 128)
DRAFT_CONFIG = GPTConfig(n_layer=1, n_head=4, n_embd=128, block_size=256)
MINI_CONFIG = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64)
# The GPU-scale switch: the same recipes at a size one GPU trains in minutes.
GPU_CONFIGS = {
    TARGET_CONFIG: GPTConfig(n_layer=24, n_head=8, n_embd=384, block_size=256),  # ~44 M parameters, as deep
    DRAFT_CONFIG: GPTConfig(n_layer=2, n_head=4, n_embd=256, block_size=256),    # ~2.1 M parameters
}
SCALES = ("cpu", "gpu")
RUNS = data.CACHE_DIR / "runs"
# Set by SIGTERM / Ctrl-C under ``main``: ``fit`` ends after the step in progress, and the run is
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
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
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
        nll += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y[i : i + 16].reshape(-1), reduction="sum").item()
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
    running = lambda: time.time() - started - (PAUSED["seconds"] - paused_before)  # wall time, pauses excluded
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


def run_metadata(state, planned_steps, batch_size, device, seed, before=None) -> dict:
    """The fields every checkpoint's metadata records about its training run (steps, tokens
    and seconds add up over resumed runs: ``before`` is the previous metadata)."""
    before = before or {}
    return {
        "steps": before.get("steps", 0) + state["step"],
        "planned_steps": planned_steps,
        "runs": before.get("runs", 0) + (len(state.get("history", [])) or 1),
        "batch_size": batch_size,
        "tokens_seen": before.get("tokens_seen", 0) + state["tokens"],
        "train_seconds": round(before.get("train_seconds", 0.0) + state["seconds"], 1),
        "final_train_loss": float(np.mean(state["losses"][-50:])),
        **where(device),
        "seed": seed,
    }


def where(device) -> dict:
    """Where a run trains: device, machine (with the thread count), torch and the git revision."""
    return {"device": torch.cuda.get_device_name() if torch.device(device).type == "cuda" else "cpu",
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + f", {torch.get_num_threads()} threads",
            "torch": str(torch.__version__), "git_revision": git_revision()}  # str: a TorchVersion breaks weights_only loads


def record_run(state, before, place):
    """Append this run to ``state["history"]``: the steps it trained, its seconds and where
    (``place``: ``where`` at the run's start), so a resumed checkpoint says which part was trained where."""
    history = state.setdefault("history", [])
    if not history and before["step"] > 0:  # resumed from a run saved before runs kept a history
        history.append({"steps": [0, before["step"]], "where": "not recorded (saved before runs kept a history)"})
    history.append({"steps": [before["step"], state["step"]], "seconds": round(state["seconds"] - before["seconds"], 1),
                    **place})


def git_revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=CHECKPOINTS, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ----------------------------------------------------------------------------- recipes

RECIPES = {
    # name: (config, peak lr, batch, kind, teacher, initial weights)
    # trained with MTP modules (lessonlib.models.mtp), saved beside it as target-mtp
    "target": (TARGET_CONFIG, 1.5e-3, 32, "mtp", None, None),
    # draft-ce and draft-kl share a base and differ only in the objective of their last steps,
    # so the comparison of their alphas is not confounded by how many tokens each has seen
    "draft-base": (DRAFT_CONFIG, 3e-3, 32, "ce", None, None),
    "draft-ce": (DRAFT_CONFIG, 1e-3, 32, "ce", None, "draft-base"),
    "draft-kl": (DRAFT_CONFIG, 1e-3, 32, "fkl", "target", "draft-base"),
    "mini": (MINI_CONFIG, 3e-3, 8, "ce", None, None),
}
DEFAULT_STEPS = {"target": 2400, "draft-base": 1500, "draft-ce": 500, "draft-kl": 500, "mini": 50}


def recipe(name: str, scale: str = "cpu"):
    """(config, lr, batch, kind, teacher, init, checkpoint name) of a recipe at a scale."""
    if name not in RECIPES:
        raise ValueError(f"name must be one of {sorted(RECIPES)}, got {name!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    config, lr, batch, kind, teacher, init = RECIPES[name]
    if scale == "gpu":
        config, batch = GPU_CONFIGS.get(config, config), 4 * batch
    teacher, init = (n and scaled_name(n, scale) for n in (teacher, init))  # None stays None
    return config, lr, batch, kind, teacher, init, scaled_name(name, scale)


OBJECTIVES = {"ce": "cross-entropy on ground truth", "fkl": "forward KL to the target",
              "mtp": "cross-entropy on ground truth + (lambda / D) sum_d MTP cross-entropy (lambda 0.3, then 0.1)"}


def _trainee(config, kind, device, steps):
    """The module ``fit`` steps: the GPT, or the GPT with its MTP modules (``kind == "mtp"``)."""
    from lessonlib.models.mtp import TargetWithMTP, mtp_train_step

    gpt = GPT(config).to(device)
    if kind != "mtp":
        return gpt, gpt, train_step
    return TargetWithMTP(gpt, MTP_DEPTH, steps).to(device), gpt, mtp_train_step


def _resume_state(model, run_path, name, out_dir):
    """The saved run state (full, with the optimizer) or, when only the shipped checkpoint of
    an unfinished run is here (a new machine), its weights and counters with a new optimizer."""
    if run_path.exists():
        saved = torch.load(run_path, weights_only=True)
        model.load_state_dict(saved.pop("model"))
        return saved
    meta_path = out_dir / f"{name}.json"
    if not meta_path.exists():
        return None
    meta = read_meta(name, out_dir)
    gpt = getattr(model, "gpt", model)
    gpt.load_state_dict(load_state(name, out_dir))
    if hasattr(model, "mtp"):
        model.mtp.load_state_dict(load_state(f"{name}-mtp", out_dir))
    return {"step": meta["steps"], "tokens": meta["tokens_seen"], "seconds": meta["train_seconds"], "losses": [],
            "history": meta.get("history", []),
            "optimizer_restarted_at": meta["steps"]}


def train_model(name, steps, minutes=None, resume=False, seed=0, device=None, out_dir=CHECKPOINTS, scale="cpu"):
    config, lr, batch, kind, teacher_name, init, name = recipe(name, scale)
    device = device or default_device()
    torch.manual_seed(seed)
    model, gpt, step_fn = _trainee(config, kind, device, steps)
    if init:
        gpt.load_state_dict(load(init, device).state_dict())
    run_path = RUNS / f"{name}.pt"
    state = _resume_state(model, run_path, name, out_dir) if resume else None
    if kind == "mtp":
        model.step = state["step"] if state else 0
    teacher = load(teacher_name, device) if teacher_name else None

    def checkpoint(s):
        run_path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(s | {"model": model.state_dict()}, run_path)

    before = {"step": state["step"], "seconds": state["seconds"]} if state else {"step": 0, "seconds": 0.0}
    place = where(device)  # at the start: the revision whose code this run executes
    state = fit(model, steps, batch, lr, seed + (init is not None), step_fn=step_fn, teacher=teacher, kind=kind,
                state=state, time_budget_s=None if minutes is None else 60 * minutes, desc=name, checkpoint=checkpoint,
                checkpoint_every=50 if kind == "mtp" else 500)
    record_run(state, before, place)
    checkpoint(state)
    trainee, model = model, gpt
    meta = {
        "name": name,
        "config": config_dict(config),
        "params": model.num_params(),
        "objective": OBJECTIVES[kind],
        "teacher": teacher_name,
        "initialised_from": init,
        "corpus": "train split of code + prose (lessonlib.data), windows sampled by corpus size",
        "heldout_documents": data.heldout_names(),
        **run_metadata(state, steps, batch, device, seed),
        "heldout_bits_per_byte": None,  # filled below, after rounding to the stored precision
        "history": state["history"],
    }
    if "optimizer_restarted_at" in state:
        meta["optimizer_restarted_at"] = state["optimizer_restarted_at"]
    if state["step"] < steps:  # stopped by --minutes or SIGTERM: ship what was reached, say how to go on
        meta["unfinished"] = (f"training stopped at step {state['step']} of {steps}; resume with: "
                              f"python -m lessonlib.models.train {name} --resume")
    model.load_state_dict(round_trip(model.state_dict()))  # evaluate exactly what ships
    meta["heldout_bits_per_byte"] = {c: round(bits_per_byte(model, c), 4) for c in data.CORPORA}
    save(model, name, meta, out_dir)
    if kind == "mtp":  # the modules ship beside the target, with the same run metadata
        save(trainee.mtp, f"{name}-mtp", meta | {"name": f"{name}-mtp", "kind": "mtp", "depth": MTP_DEPTH, "target": name,
                                                  "params": sum(p.numel() for p in trainee.mtp.parameters())}, out_dir)
    return model, meta


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["tokenizer", *RECIPES])
    parser.add_argument("--steps", type=int, default=None, help="planned optimizer steps (sets the lr schedule)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="stop after this many minutes (resume later); SIGTERM or Ctrl-C stops the same way")
    parser.add_argument("--resume", action="store_true", help="continue the run saved under .cache/runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="gpu: the larger configs, saved as NAME-gpu")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop cleanly: finish the step, save, ship (resume later)
        signal.signal(sig, lambda *_: STOP.set())
    signal.signal(signal.SIGTSTP, _pause)
    signal.signal(signal.SIGCONT, _resume)
    if args.what == "tokenizer":
        data.train_tokenizer()
        print(f"wrote {data.TOKENIZER_PATH}")
        return
    steps = args.steps or DEFAULT_STEPS[args.what] * (2 if args.scale == "gpu" else 1)
    _, meta = train_model(args.what, steps, args.minutes, args.resume, args.seed, args.device, scale=args.scale)
    print({k: meta[k] for k in ("name", "params", "steps", "tokens_seen", "train_seconds", "heldout_bits_per_byte")})


if __name__ == "__main__":
    main()
