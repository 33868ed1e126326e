"""Is each draft's q a good *sampling* distribution? Teacher-forced alpha and reliability.

    python -m lessonlib.bench calibration [--windows 8]

Once drafts are sampled, what a draft keeps at T > 0 is alpha_T = sum_x min(p_T(x), q_T(x))
(Leviathan et al. 2023), not its top-1 agreement. For every draft (draft-kl, the EAGLE head,
the EAGLE-3 head, Medusa's first head), on held-out code windows read teacher-forced (the draft
sees the target's true features and tokens), this measures alpha at T = 0 (top-1 agreement),
0.7 and 1, and a reliability table at T = 1: the draft's top token x binned by q(x), against the
mean p(x) the target gives it (a calibrated draft has p = q on the diagonal; above it, the draft
is under-confident; below, over-confident). The heads are trained with forward KL to the
target's T = 1 distribution (``models.heads``: ``eagle_losses``, ``eagle3_losses``), the
distribution-matching loss sampling wants. The report adds the "before" of that loss (``CONTROLS``):
the same EAGLE head trained on the target's argmax alone (``train_heads --objective top1``) and
the separate draft before its distillation (draft-ce: cross-entropy on the text); and the
temperature the KL is taken at (``VARIANTS``): the EAGLE head trained alone at T = 1, and alone
with the KL averaged over T = 0.7 and 1 (``train_heads --temperatures 0.7 1``).

Writes ``outputs/benchmarks/calibration.json`` and ``calibration.md``.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib import cli, threads
from lessonlib.bench import common
from lessonlib.core import kinds as core_kinds
from lessonlib.core.sampling import softmax
from lessonlib.models import CHECKPOINTS, data, load
from lessonlib.models.distill import alpha_from_logits
from lessonlib.models.heads import eagle_unroll, load_head, target_outputs

TEMPERATURES = (0.0, 0.7, 1.0)
# the "before" of distribution matching: the same architectures trained on a top-1 target
CONTROLS = {"draft-ce": "draft-ce (text cross-entropy, before distillation)",
            "eagle-top1": "EAGLE (top-1 loss: the target's argmax only)"}
# the temperature the forward KL is taken at: the EAGLE head trained alone at T = 1, and averaged over 0.7 and 1
VARIANTS = {"eagle-alone": "EAGLE (trained alone, forward KL at T = 1)",
            "eagle-multi": "EAGLE (trained alone, forward KL over T = 0.7 and 1)"}
LABELS = {**CONTROLS, **VARIANTS}  # checkpoint -> its row in the report
BINS = np.linspace(0.0, 1.0, 11)


def windows(n: int, length: int, seed: int = 0) -> torch.Tensor:
    """(n, length) held-out code windows, seeded."""
    tokens = data.token_array("code", "heldout").astype(np.int64)
    starts = np.random.default_rng(seed).integers(0, len(tokens) - length - 1, size=n)
    return torch.from_numpy(np.stack([tokens[s : s + length] for s in starts]))


@torch.no_grad()
def pairs(directory=CHECKPOINTS, n_windows: int = 8, controls: bool = False
          ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{draft: (target logits, draft logits)}, (positions, V) each, aligned: both predict the same
    next token from the same prefix. ``controls``: also the drafts trained without matching the
    target's distribution (``CONTROLS``) and the EAGLE head's temperature variants (``VARIANTS``),
    where their checkpoints exist."""
    target = load("target", "cpu", directory)
    x = windows(n_windows, target.config.block_size)
    t_logits, h = target_outputs(target, x)
    out = {}
    draft = load("draft-kl", "cpu", directory)
    out["draft-kl"] = (t_logits[:, 1:], draft(x)[:, 1:])  # align with the heads: from position 1 on
    order = ("draft-ce", *core_kinds.names("head"), "eagle-top1", *VARIANTS)  # the report's rows, in order
    for name in (n for n in order if controls or n not in LABELS):
        kind = name.split("-")[0]
        try:
            head = load(name, "cpu", directory) if kind == "draft" else load_head(name, target, directory)
        except FileNotFoundError:
            continue
        if kind == "draft":
            out[LABELS[name]] = (t_logits[:, 1:], head(x)[:, 1:])
            continue
        if kind == "medusa":  # head 0 at s predicts x_{s+2}: the target's row at s + 1
            out["Medusa (head 1)"] = (t_logits[:, 1:], head(target, h)[0, :, :-1])
            continue
        feats = target_outputs(target, x, head.layers)[1] if kind == "eagle3" else h
        if kind == "eagle3":
            feats = head.fuse(feats)
        logits, _ = eagle_unroll(head, target, x, feats, 1)[0]  # depth 1, the target's true features
        out[LABELS.get(name, "EAGLE" if kind == "eagle" else "EAGLE-3")] = (t_logits[:, 1:], logits)
    V = t_logits.shape[-1]
    return {k: (a.reshape(-1, V).double().numpy(), b.reshape(-1, V).double().numpy()) for k, (a, b) in out.items()}


def measure(p_logits: np.ndarray, q_logits: np.ndarray) -> dict:
    """Teacher-forced alpha at each temperature, and the T = 1 reliability table."""
    alpha = {f"{t:g}": float(np.mean(alpha_from_logits(p_logits, q_logits, t))) for t in TEMPERATURES}
    p, q = softmax(p_logits, 1.0), softmax(q_logits, 1.0)
    top = q.argmax(-1)
    qx, px = q[np.arange(len(q)), top], p[np.arange(len(p)), top]
    which = np.clip(np.digitize(qx, BINS) - 1, 0, len(BINS) - 2)
    table = [{"q_from": float(BINS[b]), "q_to": float(BINS[b + 1]), "count": int((which == b).sum()),
              "mean_q": float(qx[which == b].mean()), "mean_p": float(px[which == b].mean())}
             for b in range(len(BINS) - 1) if (which == b).any()]
    gap = sum(r["count"] * abs(r["mean_p"] - r["mean_q"]) for r in table) / len(qx)  # expected calibration error
    return {"alpha": alpha, "reliability": table, "calibration_error": gap,
            "overconfidence": float(np.mean(qx - px)),  # > 0: the draft's top token is likelier to it than to p
            "positions": int(len(qx))}


def markdown(results: dict) -> str:
    header = ["draft", "α T = 0 (top-1)", "α T = 0.7", "α T = 1", "calibration error (top token, T = 1)",
              "mean q(x) - p(x) (top token, T = 1)", "positions"]
    rows = [[name, *(f"{r['alpha'][f'{t:g}']:.3f}" for t in TEMPERATURES), f"{r['calibration_error']:.3f}",
             f"{r['overconfidence']:+.3f}", r["positions"]] for name, r in results.items()]
    lines = ["# Teacher-forced calibration of every draft", "", common.markdown_table(header, rows), "",
             "α = mean over held-out code positions of Σ min(p_T, q_T), every draft teacher-forced at depth 1. "
             "Calibration error: the draft's top token binned by q(x) (10 bins), |mean p(x) - mean q(x)| weighted by "
             "the bin's count; mean q(x) - p(x) above 0: over-confident. The drafts with a top-1 target in brackets "
             "are the controls (the EAGLE head on the target's argmax, the draft on the text): the \"before\" of the "
             "forward KL the others were trained with. The shipped EAGLE, EAGLE-3 and Medusa heads were trained "
             "together (one target forward, one gradient-norm clip); the EAGLE heads marked \"trained alone\" "
             "compare the temperature of the KL without that difference. Reliability tables in calibration.json."]
    for name, r in results.items():
        lines += ["", f"{name}: " + ", ".join(f"q {b['q_from']:.1f}-{b['q_to']:.1f}: p {b['mean_p']:.2f} "
                                               f"(n {b['count']})" for b in r["reliability"])]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=cli.int_at_least(1), default=8, help="held-out windows of 256 tokens")
    parser.add_argument("--out", default=None)
    args = common.parse(parser, argv)  # LESSONLIB_RUN, LESSONLIB_THREADS and the output folder, before any work
    started = time.time()
    n_threads = threads.apply()
    results = {name: measure(*pq) for name, pq in pairs(n_windows=args.windows, controls=True).items()}
    report = {"setup": {"corpus": "code (held-out)", "windows": args.windows, "threads": n_threads,
                        "temperatures": list(TEMPERATURES), "seconds": round(time.time() - started, 1)},
              "machine": common.machine(), "drafts": results}
    md = markdown(results)
    common.write_report("calibration", report, md, args.out)
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench calibration"))
