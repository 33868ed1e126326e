"""Tree structure, drafting and verification (lessonlib.core.tree)."""
import numpy as np
import pytest

from lessonlib.core import tree
from lessonlib.core.stats import chi_square


def random_parents(n, rng):
    """A random valid tree: each node's parent is -1 or a uniformly chosen earlier node."""
    return np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int64)


def ancestors_brute(parents, i):
    """Independent reference: walk up from node i one parent at a time."""
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_mask_and_positions_match_ancestor_walk(seed):
    rng = np.random.default_rng(seed)
    parents = random_parents(int(rng.integers(1, 40)), rng)
    n = len(parents)
    expected = np.zeros((n, n), dtype=bool)
    for i in range(n):
        expected[i, ancestors_brute(parents, i)] = True
    mask = tree.tree_attention_mask(parents)
    assert mask.dtype == bool and mask.shape == (n, n)
    np.testing.assert_array_equal(mask, expected)
    prefix = int(rng.integers(0, 100))
    depths = [len(ancestors_brute(parents, i)) - 1 for i in range(n)]
    np.testing.assert_array_equal(tree.tree_position_ids(parents, prefix), prefix + np.array(depths))


def test_lesson_tree():
    # root -> a, b; a -> c, d; b -> e, f  (the lesson's drawing)
    parents = [-1, -1, 0, 0, 1, 1]
    mask = tree.tree_attention_mask(parents)
    assert mask[2].tolist() == [True, False, True, False, False, False]  # c sees a and itself
    assert mask[5].tolist() == [False, True, False, False, False, True]  # f sees b and itself
    assert tree.tree_position_ids(parents, 10).tolist() == [10, 10, 11, 11, 11, 11]


def test_empty_tree():
    assert tree.tree_attention_mask([]).shape == (0, 0)
    assert tree.tree_position_ids([], 3).shape == (0,)


@pytest.mark.parametrize("bad", [[0], [-1, 1], [-1, 5], [-2], [[-1]], [-1, 0.5]])
def test_bad_parents_raise(bad):
    with pytest.raises(ValueError, match="parents"):
        tree.tree_attention_mask(bad)


def test_bad_prefix_len_raises():
    with pytest.raises(ValueError, match="prefix_len"):
        tree.tree_position_ids([-1], -1)


# ----------------------------------------------------------------------------- structure helpers

@pytest.mark.parametrize("seed", range(5))
def test_retrieve_paths_are_root_to_leaf_walks(seed):
    rng = np.random.default_rng(100 + seed)
    parents = random_parents(25, rng)
    paths = tree.retrieve_paths(parents)
    leaves = [i for i in range(len(parents)) if i not in set(parents.tolist())]
    assert len(paths) == len(leaves)
    for row, leaf in zip(paths, leaves):
        walk = ancestors_brute(parents, leaf)[::-1]
        assert row[: len(walk)].tolist() == walk and (row[len(walk):] == -1).all()


def test_with_root_and_subtree():
    parents = np.array([-1, -1, 0, 0, 1, 1])
    assert tree.with_root(parents).tolist() == [-1, 0, 0, 1, 1, 2, 2]
    keep = tree.ancestor_closure(parents, [3, 5])
    assert keep.tolist() == [0, 1, 3, 5]
    assert tree.subtree(parents, keep).tolist() == [-1, -1, 0, 1]
    with pytest.raises(ValueError, match="closed under ancestors"):
        tree.subtree(parents, [0, 4])


# ----------------------------------------------------------------------------- drafting

V = 8


def markov_expand(table, context_token=0):
    """Toy draft: log q(next | node) = log table[token of node] (row of the context at -1)."""
    def expand(parents, tokens, nodes):
        assert len(parents) == len(tokens) and np.all(np.asarray(nodes) < len(parents))
        last = np.where(np.asarray(nodes) >= 0, np.asarray(tokens)[np.maximum(nodes, 0)] if len(tokens) else 0,
                        context_token)
        with np.errstate(divide="ignore"):
            return np.log(table[last])
    return expand


def random_table(rng, concentration=0.5):
    return rng.dirichlet(np.full(V, concentration), size=V)


def test_static_topk_tree():
    table = random_table(np.random.default_rng(1))
    parents, tokens, score = tree.draft_topk(markov_expand(table), (3, 2, 2))
    assert len(parents) == 3 + 6 + 12
    ranks = tree.tree_from_choices(tree.choices_from_branching((3, 2, 2)))[1]
    for i, (par, tok) in enumerate(zip(parents, tokens)):
        row = table[tokens[par] if par >= 0 else 0]
        assert tok == np.argsort(-row, kind="stable")[ranks[i]]
        assert np.isclose(score[i], (score[par] if par >= 0 else 0.0) + np.log(row[tok]))


@pytest.mark.parametrize("seed", range(5))
def test_top_k_matches_stable_sort_including_ties(seed):
    rng = np.random.default_rng(600 + seed)
    rows = np.round(rng.normal(size=(6, 200)), 1)  # coarse values: many ties, some at the k-th place
    rows[0] = -np.inf
    rows[0, [5, 9]] = 0.0
    distinct = rng.normal(size=(6, 200))  # the argpartition fast path
    for k in (1, 3, 7, 60):
        for r in (rows, distinct):
            np.testing.assert_array_equal(tree._top(r, k), np.argsort(-r, axis=1, kind="stable")[:, :k])


def test_tree_from_choices_rejects_orphans():
    with pytest.raises(ValueError, match="prefix"):
        tree.tree_from_choices([(0,), (1, 0)])


def test_top_p_tree_keeps_smallest_set_reaching_p():
    table = random_table(np.random.default_rng(2))
    parents, tokens, _ = tree.draft_top_p(markov_expand(table), 0.7, depth=3, max_children=4)
    for node in range(-1, len(parents)):
        kids = tokens[parents == node]
        if node >= 0 and tree.tree_depth(parents)[node] == 2:
            assert len(kids) == 0
            continue
        row = np.sort(table[tokens[node] if node >= 0 else 0])[::-1]
        need = min(4, int(np.searchsorted(np.cumsum(row), 0.7)) + 1)
        assert len(kids) == need


@pytest.mark.parametrize("seed", range(10))
def test_keep_best_is_optimal_and_closed_with_ties(seed):
    rng = np.random.default_rng(200 + seed)
    parents = random_parents(40, rng)
    # coarse steps with many zeros: lots of exact ties, including child == parent
    step = rng.choice([0.0, 0.0, -1.0, -2.0], size=len(parents))
    score = np.zeros(len(parents))
    for i, par in enumerate(parents):
        score[i] = (score[par] if par >= 0 else 0.0) + step[i]
    for n in range(1, len(parents) + 1):
        keep = tree.keep_best(parents, score, n)
        assert len(keep) == n
        assert set(tree.ancestor_closure(parents, keep).tolist()) == set(keep.tolist())
        dropped = np.setdiff1d(np.arange(len(parents)), keep)
        assert not dropped.size or score[keep].min() >= score[dropped].max()


def test_naive_top_n_breaks_closure_on_ties():
    """Negative control: ranking by score alone, later nodes first on ties, keeps an orphan."""
    parents, score = np.array([-1, 0, 0]), np.array([-1.0, -1.0, -3.0])
    naive = np.sort(np.lexsort((-np.arange(3), -score))[:1])
    assert naive.tolist() == [1]  # child without its parent: the closure test above would fail
    assert tree.keep_best(parents, score, 1).tolist() == [0]


@pytest.mark.parametrize("seed", range(5))
def test_dynamic_tree_closed_and_budgeted(seed):
    rng = np.random.default_rng(300 + seed)
    table = random_table(rng, concentration=0.2)
    table[3] = np.eye(V)[5]  # a certain transition (log q = 0): ties between parent and child
    parents, tokens, score = tree.draft_dynamic(markov_expand(table, context_token=3), depth=5, top_k=3, total=12)
    assert len(parents) == 12 and tree.check_parents(parents) is not None
    for i, par in enumerate(parents):
        assert par < i
        row = table[tokens[par] if par >= 0 else 3]
        assert np.isclose(score[i], (score[par] if par >= 0 else 0.0) + np.log(row[tokens[i]]))


# ----------------------------------------------------------------------------- verification

def random_tree_with_rows(rng, n, vocab):
    """Random tree whose siblings carry distinct tokens (as top-k drafting gives), plus
    random target rows for the context and every node."""
    parents = random_parents(n, rng)
    tokens = np.zeros(n, dtype=np.int64)
    for node in range(-1, n):
        kids = np.flatnonzero(parents == node)
        while len(kids) > vocab:  # more children than tokens: re-hang the extra ones
            parents[kids[vocab:]] = kids[0]
            kids = np.flatnonzero(parents == node)
        tokens[kids] = rng.choice(vocab, size=len(kids), replace=False)
    tree.check_parents(parents)
    p_rows = rng.dirichlet(np.full(vocab, 0.7), size=n + 1)
    return parents, tokens, p_rows


def target_law(parents, tokens, p_rows):
    """Independent reference: draw x ~ p at the current node; follow the child carrying x if
    there is one, else stop. This is the target sampling its own continuation."""
    out = {}

    def walk(node, prefix, prob):
        for x, px in enumerate(p_rows[node + 1]):
            kids = [c for c in range(len(parents)) if parents[c] == node and tokens[c] == x]
            if kids:
                walk(kids[0], prefix + (x,), prob * px)
            elif px > 0:
                out[prefix + (x,)] = prob * px

    walk(-1, (), 1.0)
    return out


def no_renormalise_law(parents, tokens, p_rows):
    """Negative control: try siblings with the ORIGINAL p (no zeroing/renormalising)."""
    out = {}

    def walk(node, prefix, prob):
        p, stay = p_rows[node + 1], 1.0
        kids = [c for c in range(len(parents)) if parents[c] == node]
        for c in kids:
            walk(c, prefix + (int(tokens[c]),), prob * stay * p[tokens[c]])
            stay *= 1 - p[tokens[c]]
        rest = p.copy()
        rest[tokens[kids]] = 0
        for x in np.flatnonzero(rest):
            out[prefix + (int(x),)] = out.get(prefix + (int(x),), 0.0) + prob * stay * rest[x] / rest.sum()

    walk(-1, (), 1.0)
    return out


def max_gap(a, b):
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


@pytest.mark.parametrize("seed", range(20))
def test_stochastic_rule_is_exact_by_enumeration(seed):
    rng = np.random.default_rng(400 + seed)
    parents, tokens, p_rows = random_tree_with_rows(rng, int(rng.integers(1, 12)), vocab=4)
    exact = tree.tree_output_distribution(parents, tokens, p_rows)
    assert abs(sum(exact.values()) - 1) < 1e-12
    assert max_gap(exact, target_law(parents, tokens, p_rows)) < 1e-12


def test_negative_control_without_renormalising_is_not_exact():
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(10):
        parents, tokens, p_rows = random_tree_with_rows(rng, 8, vocab=4)
        gaps.append(max_gap(no_renormalise_law(parents, tokens, p_rows), target_law(parents, tokens, p_rows)))
    assert min(gaps) > 1e-3  # every tree with a 2-sibling node exposes the bug


def test_sampler_matches_enumeration_chi_square():
    """verify_tree's samples follow tree_output_distribution (chi-square, false alarm 1e-3),
    and the same samples reject the no-renormalisation law (power check)."""
    rng = np.random.default_rng(11)
    parents, tokens, _ = random_tree_with_rows(rng, 6, vocab=4)
    p_rows = rng.dirichlet(np.full(4, 2.0), size=len(parents) + 1)
    exact = tree.tree_output_distribution(parents, tokens, p_rows)
    wrong = no_renormalise_law(parents, tokens, p_rows)
    keys = sorted(set(exact) | set(wrong))
    counts = dict.fromkeys(keys, 0)
    sample_rng = np.random.default_rng(12)
    n = 20000
    for _ in range(n):
        counts[tuple(tree.verify_tree(parents, tokens, p_rows, sample_rng)[1])] += 1
    obs = np.array([counts[k] for k in keys])
    assert chi_square(obs, [exact.get(k, 0.0) for k in keys])[1] > 1e-3
    assert chi_square(obs, [wrong.get(k, 0.0) for k in keys])[1] < 1e-3


@pytest.mark.parametrize("seed", range(10))
def test_greedy_verification_is_longest_matching_path(seed):
    rng = np.random.default_rng(500 + seed)
    parents, tokens, p_rows = random_tree_with_rows(rng, 15, vocab=3)
    argmax = p_rows.argmax(1)
    path, emitted = tree.verify_tree_greedy(parents, tokens, argmax)
    best = []  # brute force over root-to-node walks
    for node in range(len(parents)):
        walk = ancestors_brute(parents, node)[::-1]
        if all(tokens[w] == argmax[parents[w] + 1] for w in walk) and len(walk) > len(best):
            best = walk
    assert path == best
    assert emitted == [int(tokens[w]) for w in best] + [int(argmax[best[-1] + 1 if best else 0])]
    # greedy is the stochastic rule with one-hot target rows
    assert tree.verify_tree(parents, tokens, np.eye(3)[argmax], rng) == (path, emitted)


def test_verification_rejects_bad_input():
    with pytest.raises(ValueError, match="rows"):
        tree.verify_tree_greedy([-1, 0], [1, 2], [0, 0])
    with pytest.raises(ValueError, match="tokens"):
        tree.verify_tree([-1, 0], [1], np.full((3, 2), 0.5), np.random.default_rng(0))
    with pytest.raises(ValueError, match="p_rows"):
        tree.verify_tree([-1], [1], np.full((2, 2), 0.6), np.random.default_rng(0))


# ----------------------------------------------------------------------------- the dynamic tree, by hand

# integer "log-probabilities" (sums are exact, so ties are exact): the draft's row after each
# token (None = after the committed context); -9 stands for "very unlikely"
HAND_ROWS = {None: [-1, -2, -3, -9, -9, -9], 0: [-9, -9, -1, -2, -9, -9], 1: [-9, -9, -9, -1, -3, -9],
             2: [-1, -1, -9, -9, -9, -9], 3: [-9, -9, -9, -9, -1, -2], 4: [-9] * 5 + [-1], 5: [-1] + [-9] * 5}


def hand_expand(parents, tokens, nodes):
    return np.array([HAND_ROWS[None if n < 0 else int(tokens[n])] for n in nodes], dtype=float)


def test_dynamic_tree_by_hand_frontier_and_ties():
    """depth 3, top_k 2. Depth 0: a = token 0 (-1), b = token 1 (-2). Depth 1 candidates:
    a->2 (-2), a->3 (-3), b->3 (-3), b->4 (-5); the frontier is the best 2 by cumulative score,
    ties to the earlier candidate: a->2 and a->3 (not b->3). Depth 2: a->2->0 (-3), a->2->1
    (-3, a tie between the children of one node: lower token first), a->3->4 (-4), a->3->5 (-5).
    The best 8 overall, ties to the shallower then earlier node, closed under ancestors."""
    parents, tokens, score = tree.draft_dynamic(hand_expand, depth=3, top_k=2, total=8)
    assert parents.tolist() == [-1, -1, 0, 0, 1, 2, 2, 3]
    assert tokens.tolist() == [0, 1, 2, 3, 3, 0, 1, 4]
    assert score.tolist() == [-1, -2, -2, -3, -3, -3, -3, -4]
    # four nodes: the -3 tie between a->3 and b->3 goes to the earlier candidate, a->3
    parents, tokens, score = tree.draft_dynamic(hand_expand, depth=3, top_k=2, total=4)
    assert (parents.tolist(), tokens.tolist(), score.tolist()) == ([-1, -1, 0, 0], [0, 1, 2, 3], [-1, -2, -2, -3])
    # a deeper tree expands only the frontier: b->3 (not in it at depth 1) never gets children
    parents, tokens, _ = tree.draft_dynamic(hand_expand, depth=4, top_k=2, total=30)
    children_of_b3 = [i for i, p in enumerate(parents) if p == 4]
    assert len(parents) == 2 + 4 + 4 + 4 and children_of_b3 == []


def test_top_k_fast_path_orders_ties_inside_the_top_k_by_index():
    """No tie straddles the k-th place, so the argpartition path runs; the tie inside the top
    k must still come out lower index first, as the stable sort would give."""
    rows = np.zeros((2, 40))
    rows[0, [7, 3, 20]] = [5.0, 5.0, 3.0]
    rows[1, [30, 2, 11]] = [4.0, 2.0, 4.0]
    assert tree._top(rows, 3).tolist() == [[3, 7, 20], [11, 30, 2]]


def test_top_p_tree_at_the_exact_boundary():
    """Children of mass 0.5 and 0.25 reach top_p = 0.75 exactly: a third child is not needed
    (the mass before it is not short of top_p)."""
    row = np.log([0.5, 0.25, 0.25, 1e-300])
    expand = lambda parents, tokens, nodes: np.tile(row, (len(nodes), 1))  # noqa: E731
    parents, tokens, _ = tree.draft_top_p(expand, 0.75, depth=2, max_children=4)
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1] and tokens.tolist() == [0, 1, 0, 1, 0, 1]


def test_dynamic_tree_clamps_a_rounding_positive_log_probability():
    """A log-softmax can return +1e-16 for a certain token; unclamped, that child would score
    above its parent, the best single node would be the child alone and the tree would not be
    closed under ancestors."""
    rows = {None: [-1.0, -2.0, -9.0, -9.0], 0: [-9.0, -9.0, -9.0, 1e-12]}
    expand = lambda parents, tokens, nodes: np.array([rows[None if n < 0 else int(tokens[n])] for n in nodes])  # noqa: E731
    parents, tokens, score = tree.draft_dynamic(expand, depth=2, top_k=1, total=1)
    assert (parents.tolist(), tokens.tolist(), score.tolist()) == ([-1], [0], [-1.0])
