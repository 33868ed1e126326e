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
its level-0 token), so the round is the one speculative round (``round.speculative_round``):
``LookaheadDrafter`` proposes the tree, ``core.tree`` verifies it (greedy at T <= 1e-5, else
the sibling rule) and ``KVCache.keep`` compacts the cache. Every guess is deterministic given
what came before the round, so the output is exactly the target's: token for token at T = 0,
in distribution at T > 0. The window's update needs the target's logits at every lookahead
node: it runs after the round's commit, as the loop's post-round hook
(``LookaheadDrafter.after_round``).

On a GPU the extra positions are nearly free; on a CPU they are not (``bench tree``'s verify
cost table), so small windows do best here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt
import torch

from lessonlib.core.validate import check_int, check_temperature
from lessonlib.decoding.drafters import RuleDrafter
from lessonlib.decoding.prompt_lookup import trie_arrays
from lessonlib.decoding.round import Ids, Proposal, RoundResult, Sampling, check_budget, check_sampling_rng, run_rounds
from lessonlib.decoding.stats import DecodeStats
from lessonlib.decoding.timing import Timer, untimed

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    from lessonlib.decoding.drafters import Rule
    from lessonlib.models.gpt import GPT


class NgramPool:
    """First token -> up to ``size`` distinct continuations that followed it, newest last."""

    def __init__(self, size: int) -> None:
        self.size = check_int(size, "size", 1)
        self.table: dict[int, dict[tuple, None]] = {}

    def add(self, key: int, continuation: tuple[int, ...]) -> None:
        grams = self.table.setdefault(int(key), {})
        grams.pop(continuation, None)  # seen again: it becomes the newest
        grams[continuation] = None
        if len(grams) > self.size:
            del grams[next(iter(grams))]

    def get(self, key: int, n: int) -> list[list[int]]:
        """Up to ``n`` continuations of ``key``, newest first."""
        grams = list(self.table.get(int(key), ()))
        return [list(g) for g in grams[::-1][:n]]

    def __len__(self) -> int:
        return sum(len(g) for g in self.table.values())


def lookahead_tree(candidates: Sequence[Sequence[int]], levels: npt.ArrayLike
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parents, tokens, index) of one round's tree ((N,), (N,), (L, W) int64): the candidates'
    trie first, then the window (``levels``: (L, W) tokens). ``index[i, j]`` is the node of level i, column j: level
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
    """The lookahead branch's 2-D window and its Jacobi update (``first_level``: (width,) tokens)."""

    def __init__(self, width: int, ngram: int, first_level: npt.ArrayLike) -> None:
        self.width, self.ngram = width, ngram
        self.levels = [np.asarray(first_level, dtype=np.int64)]  # up to ngram - 1 levels, (width,) each

    def update(self, top_argmax: npt.ArrayLike, pool: NgramPool) -> None:
        """``top_argmax``: (width,) the target's argmax at each top-level node (the next level). Once
        the window is full (ngram - 1 levels), every column plus its new token is an n-gram."""
        new = np.asarray(top_argmax, dtype=np.int64)
        if len(self.levels) == self.ngram - 1:
            grams = np.stack(self.levels + [new], 1)  # (width, ngram): one n-gram per column
            for gram in grams.tolist():
                pool.add(gram[0], tuple(gram[1:]))
            self.levels = self.levels[1:]
        self.levels.append(new)


class LookaheadDrafter(RuleDrafter):
    """The lookahead branch and the n-gram pool as a drafter with a rule of its own: each
    round's tree is the pool's candidates for the root, then the window (``lookahead_tree``)."""

    root: int | None  # the last committed token (set by every commit)
    index: np.ndarray | None  # (L, W): the window's node indices in the round's tree (set by propose)

    def __init__(self, window: int, ngram: int, guesses: int, first_level: npt.ArrayLike) -> None:
        self.guesses = guesses
        self.pool = NgramPool(max(guesses, 1) * 4)
        self.win = Window(window, ngram, first_level)
        self.root, self.index = None, None
        self.from_pool = self.from_window = 0  # rounds whose accepted path started in the pool / the window

    def _commit(self, seq: list[int], features: torch.Tensor | None = None) -> None:
        self.root = seq[-1]

    def propose(self, rule: Rule | None = None, sampling: Sampling | None = None,
                rng: np.random.Generator | None = None, clock: Timer = untimed) -> Proposal:
        if rule is not None:
            raise ValueError("rule must be None for lookahead: its tree is the pool's candidates and the window")
        # root: set by commit (read only when guesses > 0: a pool-less drafter never needs it)
        candidates = self.pool.get(cast(int, self.root), self.guesses) if self.guesses else []
        parents, tokens, self.index = clock("draft", lookahead_tree, candidates, np.stack(self.win.levels))
        return Proposal(parents, tokens)

    def after_round(self, result: RoundResult, clock: Timer = untimed) -> None:
        """The window's Jacobi step from the target's argmax at the top level's nodes."""
        assert self.index is not None  # set by propose
        clock("draft", self.win.update, result.logits.argmax(-1)[self.index[-1] + 1], self.pool)
        first_window = self.index[0, 0]
        self.from_pool += bool(result.path) and result.path[0] < first_window
        self.from_window += bool(result.path) and result.path[0] >= first_window


def _check_args(window: int, ngram: int, guesses: int, temperature: float) -> tuple[int, int, int, float]:
    return check_int(window, "window", 1), check_int(ngram, "ngram", 2), check_int(guesses, "guesses", 0), \
        check_temperature(temperature)


@torch.inference_mode()
def lookahead_generate(target: GPT, prompt_tokens: Ids, max_new_tokens: int, window: int = 4, ngram: int = 3,
                       guesses: int = 4, temperature: float | Sampling = 0.0, rng: np.random.Generator | None = None,
                       seed: int = 0, stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """Lookahead decoding: ``window`` columns, n-grams of ``ngram`` tokens, up to ``guesses``
    pool n-grams verified per round. Greedy at T <= 1e-5 (the output is the target's greedy
    output), else exact sampling at ``temperature`` (``rng``, a numpy Generator, draws the
    coins; ``seed`` only picks the window's first guesses from the prompt).

    Returns (new_tokens, ``DecodeStats``) of the tree loop, with in ``extra``: ``pool_rounds``
    (rounds whose accepted path came from the pool), ``window_rounds`` (from the window itself),
    ``pool_size`` at the end, and the settings.
    """
    sampling = Sampling.of(temperature)
    window, ngram, guesses, _ = _check_args(window, ngram, guesses, sampling.temperature)
    max_nodes = (window + guesses) * (ngram - 1)
    # the last round starts with at most prompt + max_new_tokens - 1 tokens committed, the cache
    # holding all but one, and scores its root and up to max_nodes nodes (as a chain of k: k - 1)
    max_new_tokens = check_budget(target, prompt_tokens, max_new_tokens, extra=max_nodes - 1)
    rng = check_sampling_rng(sampling, rng)
    drafter = LookaheadDrafter(window, ngram, guesses, np.random.default_rng(seed).choice(list(prompt_tokens), window))
    out, stats = run_rounds(target, drafter, None, prompt_tokens, max_new_tokens, sampling, rng, "tree",
                            after_round=drafter.after_round, stop=stop)
    stats.extra |= {"window": window, "ngram": ngram, "guesses": guesses, "pool_rounds": int(drafter.from_pool),
                    "window_rounds": int(drafter.from_window), "pool_size": len(drafter.pool)}
    return out, stats
