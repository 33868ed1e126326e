"""Draft trees: structure, attention mask, drafting rules and exact verification (numpy).

A tree of N drafted tokens is a ``parents`` array: ``parents[i]`` is the index of node i's
parent, or -1 when node i hangs directly off the committed context (depth 0). Parents always
come before their children, so a node's index is also a valid topological order.

* Structure: ``tree_attention_mask`` (node i sees j iff j is i or an ancestor of i),
  ``tree_depth``, ``tree_position_ids`` (prefix_len + depth), root-to-leaf ``retrieve_paths``
  (node indices padded with -1), ``with_root`` (prepend the last committed token as node 0).
* Drafting, through a model-free ``expand`` callback: static top-k per depth
  (``draft_topk((3, 2, 2))``) or Medusa/EAGLE "choices" (``draft_static``), top-p branching
  (``draft_top_p``), and the EAGLE-2 dynamic tree (``draft_dynamic``: expand the top-k
  frontier by cumulative draft log-prob, keep the best N overall, closed under ancestors).
* Verification: greedy (``verify_tree_greedy``: longest path matching the target's argmax,
  plus the bonus token) and stochastic with deterministic sibling candidates
  (``verify_tree``), whose output distribution ``tree_output_distribution`` enumerates
  exactly.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from lessonlib.core.sampling import inverse_cdf
from lessonlib.core.tree_structure import (  # noqa: F401
    ancestor_closure,
    check_parents,
    retrieve_paths,
    subtree,
    tree_attention_mask,
    tree_depth,
    tree_position_ids,
    with_root,
)
from lessonlib.core.validate import check_int, check_interval, check_probs, check_rng, check_token_ids

# expand(parents (N,), tokens (N,), nodes (M,)) -> (M, V) draft log-probabilities (see "drafting")
Expand: TypeAlias = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
# what every drafting rule returns: parents (N,), tokens (N,), score (N,)
Drafted: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray]


# ----------------------------------------------------------------------------- drafting
#
# Every drafting rule grows the tree one depth at a time through a callback
#     expand(parents, tokens, nodes) -> (len(nodes), V) draft log-probabilities
# giving the draft's next-token log-probs after each node in ``nodes`` (-1 = after the
# committed context) of the tree drafted so far. A chain draft model, the EAGLE head and
# Medusa heads each supply one (``lessonlib.decoding.drafters``), so the rules stay model-free.
# Each rule returns (parents, tokens, score): score = cumulative draft log-probability of
# the node's root-to-node path.

def choices_from_branching(branching: Sequence[int]) -> list[tuple[int, ...]]:
    """Static tree as Medusa/EAGLE "choices": every path of top-k ranks, e.g. (3, 2, 2) ->
    [(0,), (1,), (2,), (0, 0), (0, 1), ..., (2, 1, 1)] (3 + 6 + 12 = 21 nodes)."""
    branching = [check_int(b, "branching", minimum=1) for b in branching]
    if not branching:
        raise ValueError(f"branching must be a non-empty list of ints >= 1, got {branching}")
    paths: list[tuple[int, ...]] = []
    level: list[tuple[int, ...]] = [()]
    for b in branching:
        level = [path + (r,) for path in level for r in range(b)]
        paths += level
    return paths


def tree_from_choices(choices: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(parents (N,), ranks (N,)) of a static tree given as paths of top-k ranks; nodes
    ordered by depth, then lexicographically. Every prefix of a path must itself be a path."""
    try:
        paths = sorted({tuple(check_int(r, "choices' ranks") for r in c) for c in choices}, key=lambda c: (len(c), c))
    except TypeError:  # a choice that is not a sequence of ranks (a number, None)
        raise ValueError(f"choices must be paths of ranks, e.g. [(0,), (1,), (0, 0)], got {choices!r}") from None
    if not paths or min(len(c) for c in paths) < 1 or min(min(c) for c in paths) < 0:
        raise ValueError("choices must be non-empty paths of ranks >= 0")
    index = {c: i for i, c in enumerate(paths)}
    missing = [c for c in paths if len(c) > 1 and c[:-1] not in index]
    if missing:
        raise ValueError(f"choices must contain every prefix of every path; missing parent of {missing[0]}")
    parents = np.array([index[c[:-1]] if len(c) > 1 else -1 for c in paths], dtype=np.int64)
    return parents, np.array([c[-1] for c in paths], dtype=np.int64)


def _top(rows: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries of every row, largest first (ties: lower index).

    argpartition finds the candidates in O(V); only when a tie straddles the k-th place does
    it fall back to a full stable sort, so the result never depends on the partition order.
    """
    rows = np.asarray(rows)
    k = min(int(k), rows.shape[1])
    if k == 1:  # argmax already returns the first (lowest) index among ties
        return rows.argmax(1)[:, None]
    if 4 * k >= rows.shape[1]:
        return np.argsort(-rows, axis=1, kind="stable")[:, :k]
    part = np.argpartition(-rows, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(rows, part, 1)
    if np.any((rows >= vals.min(1, keepdims=True)).sum(1) != k):
        return np.argsort(-rows, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(part, np.lexsort((part, -vals), axis=-1), 1)


@functools.lru_cache(maxsize=64)
def _static_structure(choices: tuple[tuple[int, ...], ...]) \
        -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """(parents, ranks, levels) of a static tree, cached: drafting reuses it every round.
    levels[d] = (nodes at depth d, their distinct parents, each node's row among those)."""
    parents, ranks = tree_from_choices(choices)
    depth = tree_depth(parents)
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for d in range(int(depth.max()) + 1):
        level = np.flatnonzero(depth == d)
        levels.append((level, *np.unique(parents[level], return_inverse=True)))
    return parents, ranks, levels


def draft_static(expand: Expand, choices: Iterable[Sequence[int]]) -> Drafted:
    """Static tree: node with rank r is its parent's r-th most likely draft token."""
    parents, ranks, levels = _static_structure(tuple(tuple(int(r) for r in c) for c in choices))
    tokens = np.full(len(parents), -1, dtype=np.int64)
    score = np.zeros(len(parents))
    for level, frontier, row in levels:  # nodes sorted by depth: 0..level[0]-1 are drafted
        logq = _log_probs(expand(parents[: level[0]], tokens[: level[0]], frontier), len(frontier))
        top = _top(logq, int(ranks[level].max()) + 1)
        tokens[level] = top[row, ranks[level]]
        score[level] = np.where(parents[level] >= 0, score[parents[level]], 0.0) + logq[row, tokens[level]]
    return parents.copy(), tokens, score  # the structure is cached: hand out a copy


def _log_probs(logq: object, rows: int) -> np.ndarray:
    """``expand``'s output checked: (rows, V) log-probabilities with no NaN (NaN sorts anywhere:
    the tree would take arbitrary children, silently); -inf is a token the draft rules out."""
    logq = np.asarray(logq, dtype=np.float64)
    if logq.ndim != 2 or len(logq) != rows:
        raise ValueError(f"expand must return ({rows}, V) draft log-probabilities, got shape {logq.shape}")
    if np.isnan(logq).any():
        raise ValueError("expand must return draft log-probabilities, found NaN (the draft's logits hold NaN)")
    return logq


def draft_topk(expand: Expand, branching: Sequence[int]) -> Drafted:
    """Static top-k tree, e.g. branching (3, 2, 2): 3 children of the context, 2 under each."""
    return draft_static(expand, choices_from_branching(branching))


def draft_top_p(expand: Expand, top_p: float, depth: int, max_children: int = 4) -> Drafted:
    """Top-p branching: under every node keep the most likely children until their cumulative
    draft probability reaches ``top_p`` (at least 1, at most ``max_children``), ``depth`` levels."""
    check_interval(top_p, "top_p", "(0, 1]")
    depth = check_int(depth, "depth", minimum=1)
    max_children = check_int(max_children, "max_children", minimum=1)
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        logq = _log_probs(expand(parents, tokens, frontier), len(frontier))
        top = _top(logq, max_children)
        top_logq = np.take_along_axis(logq, top, 1)
        mass_before = np.cumsum(np.exp(top_logq), 1) - np.exp(top_logq)
        rows, ranks = np.nonzero(mass_before < top_p)  # the first child always (mass before it is 0)
        base = len(parents)
        parents = np.concatenate([parents, frontier[rows]])
        tokens = np.concatenate([tokens, top[rows, ranks]])
        score = np.concatenate([score, frontier_score[rows] + top_logq[rows, ranks]])
        frontier, frontier_score = np.arange(base, len(parents)), score[base:]
    return parents, tokens, score


def keep_best(parents: npt.ArrayLike, score: npt.ArrayLike, n: int) -> np.ndarray:
    """Sorted indices of the ``n`` best nodes by score, closed under ancestors.

    Ranks by (score desc, depth asc, index asc). A child never scores above its parent
    (log q <= 0), and on a tie the shallower parent ranks first, so every prefix of this order
    contains each member's ancestors.
    """
    depth = tree_depth(parents)
    score = np.asarray(score, dtype=np.float64)
    if score.shape != depth.shape or np.isnan(score).any():
        raise ValueError(f"score must hold one number per node ({len(depth)}), no NaN, got shape {score.shape}")
    order = np.lexsort((np.arange(len(depth)), depth, -score))
    return np.sort(order[: check_int(n, "n", minimum=0)])


def draft_dynamic(expand: Expand, depth: int, top_k: int, total: int) -> Drafted:
    """EAGLE-2 dynamic tree: at every depth expand the ``top_k`` most likely frontier nodes
    (by cumulative draft log-prob) into their ``top_k`` children each; finally keep the best
    ``total`` of all candidates, closed under ancestors."""
    depth = check_int(depth, "depth", minimum=1)
    top_k = check_int(top_k, "top_k", minimum=1)
    total = check_int(total, "total", minimum=1)
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        # log q <= 0 up to rounding; clamping keeps a child from outranking its parent
        logq = np.minimum(_log_probs(expand(parents, tokens, frontier), len(frontier)), 0.0)
        top = _top(logq, top_k)
        cand = (frontier_score[:, None] + np.take_along_axis(logq, top, 1)).ravel()
        base = len(parents)
        parents = np.concatenate([parents, np.repeat(frontier, top.shape[1])])
        tokens = np.concatenate([tokens, top.ravel()])
        score = np.concatenate([score, cand])
        best = np.argsort(-cand, kind="stable")[:top_k]
        frontier, frontier_score = base + best, cand[best]
    keep = keep_best(parents, score, total)
    return subtree(parents, keep), tokens[keep], score[keep]


# ----------------------------------------------------------------------------- verification

def _check_tree(parents: npt.ArrayLike, tokens: npt.ArrayLike, rows: npt.ArrayLike, name: str,
                vocab_size: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """parents, tokens (integer ids in [0, vocab_size), or >= 0 when the vocabulary is not
    known) and N + 1 rows."""
    parents = check_parents(parents)
    raw = np.asarray(tokens)
    if raw.shape != parents.shape:
        raise ValueError(f"tokens must have one entry per node ({len(parents)}), got shape {raw.shape}")
    if vocab_size is not None:
        tokens = check_token_ids(raw, vocab_size, "tokens")
    elif raw.size and (not np.issubdtype(raw.dtype, np.integer) or raw.min() < 0):
        raise ValueError(f"tokens must be integer token ids >= 0, got {raw.tolist()}")
    else:
        tokens = raw.astype(np.int64)
    rows = np.asarray(rows)
    if len(rows) != len(parents) + 1:
        raise ValueError(f"{name} must have N + 1 = {len(parents) + 1} rows (context, then each node), got {len(rows)}")
    return parents, tokens, rows


def verify_tree_greedy(parents: npt.ArrayLike, tokens: npt.ArrayLike,
                       target_argmax: npt.ArrayLike) -> tuple[list[int], list[int]]:
    """Greedy tree verification (T = 0). ``parents``, ``tokens``: (N,); ``target_argmax``: (N + 1,).

    ``target_argmax[0]`` is the target's argmax after the committed context and
    ``target_argmax[i + 1]`` its argmax after node i. A node is accepted iff it and every
    ancestor equal the target's argmax at their parent. Returns (path, emitted): the deepest
    accepted root-to-node path (node indices; first such node on a tie) and its tokens
    followed by the target's argmax after it (the bonus token).
    """
    parents, tokens, target_argmax = _check_tree(parents, tokens, target_argmax, "target_argmax")
    mask = tree_attention_mask(parents)
    correct = tokens == target_argmax[parents + 1]
    accepted = ~(mask & ~correct[None, :]).any(1)
    if not accepted.any():
        return [], [int(target_argmax[0])]
    depth = np.where(accepted, mask.sum(1), 0)
    best = int(np.argmax(depth))
    path = np.flatnonzero(mask[best])
    return path.tolist(), tokens[path].tolist() + [int(target_argmax[best + 1])]


def _children(parents: np.ndarray) -> list[np.ndarray]:
    """children[node + 1] = node's children in index order (the sibling order of the rule)."""
    order = np.argsort(parents, kind="stable")
    return np.split(order, np.searchsorted(parents[order], np.arange(len(parents))))


def verify_tree(parents: npt.ArrayLike, tokens: npt.ArrayLike, p_rows: npt.ArrayLike,
                rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Stochastic tree verification with deterministic sibling candidates (T > 0).

    At a node with target distribution p and children c1..cm (index order): accept ci with
    probability p_i(ci); on rejection zero ci and renormalise (p_{i+1}); accepted -> continue
    at ci with its own row; all rejected (or a leaf) -> sample the last token from what is
    left. The emitted tokens are then exactly distributed as the target's own sampling.
    ``p_rows`` (N + 1, V): ``p_rows[0]`` is the target distribution after the context,
    ``p_rows[i + 1]`` after node i. Returns (path, emitted) like ``verify_tree_greedy``.
    """
    p_rows = check_probs(p_rows, "p_rows", ndim=(2,))
    parents, tokens, p_rows = _check_tree(parents, tokens, p_rows, "p_rows", p_rows.shape[-1])
    check_rng(rng)
    children = _children(parents)
    node = -1
    path: list[int] = []  # the accepted nodes so far, root first
    while True:
        p = p_rows[node + 1].copy()
        for c in children[node + 1]:
            if rng.random() < p[tokens[c]]:
                path.append(int(c))
                break
            p[tokens[c]] = 0.0
            p /= p.sum()
        else:
            return path, tokens[path].tolist() + [int(inverse_cdf(p, np.asarray(rng.random())))]
        node = path[-1]


def tree_output_distribution(parents: npt.ArrayLike, tokens: npt.ArrayLike,
                             p_rows: npt.ArrayLike) -> dict[tuple[int, ...], float]:
    """Exact distribution of ``verify_tree``'s emitted tokens, by enumerating its branches:
    {tuple(emitted tokens): probability}. ``p_rows``: (N + 1, V) as in ``verify_tree``. For
    tests and the notebook (small vocabularies)."""
    p_rows = check_probs(p_rows, "p_rows", ndim=(2,))
    parents, tokens, p_rows = _check_tree(parents, tokens, p_rows, "p_rows", p_rows.shape[-1])
    children = _children(parents)
    out: dict[tuple[int, ...], float] = {}

    def walk(node: int, prefix: tuple[int, ...], prob: float) -> None:
        p, stay = p_rows[node + 1].copy(), 1.0  # stay = P(every sibling so far rejected)
        for c in children[node + 1]:
            accept = p[tokens[c]]
            walk(c, prefix + (int(tokens[c]),), prob * stay * accept)
            stay *= 1.0 - accept
            p[tokens[c]] = 0.0
            if p.sum() > 0:
                p /= p.sum()
        for x in np.flatnonzero(p * stay > 0):
            out[prefix + (int(x),)] = out.get(prefix + (int(x),), 0.0) + prob * stay * p[x]

    walk(-1, (), 1.0)
    return out
