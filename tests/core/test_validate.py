"""Every public function rejects bad input with a ValueError naming the argument."""
import numpy as np
import pytest

import lessonlib as L
from lessonlib.core import toy
from lessonlib.core.batched import sample_rounds, verify_rounds

P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]])  # (K+1, V) with K = 2
Q = np.array([[0.4, 0.4, 0.2], [0.3, 0.3, 0.4]])
RNG = np.random.default_rng(0)


def Table(V):
    """The uniform next-token model over V tokens (``core.toy``)."""
    return toy.markov(np.full((V, V), 1.0 / V))


CASES = {
    "softmax negative temperature": (lambda: L.softmax([1.0, 2.0], -0.1), "temperature"),
    "softmax NaN logits": (lambda: L.softmax([np.nan, 1.0]), "logits"),
    "softmax +inf logits": (lambda: L.softmax([np.inf, 1.0]), "logits"),
    "softmax NaN behind a larger logit": (lambda: L.softmax([[1.0, 2.0], [3.0, np.nan]]), "logits"),
    "softmax NaN and +inf": (lambda: L.softmax([np.inf, np.nan, -np.inf]), "logits"),
    "softmax all -inf row": (lambda: L.softmax([-np.inf, -np.inf]), "logits"),
    "softmax empty": (lambda: L.softmax([]), "logits"),
    "residual negative p": (lambda: L.residual([1.2, -0.2], [0.5, 0.5]), "p must be non-negative"),
    "residual NaN q": (lambda: L.residual([0.5, 0.5], [np.nan, 0.5]), "q must be finite"),
    "residual not summing to 1": (lambda: L.residual([0.5, 0.6], [0.5, 0.5]), "p rows must sum to 1"),
    "residual vocab mismatch": (lambda: L.residual([0.5, 0.5], [0.2, 0.3, 0.5]), "same shape"),
    "acceptance_rate shape": (lambda: L.acceptance_rate([1.0], [0.5, 0.5]), "same shape"),
    "sample bad p": (lambda: L.sample([0.3, 0.3], RNG), "sum to 1"),
    "top_k k too big": (lambda: L.top_k_filter([0.5, 0.5], 3), "k must"),
    "top_p zero": (lambda: L.top_p_filter([0.5, 0.5], 0.0), "top_p"),
    "verify_chain K mismatch": (lambda: L.verify_chain(P, Q[:1], [0], RNG), "K \\+ 1"),
    "verify_chain vocab mismatch": (lambda: L.verify_chain(P, Q[:, :2] / Q[:, :2].sum(1, keepdims=True), [0, 1], RNG),
                                    "vocabulary"),
    "verify_chain wrong number of drafts": (lambda: L.verify_chain(P, Q, [0], RNG), "draft_tokens"),
    "verify_chain token out of range": (lambda: L.verify_chain(P, Q, [0, 3], RNG), "draft_tokens"),
    "verify_chain float tokens": (lambda: L.verify_chain(P, Q, [0.5, 1], RNG), "draft_tokens"),
    "verify_chain q(x) = 0 for a draft": (
        lambda: L.verify_chain(P, np.array([[1.0, 0, 0], [0.3, 0.3, 0.4]]), [1, 0], RNG), "q = 0"),
    "verify_chain bad p row": (lambda: L.verify_chain(P * 1.1, Q, [0, 1], RNG), "p_rows"),
    "verify_chain no drafts": (lambda: L.verify_chain(P[:1], np.zeros((0, 3)), [], RNG), "K >= 1"),
    "verify_greedy one row": (lambda: L.verify_greedy(P[:1], []), "K \\+ 1"),
    "verify_greedy drafts": (lambda: L.verify_greedy(P, [0]), "draft_tokens"),
    "verify_rounds uniforms out of range": (
        lambda: verify_rounds(P, Q, np.zeros((2, 2), int), np.ones((2, 2)), np.zeros(2)), "u_accept"),
    "verify_rounds uniforms shape": (lambda: verify_rounds(P, Q, np.zeros((2, 2), int), np.zeros((2, 2)), np.zeros(3)),
                                     "u_final"),
    "sample_rounds uniforms shape": (lambda: sample_rounds(P, Q, np.zeros((4, 4))), "uniforms"),
    "simulate_rounds n_rounds": (lambda: L.simulate_rounds(P, Q, 0, RNG, "numpy"), "n_rounds"),
    "simulate_rounds rng": (lambda: L.simulate_rounds(P, Q, 10, 0, "numpy"), "rng"),
    "simulate_rounds backend": (lambda: L.simulate_rounds(P, Q, 10, RNG, "jax"), "name must be one of"),
    "exact_output_distribution shapes": (lambda: L.exact_output_distribution(P, Q[:1]), "K \\+ 1"),
    "draft_with_alpha alpha > 1": (lambda: L.draft_with_alpha(P[1], 1.1, RNG), "alpha"),
    "draft_with_alpha unreachable": (lambda: L.draft_with_alpha(np.full(4, 0.25), 0.0, RNG), "alpha=0.0 is below"),
    "speculative_decode k = 0": (lambda: L.speculative_decode(Table(3), Table(3), [0], 0, rng=RNG), "k must"),
    "speculative_decode negative temperature": (lambda: L.speculative_decode(Table(3), Table(3), [0], 2, -1.0, rng=RNG),
                                                "temperature"),
    "speculative_decode empty prompt": (lambda: L.speculative_decode(Table(3), Table(3), [], 2, rng=RNG), "prompt"),
    "speculative_decode vocab mismatch": (lambda: L.speculative_decode(Table(3), Table(4), [0], 2, rng=RNG),
                                          "vocabulary"),
    "speculative_decode no rng when sampling": (lambda: L.speculative_decode(Table(3), Table(3), [0], 2, 1.0), "rng"),
    "speculative_decode max_new_tokens": (
        lambda: L.speculative_decode(Table(3), Table(3), [0], 2, rng=RNG, max_new_tokens=0), "max_new_tokens"),
    "autoregressive_decode temperature": (lambda: L.autoregressive_decode(Table(3), [0], 3, np.nan), "temperature"),
    "expected_tokens_per_verify alpha": (lambda: L.expected_tokens_per_verify(1.2, 3), "alpha"),
    "expected_tokens_per_verify k = 0": (lambda: L.expected_tokens_per_verify(0.5, 0), "k must"),
    "expected_tokens_per_verify k float": (lambda: L.expected_tokens_per_verify(0.5, 2.5), "k must"),
    "expected_speedup negative c": (lambda: L.expected_speedup(0.5, 2, -0.1), "c must"),
    "wall_time_per_token NaN alpha": (lambda: L.wall_time_per_token(np.nan, 2, 0.1), "alpha"),
    "optimal_k k_max": (lambda: L.optimal_k(0.5, 0.1, k_max=0), "k_max must"),
    "breakeven_alpha k": (lambda: L.breakeven_alpha(0, 0.1), "k must"),
    "simulate_tokens_per_verify n_rounds": (lambda: L.simulate_tokens_per_verify(0.5, 2, 0, RNG), "n_rounds"),
    "tv_distance shapes": (lambda: L.tv_distance([1.0], [0.5, 0.5]), "same shape"),
    "tv_noise_floor n": (lambda: L.tv_noise_floor([0.5, 0.5], 0), "n must"),
    "tv_noise_floor 2-D p": (lambda: L.tv_noise_floor(P, 10), "p must have 1"),
    "tv_null_quantile level": (lambda: L.tv_null_quantile([0.5, 0.5], 10, RNG, level=1.0), "level"),
    "chi_square negative counts": (lambda: L.chi_square([-1, 5], [0.5, 0.5]), "observed_counts"),
    "chi_square fractional counts": (lambda: L.chi_square([1.5, 5], [0.5, 0.5]), "observed_counts"),
    "chi_square length mismatch": (lambda: L.chi_square([1, 2, 3], [0.5, 0.5]), "bins"),
    "chi_square bad probs": (lambda: L.chi_square([1, 2], [0.5, 0.6]), "expected_probs"),
    "chi_square too few samples": (lambda: L.chi_square([2, 3], [0.5, 0.5]), "too few"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_raises_value_error(name):
    fn, message = CASES[name]
    with pytest.raises(ValueError, match=message):
        fn()
