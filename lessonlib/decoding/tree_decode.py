"""Tree speculative decoding with KV caches: draft a tree, verify it in ONE target forward.

One round (the target cache holds the committed sequence minus its last token, as in
``lessonlib.decode``; that last token is the tree's root):

1. a drafter grows a tree with one of the rules of ``lessonlib.tree`` (static top-k, top-p,
   EAGLE-2 dynamic) through its ``expand`` callback;
2. the target runs once over [root] + the N tree tokens, with the tree attention mask and
   positions ``prefix_len + depth``, so every node is scored as if it were the next token
   after its own root-to-node path;
3. the longest acceptable branch is kept: greedy at T <= 1e-5, else the exact sibling rule;
4. the cache keeps the root and the accepted nodes' keys/values, in order, and drops the
   rest (``KVCache.keep``) -- it then equals a fresh prefill of the committed tokens.

Drafters implement ``drafters.Drafter``: ``ModelDrafter`` (a small GPT with its own cache),
``EagleDrafter`` (the EAGLE head on the target's features), ``MedusaDrafter``, and the
draft-free and MTP drafters.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch

from lessonlib.core import tree
from lessonlib.core.sampling import GREEDY_TEMPERATURE, softmax
from lessonlib.core.validate import check_temperature, check_token_ids
from lessonlib.decoding import measures
from lessonlib.decoding.decode import _check_budget, _rng, timing_stats

from lessonlib.decoding.timing import Clock

DEFAULT_RULE = functools.partial(tree.draft_topk, branching=(3, 2, 2))


def verify_tree_forward(target, cache, root_token, parents, tokens, return_hidden=True):
    """One target forward over [root] + tree tokens after ``cache``: (logits, hidden) with
    N + 1 rows, row 0 for the root and row i + 1 for node i. ``return_hidden``: True for the
    top feature, a tuple of block indices for fused features (EAGLE-3)."""
    mask = tree.tree_attention_mask(tree.with_root(parents))
    check_token_ids(tokens, target.config.vocab_size, "tokens (the drafted tree)")
    start = cache.length
    if start + len(mask) > cache.capacity:
        raise ValueError(f"the tree ({len(parents)} nodes) does not fit the context: {start} + {len(mask)} > {cache.capacity}")
    idx = torch.as_tensor(np.concatenate([[root_token], tokens]), dtype=torch.long, device=target.device)
    positions = torch.as_tensor(start + mask.sum(1) - 1, device=target.device)  # prefix_len + depth (root at depth 0)
    logits, hidden = target(idx[None], positions=positions, mask=torch.from_numpy(mask), cache=cache, return_hidden=return_hidden)
    return logits[0], hidden[0]


def acceptance_by_depth(accepted_lengths, max_depth):
    """alpha_d = P(node at depth d accepted | depth d - 1 accepted), d = 0..max_depth-1."""
    lengths = np.asarray(accepted_lengths)
    reached = np.array([(lengths >= d).sum() for d in range(max_depth)])
    passed = np.array([(lengths > d).sum() for d in range(max_depth)])
    return [float(p / r) if r else None for p, r in zip(passed, reached)]


@torch.inference_mode()
def tree_generate(target, drafter, prompt_tokens, max_new_tokens, rule=DEFAULT_RULE, temperature=0.0, rng=None):
    """Tree speculative decoding. ``rule(expand) -> (parents, tokens, score)`` is a drafting
    rule of ``lessonlib.tree``, e.g. ``functools.partial(tree.draft_dynamic, depth=5,
    top_k=4, total=24)``. Greedy at T <= 1e-5 (output = the target's greedy output), else the
    exact sibling rule (output distributed as the target's sampling at ``temperature``).

    Returns (new_tokens, stats): tau (tokens per target forward), acceptance by depth,
    mean nodes per tree, target_calls, draft/verify/overhead seconds, tokens_per_second.
    """
    check_temperature(temperature)
    _check_budget(target, prompt_tokens, max_new_tokens)
    # a separate draft model (``ModelDrafter.model``) must share the vocabulary; any other
    # drafter's tokens are checked as they enter the target (``verify_tree_forward``)
    draft_vocab = getattr(getattr(getattr(drafter, "model", None), "config", None), "vocab_size", None)
    if draft_vocab is not None and draft_vocab != target.config.vocab_size:
        raise ValueError(f"drafter and target must share a vocabulary, got sizes {draft_vocab} "
                         f"and {target.config.vocab_size}")
    if len(prompt_tokens) < 2 and drafter.needs_features:
        raise ValueError("prompt_tokens must hold at least 2 tokens for a feature-based drafter")
    greedy = temperature <= GREEDY_TEMPERATURE
    rng = _rng(rng)
    clock = Clock(target.device)
    seq = list(prompt_tokens)
    cache = target.new_cache()
    # the features the drafter reads: the top block's (True) or fused blocks' (EAGLE-3)
    features_of = getattr(drafter, "feature_layers", None) or True
    width = target.config.n_embd * (len(features_of) if isinstance(features_of, tuple) else 1)
    features = torch.zeros(0, width, device=target.device)
    if len(seq) > 1:  # prefill all but the last token; it is the first round's root
        idx = torch.as_tensor(seq[:-1], dtype=torch.long, device=target.device)[None]
        features = clock("prefill", target, idx, cache=cache, return_hidden=features_of)[1][0]
    clock("prefill", drafter.commit, seq, features)
    goal = len(seq) + max_new_tokens
    lengths, nodes, depth = [], [], 0
    start_time = time.perf_counter()
    while len(seq) < goal:
        parents, tokens, _ = clock("draft", rule, drafter.expand)
        start = cache.length
        logits, hidden = clock("verify", verify_tree_forward, target, cache, seq[-1], parents, tokens, features_of)
        if greedy:
            path, emitted = tree.verify_tree_greedy(parents, tokens, logits.argmax(-1).cpu().numpy())
        else:
            path, emitted = tree.verify_tree(parents, tokens, softmax(logits.double().cpu().numpy(), temperature), rng)
        keep = [0] + [a + 1 for a in path]
        cache.keep(start, keep)
        seq += emitted
        clock("draft", drafter.commit, seq, hidden[keep])
        lengths.append(len(path))
        nodes.append(len(parents))
        depth = max(depth, int(tree.tree_depth(parents).max(initial=-1)) + 1)  # an empty tree (nothing drafted) is one plain step
    seconds = time.perf_counter() - start_time
    draft_s, verify_s = clock.seconds["draft"], clock.seconds["verify"]
    rounds = len(lengths)
    return seq[goal - max_new_tokens : goal], {
        "temperature": float(temperature),
        "tau": measures.tau(len(seq) - (goal - max_new_tokens), rounds),
        "rounds": rounds,
        "target_calls": rounds,
        "mean_nodes": float(np.mean(nodes)),
        "mean_accepted": float(np.mean(lengths)),
        "acceptance_by_depth": acceptance_by_depth(lengths, depth),
        "accepted_lengths": np.bincount(lengths).tolist(),
        **timing_stats(clock, seconds, max_new_tokens),
        "verify_forward_seconds": verify_s / rounds,
        "draft_seconds_per_round": draft_s / rounds,
    }
