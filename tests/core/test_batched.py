"""Batched verification: one implementation for numpy and torch; identical tokens for
identical uniforms; exact in distribution (chi-square against the enumerated law)."""
import numpy as np
import pytest
import torch

from lessonlib import chi_square, draft_with_alpha, exact_output_distribution, softmax
from lessonlib.core.batched import sample_rounds, simulate_rounds, verify_rounds
from lessonlib.core.chain import exact_round_distribution
from lessonlib.core.sampling import inverse_cdf

LEVEL = 1e-3


def setup(seed=0, K=4, V=16, alpha=0.7):
    rng = np.random.default_rng(seed)
    p = softmax(2 * rng.normal(size=(K + 1, V)))
    return p, draft_with_alpha(p[:K], alpha, rng), rng


def test_numpy_and_torch_give_identical_tokens_for_identical_uniforms():
    p, q, rng = setup()
    u = rng.random((20000, 2 * q.shape[0] + 1))
    out_np = sample_rounds(p, q, u)
    t = lambda x: torch.as_tensor(x, dtype=torch.float64)  # noqa: E731
    out_torch = sample_rounds(t(p), t(q), t(u))
    for a, b in zip(out_np, out_torch):
        assert isinstance(b, torch.Tensor)
        np.testing.assert_array_equal(a, b.numpy())


def test_per_round_rows_equal_shared_rows():
    p, q, rng = setup(K=2, V=5)
    N = 500
    u = rng.random((N, 5))
    shared = sample_rounds(p, q, u)
    per_round = sample_rounds(np.broadcast_to(p, (N,) + p.shape), np.broadcast_to(q, (N,) + q.shape), u)
    for a, b in zip(shared, per_round):
        np.testing.assert_array_equal(a, b)


def test_token_layout():
    p, q, rng = setup(K=3, V=6)
    drafts, tokens, n_acc = sample_rounds(p, q, rng.random((3000, 7)))
    for d, t, n in zip(drafts, tokens, n_acc):
        assert (t[:n] == d[:n]).all() and t[n] >= 0 and (t[n + 1 :] == -1).all()
    assert set(np.unique(n_acc)) == {0, 1, 2, 3}


def test_chunking_does_not_change_numpy_results():
    p, q, _ = setup(K=2, V=8)
    a = simulate_rounds(p, q, 1000, np.random.default_rng(1), "numpy")
    b = simulate_rounds(p, q, 1000, np.random.default_rng(1), "numpy", chunk=300)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_batched_rounds_are_exact_in_distribution(name):
    """Every emitted position, given the round reaches it, follows p_j; and the number of
    accepted drafts follows its exact law P(n = m) = prod_{j<m} alpha_j (1 - alpha_m)."""
    p, q, rng = setup(seed=2)
    K, V = q.shape
    tokens, n_acc = simulate_rounds(p, q, 40000, rng, name)
    np.testing.assert_allclose(exact_output_distribution(p, q), p, atol=1e-12)
    tests = K + 2  # Bonferroni: the whole test's false-alarm rate is LEVEL
    for j in range(K + 1):
        counts = np.bincount(tokens[n_acc >= j, j], minlength=V)
        assert chi_square(counts, p[j])[1] > LEVEL / tests
    accepted, _ = exact_round_distribution(p, q)
    alpha = accepted.sum(1)
    law = np.append(np.cumprod(np.r_[1, alpha[:-1]]) * (1 - alpha), alpha.prod())
    assert chi_square(np.bincount(n_acc, minlength=K + 1), law)[1] > LEVEL / tests


def test_batched_rule_with_a_wrong_q_fails_the_same_test():
    """Negative control: verifying against a q that is not what the drafts came from (the
    HF pitfall: q before temperature) breaks exactness, and the test notices."""
    p, q, rng = setup(seed=3, K=1)
    N, V = 40000, p.shape[1]
    u = rng.random((N, 3))
    drafts = inverse_cdf(q, u[:, :1])
    wrong_q = softmax(np.log(q) / 0.5)  # sharper than what was sampled from
    tokens, _ = verify_rounds(p, wrong_q, drafts, u[:, 1:2], u[:, 2])
    assert chi_square(np.bincount(tokens[:, 0], minlength=V), p[0])[1] < LEVEL
    good, _ = verify_rounds(p, q, drafts, u[:, 1:2], u[:, 2])
    assert chi_square(np.bincount(good[:, 0], minlength=V), p[0])[1] > LEVEL


def test_torch_path_on_cpu_through_simulate_rounds_returns_numpy():
    p, q, rng = setup(K=2, V=4)
    tokens, n_acc = simulate_rounds(p, q, 100, rng, "torch-cpu")
    assert isinstance(tokens, np.ndarray) and tokens.shape == (100, 3) and n_acc.shape == (100,)
