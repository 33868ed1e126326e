"""TV distance, its noise floor (exact), the null quantile, and chi-square with pooling."""
import numpy as np
import pytest
from scipy import stats as sps

from lessonlib import chi_square, softmax, tv_distance, tv_noise_floor, tv_null_quantile
from lessonlib.core.stats import _pool_sparse


def test_tv_distance():
    assert tv_distance([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]) == 0.5
    assert tv_distance([1.0, 0.0], [0.0, 1.0]) == 1.0
    rows = tv_distance(np.eye(3), np.full((3, 3), 1 / 3))
    np.testing.assert_allclose(rows, 2 / 3)


def brute_force_noise_floor(p, n):
    x = np.arange(n + 1)
    return sum(0.5 * (sps.binom.pmf(x, n, px) * np.abs(x / n - px)).sum() for px in p)


@pytest.mark.parametrize("n", [1, 2, 7, 50, 333])
def test_noise_floor_matches_binomial_sums(n):
    p = np.array([0.5, 0.25, 0.125, 0.125, 0.0])
    assert tv_noise_floor(p, n) == pytest.approx(brute_force_noise_floor(p, n), rel=1e-10)
    assert tv_noise_floor([1.0, 0.0], n) == 0.0


def test_noise_floor_is_the_mean_tv_of_real_histograms():
    rng = np.random.default_rng(0)
    p, n = softmax(2 * rng.normal(size=32)), 20000
    tv = 0.5 * np.abs(rng.multinomial(n, p, size=4000) / n - p).sum(1)
    floor = tv_noise_floor(p, n)
    assert abs(tv.mean() - floor) < 4 * tv.std() / np.sqrt(tv.size)
    assert tv_noise_floor(p, 4 * n) == pytest.approx(floor / 2, rel=0.02)  # ~ sqrt(V / n)


def test_null_quantile_has_its_false_alarm_rate():
    rng = np.random.default_rng(1)
    p, n = softmax(3 * rng.normal(size=16)), 5000
    limit = tv_null_quantile(p, n, rng, level=0.99, n_sim=20000)
    fresh = 0.5 * np.abs(rng.multinomial(n, p, size=20000) / n - p).sum(1)
    assert 0.007 < (fresh > limit).mean() < 0.013  # 1% +- 4 s.e.
    assert limit > tv_noise_floor(p, n)


def test_chi_square_matches_scipy_without_sparse_bins():
    obs, probs = np.array([30, 50, 20]), np.array([0.3, 0.4, 0.3])
    stat, pval = chi_square(obs, probs)
    ref = sps.chisquare(obs, 100 * probs)
    assert (stat, pval) == pytest.approx((ref.statistic, ref.pvalue))


def test_pooling_leaves_every_bin_with_expected_at_least_five():
    expected = np.array([0.1, 0.2, 3.0, 40.0, 1.0, 2.5, 60.0, 0.7])
    groups = _pool_sparse(expected, 5.0)
    assert sorted(i for g in groups for i in g) == list(range(8))
    assert all(expected[g].sum() >= 5 for g in groups) and len(groups) == 3


def test_chi_square_false_alarm_rate_with_many_sparse_bins():
    """Validity: with pooling, p < 0.05 happens ~5% of the time under the null even when
    most bins are sparse (a long tail of rare tokens)."""
    rng = np.random.default_rng(2)
    p = softmax(4 * rng.normal(size=60))
    n = 300
    pvals = np.array([chi_square(rng.multinomial(n, p), p)[1] for _ in range(1500)])
    assert (n * p < 5).sum() > 30
    assert 0.03 < (pvals < 0.05).mean() < 0.07


def test_chi_square_rejects_mass_where_p_is_zero():
    assert chi_square([5, 5, 1], [0.5, 0.5, 0.0]) == (float("inf"), 0.0)


def test_chi_square_flattens_tables():
    probs = np.full((2, 3), 1 / 6)
    assert chi_square(np.full((2, 3), 10), probs)[1] == pytest.approx(1.0)
