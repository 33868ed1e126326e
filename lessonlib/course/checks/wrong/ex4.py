"""Wrong implementations for notebook 4: the tree mask, top-k drafting, greedy and sampled tree verification."""
from __future__ import annotations

import numpy as np

from lessonlib.core import tree
from lessonlib.course.checks.framework import Wrong

# ----------------------------------------------------------------------------- 4a the mask


def _walk_mask(parents, generations=None, stop_at_root_child=False):
    """Walks every node up ``parents``; ``generations`` caps the walk; ``stop_at_root_child`` treats
    node 0 as having no parent entry (the `> 0` slip)."""
    parents = np.asarray(parents)
    mask, up, rows = np.eye(len(parents), dtype=bool), parents.copy(), np.arange(len(parents))
    step = 0
    while ((up > 0) if stop_at_root_child else (up >= 0)).any() and (generations is None or step < generations):
        alive = (up > 0) if stop_at_root_child else (up >= 0)
        mask[rows[alive], up[alive]] = True
        up[alive] = parents[up[alive]]
        step += 1
    return mask


def mask_walks_parents_in_place(parents):
    """The right mask, but the walk moves ``parents`` itself up the tree: the caller's tree is destroyed."""
    original, up, rows = parents.copy(), parents, np.arange(len(parents))
    mask = np.eye(len(parents), dtype=bool)
    while (up >= 0).any():
        alive = up >= 0
        mask[rows[alive], up[alive]] = True
        up[alive] = original[up[alive]]
    return mask


def mask_includes_siblings(parents):
    parents = np.asarray(parents)
    return tree.tree_attention_mask(parents) | (parents[:, None] == parents[None, :])


# ----------------------------------------------------------------------------- 4b top-k drafting


def _topk_bfs(expand, branching, order=lambda logq: np.argsort(-logq, axis=1, kind="stable"), frontier_of=None,
              local_parents=False):
    """Top-k tree depth by depth; ``order`` ranks tokens, ``frontier_of`` picks the next nodes to
    expand, ``local_parents`` stores a parent's index within its depth instead of in the tree."""
    parents, tokens, frontier = np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([-1])
    for k in branching:
        top = order(expand(parents, tokens, frontier))[:, :k]
        start = len(parents)
        labels = np.arange(len(frontier)) if local_parents and frontier[0] >= 0 else frontier
        parents = np.concatenate([parents, np.repeat(labels, k)])
        tokens = np.concatenate([tokens, top.ravel()])
        frontier = np.arange(start, len(parents)) if frontier_of is None else frontier_of(frontier)
    return parents, tokens


def topk_sampled(expand, branching):
    """Samples the children from q instead of taking the top-k."""
    rng = np.random.default_rng(0)
    parents, tokens, _ = tree.draft_topk(expand, branching)
    logq = expand(parents, tokens, np.concatenate([[-1], np.arange(len(parents))]))
    p = np.exp(logq[parents + 1])
    return parents, np.array([rng.choice(len(r), p=r / r.sum()) for r in p])


def topk_depth_first(expand, branching):
    parents, tokens = tree.draft_topk(expand, branching)[:2]
    order, stack = [], [int(i) for i in np.flatnonzero(parents == -1)][::-1]
    while stack:  # depth-first numbering
        node = stack.pop()
        order.append(node)
        stack += [int(c) for c in np.flatnonzero(parents == node)][::-1]
    new = np.argsort(order)
    return np.where(parents[order] >= 0, new[parents[order]], -1), tokens[order]


def topk_one_width(expand, branching):
    return _topk_bfs(expand, [branching[0]] * len(branching))


# ----------------------------------------------------------------------------- 4c greedy verification


def _greedy(parents, tokens, target_argmax, row=lambda i, parent: parent + 1, pick=np.argmax, bonus=lambda n: n + 1,
            chained=True):
    """Greedy tree verification with one part swapped: ``row`` is the argmax row node i is compared
    with, ``pick`` chooses among the deepest, ``bonus(n)`` the row of the bonus, ``chained``
    requires the ancestors to be accepted."""
    parents, tokens, target_argmax = (np.asarray(x) for x in (parents, tokens, target_argmax))
    mask = tree.tree_attention_mask(parents)
    rows = np.array([row(i, p) for i, p in enumerate(parents)], dtype=np.int64)
    correct = tokens == target_argmax[np.minimum(rows, len(target_argmax) - 1)]
    accepted = ~(mask & ~correct[None, :]).any(1) if chained else correct
    if not accepted.any():
        return [], [int(target_argmax[0])]
    depth = np.where(accepted, mask.sum(1), 0)
    best = int(pick(depth))
    path = np.flatnonzero(mask[best]).tolist()
    return path, [int(tokens[i]) for i in path] + ([] if bonus(best) is None else [int(target_argmax[bonus(best)])])


def greedy_first_child(parents, tokens, target_argmax):
    """Follows only the first child at each node (a chain, not a tree)."""
    node, path = -1, []
    while True:
        kids = np.flatnonzero(np.asarray(parents) == node)
        if not len(kids) or tokens[kids[0]] != target_argmax[node + 1]:
            return path, [int(tokens[i]) for i in path] + [int(target_argmax[node + 1])]
        node = int(kids[0])
        path.append(node)


def greedy_path_reversed(parents, tokens, target_argmax):
    path, emitted = tree.verify_tree_greedy(parents, tokens, target_argmax)
    return path[::-1], emitted


# ----------------------------------------------------------------------------- 4d sampled verification


def _sampled(parents, tokens, p_rows, rng, renormalise=True, final_from_original=False, one_u=False, descend=True,
             own_row=True, accept=lambda p, x, u: u < p[x]):
    """The sibling rule with one part swapped out (each flag names the part)."""
    parents, node, path = np.asarray(parents), -1, []
    while True:
        p = np.array(p_rows[node + 1 if own_row or node < 0 else node], dtype=float)
        original, kids = p.copy(), np.flatnonzero(parents == node)
        u = rng.random() if one_u else None
        for c in kids:
            if accept(p, tokens[c], rng.random() if u is None else u):
                path.append(int(c))
                break
            if renormalise:
                p[tokens[c]] = 0.0
                p /= p.sum()
        else:
            if final_from_original:
                p = original
            elif not renormalise:  # never zeroed while trying: drop the rejected tokens only now
                p[tokens[kids]] = 0.0
                p /= p.sum()
            return path, [int(tokens[i]) for i in path] + [int(rng.choice(len(p), p=p))]
        if not descend:
            last = p_rows[path[-1] + 1]
            return path, [int(tokens[i]) for i in path] + [int(rng.choice(len(last), p=last))]
        node = path[-1]


def topk_unstable_sort(expand, branching):
    """np.argsort(-logq) without kind='stable': equal probabilities come out in the sort's own order."""
    return _topk_bfs(expand, branching, order=lambda logq: np.argsort(-logq, axis=1))


def topk_torch(expand, branching):
    """torch.topk: which of several equal values it returns first is not specified."""
    import torch

    return _topk_bfs(expand, branching, order=lambda logq: torch.topk(torch.as_tensor(logq), logq.shape[1],
                                                                      dim=1).indices.numpy())


def sampled_three_levels(parents, tokens, p_rows, rng):
    """Verifies only the first three levels of the tree (deeper nodes dropped, as if the tree were cut there)."""
    parents, tokens = np.asarray(parents), np.asarray(tokens)
    keep = np.flatnonzero(tree.tree_depth(parents) < 3)
    new = {int(old): i for i, old in enumerate(keep)}
    cut = np.array([new[int(parents[i])] if parents[i] >= 0 else -1 for i in keep], dtype=np.int64)
    path, emitted = tree.verify_tree(cut, tokens[keep], np.asarray(p_rows)[np.r_[0, keep + 1]], rng)
    return [int(keep[i]) for i in path], emitted


def sampled_new_generator(parents, tokens, p_rows, rng):
    """The sibling rule drawing from a new unseeded generator instead of ``rng``: right in law, not reproducible."""
    return tree.verify_tree(parents, tokens, p_rows, np.random.default_rng())


ANCESTORS = "j == i or j is an ancestor of i"
PARENTS = "parents[i] is the index of the parent node"
RANKS = "r-th most likely token"
PATH = "and all its ancestors equal the target's argmax at their parent"
BONUS = "target_argmax[last accepted node + 1]"
SIBLINGS = "set p(c) = 0 and renormalise"
ENTRIES = [
    Wrong("4a", "walks up in the caller's parents", mask_walks_parents_in_place, "modified `parents` in place",
          "up = parents (no copy), then moved up the tree in place"),
    Wrong("4a", "parent only", lambda parents: _walk_mask(parents, generations=1), ANCESTORS,
          "each node sees itself and its parent, not the grandparents", control=True),
    Wrong("4a", "causal mask", lambda parents: np.tril(np.ones((len(parents),) * 2, dtype=bool)), "the causal mask",
          "lower-triangular: lets branches see each other"),
    Wrong("4a", "no diagonal", lambda parents: _walk_mask(parents) & ~np.eye(len(parents), dtype=bool), ANCESTORS,
          "a node does not see itself"),
    Wrong("4a", "transposed", lambda parents: _walk_mask(parents).T, "that is the transpose",
          "row i marks i's descendants"),
    Wrong("4a", "siblings see each other", mask_includes_siblings, ANCESTORS, "adds nodes with the same parent"),
    Wrong("4a", "stops at node 0", lambda parents: _walk_mask(parents, stop_at_root_child=True), ANCESTORS,
          "tests parent > 0 instead of >= 0, so nobody sees node 0"),
    Wrong("4a", "two generations", lambda parents: _walk_mask(parents, generations=2), ANCESTORS,
          "walks up twice instead of to the root"),
    Wrong("4a", "three generations", lambda parents: _walk_mask(parents, generations=3), ANCESTORS,
          "walks up three times: right on trees up to 4 deep, not on the EAGLE-2 tree (6 deep)", control=True),
    Wrong("4a", "five generations", lambda parents: _walk_mask(parents, generations=5), ANCESTORS,
          "walks up five times: a chain of 8 or a tree 10 deep needs more"),
    Wrong("4b", "sampled children", topk_sampled, RANKS, "samples children from q instead of the top-k",
          control=True),
    Wrong("4b", "ties to the higher id",
          lambda e, b: _topk_bfs(e, b, order=lambda lq: np.argsort(lq, 1, "stable")[:, ::-1]),
          "ties go to the lower token id", "argsort(logq)[::-1] puts the higher id first among equals", control=True),
    Wrong("4b", "least likely first", lambda e, b: _topk_bfs(e, b, order=lambda lq: np.argsort(lq, 1, "stable")), RANKS,
          "argsort without the minus sign"),
    Wrong("4b", "every depth under the context", lambda e, b: _topk_bfs(e, b, frontier_of=lambda f: np.array([-1])),
          "children under every node of depth d − 1", "expands [-1] at every depth"),
    Wrong("4b", "depth-first order", topk_depth_first, PARENTS, "numbers the nodes depth first"),
    Wrong("4b", "parents within the depth", lambda e, b: _topk_bfs(e, b, local_parents=True), PARENTS,
          "stores the parent's position in the previous depth"),
    Wrong("4b", "first width everywhere", topk_one_width, "depth d has branching[d] children",
          "uses branching[0] at every depth"),
    Wrong("4b", "unstable sort", topk_unstable_sort, "ties go to the lower token id",
          "np.argsort(-logq) (quicksort): equal probabilities in no fixed order past 16 tokens"),
    Wrong("4b", "torch.topk", topk_torch, "ties go to the lower token id",
          "torch.topk does not promise the lower id first among equal values"),
    Wrong("4b", "three levels only", lambda e, b: _topk_bfs(e, b[:3]), "depth d has branching[d] children",
          "drafts only the first three depths of a deeper branching"),
    Wrong("4c", "paths at most 3 deep",
          lambda p, t, a: _greedy(p, t, a, pick=lambda d: np.argmax(np.where(d <= 3, d, 0))), PATH,
          "keeps the deepest accepted path of at most 3 nodes"),
    Wrong("4c", "first child only", greedy_first_child, PATH, "follows only the first child: a chain, not a tree",
          control=True),
    Wrong("4c", "compares with its own row", lambda p, t, a: _greedy(p, t, a, row=lambda i, parent: i + 1), PATH,
          "node i against target_argmax[i + 1] instead of its parent's"),
    Wrong("4c", "bonus off by one", lambda p, t, a: _greedy(p, t, a, bonus=lambda n: n), BONUS,
          "bonus target_argmax[node] instead of [node + 1]"),
    Wrong("4c", "last path on a tie", lambda p, t, a: _greedy(p, t, a, pick=lambda d: len(d) - 1 - np.argmax(d[::-1])),
          "on a tie between equally deep paths", "keeps the last of equally deep paths"),
    Wrong("4c", "no bonus", lambda p, t, a: _greedy(p, t, a, bonus=lambda n: None), BONUS, "emits only the path"),
    Wrong("4c", "ignores the ancestors", lambda p, t, a: _greedy(p, t, a, chained=False), PATH,
          "accepts a node whose parent was rejected"),
    Wrong("4c", "path leaf first", greedy_path_reversed, "root first", "returns the path reversed"),
    Wrong("4d", "a new unseeded generator", sampled_new_generator, "from the rng argument",
          "the exact rule, drawing from np.random.default_rng() instead of rng: a seed does not reproduce it",
          control=True),
    Wrong("4d", "three levels only", sampled_three_levels, SIBLINGS,
          "verifies the first three levels only: on a tree 6 deep the round stops early"),
    Wrong("4d", "no renormalisation", lambda p, t, r, g: _sampled(p, t, r, g, renormalise=False), SIBLINGS,
          "tries each sibling with the original p", control=True),
    Wrong("4d", "rejected tokens kept", lambda p, t, r, g: _sampled(p, t, r, g, final_from_original=True), SIBLINGS,
          "the final sample can repeat a rejected sibling"),
    Wrong("4d", "one u per node", lambda p, t, r, g: _sampled(p, t, r, g, one_u=True), "fresh u = rng.random()",
          "compares all siblings with the same u"),
    Wrong("4d", "stops at depth 1", lambda p, t, r, g: _sampled(p, t, r, g, descend=False), "continue there",
          "after an accepted child samples the last token instead of trying its children"),
    Wrong("4d", "parent's row after accepting", lambda p, t, r, g: _sampled(p, t, r, g, own_row=False),
          "own row p_rows[c + 1]", "continues with p_rows[c] instead of p_rows[c + 1]"),
    Wrong("4d", "greedy at T > 0", lambda p, t, r, g: _sampled(p, t, r, g, accept=lambda q, x, u: x == np.argmax(q)),
          "accept child c if u < p(c)", "accepts a child only if it is the target's argmax"),
]
