"""Speculative decoding is exact at sequence level: the generic reference loops
(``lessonlib.decoding.reference``: ``speculative_decode``, ``autoregressive_decode``) on toy
Markov chains, by the three-token law (chi-square) and token for token at T = 0."""
import numpy as np
import pytest

from lessonlib import autoregressive_decode, chi_square, softmax, speculative_decode
from lessonlib.core import toy

LEVEL = 1e-3  # false-alarm rate of every chi-square test below


def chains(V=4, seed=8):
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.ones(V), size=V)
    draft = 0.5 * target + 0.5 * rng.dirichlet(np.ones(V), size=V)
    return toy.markov(target), toy.markov(draft), target


@pytest.mark.parametrize("k,temperature", [(1, 1.0), (3, 1.0), (3, 0.6)])
def test_speculative_decode_three_token_law_matches_target(k, temperature):
    target, draft, P = chains()
    V, n, start = P.shape[0], 4000, 2
    PT = softmax(np.log(P), temperature)
    exact = PT[start][:, None, None] * PT[:, :, None] * PT[None, :, :]  # P(a, b, c | start)
    rng = np.random.default_rng(10 + k)
    counts = np.zeros((V, V, V))
    calls = 0
    for _ in range(n):
        new, stats = speculative_decode(target, draft, [start], k, temperature, max_new_tokens=3, rng=rng)
        counts[tuple(new)] += 1
        calls += stats.target_calls
    assert chi_square(counts, exact)[1] > LEVEL
    assert calls < 3 * n  # fewer target calls than plain decoding, or there is no point


def test_autoregressive_decode_three_token_law_matches_target():
    target, _, P = chains()
    V, n, rng = P.shape[0], 3000, np.random.default_rng(11)
    exact = P[0][:, None, None] * P[:, :, None] * P[None, :, :]
    counts = np.zeros((V, V, V))
    for _ in range(n):
        counts[tuple(autoregressive_decode(target, [0], 3, 1.0, rng))] += 1
    assert chi_square(counts, exact)[1] > LEVEL


@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_speculative_equals_greedy_plain(k):
    target, draft, _ = chains(V=6, seed=12)
    for prompt in ([0], [3, 1], [5, 5, 2]):
        plain = autoregressive_decode(target, prompt, 25, temperature=0.0)
        spec, stats = speculative_decode(target, draft, prompt, k, temperature=0.0, max_new_tokens=25)
        assert spec == plain
        assert stats.draft_calls == k * stats.target_calls
        # tau counts every emitted token, the last round's surplus too (measures.tau)
        emitted = sum(stats.lengths) + stats.target_calls
        assert emitted >= 25 and stats.tau == pytest.approx(emitted / stats.target_calls)


def test_identical_draft_accepts_everything():
    target, _, _ = chains()
    new, stats = speculative_decode(target, target, [0], 4, 1.0, max_new_tokens=20, rng=np.random.default_rng(0))
    assert len(new) == 20 and stats.alpha == 1.0
    assert stats.lengths == [4] * 4  # 5 tokens per target call, cut to 20
