"""How alpha, K and c set the speedup (Leviathan, Kalai, Matias 2023, section 3).

Model: each drafted token is accepted independently with probability alpha until the
first rejection; a round costs K draft steps (c each, in units of one target forward) plus
one target forward, and emits the accepted prefix plus one token.

    E(alpha, K)       = (1 - alpha^(K+1)) / (1 - alpha)     tokens per target pass (tau)
    wall time / token = (K c + 1) / E
    speedup           = E / (K c + 1)                       (Thm 3.8)

With a measured verify cost r = r(K + 1) (a target forward over K + 1 tokens / a one-token
step) the speedup is E / (K c + r); ``alpha_for_speedup`` is the one inverse of E and of
that speedup (break-even alpha, fallback thresholds, alpha from an engine's tau).

All functions broadcast over numpy arrays.
"""
from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from lessonlib.core.validate import check_alpha as _alpha
from lessonlib.core.validate import check_c as _c
from lessonlib.core.validate import check_int, check_positive, check_rng
from lessonlib.core.validate import check_ks as _k

K_MAX_SEARCH = 4096  # optimal_k searches 1..k_max: an array of k_max rows
SIMULATE_MAX = 10**8  # random numbers simulate_tokens_per_verify draws at most (0.8 GB of float64)

# Each function takes scalars or arrays (broadcast together) and returns a float for all-scalar
# input, else an array of the broadcast shape.
Result: TypeAlias = "float | np.ndarray"


def _scalar(x: np.ndarray) -> Result:
    return float(x) if np.ndim(x) == 0 else x


def _tokens(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(1 - a^(k+1)) / (1 - a), written with expm1/log so it stays accurate as a -> 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)
        e = np.expm1((k + 1) * log_a) / np.expm1(log_a)
    return np.where(a == 1, k + 1.0, np.where(a == 0, 1.0, e))


def expected_tokens_per_verify(alpha: npt.ArrayLike, k: npt.ArrayLike) -> Result:
    """E = (1 - alpha^(k+1)) / (1 - alpha) = 1 + alpha + ... + alpha^k: the accepted prefix
    plus the one token the target adds (k + 1 at alpha = 1)."""
    return _scalar(_tokens(_alpha(alpha), _k(k)))


def wall_time_per_token(alpha: npt.ArrayLike, k: npt.ArrayLike, c: npt.ArrayLike) -> Result:
    """(k c + 1) / E, in units of one target forward pass (plain decoding costs 1)."""
    a, kk, cc = _alpha(alpha), _k(k), _c(c)
    return _scalar((kk * cc + 1) / _tokens(a, kk))


def expected_speedup(alpha: npt.ArrayLike, k: npt.ArrayLike, c: npt.ArrayLike) -> Result:
    """E / (k c + 1): speedup over plain decoding (Leviathan et al. Thm 3.8)."""
    a, kk, cc = _alpha(alpha), _k(k), _c(c)
    return _scalar(_tokens(a, kk) / (kk * cc + 1))


def optimal_k(alpha: npt.ArrayLike, c: npt.ArrayLike, k_max: int = 32) -> int | np.ndarray:
    """The integer K in 1..k_max with the largest expected_speedup(alpha, K, c) (smallest
    K on ties); broadcasts over alpha and c."""
    a, cc = _alpha(alpha), _c(c)
    k_max = int(_k(k_max, "k_max", maximum=K_MAX_SEARCH))
    ks = np.arange(1, k_max + 1).reshape((-1,) + (1,) * np.broadcast(a, cc).ndim)
    best = np.argmax(_tokens(a, ks) / (ks * cc + 1), axis=0) + 1
    return int(best) if best.ndim == 0 else best


def alpha_for_speedup(speedup: npt.ArrayLike, k: npt.ArrayLike, c: npt.ArrayLike,
                      r: npt.ArrayLike = 1.0) -> Result:
    """The least alpha in [0, 1] with E(alpha, k) / (k c + r) >= ``speedup``: the one inverse
    of E and of the speedup (bisection, 60 halvings: exact to float precision; broadcasts).

    r = r(k + 1), the target forward over k + 1 tokens / a one-token target step (1 in
    Leviathan et al.'s formula). E rises with alpha from 1 to k + 1, so the speedup rises from
    1 / (k c + r) to (k + 1) / (k c + r): a speedup at or below that range is reached by every
    alpha (returns 0.0), one above it by none (returns inf, a threshold no estimate can pass).
    Special cases: ``alpha_for_speedup(1, k, c)`` is ``breakeven_alpha(k, c)``;
    ``alpha_for_speedup(tau, k, 0)`` inverts tau = E(alpha, k) (an engine's mean accepted length).
    """
    s = check_positive(speedup, "speedup")
    rr = check_positive(r, "r", "a finite number > 0 (target forward over k + 1 tokens / one-token step)")
    kk, cc = _k(k), _c(c)
    goal = s * (kk * cc + rr)  # the E(alpha, k) the speedup needs
    kk, goal = np.broadcast_arrays(kk, goal)
    lo, hi = np.zeros(goal.shape), np.ones(goal.shape)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = _tokens(mid, kk) < goal
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return _scalar(np.where(goal <= 1, 0.0, np.where(goal > kk + 1, np.inf, hi)))


def breakeven_alpha(k: npt.ArrayLike, c: npt.ArrayLike) -> Result:
    """The alpha where expected_speedup(alpha, k, c) == 1, i.e. E(alpha, k) = k c + 1.
    E rises from 1 (alpha 0) to k + 1 (alpha 1), so the root is unique: 0 for c = 0,
    1 for c = 1, NaN for c > 1 (no alpha pays). ``alpha_for_speedup(1, k, c)``."""
    kk, cc = np.broadcast_arrays(_k(k), _c(c))
    return _scalar(np.where(cc > 1, np.nan, alpha_for_speedup(1.0, kk, cc)))


def simulate_tokens_per_verify(alpha: float, k: int, n_rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Monte-Carlo counterpart of E: ``n_rounds`` rounds, each accepting its k drafts
    independently with probability alpha up to the first rejection. Returns the tokens
    emitted per round (accepted prefix + 1), shape (n_rounds,); ``.mean()`` estimates E."""
    a, kk = float(_alpha(alpha)), int(_k(k))
    n_rounds = check_int(n_rounds, "n_rounds", minimum=1)
    if n_rounds * kk > SIMULATE_MAX:
        raise ValueError(f"n_rounds * k must be <= {SIMULATE_MAX:.0e} (one random number each), "
                         f"got {n_rounds} * {kk}")
    check_rng(rng)
    accepted = rng.random((n_rounds, kk)) < a
    return np.cumprod(accepted, axis=1).sum(axis=1) + 1
