"""The trie of prompt lookup's continuations, and ``draft_support``, the drafting rule for
draft-free drafters (``prompt_lookup`` re-exports every name here).

* ``Trie`` -- the continuations merged into a trie (``_build_trie``): each node's children in
  priority order and the log of the share of weight through each node.
* ``trie_arrays`` -- such a trie as ``core.tree``'s (parents, tokens) arrays (``_breadth_first``
  gives the score too).
* ``draft_support`` -- every child with non-zero draft probability, most likely first.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NotRequired, TypedDict

import numpy as np

from lessonlib.core import tree
from lessonlib.core.validate import check_int


class Trie(TypedDict):
    """A lookup's continuations as a trie (node 0: the committed sequence)."""

    children: list[dict[int, int]]  # children[node] = {token: child}, in priority order
    logq: np.ndarray  # (n_nodes,) float64: log of the share of its parent's weight through each node
    length: NotRequired[int]  # len(seq) at the commit that built it (``PromptLookupDrafter``)
    served: NotRequired[set[int]]  # the nodes whose children a rule was handed (drafted)
    arrays: NotRequired[tree.Drafted]  # ``_breadth_first(trie)``, cached by ``PromptLookupDrafter.proposal``


def _build_trie(continuations: Iterable[Sequence[int]]) -> Trie:
    """The continuations merged into a trie: children[node] = {token: child} in priority
    order (node 0 = the committed sequence), logq[child] = log of the share of weight
    through it, with weights 2^-i for the i-th continuation so that a child reached by an
    earlier continuation always outranks one reached only by later ones."""
    children: list[dict[int, int]]
    weight: list[float] | np.ndarray  # per node: a list while the trie grows, then (n_nodes,) float64
    children, weight = [{}], [0.0]
    for i, cont in enumerate(continuations):
        w, node = 0.5 ** (i + 1), 0
        weight[0] += w
        for token in cont:
            if token not in children[node]:
                children[node][token] = len(children)
                children.append({})
                weight.append(0.0)
            node = children[node][token]
            weight[node] += w
    weight = np.array(weight)
    logq = np.zeros(len(children))  # (n_nodes,)
    for node, kids in enumerate(children):
        for child in kids.values():
            logq[child] = np.log(weight[child] / weight[node])
    return {"children": children, "logq": logq}


def _breadth_first(trie: Trie) -> tree.Drafted:
    """(parents, tokens, score) of a trie in the order the drafting rules of ``core.tree``
    (and ``draft_support``) use: depth by depth, then by parent, siblings in priority order;
    score = the cumulative log-probability of the node's path; each (N,)."""
    children, logq = trie["children"], trie["logq"]
    parents: list[int]
    tokens: list[int]
    score: list[float]
    level: list[tuple[int, int, float]]
    parents, tokens, score, level = [], [], [], [(0, -1, 0.0)]  # (trie node, output index, score)
    while level:
        nxt: list[tuple[int, int, float]] = []
        for node, out, base in level:
            for token, child in children[node].items():
                nxt.append((child, len(parents), base + logq[child]))
                parents.append(out)
                tokens.append(token)
                score.append(nxt[-1][2])
        level = nxt
    return np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64), np.array(score)


def trie_arrays(continuations: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(parents, tokens) of the continuations merged into a trie, in ``core.tree``'s order:
    (N,) int64 each."""
    return _breadth_first(_build_trie(continuations))[:2]


def draft_support(expand: tree.Expand, depth: int, max_children: int | None = None) -> tree.Drafted:
    """Drafting rule: under every node, every token with non-zero draft probability (finite
    log-prob), most likely first (ties: lower token id), ``depth`` levels at most, at most
    ``max_children`` per node (needed for a model's dense rows). A node with no such token
    gets no children, so an empty row drafts nothing. Returns (parents, tokens, score), (N,) each."""
    depth = check_int(depth, "depth", 1)
    if max_children is not None:
        max_children = check_int(max_children, "max_children", 1)
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        logq = expand(parents, tokens, frontier)  # (len(frontier), V)
        rows, toks = np.nonzero(np.isfinite(logq))
        vals = logq[rows, toks]
        order = np.lexsort((toks, -vals, rows))  # by row, then most likely first, then token id
        rows, toks, vals = rows[order], toks[order], vals[order]
        if max_children is not None:
            rank = np.arange(len(rows)) - np.searchsorted(rows, rows)
            keep = rank < max_children
            rows, toks, vals = rows[keep], toks[keep], vals[keep]
        if not len(rows):
            break
        base = len(parents)
        parents = np.concatenate([parents, frontier[rows]])
        tokens = np.concatenate([tokens, toks])
        score = np.concatenate([score, frontier_score[rows] + vals])
        frontier, frontier_score = np.arange(base, len(parents)), score[base:]
    return parents, tokens, score
