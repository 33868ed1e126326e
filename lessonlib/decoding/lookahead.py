"""Lookahead decoding (Fu, Bailis, Stoica, Zhang 2024, arXiv 2402.02057): no draft, no training.

The target drafts for itself by Jacobi iteration. Every round is ONE target forward over
the last committed token (the root) and two branches, kept apart by an attention mask:

* the **lookahead branch**, a 2-D window of ``window`` columns and up to ``ngram - 1``
  levels of guessed tokens. Level 0 is a chain of guesses for the next ``window`` positions;
  the token at level i, column j sits at position root + 1 + j + i and sees the root, level
  0 up to column j and its own column above it. The target's argmax at the top level gives a
  new level (one Jacobi step), and each column, read top to bottom with that new token, is an
  n-gram the target itself produced: it goes into the **n-gram pool**, keyed by its first token;
* the **verification branch**: up to ``guesses`` pool n-grams whose first token is the root,
  i.e. (ngram - 1)-token continuations of the committed text, merged into a trie.

That mask is a tree mask (level 0 is a chain off the root, every column a chain hanging off
its level-0 token), so the round is the tree loop's round: ``tree_decode.verify_tree_forward``
runs it, ``core.tree`` verifies it (greedy at T <= 1e-5, else the sibling rule) and
``KVCache.keep`` compacts the cache. Every guess is deterministic given what came before the
round, so the output is exactly the target's: token for token at T = 0, in distribution at
T > 0. The window's update needs the target's logits at every lookahead node, which the
``Drafter`` protocol does not hand back, so this is its own loop rather than a drafter.

On a GPU the extra positions are nearly free; on a CPU they are not (``bench tree``'s verify
cost table), so small windows do best here.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib.core import tree
from lessonlib.core.sampling import GREEDY_TEMPERATURE, softmax
from lessonlib.core.validate import check_int, check_temperature
from lessonlib.decoding import measures
from lessonlib.decoding.decode import _check_budget, _rng, timing_stats
from lessonlib.decoding.prompt_lookup import trie_arrays
from lessonlib.decoding.timing import Clock
from lessonlib.decoding.tree_decode import acceptance_by_depth, verify_tree_forward


class NgramPool:
    """First token -> up to ``size`` distinct continuations that followed it, newest last."""

    def __init__(self, size):
        self.size = check_int(size, "size", 1)
        self.table: dict[int, dict[tuple, None]] = {}

    def add(self, key, continuation):
        grams = self.table.setdefault(int(key), {})
        grams.pop(continuation, None)  # seen again: it becomes the newest
        grams[continuation] = None
        if len(grams) > self.size:
            del grams[next(iter(grams))]

    def get(self, key, n) -> list[list[int]]:
        """Up to ``n`` continuations of ``key``, newest first."""
        grams = list(self.table.get(int(key), ()))
        return [list(g) for g in grams[::-1][:n]]

    def __len__(self):
        return sum(len(g) for g in self.table.values())


def lookahead_tree(candidates, levels):
    """(parents, tokens, index) of one round's tree: the candidates' trie first, then the
    window (``levels``: (L, W) tokens). ``index[i, j]`` is the node of level i, column j: level
    0 is a chain off the root, level i > 0 hangs under level i - 1 of the same column, so a
    node's depth is i + j and its ancestors are exactly what the lookahead mask lets it see."""
    c_parents, c_tokens = trie_arrays(candidates) if candidates else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    levels = np.asarray(levels, dtype=np.int64)
    n_levels, width = levels.shape
    index = len(c_parents) + np.arange(n_levels * width).reshape(n_levels, width)
    parents = np.empty_like(index)
    parents[0, 0] = -1
    parents[0, 1:] = index[0, :-1]
    parents[1:] = index[:-1]
    return np.concatenate([c_parents, parents.ravel()]), np.concatenate([c_tokens, levels.ravel()]), index


class Window:
    """The lookahead branch's 2-D window and its Jacobi update."""

    def __init__(self, width, ngram, first_level):
        self.width, self.ngram = width, ngram
        self.levels = [np.asarray(first_level, dtype=np.int64)]

    def update(self, top_argmax, pool):
        """``top_argmax``: the target's argmax at each top-level node (the next level). Once the
        window is full (ngram - 1 levels), every column plus its new token is an n-gram."""
        new = np.asarray(top_argmax, dtype=np.int64)
        if len(self.levels) == self.ngram - 1:
            grams = np.stack(self.levels + [new], 1)  # (width, ngram): one n-gram per column
            for gram in grams.tolist():
                pool.add(gram[0], tuple(gram[1:]))
            self.levels = self.levels[1:]
        self.levels.append(new)


def _check_args(window, ngram, guesses, temperature):
    return check_int(window, "window", 1), check_int(ngram, "ngram", 2), check_int(guesses, "guesses", 0), \
        check_temperature(temperature)


@torch.inference_mode()
def lookahead_generate(target, prompt_tokens, max_new_tokens, window=4, ngram=3, guesses=4, temperature=0.0,
                       rng=None, seed=0):
    """Lookahead decoding: ``window`` columns, n-grams of ``ngram`` tokens, up to ``guesses``
    pool n-grams verified per round. Greedy at T <= 1e-5 (the output is the target's greedy
    output), else exact sampling at ``temperature`` (``rng`` draws the coins; ``seed`` only
    picks the window's first guesses from the prompt).

    Returns (new_tokens, stats) with the tree loop's keys (tau, acceptance by depth, mean
    nodes, draft/verify seconds, ...) and ``pool_rounds``: rounds whose accepted path came
    from the pool, ``window_rounds``: from the window itself, ``pool_size`` at the end.
    """
    window, ngram, guesses, temperature = _check_args(window, ngram, guesses, temperature)
    max_nodes = (window + guesses) * (ngram - 1)
    _check_budget(target, prompt_tokens, max_new_tokens, extra=max_nodes + 1)
    greedy, rng = temperature <= GREEDY_TEMPERATURE, _rng(rng)
    clock, seq, cache = Clock(target.device), list(prompt_tokens), target.new_cache()
    if len(seq) > 1:  # prefill all but the last token; it is the first round's root
        clock("prefill", target, torch.as_tensor(seq[:-1], device=target.device)[None], cache=cache)
    pool = NgramPool(max(guesses, 1) * 4)
    win = Window(window, ngram, np.random.default_rng(seed).choice(seq, window))
    goal = len(seq) + max_new_tokens
    lengths, nodes, depth, from_pool, from_window = [], [], 0, 0, 0
    start_time = time.perf_counter()
    while len(seq) < goal:
        candidates = pool.get(seq[-1], guesses) if guesses else []
        parents, tokens, index = clock("draft", lookahead_tree, candidates, np.stack(win.levels))
        start = cache.length
        logits, _ = clock("verify", verify_tree_forward, target, cache, seq[-1], parents, tokens)
        argmax = logits.argmax(-1).cpu().numpy()
        if greedy:
            path, emitted = tree.verify_tree_greedy(parents, tokens, argmax)
        else:
            path, emitted = tree.verify_tree(parents, tokens, softmax(logits.double().cpu().numpy(), temperature), rng)
        cache.keep(start, [0] + [a + 1 for a in path])
        seq += emitted
        clock("draft", win.update, argmax[index[-1] + 1], pool)
        from_pool += bool(path) and path[0] < index[0, 0]
        from_window += bool(path) and path[0] >= index[0, 0]
        lengths.append(len(path))
        nodes.append(len(parents))
        depth = max(depth, int(tree.tree_depth(parents).max()) + 1)
    seconds = time.perf_counter() - start_time
    rounds = len(lengths)
    return seq[goal - max_new_tokens : goal], {
        "temperature": float(temperature), "window": window, "ngram": ngram, "guesses": guesses,
        "tau": measures.tau(len(seq) - (goal - max_new_tokens), rounds),
        "rounds": rounds, "target_calls": rounds,
        "mean_nodes": float(np.mean(nodes)), "mean_accepted": float(np.mean(lengths)),
        "acceptance_by_depth": acceptance_by_depth(lengths, depth),
        "accepted_lengths": np.bincount(lengths).tolist(),
        "pool_rounds": int(from_pool), "window_rounds": int(from_window), "pool_size": len(pool),
        **timing_stats(clock, seconds, max_new_tokens),
        "verify_forward_seconds": clock.per_call("verify"),
        "draft_seconds_per_round": clock.seconds.get("draft", 0.0) / rounds,
    }
