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

α depends on the text it is measured on, so it is measured on three, from the most to the least
like training: the own replies' windows at every position (``self``: the chat template's fixed
system message and the requests included, which a drafter predicts easily) and at the reply
tokens alone (``self replies``, ``reply_mask``); and the readable target's greedy replies (≤ 128
tokens) to ``bench llm``'s first 5 edit and 5 chat prompts, at their reply tokens (``edit replies``,
``chat replies``). At T = 0 and one draft the last is the α a chain of one measures while decoding
those prompts (the same argmax agreements, over the positions a round judges).
"""
from __future__ import annotations

import argparse
import dataclasses
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
BLOCK = 1024  # the target's positions: a benchmark prompt and its reply fit (``bench.llm.BLOCK``)
MEASURED = ("teacher-forced mean of sum_x min(p_T(x), q_T(x)) at depth 1, p_T over the full vocabulary, q_T zero "
            "outside the draft vocabulary (T = 0: argmax agreement); heldout: the corpora's held-out windows; self: "
            "the held-out windows of the target's own replies, every position; self replies: their reply tokens "
            "alone; edit/chat replies: the reply tokens of the target's greedy replies to bench llm's first 5 "
            "prompts of each set")


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


def reply_mask(tokens: np.ndarray, header: Sequence[int], end: int) -> np.ndarray:
    """(L,) bool: True at the tokens of an assistant's reply in a window of concatenated chats --
    after the header ``<|im_start|>assistant\\n`` (ids ``header``) through the turn's ``end``
    (``<|im_end|>``). A window that starts inside a turn cannot tell whose it is: its tokens before
    its first header or ``end`` are False."""
    header, tokens = list(header), np.asarray(tokens).tolist()
    out, inside = np.zeros(len(tokens), bool), False
    for j, token in enumerate(tokens):
        if inside:
            out[j] = True
            inside = token != end
        elif j + 1 >= len(header) and tokens[j + 1 - len(header) : j + 1] == header:
            inside = True
    return out


@torch.no_grad()
def calibrate(heads: dict[str, Any], target: Llama, store: Any, temperatures: Sequence[float] = TEMPERATURES,
              keep: Sequence[np.ndarray] | None = None) -> dict[str, dict[str, float]]:
    """{name: {str(T): mean α_T}} over the positions of ``store``'s held-out windows (``store``: a
    ``FeatureStore``, or anything with its ``tokens``/``fused``/``final`` rows and ``heldout`` count,
    rows of any length); ``keep[w]``: a bool per token of window w, a row counted when the token it
    predicts is kept (None: every row). Each window's target logits are computed once for all
    drafters and temperatures."""
    if keep is not None and len(keep) != store.heldout:
        raise ValueError(f"keep must hold one mask per held-out window ({store.heldout}), got {len(keep)}")
    sums = {name: np.zeros(len(temperatures)) for name in heads}
    n = 0
    for w in range(store.heldout):
        tokens = torch.from_numpy(np.asarray(store.tokens[w], np.int64))[None]
        if keep is not None and len(keep[w]) != tokens.shape[1]:
            raise ValueError(f"keep[{w}] must hold one flag per token of window {w} ({tokens.shape[1]}), "
                             f"got {len(keep[w])}")
        final = torch.from_numpy(np.asarray(store.final[w], np.float32))[None]
        fused = torch.from_numpy(np.asarray(store.fused[w], np.float32))[None]
        p_logits = target.lm_head(final[:, 1:])  # (1, L - 1, V): the target's distribution of token s + 2
        rows = torch.ones(p_logits.shape[1], dtype=torch.bool)
        if keep is not None:
            rows[:-1] = torch.from_numpy(np.asarray(keep[w], bool)[2:])  # row s predicts token s + 2
            rows[-1] = False  # ... which the last row's lies past the window
        for name, head in heads.items():
            q_logits = depth1_logits(head, target, tokens, fused, final)
            sums[name] += [float(alpha_at(p_logits, q_logits, head.draft_ids, t)[0, rows].sum())
                           for t in temperatures]
        n += int(rows.sum())
    return {name: {f"{t:g}": round(float(v) / n, 4) for t, v in zip(temperatures, s, strict=True)}
            for name, s in sums.items()} if n else {}


@dataclasses.dataclass
class Replies:
    """Sequences (a prompt and the target's reply) in a ``FeatureStore``'s shape for ``calibrate``:
    per sequence its ``tokens`` (L,), ``fused`` (L, 3C) and ``final`` (L, C) features, and ``keep``:
    True at the reply's tokens."""
    tokens: list[np.ndarray]
    fused: list[np.ndarray]
    final: list[np.ndarray]
    keep: list[np.ndarray]

    @property
    def heldout(self) -> int:
        return len(self.tokens)


@torch.no_grad()
def bench_replies(target: Llama, tokenizer: Any, kind: str, n: int = 5, new_tokens: int = 128) -> Replies:
    """The greedy replies (T = 0, at most ``new_tokens``, stopped at the end of the turn) of ``target``
    to ``bench llm``'s first ``n`` prompts of ``kind`` (``llm_prompts``), with their features."""
    from lessonlib.models import llama_tokenizer, llm_prompts, llm_selfdistill
    from lessonlib.models.llm_heads import eagle3_reference_layers

    layers = eagle3_reference_layers(target.config.n_layer) + (target.config.n_layer - 1,)
    C, out = target.config.n_embd, Replies([], [], [], [])
    for prompt in llm_prompts.prompts(tokenizer, kind, n):
        reply = llm_selfdistill.reply(target, prompt, llama_tokenizer.end_of_turn(tokenizer), new_tokens)
        tokens = np.array(prompt + reply, np.int64)
        _, h = target(torch.from_numpy(tokens)[None], return_hidden=layers)  # (1, L, 4C): the store's features
        out.tokens.append(tokens)
        out.fused.append(h[0, :, :-C].numpy())
        out.final.append(h[0, :, -C:].numpy())
        out.keep.append(np.arange(len(tokens)) >= len(prompt))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from lessonlib.core import kinds
    from lessonlib.models import llama_tokenizer, llm_features, llm_prompts, llm_selfdistill
    from lessonlib.models.llama import load_smollm2
    from lessonlib.models.llm_features import FeatureStore
    from lessonlib.models.llm_store import load_llm_head, paths

    names = [k.name for k in kinds.LLM_KINDS]
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", choices=names, default=names)
    args = parser.parse_args(argv)
    stores = {"heldout": FeatureStore(llm_features.folder()),
              "self": FeatureStore(llm_selfdistill.folder() / "features")}
    target = load_smollm2(torch.float32, block_size=BLOCK)
    tokenizer = llama_tokenizer.load_tokenizer()
    heads = {k: load_llm_head(target, kinds.kind(k).checkpoint).eval() for k in args.kinds}
    found = {where: calibrate(heads, target, store) for where, store in stores.items()}
    header = llama_tokenizer.encode(tokenizer, "<|im_start|>assistant\n")
    self_store, end = stores["self"], llama_tokenizer.end_of_turn(tokenizer)
    found["self replies"] = calibrate(heads, target, self_store, keep=[
        reply_mask(self_store.tokens[w], header, end) for w in range(self_store.heldout)])
    for kind in llm_prompts.KINDS:
        replies = bench_replies(target, tokenizer, kind)
        found[f"{kind} replies"] = calibrate(heads, target, replies, keep=replies.keep)
    for k in args.kinds:
        meta_path = paths(kinds.kind(k).checkpoint)[1]
        meta = json.loads(meta_path.read_text())
        meta["calibration"] = {"measured": MEASURED, **{where: by_head[k] for where, by_head in found.items()},
                               "windows": {where: s.heldout for where, s in stores.items()},
                               "bench prompts": 5}
        write_atomic(meta_path, json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")
        print(f"{k}: {json.dumps({w: meta['calibration'][w] for w in found})}")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.llm_calibration"))
