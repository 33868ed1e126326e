"""Train the EAGLE head, the EAGLE-3 head and Medusa heads on the frozen shipped target:

    python -m lessonlib.models.train_heads both    # EAGLE and Medusa
    python -m lessonlib.models.train_heads eagle --ttt 3 --suffix=-ttt   # EAGLE with the training-time test alone
    python -m lessonlib.models.train_heads all     # EAGLE, EAGLE-3 and Medusa on one target forward per batch
    python -m lessonlib.models.train_heads all --temperatures 0.7 1 1.5   # the KL averaged over sampling temperatures
    python -m lessonlib.models.train_heads eagle --objective top1 --suffix=-top1   # calibration's control

Both train on one target forward per batch (``Trainee``); each checkpoint's metadata records
the run (``train.run_metadata``) and the held-out top-1 agreement with the target by depth.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
import torch.nn as nn

from lessonlib import cli
from lessonlib.models import CHECKPOINTS, GPTConfig, data, load, load_state, read_meta, save
from lessonlib.models.checkpoints import fingerprint
from lessonlib.models.heads import (
    HEAD_KINDS,
    OBJECTIVES,
    build,
    check_objective,
    eagle3_losses,
    eagle_losses,
    medusa_losses,
    target_outputs,
)
from lessonlib.models.loop import fit
from lessonlib.models.provenance import run_metadata
from lessonlib.models.steps import autocast, optimizer_step

EAGLE3_TTT = 3  # EAGLE-3's training-time test unrolls the head this many steps on its own outputs
# each head kind of core.kinds alone, and the joint runs: EAGLE + Medusa, every head (one target forward per batch)
KINDS = {**{kind: (kind,) for kind in HEAD_KINDS}, "both": ("eagle", "medusa"), "all": HEAD_KINDS}


class Trainee(nn.Module):
    """The heads trained together on one target forward per batch (the forward dominates the
    cost, so training EAGLE and Medusa at once halves it)."""

    def __init__(self, config: GPTConfig, kinds=("eagle", "medusa"), n_heads=4, ttt_steps=1, eagle3_ttt=EAGLE3_TTT,
                 temperatures=(1.0,), objective="fkl"):
        super().__init__()
        self.temperatures = tuple(float(t) for t in temperatures)  # the forward KL is averaged over these
        self.objective = check_objective(objective)  # "fkl" (distribution matching) or "top1" (the argmax only)
        if eagle3_ttt < 2:
            raise ValueError("eagle3_ttt must be >= 2 (EAGLE-3 always trains with the training-time test), "
                             f"got {eagle3_ttt!r}")
        self.config, self.ttt_steps, self.eagle3_ttt = config, ttt_steps, eagle3_ttt
        self.heads = nn.ModuleDict({kind: build(kind, config, n_heads) for kind in kinds})

    @property
    def device(self):
        return next(self.parameters()).device

    def losses(self, target, x):
        """{kind: (per-depth losses, per-depth top-1 agreements)} on windows ``x``."""
        fused = None
        if "eagle3" in self.heads:  # one forward gives the fused features; the top block's are their last C
            t_logits, fused = target_outputs(target, x, self.heads["eagle3"].layers)
            h = fused[..., -self.config.n_embd :]
        else:
            t_logits, h = target_outputs(target, x)
        out = {}
        for kind, head in self.heads.items():
            if kind == "eagle":
                out[kind] = eagle_losses(head, target, x, t_logits, h, self.ttt_steps, self.temperatures,
                                         self.objective)
            elif kind == "eagle3":  # EAGLE-3 always trains with the training-time test
                out[kind] = eagle3_losses(head, target, x, t_logits, fused, self.eagle3_ttt, self.temperatures,
                                          self.objective)
            else:
                out[kind] = medusa_losses(head, target, t_logits, h, self.temperatures, self.objective)
        return out


def _step(model: Trainee, optimizer, x, y, teacher=None, kind=None):
    """One optimizer step for ``train.fit`` (``teacher`` is the frozen target): the sum over
    kinds of the mean loss over depths."""
    with autocast(model.device):
        losses = model.losses(teacher, x)
    return optimizer_step(model, optimizer, sum(sum(per_depth) / len(per_depth) for per_depth, _ in losses.values()))


@torch.no_grad()
def heldout_agreement(model: Trainee, target, n_windows=16, corpus="code", seed=0, eagle_depths=4):
    """Held-out top-1 agreement with the target per depth, teacher-forced windows of ``corpus``
    (the EAGLE head is unrolled ``eagle_depths`` steps on its own features)."""
    tokens = data.token_array(corpus, "heldout").astype(np.int64)
    T = target.config.block_size
    starts = np.random.default_rng(seed).integers(0, len(tokens) - T - 1, size=n_windows)
    x = torch.from_numpy(np.stack([tokens[s : s + T] for s in starts])).to(target.device)
    model.eval()
    unrolls = model.ttt_steps, model.eagle3_ttt
    model.ttt_steps = model.eagle3_ttt = eagle_depths
    with autocast(target.device):
        agree = {kind: [round(float(a), 4) for a in v[1]] for kind, v in model.losses(target, x).items()}
    model.ttt_steps, model.eagle3_ttt = unrolls
    return agree


def train_heads(kinds=("eagle", "medusa"), steps=1000, minutes=None, ttt_steps=1, n_heads=4, batch_size=8, lr=2e-3,
                seed=0, device=None, target_name="target", suffix="", directory=CHECKPOINTS, resume=False,
                temperatures=(1.0,), objective="fkl"):
    """Train EAGLE and/or Medusa heads on the frozen shipped target; save each as
    ``{kind}{suffix}`` and return {kind: meta}. ``resume``: start from those checkpoints (a new
    learning-rate schedule; steps, tokens and seconds add up in the metadata). ``temperatures``:
    the forward KL to the target is averaged over these sampling temperatures (``heads.tempered_fkl``).
    ``objective``: "fkl", or "top1" for cross-entropy on the target's argmax (``heads.head_loss``)."""
    target = load(target_name, device, directory)
    for p in target.parameters():
        p.requires_grad_(False)
    torch.manual_seed(seed)
    model = Trainee(target.config, kinds, n_heads, ttt_steps, temperatures=temperatures,
                    objective=objective).to(target.device)
    before = {kind: {} for kind in kinds}
    if resume:
        for kind, head in model.heads.items():
            head.load_state_dict(load_state(kind + suffix, directory))
            before[kind] = read_meta(kind + suffix, directory)
    state = fit(model, steps, batch_size, lr, seed, step_fn=_step, teacher=target,
                time_budget_s=None if minutes is None else 60 * minutes, desc="+".join(kinds))
    agreement = heldout_agreement(model, target)
    metas = {}
    for kind, head in model.heads.items():
        metas[kind] = {
            "name": kind + suffix,
            "kind": kind,
            "target": target_name,
            "target_fingerprint": fingerprint(target),  # checked by load_head (checkpoints.check_beside)
            "config": dataclasses.asdict(target.config),
            "n_heads": n_heads if kind == "medusa" else None,
            "ttt_steps": {"eagle": ttt_steps, "eagle3": model.eagle3_ttt}.get(kind),
            "trained_with": list(kinds),
            "loss_temperatures": list(model.temperatures),
            "objective": model.objective,
            "params": sum(p.numel() for p in head.parameters()),
            **run_metadata(state, steps, batch_size, target.device, seed, before[kind]),
            "heldout_top1_agreement_by_depth": agreement[kind],
        }
        metas[kind] = save(head, kind + suffix, metas[kind], directory)
    return metas


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=list(KINDS), help="both = EAGLE + Medusa; all = EAGLE + EAGLE-3 + Medusa")
    parser.add_argument("--steps", type=cli.positive_int, default=1000,
                        help="planned optimizer steps (sets the lr schedule; default: the shipped heads' 1000)")
    parser.add_argument("--minutes", type=cli.number(0, low_open=True), default=None,
                        help="stop after this many minutes")
    parser.add_argument("--ttt", type=cli.int_at_least(1, 64), default=1,
                        help="the EAGLE head's training-time test: unroll steps "
                             "(1 = off; EAGLE-3 always unrolls EAGLE3_TTT)")
    parser.add_argument("--heads", type=cli.int_at_least(1, 64), default=4, help="number of Medusa heads")
    parser.add_argument("--batch", type=cli.positive_int, default=8)
    parser.add_argument("--lr", type=cli.number(0, 1, low_open=True), default=2e-3)
    parser.add_argument("--suffix", type=cli.pattern(r"(-[A-Za-z0-9_]+)?", "'' or -WORD, e.g. -ttt"), default="",
                        help="checkpoint name suffix, e.g. -ttt")
    parser.add_argument("--target", default="target", help="the frozen target the heads read")
    parser.add_argument("--resume", action="store_true", help="continue from the saved heads (new lr schedule)")
    parser.add_argument("--temperatures", type=cli.number(0, 10, low_open=True), nargs="+", default=[1.0],
                        help="average the forward KL over these sampling temperatures (default: 1)")
    parser.add_argument("--objective", choices=OBJECTIVES, default="fkl",
                        help="fkl: forward KL to the target (default); top1: cross-entropy on its argmax token only")
    parser.add_argument("--seed", type=cli.nonnegative_int, default=0)
    parser.add_argument("--device", type=cli.device, default=None)
    args = parser.parse_args(argv)
    kinds = KINDS[args.kind]
    started = time.time()
    metas = train_heads(kinds, args.steps, args.minutes, args.ttt, args.heads, args.batch, args.lr, args.seed,
                        args.device, target_name=args.target, suffix=args.suffix, resume=args.resume,
                        temperatures=args.temperatures, objective=args.objective)
    for meta in metas.values():
        print({k: meta[k]
               for k in ("name", "steps", "tokens_seen", "train_seconds", "heldout_top1_agreement_by_depth")})
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.train_heads"))
