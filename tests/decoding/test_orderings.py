"""Exact ties and boundaries of every stated ordering, each with a control that moves the input
just off the tie or the boundary (the documented rule decides the tie; the control shows the
test's input is not decided by something else)."""
import functools

import numpy as np

from lessonlib.core import tree
from lessonlib.core.batched import verify_rounds
from lessonlib.core.sampling import top_k_filter, top_p_filter
from lessonlib.decoding.prompt_lookup import PromptLookupDrafter, draft_support

LOG = np.log


def rows_expand(rows):
    """An ``expand`` giving every node the same log-prob row ``rows`` ((V,))."""
    return lambda parents, tokens, nodes: np.tile(np.asarray(rows, dtype=float), (len(nodes), 1))


def test_top_k_ties_keep_the_lower_index():
    p = np.array([0.25, 0.5, 0.25])
    assert top_k_filter(p, 2).tolist() == [1 / 3, 2 / 3, 0.0]
    assert top_k_filter([0.24, 0.5, 0.26], 2)[2] > 0  # control: no tie, the larger one
    assert tree._top(np.array([[0.2, 0.3, 0.3, 0.2, 0.0]]), 3).tolist() == [[1, 2, 0]]
    assert tree._top(np.array([[0.1, 0.3, 0.3]]), 1).tolist() == [[1]]  # k = 1: argmax's first
    wide = np.full((1, 20), 0.01)
    wide[0, [3, 7, 11]] = 0.1
    assert tree._top(LOG(wide), 2).tolist() == [[3, 7]]  # argpartition path: a tie straddling k


def test_top_p_keeps_an_entry_while_the_mass_before_it_is_short():
    p = np.array([0.25, 0.5, 0.25])
    assert top_p_filter(p, 0.75).tolist() == [1 / 3, 2 / 3, 0.0]  # mass before the third is 0.75: out
    assert (top_p_filter(p, 0.76) > 0).all()  # control: just past the boundary, all three
    assert top_p_filter(p, 0.5).tolist() == [0.0, 1.0, 0.0]  # the first reaches 0.5: alone
    assert top_p_filter(p, 0.51).tolist() == [1 / 3, 2 / 3, 0.0]  # the tie: the lower index first


def test_draft_top_p_children_by_cumulative_mass():
    expand = rows_expand(LOG([0.5, 0.25, 0.125, 0.125]))
    parents, tokens, score = tree.draft_top_p(expand, 0.75, depth=1)
    assert tokens.tolist() == [0, 1]  # mass before token 2 is 0.75: not short of 0.75
    assert tree.draft_top_p(expand, 0.8, depth=1)[1].tolist() == [0, 1, 2]  # control; 2 before 3 (tie)
    assert tree.draft_top_p(expand, 0.5, depth=1)[1].tolist() == [0]  # the first alone reaches 0.5
    parents, tokens, score = tree.draft_top_p(expand, 0.6, depth=2)
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1] and np.allclose(score[2:], LOG([0.25, 0.125, 0.125, 0.0625]))


def test_draft_support_ties_by_token_id_and_the_lookup_trie_order():
    row = np.full(6, -np.inf)
    row[[4, 1, 5]] = [LOG(0.25), LOG(0.25), LOG(0.5)]
    parents, tokens, _ = draft_support(rows_expand(row), 1)
    assert tokens.tolist() == [5, 1, 4]  # most likely first, then the lower token id
    assert draft_support(rows_expand(row), 1, max_children=2)[1].tolist() == [5, 1]
    d = PromptLookupDrafter(10, k=2, matches=2)
    d.commit([7, 1, 2, 7, 3, 4, 7])  # the continuations of 7: (3, 4) the latest, then (1, 2)
    assert d.propose(None).tokens.tolist() == [3, 1, 4, 2]
    assert d.propose(functools.partial(draft_support, depth=2)).tokens.tolist() == [3, 1, 4, 2]
    first = PromptLookupDrafter(10, k=2, matches=2, prefer="first")
    first.commit([7, 1, 2, 7, 3, 4, 7])
    assert first.propose(None).tokens.tolist() == [1, 3, 2, 4]


def test_keep_best_ties_rank_the_shallower_node_first():
    # node 1 (depth 1, under node 0) ties node 2 (depth 0): depth decides before the index
    assert tree.keep_best([-1, 0, -1], [0.0, 0.0, 0.0], 2).tolist() == [0, 2]
    assert tree.keep_best([-1, 0, -1], [0.0, 0.0, -0.1], 2).tolist() == [0, 1]  # control: no tie
    assert tree.keep_best([-1, -1, 0], [-1.0, -1.0, -1.0], 2).tolist() == [0, 1]  # same depth: the index


def test_dynamic_tree_frontier_ties_keep_the_earlier_candidate():
    expand = rows_expand(LOG([0.25, 0.25, 0.25, 0.25]))
    parents, tokens, _ = tree.draft_dynamic(expand, depth=2, top_k=2, total=6)
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1] and tokens.tolist() == [0, 1, 0, 1, 0, 1]
    parents, tokens, _ = tree.draft_dynamic(expand, depth=2, top_k=2, total=4)  # ties: the shallow first
    assert parents.tolist() == [-1, -1, 0, 0]
    # depth 3: the four depth-2 candidates tie, the frontier keeps the first two (under node 0)
    parents, _, _ = tree.draft_dynamic(expand, depth=3, top_k=2, total=10)
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1, 2, 2, 3, 3]


def test_verify_rounds_rejects_at_u_zero_when_p_is_zero():
    q = np.array([[0.5, 0.5]])  # (K = 1, V = 2)
    p0 = np.array([[0.0, 1.0], [0.3, 0.7]])  # p(x = 0) = 0: never accepted, not even at u = 0
    tokens, n = verify_rounds(p0, q, np.array([[0]]), np.array([[0.0]]), np.array([0.0]))
    assert n.tolist() == [0] and tokens.tolist() == [[1, -1]]  # the residual puts all mass on 1
    p1 = np.array([[1e-12, 1.0 - 1e-12], [0.3, 0.7]])  # control: any p(x) > 0 is accepted at u = 0
    tokens, n = verify_rounds(p1, q, np.array([[0]]), np.array([[0.0]]), np.array([0.0]))
    assert n.tolist() == [1] and tokens.tolist() == [[0, 0]]
    # u = p / q exactly: u q < p fails, rejected; a hair below: accepted
    p2 = np.array([[0.25, 0.75], [0.5, 0.5]])
    assert verify_rounds(p2, q, np.array([[0]]), np.array([[0.5]]), np.array([0.0]))[1].tolist() == [0]
    assert verify_rounds(p2, q, np.array([[0]]), np.array([[0.4999]]), np.array([0.0]))[1].tolist() == [1]
