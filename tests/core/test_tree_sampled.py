"""Sampled draft trees: the recursive rejection rules are exact by enumeration, the
implementation follows the enumerated law, and each plausible wrong rule is caught.

Exactness is checked the strict way: the rule's emitted tokens, continued by sampling the
target, must have the target's own law over sequences as long as the tree is deep + 1
(``continued_law``). Negative controls: judging draws made without replacement as if they were
made with it (reusing a rejected candidate's mass), and judging with the draft's q before
top-k truncation while the drafts came from the truncated q (transformers #47932).
"""
import functools

import numpy as np
import pytest

from lessonlib.core import tree_sampled as ts
from lessonlib.core.sampling import process, top_k_filter
from lessonlib.core.stats import chi_square

V = 4
SHAPES = [(2,), (3, 2), (2, 2), (1, 1, 1), (4,), (2, 1, 2)]


def _tables(seed, sharp=0.7):
    """p_of / q_of over paths: a fresh Dirichlet row per (path, which), fixed by the seed."""
    rng, rows = np.random.default_rng(seed), {}

    def row(path, which):
        if (path, which) not in rows:
            rows[(path, which)] = rng.dirichlet(np.full(V, sharp))
        return rows[(path, which)]

    return (lambda path: row(tuple(path), "p")), (lambda path: row(tuple(path), "q"))


def _gap(a, b):
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def _target_gap(law, p_of, depth):
    return _gap(ts.continued_law(law, p_of, depth + 1), ts.continued_law({(): 1.0}, p_of, depth + 1))


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_sampled_rules_are_exact_by_enumeration(shape, replacement):
    for seed in range(3):
        p_of, q_of = _tables(seed)
        law = ts.sampled_tree_law(p_of, q_of, shape, replacement)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        assert _target_gap(law, p_of, len(shape)) < 1e-12


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("shape", [(2, 1), (3,), (2, 2)])
def test_exact_with_a_draft_vocabulary(shape, replacement):
    """A head with a draft vocabulary (EAGLE-3's d2t, the real LLM's heads) gives q = 0 outside it,
    while the target may put mass anywhere: the residual must carry that mass, and drawing three
    children without replacement from a support of three empties it."""
    for seed in range(3):
        p_of, q_full = _tables(seed)
        vocab = np.array([True, True, True, False])  # the last token is never drafted

        def q_of(path):
            q = np.where(vocab, q_full(path), 0.0)
            return q / q.sum()

        law = ts.sampled_tree_law(p_of, q_of, shape, replacement)
        assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
        assert _target_gap(law, p_of, len(shape)) < 1e-12
        assert any(3 in tokens for tokens in law)  # the undrafted token still comes out, through the residual


@pytest.mark.parametrize("shape", [(2,), (3, 2), (4,)])
def test_exact_under_truncation_when_draft_and_target_share_it(shape):
    """p and q both through top-k 2 (zeros in q and p, a residual that can be empty)."""
    p_raw, q_raw = _tables(7)
    p_of = lambda path: top_k_filter(p_raw(path), 2)  # noqa: E731
    q_of = lambda path: top_k_filter(q_raw(path), 3)  # noqa: E731
    for replacement in (True, False):
        assert _target_gap(ts.sampled_tree_law(p_of, q_of, shape, replacement), p_of, len(shape)) < 1e-12


def test_p_equal_to_q_accepts_the_first_child():
    p_of, _ = _tables(3)
    law = ts.sampled_tree_law(p_of, p_of, (3,), replacement=False)
    assert _target_gap(law, p_of, 1) < 1e-12  # and no residual needed: q = p is accepted at once
    parents, tokens = np.array([-1, -1, -1]), np.array([1, 2, 3])
    q_rows = np.tile(p_of(()), (3, 1))
    p_rows = np.stack([p_of(())] + [p_of((t,)) for t in tokens])
    for seed in range(20):
        path, _ = ts.verify_tree_sampled(parents, tokens, p_rows, q_rows, np.random.default_rng(seed), False)
        assert path == [0]


@pytest.mark.parametrize("shape", [(3, 2), (4,), (2, 2)])
def test_controls_are_not_exact(shape):
    """Reusing a rejected candidate's mass, and judging with the q from before truncation."""
    p_of, q_of = _tables(11)
    reuse = ts.sampled_tree_law(p_of, q_of, shape, replacement=False, judge_replacement=True)
    assert _target_gap(reuse, p_of, len(shape)) > 1e-3
    truncated = lambda path: top_k_filter(q_of(path), 2)  # noqa: E731
    bug_47932 = ts.sampled_tree_law(p_of, truncated, shape, replacement=True, judge_q_of=q_of)
    assert _target_gap(bug_47932, p_of, len(shape)) > 1e-3


def _expand_from(p_of, q_of):
    """An ``expand`` callback over a tree whose draft rows come from ``q_of`` (as log-probs)."""
    def expand(parents, tokens, nodes):
        out = []
        for node in np.asarray(nodes):
            path, n = [], int(node)
            while n >= 0:
                path.append(int(tokens[n]))
                n = int(parents[n])
            with np.errstate(divide="ignore"):
                out.append(np.log(q_of(tuple(reversed(path)))))
        return np.array(out)
    return expand


def _emitted_counts(p_of, q_of, shape, replacement, n, seed, judge_replacement=None):
    """Counts of emitted tuples: draft_sampled then verify_tree_sampled, ``n`` rounds."""
    rng = np.random.default_rng(seed)
    probs = functools.partial(process, temperature=1.0)
    judge = replacement if judge_replacement is None else judge_replacement
    counts = {}
    for _ in range(n):
        parents, tokens, _, q_rows = ts.draft_sampled(_expand_from(p_of, q_of), probs, rng, shape, replacement)
        p_rows = np.stack([p_of(())] + [p_of(_path(parents, tokens, i)) for i in range(len(parents))])
        _, emitted = ts.verify_tree_sampled(parents, tokens, p_rows, q_rows, rng, judge)
        counts[tuple(emitted)] = counts.get(tuple(emitted), 0) + 1
    return counts


def _path(parents, tokens, i):
    path = []
    while i >= 0:
        path.append(int(tokens[i]))
        i = int(parents[i])
    return tuple(reversed(path))


@pytest.mark.parametrize("replacement", [True, False])
def test_the_implementation_follows_the_enumerated_law(replacement):
    """Chi-square of emitted tuples against ``sampled_tree_law`` (false alarm 1e-3), and the
    reuse control run through the same code must fail it."""
    p_of, q_of = _tables(5, sharp=1.5)
    shape = (3, 2)
    law = ts.sampled_tree_law(p_of, q_of, shape, replacement)
    keys = sorted(law)
    counts = _emitted_counts(p_of, q_of, shape, replacement, 3000, seed=1)
    assert set(counts) <= set(law)
    assert chi_square([counts.get(k, 0) for k in keys], [law[k] for k in keys])[1] > 1e-3
    if not replacement:  # control: without-replacement draws judged with the full q
        bad = _emitted_counts(p_of, q_of, shape, False, 3000, seed=1, judge_replacement=True)
        assert chi_square([bad.get(k, 0) for k in keys], [law[k] for k in keys])[1] < 1e-3


def test_without_replacement_draws_are_distinct_and_in_draw_order():
    rng = np.random.default_rng(0)
    q = np.array([[0.5, 0.3, 0.2, 0.0]])
    firsts = [ts.draw_children(q, 3, rng, False)[0] for _ in range(4000)]
    assert all(len(set(d)) == 3 and 3 not in d for d in firsts)  # distinct, never a zero-mass token
    first = np.bincount([d[0] for d in firsts], minlength=4) / 4000  # the first draw is a draw of q
    np.testing.assert_allclose(first, q[0], atol=0.03)
    assert ts.draw_children(q, 9, rng, False).shape == (1, 3)  # at most the tokens with mass


def test_dynamic_shape_stays_within_budget_and_is_exact_in_structure():
    p_of, q_of = _tables(2)
    rng = np.random.default_rng(0)
    probs = functools.partial(process, temperature=1.0)
    parents, tokens, score, q_rows = ts.draft_sampled_dynamic(_expand_from(p_of, q_of), probs, rng, 3, 2, 7)
    assert len(parents) == 7 and q_rows.shape == (7, V)
    assert (parents[:2] == -1).all() and (parents < np.arange(7)).all()
    # each node's q row is its parent's q, and its score its path's cumulative log q
    for i in range(7):
        path = _path(parents, tokens, i)
        np.testing.assert_allclose(q_rows[i], q_of(path[:-1]))
        assert score[i] == pytest.approx(sum(np.log(q_of(path[:j])[path[j]]) for j in range(len(path))))


def test_bad_input_is_refused():
    p_rows, q_rows = np.full((3, V), 0.25), np.full((2, V), 0.25)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="q_rows must be"):
        ts.verify_tree_sampled([-1, -1], [0, 1], p_rows, q_rows[:1], rng)
    bad_q = np.array([[0, 1 / 3, 1 / 3, 1 / 3]] * 2)
    with pytest.raises(ValueError, match="mass under the q"):
        ts.verify_tree_sampled([-1, -1], [0, 1], p_rows, bad_q, rng)
    with pytest.raises(ValueError, match="exactly one of"):
        ts.SampledRule()
    with pytest.raises(ValueError, match="replacement"):
        ts.SampledRule((2,), replacement=1)
