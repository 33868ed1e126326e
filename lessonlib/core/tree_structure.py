"""Draft-tree structure (numpy): the ``parents`` array and what follows from it.

A tree of N drafted tokens is a ``parents`` array: ``parents[i]`` is the index of node i's
parent, or -1 when node i hangs directly off the committed context (depth 0). Parents always
come before their children, so a node's index is also a valid topological order.
``tree_attention_mask`` (node i sees j iff j is i or an ancestor of i), ``tree_depth``,
``tree_position_ids`` (prefix_len + depth), root-to-leaf ``retrieve_paths`` (node indices padded
with -1), ``with_root`` (prepend the last committed token as node 0), ``ancestor_closure`` and
``subtree``. ``core.tree`` re-exports all of them beside the drafting rules and verification.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lessonlib.core.validate import check_int

# ----------------------------------------------------------------------------- structure

def check_parents(parents: npt.ArrayLike) -> np.ndarray:
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


def tree_attention_mask(parents: npt.ArrayLike) -> np.ndarray:
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


def tree_depth(parents: npt.ArrayLike) -> np.ndarray:
    """Depth of every node, (N,): 0 for children of the context, parent's depth + 1 otherwise."""
    return tree_attention_mask(parents).sum(1) - 1


def tree_position_ids(parents: npt.ArrayLike, prefix_len: int = 0) -> np.ndarray:
    """Position ids (N,) of the nodes in the verification forward: ``prefix_len + depth``.

    Siblings share a position: each node must look to the model exactly as if it were the
    next token after its own root-to-node path.
    """
    return check_int(prefix_len, "prefix_len", minimum=0) + tree_depth(parents)


def with_root(parents: npt.ArrayLike) -> np.ndarray:
    """Parents (N + 1,) of the same tree with an explicit root node 0 (the last committed token).

    The verification forward feeds that token first, so its logits give the target's
    distribution for the depth-0 nodes; node i of the tree becomes node i + 1.
    """
    parents = check_parents(parents)
    return np.concatenate([[-1], np.where(parents < 0, 0, parents + 1)])


def retrieve_paths(parents: npt.ArrayLike) -> np.ndarray:
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


def ancestor_closure(parents: npt.ArrayLike, nodes: npt.ArrayLike) -> np.ndarray:
    """Sorted indices of ``nodes`` and all their ancestors."""
    nodes = np.asarray(nodes, dtype=np.int64)
    return np.flatnonzero(tree_attention_mask(parents)[nodes].any(0))


def subtree(parents: npt.ArrayLike, keep: npt.ArrayLike) -> np.ndarray:
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
