"""Is a sampler's histogram the distribution it should be? TV, its noise floor, chi-square.

An n-sample histogram of p is never exactly p: ``tv_noise_floor`` says how far it lands on
average, so a measured TV is judged against it, not against 0. ``chi_square`` is the
formal test (with a p-value); it pools sparse bins so its chi-square approximation holds.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats
from scipy.special import gammaln

from lessonlib.core.validate import (
    check_int,
    check_interval,
    check_positive_number,
    check_probs,
    check_rng,
    check_same_shape,
)


def tv_distance(p: npt.ArrayLike, q: npt.ArrayLike) -> float | np.ndarray:
    """TV(p, q) = 1/2 sum_x |p(x) - q(x)| = 1 - sum_x min(p(x), q(x)), per row: a float for
    p, q (V,), an array (N,) for (N, V)."""
    p, q = check_probs(p, "p"), check_probs(q, "q")
    check_same_shape(p, q)
    tv = 0.5 * np.abs(p - q).sum(axis=-1)
    return float(tv) if tv.ndim == 0 else tv


def tv_noise_floor(p: npt.ArrayLike, n: int) -> float:
    """E[TV(p, h_n)] for h_n the histogram (frequencies) of n i.i.d. draws from p (V,), exactly.

    Each count X_x ~ Binomial(n, p_x), so E TV = 1/(2n) sum_x E|X_x - n p_x|, and the
    binomial mean absolute deviation has de Moivre's closed form
    E|X - np| = 2 nu C(n, nu) p^nu (1 - p)^(n - nu + 1), nu = floor(np) + 1
    (computed in log space; 0 when p_x is 0 or 1). Decays like sqrt(V / n)."""
    p = check_probs(p, "p", ndim=(1,))
    n = check_int(n, "n", minimum=1)
    inner = (p > 0) & (p < 1)
    px = p[inner]
    nu = np.floor(n * px) + 1
    log_md = (np.log(2 * nu) + gammaln(n + 1) - gammaln(nu + 1) - gammaln(n - nu + 1)
              + nu * np.log(px) + (n - nu + 1) * np.log1p(-px))
    return float(np.exp(log_md).sum() / (2 * n))


def tv_null_quantile(p: npt.ArrayLike, n: int, rng: np.random.Generator, level: float = 0.999,
                     n_sim: int = 10_000) -> float:
    """The ``level`` quantile of TV(p, h_n) when h_n really is an n-sample histogram of p (V,),
    estimated from ``n_sim`` simulated multinomial histograms. A measured TV above it
    rejects "the samples come from p" with false-alarm rate 1 - level. (The spread around
    ``tv_noise_floor`` depends on how peaked p is, so it is simulated, not a fixed ratio.)"""
    p = check_probs(p, "p", ndim=(1,))
    check_rng(rng)
    n = check_int(n, "n", minimum=1)
    check_interval(level, "level", "(0, 1)")
    n_sim = check_int(n_sim, "n_sim", minimum=1)
    if n_sim * (1 - level) < 5:
        raise ValueError(f"n_sim={n_sim} is too small to estimate the {level} quantile "
                         "(need n_sim * (1 - level) >= 5)")
    counts = rng.multinomial(n, p / p.sum(), size=int(n_sim))
    tv = 0.5 * np.abs(counts / n - p).sum(axis=1)
    return float(np.quantile(tv, level))


def _pool_sparse(expected: np.ndarray, min_expected: float) -> list[list[int]]:
    """Group bin indices so every group's expected count is >= min_expected: bins are
    taken from the least expected up, sparse ones pooled together; a sparse remainder
    joins the last group."""
    groups: list[list[int]] = []
    pool: list[int] = []
    pool_mass = 0.0
    for i in np.argsort(expected, kind="stable"):
        pool.append(i)
        pool_mass += expected[i]
        if pool_mass >= min_expected:
            groups.append(pool)
            pool, pool_mass = [], 0.0
    if pool and groups:
        groups[-1] += pool
    elif pool:
        groups.append(pool)
    return groups


def chi_square(observed_counts: npt.ArrayLike, expected_probs: npt.ArrayLike,
               min_expected: float = 5.0) -> tuple[float, float]:
    """Pearson's goodness of fit of counts to probabilities: (statistic, p-value).

    statistic = sum_b (O_b - E_b)^2 / E_b over bins b, E_b = n * expected_probs (rescaled to
    sum exactly to n); p-value from chi-square with (bins - 1) degrees of freedom. Bins with
    E_b < ``min_expected`` are pooled (least expected first) so the approximation is valid.
    Any count in a bin of probability 0 returns (inf, 0.0). Any shape, flattened."""
    raw = np.asarray(observed_counts)
    if raw.dtype.kind not in "iuf":  # strings ('5') and bools would be converted silently
        raise ValueError(f"observed_counts must be numbers (non-negative integer counts), got dtype {raw.dtype}")
    obs = raw.astype(np.float64).ravel()
    min_expected = check_positive_number(min_expected, "min_expected")
    probs = check_probs(np.ravel(expected_probs), "expected_probs", ndim=(1,))
    if obs.shape != probs.shape:
        raise ValueError(f"observed_counts has {obs.size} bins, expected_probs {probs.size}")
    if not np.isfinite(obs).all() or (obs < 0).any() or (obs != np.round(obs)).any():
        raise ValueError("observed_counts must be non-negative integer counts")
    n = obs.sum()
    if n < 1:
        raise ValueError("observed_counts must hold at least one observation")
    if (obs[probs == 0] > 0).any():
        return float("inf"), 0.0
    obs, probs = obs[probs > 0], probs[probs > 0]
    expected = n * probs / probs.sum()
    groups = _pool_sparse(expected, min_expected)
    if len(groups) < 2:
        raise ValueError(f"too few observations ({int(n)}): need at least 2 bins with expected count >= {min_expected}")
    o = np.array([obs[g].sum() for g in groups])
    e = np.array([expected[g].sum() for g in groups])
    statistic, p_value = _scipy_stats.chisquare(o, e)
    return float(statistic), float(p_value)
