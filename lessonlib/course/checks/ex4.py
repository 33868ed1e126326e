"""Checks for notebook 4, EAGLE trees: 4a the mask, 4b top-k drafting, 4c greedy and 4d sampled verification."""
from __future__ import annotations

from collections import Counter

import numpy as np

from lessonlib.core import tree
from lessonlib.course.checks import wrong
from lessonlib.course.checks.cases import seeded
from lessonlib.course.checks.framework import (
    call,
    chi_square_gate,
    expect_equal,
    fail,
    numbers,
    run_check,
    with_controls,
)
from lessonlib.course.messages import N_, _, say, translated


def _random_tree(rng, n):
    return np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int64)


def _deep_tree(rng, n, depth):
    """A chain ``depth`` nodes long, then ``n - depth`` nodes hung anywhere on it or on each other."""
    return np.array([i - 1 for i in range(depth)] + [rng.integers(0, i) for i in range(depth, n)], dtype=np.int64)


def eagle2_tree():
    """(parents, tokens) of an EAGLE-2 dynamic tree as notebook 04 drafts one: 6 deep, the 4 most likely nodes
    expanded at each depth, the best 24 kept (``tree.draft_dynamic`` on a peaked 12-token draft)."""
    table = np.full((12, 12), 0.02)
    table[np.arange(12), (np.arange(12) + 1) % 12] = 0.85
    table[np.arange(12), (np.arange(12) + 5) % 12] = 0.1
    parents, tokens, _score = tree.draft_dynamic(markov_expand(table / table.sum(1, keepdims=True)), depth=6,
                                                 top_k=4, total=24)
    return parents, tokens


def _pair(case, got, what="(path, emitted)"):
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        fail(case, say("return {what}", what=what), got=type(got).__name__,
             hint=say("return a pair: {what}, a tuple or a list of the two", what=what))
    return got


# ----------------------------------------------------------------------------- 4a the tree attention mask

MASK = N_("mask[i, j] is True iff j == i or j is an ancestor of i (walk up parents[] until -1)")


def _mask_hint(got, want):
    n = len(want)
    if np.array_equal(got, want.T):
        return _("that is the transpose: row i must mark i's ancestors (its own past), not its descendants")
    if np.array_equal(got, np.tril(np.ones((n, n), dtype=bool))):
        return say("that is the causal mask: a node must not see its siblings or their subtrees. {rule}",
                   rule=translated(MASK))
    return MASK


def _verify_tree_mask(build_tree_mask):
    cases = {N_("the lesson's tree (root -> a, b; a -> c, d; b -> e, f)"): np.array([-1, -1, 0, 0, 1, 1]),
             N_("a chain of 4"): np.array([-1, 0, 1, 2]), N_("one node"): np.array([-1]),
             N_("a chain of 8"): np.arange(-1, 7), N_("an EAGLE-2 dynamic tree (24 nodes, 6 deep, as in notebook 04)"):
             eagle2_tree()[0]}
    rng = np.random.default_rng(40)
    cases.update({say("random tree #{i} ({n} nodes)", i=i, n=n): _random_tree(rng, n)
                  for i, n in enumerate((7, 15, 30))})
    cases[say("a tree {depth} deep ({n} nodes)", depth=10, n=40)] = _deep_tree(rng, 40, 10)
    for case, parents in cases.items():
        got = numbers(case, call(build_tree_mask, case, parents), MASK)[0]
        if got.shape != (len(parents), len(parents)):
            fail(case, say("the mask must be (N, N) = {shape}, got shape {got}", shape=(len(parents),) * 2,
                           got=got.shape))
        want = tree.tree_attention_mask(parents)
        got = got != 0
        if not np.array_equal(got, want):
            i, j = np.argwhere(got != want)[0]
            fail(case, say("mask[{i}, {j}] is {got}, expected {want} (node {i}'s ancestors: {ancestors})", i=i, j=j,
                           got=bool(got[i, j]), want=bool(want[i, j]),
                           ancestors=np.flatnonzero(want[i] & (np.arange(len(want)) != i)).tolist()),
                 want.astype(int), got.astype(int), _mask_hint(got, want))
    return [_("matches the ancestor rule on the lesson's tree, chains of 4 and 8, one node, an EAGLE-2 tree 6 deep, "
              "3 random trees and one 10 deep")]


def exercise_4a(build_tree_mask):
    """Check ``build_tree_mask(parents)`` -> bool (N, N), mask[i, j] iff j is i or an ancestor."""
    verify = with_controls(_verify_tree_mask, wrong.controls("4a"))
    return run_check("4a", build_tree_mask, tree.tree_attention_mask, verify)


# ----------------------------------------------------------------------------- 4b top-k drafting


def markov_expand(table, context_token=0):
    """A toy draft for the tree checks: log q(next | node) = log table[token of the node]."""
    def expand(parents, tokens, nodes):
        nodes = np.asarray(nodes)
        last = np.full(len(nodes), context_token)
        last[nodes >= 0] = np.asarray(tokens)[nodes[nodes >= 0]]
        return np.log(table[last])
    return expand


def draft_topk_tree_reference(expand, branching):
    """The reference for 4b: ``tree.draft_topk``'s (parents, tokens), without the scores."""
    return tree.draft_topk(expand, branching)[:2]


RANKS = N_("a node's r-th child carries the r-th most likely token of the draft at that node")
TIES = N_("ties go to the lower token id: np.argsort(-logq, kind='stable') keeps equal values in id order")


def _tied_table():
    """Rows of 12 tokens where several tokens share a probability: the ranks need the tie rule."""
    row = np.array([3, 1, 3, 2, 3, 1, 2, 0.5, 2, 1, 0.5, 3], dtype=float)
    return np.stack([np.roll(row, i) for i in range(12)]) / row.sum()


def _topk_cases():
    rng = np.random.default_rng(41)
    cases = [(say("branching {b}, random 12-token draft #{i}", b=b, i=i), rng.dirichlet(np.full(12, 0.4), size=12), b)
             for i, b in enumerate([(3,), (3, 2, 2), (2, 2, 2, 1), (4, 1, 1)])]
    wide = np.random.default_rng(47).integers(1, 5, 40).astype(float)  # 40 tokens, many tied at each value
    wide = np.stack([np.roll(wide, i) for i in range(40)]) / wide.sum()
    return cases + [(N_("branching (3, 2), a draft with tied probabilities"), _tied_table(), (3, 2)),
                    (N_("branching (4, 2, 1, 1, 1, 1), 40 tokens with tied probabilities (6 deep)"), wide,
                     (4, 2, 1, 1, 1, 1)),
                    (N_("branching (2, 2, 2, 2, 2, 2), random 12-token draft (6 deep)"),
                     rng.dirichlet(np.full(12, 0.4), size=12), (2, 2, 2, 2, 2, 2))]


def _same_values(expand, parents, got, want) -> bool:
    """Whether each node's token has the same draft probability as the reference's (a tie-order mix-up)."""
    value = lambda tokens: expand(parents, tokens, parents)[np.arange(len(parents)), tokens]  # noqa: E731
    try:
        return bool(np.allclose(value(got), value(want)))
    except (IndexError, ValueError):  # token ids out of range: not a tie problem
        return False


def _verify_topk_tree(draft_topk_tree):
    for case, table, branching in _topk_cases():
        expand = markov_expand(table)
        got = _pair(case, call(draft_topk_tree, case, expand, branching), "(parents, tokens)")
        parents, tokens = (np.asarray(x) for x in got)
        want_parents, want_tokens = draft_topk_tree_reference(expand, branching)
        sizes = np.cumprod(branching)
        if len(parents) != len(want_parents) or len(tokens) != len(want_parents):
            fail(case, say("a {branching} tree has {sizes} = {total} nodes", branching=branching,
                           sizes=" + ".join(map(str, sizes)), total=sizes.sum()),
                 len(want_parents), say("{parents} parents, {tokens} tokens", parents=len(parents), tokens=len(tokens)),
                 _("depth d has branching[d] children under every node of depth d − 1"))
        expect_equal(say("{case}: parents", case=translated(case)), parents.tolist(), want_parents.tolist(),
                     hint=_("nodes depth by depth; under each node of the previous depth, its children in rank order; "
                            "parents[i] is the index of the parent node in the whole tree (−1 for the context)"))
        if tokens.tolist() != want_tokens.tolist():
            tie = _same_values(expand, parents, tokens.astype(np.int64), want_tokens)
            expect_equal(say("{case}: tokens", case=translated(case)), tokens.tolist(), want_tokens.tolist(),
                         TIES if tie else RANKS)
    return [_("parents and tokens match the reference for 6 branchings (3; 3-2-2; 2-2-2-1; 4-1-1; 4-2-1-1-1-1; "
              "2-2-2-2-2-2, 6 deep)"),
            _("equal probabilities rank the lower token id first (12 and 40 tokens, a stable sort's order)")]


def exercise_4b(draft_topk_tree):
    """Check ``draft_topk_tree(expand, branching)`` -> (parents, tokens) on toy drafts."""
    verify = with_controls(_verify_topk_tree, wrong.controls("4b"))
    return run_check("4b", draft_topk_tree, draft_topk_tree_reference, verify)


# ----------------------------------------------------------------------------- 4c greedy verification

PATH = N_("a node is accepted iff it and all its ancestors equal the target's argmax at their parent "
        "(target_argmax[parent + 1]); keep the deepest accepted node's path (on a tie between equally deep paths, "
        "the one whose last node has the smallest index; the first one found depth-first is accepted too)")
def _tie_readings(parents, tokens, target_argmax):
    """The answers the tie rule allows: the reference's (the deepest accepted node with the smallest
    index) and the lexicographically first deepest path (the first found depth-first, children in
    index order; the same node whenever the tree is numbered depth by depth)."""
    want = tree.verify_tree_greedy(parents, tokens, target_argmax)
    mask = tree.tree_attention_mask(parents)
    accepted = ~(mask & ~(tokens == target_argmax[parents + 1])[None, :]).any(1)
    if not accepted.any():
        return [want]
    depth = np.where(accepted, mask.sum(1), 0)
    first = min(np.flatnonzero(mask[i]).tolist() for i in np.flatnonzero(depth == depth.max()))
    return [want, (first, [int(tokens[i]) for i in first] + [int(target_argmax[first[-1] + 1])])]


def _greedy_cases():
    rng = np.random.default_rng(42)
    parents = np.array([-1, -1, 0, 0, 1, 1])
    tokens = np.array([7, 3, 5, 2, 2, 9])
    cases = {N_("lesson tree, b -> f accepted, bonus 8"): (parents, tokens, np.array([3, 4, 9, 4, 4, 4, 8])),
             N_("lesson tree, nothing accepted"): (parents, tokens, np.array([1, 4, 4, 4, 4, 4, 4])),
             N_("lesson tree, a -> d accepted, bonus 8"): (parents, tokens, np.array([7, 2, 4, 4, 8, 4, 4])),
             N_("two accepted paths of equal depth"): (np.array([-1, -1, 0, 1]), np.array([5, 5, 2, 2]),
                                                       np.array([5, 2, 2, 6, 7])),
             N_("equal depth, not numbered depth by depth (both tie readings pass)"): (
                 np.array([-1, -1, 1, 0]), np.array([5, 5, 2, 2]), np.array([5, 2, 2, 6, 7]))}
    for i in range(6):
        p = _random_tree(rng, 20)
        cases[say("random tree #{i}, 3-token vocabulary", i=i)] = (p, rng.integers(0, 3, 20), rng.integers(0, 3, 21))
    chain = np.arange(-1, 7)
    cases[N_("a chain of 8, all accepted")] = (chain, np.arange(8) % 3, np.r_[np.arange(8) % 3, 1])
    parents, tokens = eagle2_tree()
    cases[N_("an EAGLE-2 tree 6 deep, its deepest path accepted")] = (parents, tokens, _accepting(parents, tokens))
    deep = _deep_tree(rng, 40, 10)
    cases[say("a tree {depth} deep ({n} nodes), 2-token vocabulary", depth=10, n=40)] = (
        deep, rng.integers(0, 2, 40), rng.integers(0, 2, 41))
    return cases


def _accepting(parents, tokens):
    """target_argmax under which the deepest node's whole path is accepted (the bonus: token 0)."""
    mask = tree.tree_attention_mask(parents)
    argmax = np.zeros(len(parents) + 1, dtype=np.int64)
    for node in np.flatnonzero(mask[int(np.argmax(mask.sum(1)))]):
        argmax[parents[node] + 1] = tokens[node]
    return argmax


def _verify_greedy_tree(verify_tree_greedy):
    for case, (p, t, argmax) in _greedy_cases().items():
        got = _pair(case, call(verify_tree_greedy, case, p, t, argmax))
        want = tree.verify_tree_greedy(p, t, argmax)
        path, emitted = _ints(case, got[0], "path"), _ints(case, got[1], "emitted")
        if (path, emitted) in _tie_readings(p, t, argmax):
            continue
        shown = translated(case)
        expect_equal(say("{case}: path", case=shown), path, want[0],
                     _("list the path root first (the order the tokens are emitted in)")
                     if path == want[0][::-1] and path != want[0] else PATH)
        expect_equal(say("{case}: emitted", case=shown), [int(x) for x in got[1]], want[1],
                     hint=_("the path's tokens, then the bonus: target_argmax[last accepted node + 1] (row 0 if none)"))
    return [_("longest accepted path and bonus token match on the lesson's tree (3 cases), two ties (the path ending "
              "at the smallest node index wins; the first found depth-first also passes), 6 random trees, a chain "
              "of 8, an EAGLE-2 tree 6 deep and a tree 10 deep")]


def exercise_4c(verify_tree_greedy):
    """Check ``verify_tree_greedy(parents, tokens, target_argmax)`` -> (path, emitted)."""
    verify = with_controls(_verify_greedy_tree, wrong.controls("4c"))
    return run_check("4c", verify_tree_greedy, tree.verify_tree_greedy, verify)


# ----------------------------------------------------------------------------- 4d sampled verification

TREE_ROUNDS, TREE_LEVEL = 5000, 1e-3
SIBLINGS = N_("try the children in order, each with a fresh u = rng.random(): accept child c if u < p(c); on rejection "
            "set p(c) = 0 and renormalise before the next child; after an accepted child continue there with its "
            "own row p_rows[c + 1]; if all fail, sample the last token from what is left")


DEEP_ROUNDS = 2000


def _ints(case, seq, what) -> list[int]:
    """A list of token ids or node indices from whatever sequence came back, or a ✗ naming it."""
    try:
        if isinstance(seq, (str, bytes, dict)):
            raise TypeError(seq)
        return [int(x) for x in seq]
    except (TypeError, ValueError, OverflowError, RuntimeError):
        fail(case, say("expected {what} as a list of integers, got {kind}", what=what, kind=type(seq).__name__),
             got=repr(seq)[:80])
    raise AssertionError("unreachable")  # fail raises


def _rounds(fn, case, parents, tokens, p_rows, rng, rounds) -> list[tuple[int, ...]]:
    """The emitted sequences of ``rounds`` calls, in order."""
    return [tuple(_ints(case, _pair(case, call(fn, case, parents, tokens, p_rows, rng))[1], "emitted"))
            for _round in range(rounds)]


def _emitted(fn, case, parents, tokens, p_rows, rng, rounds) -> Counter:
    """How often each emitted sequence came back in ``rounds`` calls."""
    return Counter(_rounds(fn, case, parents, tokens, p_rows, rng, rounds))


def _possible(case, seen: Counter, exact: dict, rounds: int) -> None:
    never = Counter({seq: n for seq, n in seen.items() if seq not in exact})  # outputs the rule can never emit
    if never:
        (seq, n), = never.most_common(1)
        fail(case, say("emitted the tokens {tokens} ({n} of {rounds} rounds), which the rule can never emit "
                       "(probability 0)", tokens=list(seq), n=n, rounds=rounds), hint=SIBLINGS)


def _deep_rows(parents, tokens, rng):
    """p rows that favour each node's children, so that paths 6 deep are accepted often (V = 12)."""
    p_rows = rng.dirichlet(np.full(12, 0.5), size=len(parents) + 1)
    for node in range(-1, len(parents)):
        kids = tokens[parents == node]
        if len(kids):
            p_rows[node + 1, kids] += 1.5 / len(kids)
    return p_rows / p_rows.sum(1, keepdims=True)


def _deep_test(verify_tree_sampled) -> None:
    """On the EAGLE-2 tree (6 deep): every output possible, and the number of emitted tokens (the accepted
    depth + 1) follows its exact law."""
    parents, tokens = eagle2_tree()
    p_rows = _deep_rows(parents, tokens, np.random.default_rng(45))
    exact = tree.tree_output_distribution(parents, tokens, p_rows)
    case = say("{rounds} rounds on an EAGLE-2 tree 6 deep over 12 tokens", rounds=DEEP_ROUNDS)
    seen = _emitted(verify_tree_sampled, case, parents, tokens, p_rows, np.random.default_rng(46), DEEP_ROUNDS)
    _possible(case, seen, exact, DEEP_ROUNDS)
    law, counts = np.zeros(8), np.zeros(8)
    for seq, prob in exact.items():
        law[len(seq)] += prob
    for seq, n in seen.items():
        counts[len(seq)] += n
    chi_square_gate(case, counts[1:], law[1:], TREE_LEVEL, hint=SIBLINGS,
                    labels=[say("{n} tokens", n=n) for n in range(1, 8)])


def _verify_sampled_tree(verify_tree_sampled, rounds=TREE_ROUNDS):
    rng = np.random.default_rng(43)
    parents, tokens = np.array([-1, -1, -1, 0, 0, 1]), np.array([0, 1, 2, 1, 3, 0])
    p_rows = rng.dirichlet(np.full(4, 1.5), size=len(parents) + 1)
    exact = tree.tree_output_distribution(parents, tokens, p_rows)
    keys = sorted(exact)
    case = say("{rounds} rounds on a 6-node tree over 4 tokens", rounds=rounds)
    seen = _emitted(verify_tree_sampled, case, parents, tokens, p_rows, np.random.default_rng(44), rounds)
    _possible(case, seen, exact, rounds)
    again = N_("the same rounds with generators of equal and of different seeds")
    randomness = seeded(again, lambda g: _rounds(verify_tree_sampled, again, parents, tokens, p_rows, g, 20))
    chi_square_gate(case, [seen[k] for k in keys], [exact[k] for k in keys], TREE_LEVEL, hint=SIBLINGS)
    _deep_test(verify_tree_sampled)
    return [say("the emitted sequences follow the exact enumeration (chi-square, {rounds} rounds, "
                "false alarm {level:g})", rounds=rounds, level=TREE_LEVEL),
            say("on an EAGLE-2 tree 6 deep the number of emitted tokens follows its exact law (chi-square, {rounds} "
                "rounds, false alarm {level:g})", rounds=DEEP_ROUNDS, level=TREE_LEVEL), randomness]


def exercise_4d(verify_tree_sampled):
    """Check ``verify_tree_sampled(parents, tokens, p_rows, rng)`` -> (path, emitted) in distribution."""
    verify = with_controls(_verify_sampled_tree, wrong.controls("4d"))
    return run_check("4d", verify_tree_sampled, tree.verify_tree, verify)
