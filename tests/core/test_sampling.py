"""softmax, filters, inverse-CDF sampling, residual, acceptance rate."""
import numpy as np
import pytest

from lessonlib import acceptance_rate, chi_square, residual, sample, softmax, top_k_filter, top_p_filter
from lessonlib.core.sampling import inverse_cdf
from lessonlib.core.stats import tv_distance


def test_softmax_matches_definition_and_temperature():
    z = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    e = np.exp(z)
    np.testing.assert_allclose(softmax(z), e / e.sum(1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(softmax(z, 0.5), softmax(2 * z), rtol=1e-14)


def test_softmax_is_stable_for_huge_logits_and_masks_minus_inf():
    p = softmax(np.array([1e4, 1e4 - 1.0, -np.inf]))
    np.testing.assert_allclose(p, [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0.0], rtol=1e-14)


@pytest.mark.parametrize("t", [0.0, 1e-5, 1e-6])
def test_softmax_greedy_at_tiny_temperature(t):
    z = np.array([[0.1, 3.0, 3.0, -2.0], [5.0, 1.0, 0.0, 4.99]])
    np.testing.assert_array_equal(softmax(z, t), [[0, 1, 0, 0], [1, 0, 0, 0]])  # first argmax on ties


def test_softmax_just_above_greedy_threshold_is_not_one_hot():
    assert softmax(np.array([0.0, 1e-5]), 2e-5)[0] > 0.3


def test_inverse_cdf_never_picks_zero_mass_even_at_extreme_uniforms():
    p = np.array([0.0, 0.3, 0.0, 0.7, 0.0, 0.0])
    u = np.array([0.0, 0.29999, 0.3, 0.5, 1 - 2.0**-53])
    np.testing.assert_array_equal(inverse_cdf(np.broadcast_to(p, (5, 6)), u), [1, 1, 3, 3, 3])


def test_inverse_cdf_handles_rows_summing_slightly_below_one():
    p = np.array([0.5, 0.5 - 4e-7, 0.0])  # accepted by validation (within 1e-6)
    assert inverse_cdf(p, np.array(1 - 2.0**-53)) == 1


def test_sample_distribution_chi_square():
    rng = np.random.default_rng(0)
    p = softmax(rng.normal(size=12))
    x = sample(np.broadcast_to(p, (30000, 12)), rng)
    assert chi_square(np.bincount(x, minlength=12), p)[1] > 1e-3  # false alarm 1e-3
    assert isinstance(sample(p, rng), int)


def test_residual_formula_and_support():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.2, 0.4, 0.1, 0.3])
    np.testing.assert_allclose(residual(p, q), [0.3, 0.0, 0.1, 0.0] / np.float64(0.4), rtol=1e-14)


def test_residual_of_equal_rows_is_p_not_rounding_noise():
    rng = np.random.default_rng(1)
    p = softmax(rng.normal(size=(3, 50)))
    q = p * (1 + 1e-15 * rng.normal(size=p.shape))  # p == q up to rounding
    np.testing.assert_array_equal(residual(p, q), p)


def test_acceptance_rate_is_one_minus_tv():
    rng = np.random.default_rng(2)
    p, q = softmax(rng.normal(size=(4, 9))), softmax(rng.normal(size=(4, 9)))
    np.testing.assert_allclose(acceptance_rate(p, q), 1 - tv_distance(p, q), rtol=1e-14)
    assert acceptance_rate(p[0], p[0]) == pytest.approx(1.0, abs=1e-15)
    assert acceptance_rate([1.0, 0.0], [0.0, 1.0]) == 0.0


def _sorted_truncation(p, k=None, top_p=None):
    """The definitions, by a full stable sort of every row (probability descending, index ascending)."""
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    keep = np.zeros_like(sorted_p, dtype=bool)
    if k is not None:
        keep[..., :k] = True
    else:
        keep = np.cumsum(sorted_p, axis=-1) - sorted_p < top_p  # the mass strictly before is short of top_p
    out = np.zeros_like(p)
    np.put_along_axis(out, order, sorted_p * keep, axis=-1)
    return out / out.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("rows", ["ties", "zeros", "flat", "peaked"])
def test_truncation_keeps_what_a_full_stable_sort_keeps(rows):
    """top_k_filter partitions and top_p_filter sorts only a prefix of the order (256 entries
    first): on rows with ties, zeros, a nucleus wider than that prefix and a narrow one, both
    give the full sort's result bit for bit."""
    rng = np.random.default_rng(len(rows))
    z = {"ties": rng.integers(0, 4, (6, 700)).astype(float),
         "zeros": np.where(rng.random((6, 700)) < 0.6, -np.inf, 0.0),
         "flat": rng.normal(size=(6, 2048)) * 0.3, "peaked": rng.normal(size=(6, 2048)) * 4}[rows]
    z[:, 0] = 1.0  # every row keeps a finite entry
    p = softmax(z)
    for top_p in (0.05, 0.5, 0.9, 0.95, 0.999):
        np.testing.assert_array_equal(top_p_filter(p, top_p), _sorted_truncation(p, top_p=top_p))
    for k in (1, 3, 50, 699):
        np.testing.assert_array_equal(top_k_filter(p, k), _sorted_truncation(p, k=k))


def test_top_k_and_top_p_filters():
    p = np.array([0.1, 0.4, 0.2, 0.3])
    np.testing.assert_allclose(top_k_filter(p, 2), [0, 4 / 7, 0, 3 / 7])
    np.testing.assert_allclose(top_p_filter(p, 0.7), [0, 4 / 7, 0, 3 / 7])  # 0.4 + 0.3 reaches 0.7
    np.testing.assert_allclose(top_p_filter(p, 0.71), [0, 4 / 9, 2 / 9, 3 / 9])
    np.testing.assert_allclose(top_p_filter(p, 0.01), [0, 1, 0, 0])
    np.testing.assert_allclose(top_k_filter(p, 4), p)
