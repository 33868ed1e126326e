"""Calibration of the real LLM's shipped drafters: teacher-forced α at T = 0, 0.7 and 1.

    python -m lessonlib.models.llm_calibration [--kinds smollm2-eagle3 ...]

For each held-out window of the feature stores (the corpora's, ``llm_features``; the target's own
replies, ``llm_selfdistill``) and each position, the drafter's depth-1 distribution q_T of the next
token (EAGLE-3 and the draft model: the token after the one they are fed; Medusa: head 0) against
the target's p_T over its full vocabulary, both tempered by the same T:

    α_T = Σ_x min(p_T(x), q_T(x)),  q_T = 0 outside the draft vocabulary,

the acceptance of a draft sampled from q_T by the exact rule; at T = 0 both are one-hot at their
argmax (the greedy agreement). The mean over positions is written into each drafter's metadata
(``calibration``), beside the held-out α its training measured at T = 0. Not a benchmark: it reads
no clock, so its numbers are the same on any machine.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models.llama import Llama

TEMPERATURES = (0.0, 0.7, 1.0)


def depth1_logits(head: Any, target: Llama, tokens: torch.Tensor, fused: torch.Tensor,
                  final: torch.Tensor) -> torch.Tensor:
    """(B, L - 1, N) draft-vocabulary logits whose row s is the drafter's guess of token s + 2 (the
    target's distribution of it: ``target.lm_head(final[:, s + 1])``), teacher-forced on a window."""
    from lessonlib.models.llm_draft import LlamaDraftModel
    from lessonlib.models.llm_heads import LlamaEagle3Head, unroll
    from lessonlib.models.llm_medusa import LlamaMedusaHeads

    if isinstance(head, LlamaDraftModel):
        return head.draft_logits(head.hidden(tokens)[:, 1:])
    if isinstance(head, LlamaMedusaHeads):
        return head.draft_logits(target, final[:, :-1])[0]
    if isinstance(head, LlamaEagle3Head):
        return unroll(head, target, tokens, fused, 1)[0]
    raise ValueError(f"head must be an EAGLE-3 head, Medusa heads or the draft model, got {type(head).__name__}")


def alpha_at(p_logits: torch.Tensor, q_logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per row, Σ_x min(p_T(x), q_T(x)): ``p_logits`` (..., V) the target's, ``q_logits`` (..., N) the
    drafter's over the target ids ``ids`` (N,); T = 0: whether the two argmaxes agree."""
    if temperature == 0.0:
        return (ids[q_logits.argmax(-1)] == p_logits.argmax(-1)).double()
    p = F.softmax(p_logits.double() / temperature, -1)[..., ids]  # p_T at the draft ids; elsewhere min(p, 0) = 0
    return torch.minimum(p, F.softmax(q_logits.double() / temperature, -1)).sum(-1)


@torch.no_grad()
def calibrate(heads: dict[str, Any], target: Llama, store: Any,
              temperatures: Sequence[float] = TEMPERATURES) -> dict[str, dict[str, float]]:
    """{name: {str(T): mean α_T}} over every position of ``store``'s held-out windows, each window's
    target logits computed once for all drafters and temperatures."""
    sums = {name: np.zeros(len(temperatures)) for name in heads}
    n = 0
    for w in range(store.heldout):
        tokens = torch.from_numpy(store.tokens[w : w + 1].astype(np.int64))
        final = torch.from_numpy(store.final[w : w + 1].astype(np.float32))
        fused = torch.from_numpy(store.fused[w : w + 1].astype(np.float32))
        p_logits = target.lm_head(final[:, 1:])  # (1, L - 1, V): the target's distribution of token s + 2
        for name, head in heads.items():
            q_logits = depth1_logits(head, target, tokens, fused, final)
            sums[name] += [float(alpha_at(p_logits, q_logits, head.draft_ids, t).sum()) for t in temperatures]
        n += p_logits.shape[1]
    return {name: {f"{t:g}": round(float(v) / n, 4) for t, v in zip(temperatures, s, strict=True)}
            for name, s in sums.items()} if n else {}


def main(argv: Sequence[str] | None = None) -> None:
    from lessonlib.core import kinds
    from lessonlib.models import llm_features, llm_selfdistill
    from lessonlib.models.llama import load_smollm2
    from lessonlib.models.llm_features import FeatureStore
    from lessonlib.models.llm_store import load_llm_head, paths

    names = [k.name for k in kinds.LLM_KINDS]
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=names, default=names)
    args = parser.parse_args(argv)
    stores = {"heldout": FeatureStore(llm_features.folder()),
              "self": FeatureStore(llm_selfdistill.folder() / "features")}
    target = load_smollm2(torch.float32, block_size=stores["heldout"].meta["window"])
    heads = {k: load_llm_head(target, kinds.kind(k).checkpoint).eval() for k in args.kinds}
    found = {where: calibrate(heads, target, store) for where, store in stores.items()}
    for k in args.kinds:
        meta_path = paths(kinds.kind(k).checkpoint)[1]
        meta = json.loads(meta_path.read_text())
        meta["calibration"] = {"measured": "teacher-forced mean over held-out positions of sum_x min(p_T(x), q_T(x)) "
                                           "at depth 1, p_T over the full vocabulary, q_T zero outside the draft "
                                           "vocabulary; T = 0: argmax agreement",
                               **{where: by_head[k] for where, by_head in found.items()},
                               "windows": {where: s.heldout for where, s in stores.items()}}
        write_atomic(meta_path, json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")
        print(f"{k}: {json.dumps({w: meta['calibration'][w] for w in stores})}")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.llm_calibration"))
