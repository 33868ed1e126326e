"""How alpha, K and c set the speedup (Leviathan, Kalai, Matias 2023, section 3).

Model: each drafted token is accepted independently with probability alpha until the
first rejection; a round costs K draft steps (c each, in units of one target forward) plus
one target forward, and emits the accepted prefix plus one token.

    E(alpha, K)       = (1 - alpha^(K+1)) / (1 - alpha)     tokens per target pass (tau)
    wall time / token = (K c + 1) / E
    speedup           = E / (K c + 1)                       (Thm 3.8)

All functions broadcast over numpy arrays.
"""
from __future__ import annotations

import numpy as np


def _alpha(alpha):
    a = np.asarray(alpha, dtype=np.float64)
    if np.isnan(a).any() or (a < 0).any() or (a > 1).any():
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    return a


def _k(k):
    kk = np.asarray(k)
    if kk.dtype == bool or not np.all(np.mod(kk, 1) == 0) or (kk < 1).any():
        raise ValueError(f"k must be an integer >= 1, got {k}")
    return kk.astype(np.int64)


def _c(c):
    cc = np.asarray(c, dtype=np.float64)
    if np.isnan(cc).any() or (cc < 0).any() or np.isinf(cc).any():
        raise ValueError(f"c must be a finite cost ratio >= 0, got {c}")
    return cc


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def _tokens(a, k):
    """(1 - a^(k+1)) / (1 - a), written with expm1/log so it stays accurate as a -> 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)
        e = np.expm1((k + 1) * log_a) / np.expm1(log_a)
    return np.where(a == 1, k + 1.0, np.where(a == 0, 1.0, e))


def expected_tokens_per_verify(alpha, k):
    """E = (1 - alpha^(k+1)) / (1 - alpha) = 1 + alpha + ... + alpha^k: the accepted prefix
    plus the one token the target adds (k + 1 at alpha = 1)."""
    return _scalar(_tokens(_alpha(alpha), _k(k)))


def wall_time_per_token(alpha, k, c):
    """(k c + 1) / E, in units of one target forward pass (plain decoding costs 1)."""
    a, kk, cc = _alpha(alpha), _k(k), _c(c)
    return _scalar((kk * cc + 1) / _tokens(a, kk))


def expected_speedup(alpha, k, c):
    """E / (k c + 1): speedup over plain decoding (Leviathan et al. Thm 3.8)."""
    a, kk, cc = _alpha(alpha), _k(k), _c(c)
    return _scalar(_tokens(a, kk) / (kk * cc + 1))


def optimal_k(alpha, c, k_max: int = 32):
    """The integer K in 1..k_max with the largest expected_speedup(alpha, K, c) (smallest
    K on ties); broadcasts over alpha and c."""
    a, cc = _alpha(alpha), _c(c)
    ks = np.arange(1, int(_k(k_max)) + 1).reshape((-1,) + (1,) * np.broadcast(a, cc).ndim)
    best = np.argmax(_tokens(a, ks) / (ks * cc + 1), axis=0) + 1
    return int(best) if best.ndim == 0 else best


def breakeven_alpha(k, c):
    """The alpha where expected_speedup(alpha, k, c) == 1, i.e. E(alpha, k) = k c + 1.
    E rises from 1 (alpha 0) to k + 1 (alpha 1), so the root is unique: 0 for c = 0,
    1 for c = 1, NaN for c > 1 (no alpha pays). Found by bisection to ~1e-16."""
    kk, cc = np.broadcast_arrays(_k(k), _c(c))
    goal = kk * cc + 1
    lo, hi = np.zeros(goal.shape), np.ones(goal.shape)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = _tokens(mid, kk) < goal
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return _scalar(np.where(cc > 1, np.nan, np.where(cc == 0, 0.0, hi)))


def simulate_tokens_per_verify(alpha, k, n_rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Monte-Carlo counterpart of E: ``n_rounds`` rounds, each accepting its k drafts
    independently with probability alpha up to the first rejection. Returns the tokens
    emitted per round (accepted prefix + 1), shape (n_rounds,); ``.mean()`` estimates E."""
    a, kk = float(_alpha(alpha)), int(_k(k))
    if int(n_rounds) != n_rounds or n_rounds < 1:
        raise ValueError(f"n_rounds must be an integer >= 1, got {n_rounds}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    accepted = rng.random((int(n_rounds), kk)) < a
    return np.cumprod(accepted, axis=1).sum(axis=1) + 1
