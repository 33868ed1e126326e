"""Speedup theory: the formulas, Leviathan et al. Table 1, optimal K, break-even, Monte Carlo."""
import numpy as np
import pytest

from lessonlib import (
    breakeven_alpha,
    expected_speedup,
    expected_tokens_per_verify,
    optimal_k,
    simulate_tokens_per_verify,
    wall_time_per_token,
)

# Leviathan, Kalai, Matias 2023, Table 1 (c = 0): (alpha, gamma = K, improvement)
LEVIATHAN_TABLE_1 = [(0.6, 2, 1.96), (0.7, 3, 2.53), (0.8, 2, 2.44), (0.8, 5, 3.69), (0.9, 2, 2.71), (0.9, 10, 6.86)]


@pytest.mark.parametrize("alpha,k,improvement", LEVIATHAN_TABLE_1)
def test_reproduces_leviathan_table_1(alpha, k, improvement):
    assert round(expected_speedup(alpha, k, 0.0), 2) == improvement


def test_tokens_per_verify_known_values():
    assert round(expected_tokens_per_verify(0.8, 4), 2) == 3.36
    assert expected_tokens_per_verify(0.0, 7) == 1.0
    assert expected_tokens_per_verify(1.0, 7) == 8.0
    # the geometric sum 1 + a + ... + a^k, also right next to alpha = 1
    for a in (0.3, 0.9, 1 - 1e-9):
        assert expected_tokens_per_verify(a, 6) == pytest.approx(sum(a**i for i in range(7)), rel=1e-12)


def test_vectorised_over_alpha_and_k():
    a, k = np.array([[0.5], [0.9]]), np.array([1, 2, 3])
    e = expected_tokens_per_verify(a, k)
    assert e.shape == (2, 3)
    np.testing.assert_allclose(e[1], [1.9, 2.71, 3.439])
    np.testing.assert_allclose(wall_time_per_token(a, k, 0.1) * expected_speedup(a, k, 0.1), 1.0)


def test_speedup_and_wall_time_formulas():
    assert expected_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    assert wall_time_per_token(0.8, 4, 0.05) == pytest.approx(1.2 / 3.3616)
    # free draft: the improvement is bounded by 1 / (1 - alpha) (Leviathan section 3.5)
    assert expected_speedup(0.75, 1000, 0.0) == pytest.approx(4.0)
    assert expected_speedup(0.75, 10, 0.0) == pytest.approx(4 * (1 - 0.75**11))


def test_optimal_k_is_the_brute_force_argmax():
    ks = np.arange(1, 33)
    for alpha in (0.2, 0.5, 0.7, 0.85, 0.95):
        for c in (0.0, 0.01, 0.1, 0.5):
            expected = ks[np.argmax([expected_speedup(alpha, k, c) for k in ks])]
            assert optimal_k(alpha, c) == expected
    grid = optimal_k(np.array([0.5, 0.9])[:, None], np.array([0.05, 0.2]))
    assert grid.shape == (2, 2) and grid[1, 0] == optimal_k(0.9, 0.05)
    assert optimal_k(0.99, 0.0, k_max=8) == 8


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("c", [0.01, 0.05, 0.2, 0.5, 0.9])
def test_breakeven_alpha_gives_speedup_exactly_one(k, c):
    a = breakeven_alpha(k, c)
    assert 0 < a < 1
    assert expected_speedup(a, k, c) == pytest.approx(1.0, abs=1e-12)
    assert expected_speedup(min(a + 1e-3, 1), k, c) > 1 > expected_speedup(a - 1e-3, k, c)


def test_breakeven_alpha_edges_and_vectorised():
    assert breakeven_alpha(4, 0.0) == 0.0
    assert breakeven_alpha(4, 1.0) == pytest.approx(1.0)
    assert np.isnan(breakeven_alpha(4, 1.5))
    b = breakeven_alpha(np.array([1, 4]), 0.1)
    assert b.shape == (2,) and b[0] == pytest.approx(0.1)  # K = 1: 1 + alpha = 1 + c


@pytest.mark.parametrize("alpha,k", [(0.3, 1), (0.6, 4), (0.9, 8), (1.0, 3), (0.0, 3)])
def test_monte_carlo_agrees_with_formula(alpha, k):
    tau = simulate_tokens_per_verify(alpha, k, 40000, np.random.default_rng(0))
    assert tau.shape == (40000,) and tau.min() >= 1 and tau.max() <= k + 1
    se = max(tau.std() / np.sqrt(tau.size), 1e-12)
    assert abs(tau.mean() - expected_tokens_per_verify(alpha, k)) <= 4 * se  # false alarm 6e-5


def test_monte_carlo_detects_a_wrong_formula():
    """Negative control: K alpha + 1 (forgetting that acceptance stops at the first
    rejection) is far outside the Monte-Carlo error bar."""
    tau = simulate_tokens_per_verify(0.7, 4, 40000, np.random.default_rng(1))
    assert abs(tau.mean() - (4 * 0.7 + 1)) > 4 * tau.std() / np.sqrt(tau.size)
