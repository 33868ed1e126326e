"""Tree speculative decoding with KV caches: draft a tree, verify it in ONE target forward.

One round is ``round.speculative_round`` (the target cache holds the committed sequence minus
its last token, as in ``decoding.decode``; that last token is the tree's root):

1. a drafter grows a tree with one of the rules of ``core.tree`` (static top-k, top-p,
   EAGLE-2 dynamic) through its ``expand`` callback;
2. the target runs once over [root] + the N tree tokens, with the tree attention mask and
   positions ``prefix_len + depth``, so every node is scored as if it were the next token
   after its own root-to-node path (``round.tree_forward``);
3. the longest acceptable branch is kept: greedy at T <= 1e-5, else the exact sibling rule;
4. the cache keeps the root and the accepted nodes' keys/values, in order, and drops the
   rest (``KVCache.keep``) -- it then equals a fresh prefill of the committed tokens.

Drafters implement ``drafters.Drafter``: ``ModelDrafter`` (a small GPT with its own cache),
``EagleDrafter`` (the EAGLE head on the target's features), ``MedusaDrafter``, and the
draft-free and MTP drafters.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import torch

from lessonlib.core import tree
from lessonlib.decoding.round import Ids, Sampling, check_budget, check_drafter, check_sampling_rng, run_rounds
from lessonlib.decoding.round import tree_forward as verify_tree_forward
from lessonlib.decoding.stats import DecodeStats, acceptance_by_depth

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    from lessonlib.decoding.drafters import Drafter, Rule
    from lessonlib.models.gpt import GPT

__all__ = ["DEFAULT_RULE", "acceptance_by_depth", "tree_generate", "verify_tree_forward"]

DEFAULT_RULE = functools.partial(tree.draft_topk, branching=(3, 2, 2))


@torch.inference_mode()
def tree_generate(target: GPT, drafter: Drafter, prompt_tokens: Ids, max_new_tokens: int,
                  rule: Rule | None = DEFAULT_RULE, temperature: float | Sampling = 0.0,
                  rng: np.random.Generator | None = None, stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """Tree speculative decoding. ``rule(expand) -> (parents, tokens, score)`` is a drafting
    rule of ``core.tree``, e.g. ``functools.partial(tree.draft_dynamic, depth=5, top_k=4,
    total=24)`` (deterministic candidates, judged by the sibling rule at T > 0), a
    ``core.tree_sampled.SampledRule`` (nodes drawn from the draft's q, judged by recursive
    rejection), or None for a drafter with a rule of its own (prompt lookup). Greedy at
    T <= 1e-5 (output = the target's greedy output), else exact (output distributed as the
    target's sampling at ``temperature``, a number or a ``Sampling`` with top-k / top-p /
    min-p; ``rng``, a numpy Generator, is then required).

    Returns (new_tokens, ``DecodeStats``): tau (tokens per target forward), acceptance by
    depth, mean nodes per tree, the draft/verify/overhead split, tokens per second.
    """
    sampling = Sampling.of(temperature)
    max_new_tokens = check_budget(target, prompt_tokens, max_new_tokens)
    check_drafter(target, drafter, prompt_tokens)
    rng = check_sampling_rng(sampling, rng)
    return run_rounds(target, drafter, rule, prompt_tokens, max_new_tokens, sampling, rng, "tree", stop=stop)
