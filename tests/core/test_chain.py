"""Speculative sampling is exact: by enumeration and statistically (with negative controls that
must fail the same test); the sequence level (``speculative_decode``) is in
tests/decoding/test_reference.py.

The negative controls: the *scalar-q residual bug* (from ``lessonlib.course.checks.wrong``)
(after rejecting x, draw from norm(max(p - q(x), 0)), subtracting the scalar q(x) from
every entry) and an *always-accept* sampler (emits the draft token, i.e. samples q).
"""
import numpy as np
import pytest
from scipy import stats as sps

from lessonlib import (
    acceptance_rate,
    chi_square,
    draft_with_alpha,
    exact_output_distribution,
    simulate_rounds,
    softmax,
    verify_chain,
    verify_greedy,
)
from lessonlib.core.batched import verify_rounds
from lessonlib.core.chain import exact_round_distribution
from lessonlib.core.sampling import inverse_cdf
from lessonlib.course.checks import wrong

LEVEL = 1e-3  # false-alarm rate of every chi-square test below


def random_rows(rng, rows, V, scale=2.0):
    return softmax(scale * rng.normal(size=(rows, V)))


def one_hot(V, i):
    return np.eye(V)[i]


def cases():
    """(name, p_rows (K+1, V), q_rows (K, V)) covering the edge cases of the issue."""
    rng = np.random.default_rng(0)
    out = []
    for K in (1, 2, 3, 5):
        p, q = random_rows(rng, K + 1, 7), random_rows(rng, K, 7)
        out += [(f"random K={K}", p, q), (f"p == q K={K}", p, p[:K].copy())]
    V, K = 8, 3
    p = random_rows(rng, K + 1, V)
    disjoint_p = np.zeros((K + 1, V))
    disjoint_p[:, :4] = random_rows(rng, K + 1, 4)
    disjoint_q = np.zeros((K, V))
    disjoint_q[:, 4:] = random_rows(rng, K, 4)
    out.append(("disjoint supports", disjoint_p, disjoint_q))
    holes = random_rows(rng, K, V)
    holes[:, :3] = 0.0  # q(x) = 0 where p(x) > 0
    out.append(("q has zeros where p > 0", p, holes / holes.sum(1, keepdims=True)))
    out.append(("one-hot p", np.stack([one_hot(V, i) for i in (2, 5, 5, 0)]), random_rows(rng, K, V)))
    out.append(("one-hot q", p, np.stack([one_hot(V, i) for i in (2, 5, 1)])))
    out.append(("one-hot p and q, same", np.stack([one_hot(V, 1)] * (K + 1)), np.stack([one_hot(V, 1)] * K)))
    out.append(("alpha 0.05", p, draft_with_alpha(p[:K], 0.05, rng)))
    return out


@pytest.mark.parametrize("name,p,q", cases(), ids=[c[0] for c in cases()])
def test_exact_output_distribution_equals_p(name, p, q):
    np.testing.assert_allclose(exact_output_distribution(p, q), p, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name,p,q", cases()[:3], ids=[c[0] for c in cases()[:3]])
def test_exact_round_distribution_is_a_distribution_over_sequences(name, p, q):
    accepted, stop = exact_round_distribution(p, q)
    reach = np.concatenate([[1.0], np.cumprod(accepted.sum(1))])  # P(round reaches position m)
    assert (reach * stop.sum(1)).sum() == pytest.approx(1.0, abs=1e-12)


def test_verify_chain_is_one_round_of_verify_rounds():
    rng = np.random.default_rng(3)
    K, V, N = 3, 6, 200
    p, q = random_rows(rng, K + 1, V), random_rows(rng, K, V)
    drafts = inverse_cdf(q, rng.random((N, K)))
    seed_rng = np.random.default_rng(9)
    one_by_one = [verify_chain(p, q, d, seed_rng) for d in drafts]
    u = np.random.default_rng(9).random((N, K + 1))  # the same stream, drawn at once
    tokens, n_acc = verify_rounds(p, q, drafts, u[:, :K], u[:, K])
    assert one_by_one == [t[: n + 1].tolist() for t, n in zip(tokens, n_acc)]
    assert any(n == K for n in n_acc) and any(n == 0 for n in n_acc)


def test_verify_chain_never_accepts_a_token_with_zero_target_mass():
    p = np.array([[0.0, 1.0], [0.5, 0.5]])
    q = np.array([[1.0, 0.0]])
    rng = np.random.default_rng(0)
    assert all(verify_chain(p, q, [0], rng) == [1] for _ in range(200))


def test_verify_greedy():
    p = softmax(np.array([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0]]), 0.0)
    assert verify_greedy(p, [1, 0]) == [1, 0, 2]  # all accepted, bonus argmax
    assert verify_greedy(p, [1, 2]) == [1, 0]  # mismatch at 1: target argmax
    assert verify_greedy(p, [0, 0]) == [1]


def test_verify_greedy_on_logits_equals_on_probabilities():
    """The decoding loop hands the unchecked rule raw logits: only argmaxes matter, so the
    result must equal the checked rule on their one-hot softmax, ties included (the first
    maximum wins in both). Negative control: argmin rows give other tokens."""
    rng = np.random.default_rng(11)
    differ = 0
    for _ in range(300):
        z = np.round(rng.normal(size=(4, 6)), 0)  # coarse: many tied maxima
        drafts = [int(t) for t in rng.integers(0, 6, 3)]
        if rng.random() < 0.5:  # often draft the target's own argmax, so long prefixes are accepted
            drafts = [int(t) for t in z[:3].argmax(1)]
        expected = verify_greedy(softmax(z, 0.0), drafts)
        assert verify_greedy(z, drafts, validate=False) == expected
        differ += verify_greedy(-z, drafts, validate=False) != expected
    assert differ > 100


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.3, 0.75, 0.999, 1.0])
def test_draft_with_alpha_hits_alpha(alpha):
    rng = np.random.default_rng(4)
    p = np.concatenate([random_rows(rng, 3, 32), [one_hot(32, 7)]])
    if alpha < 0.05:
        p = p[3:]  # alpha ~ 0 needs tokens p considers impossible
    q = draft_with_alpha(p, alpha, rng)
    np.testing.assert_allclose(acceptance_rate(p, q), alpha, atol=1e-9)
    assert q.shape == p.shape and (q >= 0).all()


# ----------------------------------------------------------------------------- statistical


# the scalar-q bug, vectorised, and its exact first-token law: from the one catalogue of wrong implementations
first_tokens_scalar_q_bug = wrong.first_tokens_scalar_q
scalar_q_bug_law = wrong.scalar_q_first_token_law


def first_tokens_always_accept(p, q, n, rng):
    """Negative control: every draft is accepted, so the first token is just x ~ q."""
    return inverse_cdf(q[0], rng.random(n))


def first_tokens_correct(p, q, n, rng):
    return simulate_rounds(p, q, n, rng, "numpy")[0][:, 0]


N_STAT = 20000
V_STAT, K_STAT, ALPHA_STAT = 16, 3, 0.6


@pytest.fixture(scope="module")
def stat_setup():
    rng = np.random.default_rng(5)
    p = random_rows(rng, K_STAT + 1, V_STAT)
    return p, draft_with_alpha(p[:K_STAT], ALPHA_STAT, rng)


def test_negative_controls_are_detectable_with_high_power(stat_setup):
    """Before trusting a PASS: with N_STAT samples the test rejects both wrong laws with
    power > 0.999 (noncentral chi-square), so a pass is evidence, not luck."""
    p, q = stat_setup
    dof = V_STAT - 1  # every bin has expected count >> 5 here
    crit = sps.chi2.isf(LEVEL, dof)
    for law in (scalar_q_bug_law(p[0], q[0]), q[0]):
        noncentrality = N_STAT * ((law - p[0]) ** 2 / p[0]).sum()
        assert sps.ncx2.sf(crit, dof, noncentrality) > 0.999


@pytest.mark.parametrize("sampler,should_pass", [
    (first_tokens_correct, True),
    (first_tokens_scalar_q_bug, False),
    (first_tokens_always_accept, False),
])
def test_first_token_chi_square_with_negative_controls(stat_setup, sampler, should_pass):
    p, q = stat_setup
    x = sampler(p, q, N_STAT, np.random.default_rng(6))
    _, p_value = chi_square(np.bincount(x, minlength=V_STAT), p[0])
    assert (p_value > LEVEL) == should_pass, p_value


def test_every_position_follows_p_given_it_is_reached(stat_setup):
    p, q = stat_setup
    tokens, n_acc = simulate_rounds(p, q, N_STAT, np.random.default_rng(7), "numpy")
    for j in range(K_STAT + 1):
        reached = n_acc >= j
        assert chi_square(np.bincount(tokens[reached, j], minlength=V_STAT), p[j])[1] > LEVEL / (K_STAT + 1)

