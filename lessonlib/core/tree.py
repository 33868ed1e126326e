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

import numpy as np

from lessonlib.core.sampling import inverse_cdf
from lessonlib.core.validate import check_probs, check_rng, check_token_ids


# ----------------------------------------------------------------------------- structure

def check_parents(parents) -> np.ndarray:
    """``parents`` as an int64 array, after checking -1 <= parents[i] < i for every node."""
    arr = np.asarray(parents)
    if arr.ndim != 1:
        raise ValueError(f"parents must be a 1-D sequence of ints, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"parents must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = np.flatnonzero((arr < -1) | (arr >= np.arange(len(arr))))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"parents[{i}] = {arr[i]}: a parent must be -1 or an earlier node index (< {i})")
    return arr


def tree_attention_mask(parents) -> np.ndarray:
    """Bool (N, N) mask: ``mask[i, j]`` is true iff j == i or j is an ancestor of i.

    Built one generation at a time: row i gets parent(i), then parent(parent(i)), ... so the
    work is O(depth) vectorised steps, not a Python loop over nodes.
    """
    parents = check_parents(parents)
    n = len(parents)
    mask = np.eye(n, dtype=bool)
    rows = np.arange(n)
    up = parents.copy()
    while True:
        alive = up >= 0
        if not alive.any():
            return mask
        mask[rows[alive], up[alive]] = True
        up[alive] = parents[up[alive]]


def tree_depth(parents) -> np.ndarray:
    """Depth of every node: 0 for children of the context, parent's depth + 1 otherwise."""
    return tree_attention_mask(parents).sum(1) - 1


def tree_position_ids(parents, prefix_len: int = 0) -> np.ndarray:
    """Position ids of the nodes in the verification forward: ``prefix_len + depth``.

    Siblings share a position: each node must look to the model exactly as if it were the
    next token after its own root-to-node path.
    """
    if int(prefix_len) != prefix_len or prefix_len < 0:
        raise ValueError(f"prefix_len must be an int >= 0, got {prefix_len}")
    return int(prefix_len) + tree_depth(parents)


def with_root(parents) -> np.ndarray:
    """Parents of the same tree with an explicit root node 0 (the last committed token).

    The verification forward feeds that token first, so its logits give the target's
    distribution for the depth-0 nodes; node i of the tree becomes node i + 1.
    """
    parents = check_parents(parents)
    return np.concatenate([[-1], np.where(parents < 0, 0, parents + 1)])


def retrieve_paths(parents) -> np.ndarray:
    """(L, D) node indices of every root-to-leaf path, one row per leaf (in index order),
    padded with -1 on the right; D = depth of the deepest node + 1."""
    mask = tree_attention_mask(parents)
    n = len(mask)
    if n == 0:
        return np.zeros((0, 0), dtype=np.int64)
    depth = mask.sum(1) - 1
    leaves = np.flatnonzero(~np.isin(np.arange(n), check_parents(parents)))
    out = np.full((len(leaves), int(depth.max()) + 1), -1, dtype=np.int64)
    rows, cols = np.nonzero(mask[leaves])
    out[rows, depth[cols]] = cols
    return out


def ancestor_closure(parents, nodes) -> np.ndarray:
    """Sorted indices of ``nodes`` and all their ancestors."""
    nodes = np.asarray(nodes, dtype=np.int64)
    return np.flatnonzero(tree_attention_mask(parents)[nodes].any(0))


def subtree(parents, keep) -> np.ndarray:
    """Parents array of the nodes ``keep`` (sorted, closed under ancestors), renumbered."""
    parents = check_parents(parents)
    keep = np.asarray(keep, dtype=np.int64)
    if np.any(np.diff(keep) <= 0):
        raise ValueError("keep must be sorted node indices without repeats")
    new_index = np.full(len(parents), -1)
    new_index[keep] = np.arange(len(keep))
    up = parents[keep]
    if np.any((up >= 0) & (new_index[np.maximum(up, 0)] < 0)):
        raise ValueError("keep must be closed under ancestors (a kept node's parent was dropped)")
    return np.where(up >= 0, new_index[np.maximum(up, 0)], -1)


# ----------------------------------------------------------------------------- drafting
#
# Every drafting rule grows the tree one depth at a time through a callback
#     expand(parents, tokens, nodes) -> (len(nodes), V) draft log-probabilities
# giving the draft's next-token log-probs after each node in ``nodes`` (-1 = after the
# committed context) of the tree drafted so far. A chain draft model, the EAGLE head and
# Medusa heads each supply one (lessonlib.decode_tree), so the rules stay model-free.
# Each rule returns (parents, tokens, score): score = cumulative draft log-probability of
# the node's root-to-node path.

def choices_from_branching(branching) -> list[tuple[int, ...]]:
    """Static tree as Medusa/EAGLE "choices": every path of top-k ranks, e.g. (3, 2, 2) ->
    [(0,), (1,), (2,), (0, 0), (0, 1), ..., (2, 1, 1)] (3 + 6 + 12 = 21 nodes)."""
    branching = [int(b) for b in branching]
    if not branching or min(branching) < 1:
        raise ValueError(f"branching must be a non-empty list of ints >= 1, got {branching}")
    paths, level = [], [()]
    for b in branching:
        level = [path + (r,) for path in level for r in range(b)]
        paths += level
    return paths


def tree_from_choices(choices):
    """(parents, ranks) of a static tree given as paths of top-k ranks; nodes ordered by depth,
    then lexicographically. Every prefix of a path must itself be a path."""
    paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
    if not paths or min(len(c) for c in paths) < 1 or min(min(c) for c in paths) < 0:
        raise ValueError("choices must be non-empty paths of ranks >= 0")
    index = {c: i for i, c in enumerate(paths)}
    missing = [c for c in paths if len(c) > 1 and c[:-1] not in index]
    if missing:
        raise ValueError(f"choices must contain every prefix of every path; missing parent of {missing[0]}")
    parents = np.array([index[c[:-1]] if len(c) > 1 else -1 for c in paths], dtype=np.int64)
    return parents, np.array([c[-1] for c in paths], dtype=np.int64)


def _top(rows, k):
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
def _static_structure(choices):
    """(parents, ranks, levels) of a static tree, cached: drafting reuses it every round.
    levels[d] = (nodes at depth d, their distinct parents, each node's row among those)."""
    parents, ranks = tree_from_choices(choices)
    depth = tree_depth(parents)
    levels = []
    for d in range(int(depth.max()) + 1):
        level = np.flatnonzero(depth == d)
        levels.append((level, *np.unique(parents[level], return_inverse=True)))
    return parents, ranks, levels


def draft_static(expand, choices):
    """Static tree: node with rank r is its parent's r-th most likely draft token."""
    parents, ranks, levels = _static_structure(tuple(tuple(int(r) for r in c) for c in choices))
    tokens = np.full(len(parents), -1, dtype=np.int64)
    score = np.zeros(len(parents))
    for level, frontier, row in levels:  # nodes sorted by depth: 0..level[0]-1 are drafted
        logq = expand(parents[: level[0]], tokens[: level[0]], frontier)
        top = _top(logq, int(ranks[level].max()) + 1)
        tokens[level] = top[row, ranks[level]]
        score[level] = np.where(parents[level] >= 0, score[parents[level]], 0.0) + logq[row, tokens[level]]
    return parents.copy(), tokens, score  # the structure is cached: hand out a copy


def draft_topk(expand, branching):
    """Static top-k tree, e.g. branching (3, 2, 2): 3 children of the context, 2 under each."""
    return draft_static(expand, choices_from_branching(branching))


def draft_top_p(expand, top_p, depth, max_children=4):
    """Top-p branching: under every node keep the most likely children until their cumulative
    draft probability reaches ``top_p`` (at least 1, at most ``max_children``), ``depth`` levels."""
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if depth < 1 or max_children < 1:
        raise ValueError(f"depth and max_children must be >= 1, got {depth}, {max_children}")
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        logq = expand(parents, tokens, frontier)
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


def keep_best(parents, score, n):
    """Sorted indices of the ``n`` best nodes by score, closed under ancestors.

    Ranks by (score desc, depth asc, index asc). A child never scores above its parent
    (log q <= 0), and on a tie the shallower parent ranks first, so every prefix of this order
    contains each member's ancestors.
    """
    depth = tree_depth(parents)
    order = np.lexsort((np.arange(len(depth)), depth, -np.asarray(score)))
    return np.sort(order[:n])


def draft_dynamic(expand, depth, top_k, total):
    """EAGLE-2 dynamic tree: at every depth expand the ``top_k`` most likely frontier nodes
    (by cumulative draft log-prob) into their ``top_k`` children each; finally keep the best
    ``total`` of all candidates, closed under ancestors."""
    if depth < 1 or top_k < 1 or total < 1:
        raise ValueError(f"depth, top_k and total must be >= 1, got {depth}, {top_k}, {total}")
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        # log q <= 0 up to rounding; clamping keeps a child from outranking its parent
        logq = np.minimum(expand(parents, tokens, frontier), 0.0)
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

def _check_tree(parents, tokens, rows, name, vocab_size=None):
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


def verify_tree_greedy(parents, tokens, target_argmax):
    """Greedy tree verification (T = 0).

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


def _children(parents):
    """children[node + 1] = node's children in index order (the sibling order of the rule)."""
    order = np.argsort(parents, kind="stable")
    return np.split(order, np.searchsorted(parents[order], np.arange(len(parents))))


def verify_tree(parents, tokens, p_rows, rng):
    """Stochastic tree verification with deterministic sibling candidates (T > 0).

    At a node with target distribution p and children c1..cm (index order): accept ci with
    probability p_i(ci); on rejection zero ci and renormalise (p_{i+1}); accepted -> continue
    at ci with its own row; all rejected (or a leaf) -> sample the last token from what is
    left. The emitted tokens are then exactly distributed as the target's own sampling.
    ``p_rows[0]`` is the target distribution after the context, ``p_rows[i + 1]`` after
    node i. Returns (path, emitted) like ``verify_tree_greedy``.
    """
    p_rows = check_probs(p_rows, "p_rows", ndim=(2,))
    parents, tokens, p_rows = _check_tree(parents, tokens, p_rows, "p_rows", p_rows.shape[-1])
    check_rng(rng)
    children = _children(parents)
    node, path = -1, []
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


def tree_output_distribution(parents, tokens, p_rows) -> dict:
    """Exact distribution of ``verify_tree``'s emitted tokens, by enumerating its branches:
    {tuple(emitted tokens): probability}. For tests and the notebook (small vocabularies)."""
    p_rows = check_probs(p_rows, "p_rows", ndim=(2,))
    parents, tokens, p_rows = _check_tree(parents, tokens, p_rows, "p_rows", p_rows.shape[-1])
    children = _children(parents)
    out = {}

    def walk(node, prefix, prob):
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
