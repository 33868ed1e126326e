"""Turning logits into distributions and distributions into tokens.

* ``softmax`` with temperature; T <= ``GREEDY_TEMPERATURE`` is greedy (one-hot argmax).
* ``top_k_filter`` / ``top_p_filter`` -- truncate and renormalise a distribution.
* ``sample`` -- one token per row by inverse CDF; ``inverse_cdf`` is the same with given
  uniforms, written once for numpy arrays and torch tensors (the batched path uses it).
* ``residual`` -- norm(max(p - q, 0)), where speculative sampling draws after a rejection.

Probability rows live on the last axis. ``check_probs`` is the shared validation.
"""
from __future__ import annotations

import numpy as np

from lessonlib.core.backend import array_namespace, is_torch
from lessonlib.core.validate import check_probs, check_rng, check_temperature

GREEDY_TEMPERATURE = 1e-5  # at or below this, sampling means argmax
RESIDUAL_EPS = 1e-12  # residual mass at or below this is rounding noise (p == q)


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """p_i = exp(z_i / T) / sum_j exp(z_j / T) along the last axis, computed as
    exp(z_i/T - max z/T) so large logits do not overflow. T <= 1e-5: one-hot at argmax z
    (the first one on ties). Logits may be -inf (masked) but not NaN or +inf."""
    check_temperature(temperature)
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last axis, got shape {z.shape}")
    # one pass checks everything: a row's max is NaN if it holds a NaN, +inf if it holds a +inf
    # (and no NaN), -inf if every entry is -inf
    top = z.max(axis=-1, keepdims=True)
    if np.isnan(top).any() or np.isposinf(top).any():
        raise ValueError("logits must not contain NaN or +inf")
    if np.isneginf(top).any():
        raise ValueError("logits: every row needs at least one finite entry")
    if temperature <= GREEDY_TEMPERATURE:
        one_hot = np.zeros_like(z)  # not np.eye(V)[...]: that builds a V x V matrix per call
        np.put_along_axis(one_hot, np.argmax(z, axis=-1)[..., None], 1.0, axis=-1)
        return one_hot
    e = np.exp((z - top) / temperature)
    return e / e.sum(axis=-1, keepdims=True)


def top_k_filter(p, k: int) -> np.ndarray:
    """Keep the k most likely entries of each row (ties broken by index), renormalise."""
    p = check_probs(p)
    if int(k) != k or not 1 <= k <= p.shape[-1]:
        raise ValueError(f"k must be an integer in [1, {p.shape[-1]}], got {k}")
    keep = np.argsort(-p, axis=-1, kind="stable")[..., : int(k)]
    out = np.zeros_like(p)
    np.put_along_axis(out, keep, np.take_along_axis(p, keep, axis=-1), axis=-1)
    return out / out.sum(axis=-1, keepdims=True)


def top_p_filter(p, top_p: float) -> np.ndarray:
    """Nucleus filter: keep the smallest set of most likely entries whose mass reaches top_p
    (always at least one), renormalise."""
    p = check_probs(p)
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    # keep an entry if the mass strictly before it is still short of top_p
    keep_sorted = np.cumsum(sorted_p, axis=-1) - sorted_p < top_p
    out = np.zeros_like(p)
    np.put_along_axis(out, order, sorted_p * keep_sorted, axis=-1)
    return out / out.sum(axis=-1, keepdims=True)


def inverse_cdf(p, u):
    """Token index per row of ``p`` from uniforms ``u`` in [0, 1) (shape ``p.shape[:-1]``):
    the i with cdf[i-1] <= u * cdf[-1] < cdf[i]. Zero-probability entries are never chosen.
    No validation (hot path); works on numpy arrays and torch tensors alike."""
    xp = array_namespace(p)
    cdf = xp.cumsum(p, axis=-1)
    total = cdf[..., -1:]
    idx = (cdf <= u[..., None] * total).sum(axis=-1)
    # For u < 1, u * total < total in IEEE arithmetic, so idx is always a token with mass; a
    # caller's u == 1.0 would count every entry (an index past the end). Clamp it to the last
    # token with mass (the first index where the cdf reaches its total) rather than fail.
    last = xp.argmax(xp.where(cdf >= total, 1, 0), axis=-1)
    return xp.minimum(idx, last)


def sample(p, rng: np.random.Generator):
    """Draw x ~ p for each row (an int for a 1-D p, an int array for 2-D), by inverse CDF."""
    p = check_probs(p)
    x = inverse_cdf(p, np.asarray(check_rng(rng).random(p.shape[:-1])))
    return int(x) if x.ndim == 0 else x


def residual_rows(p, q):
    """``residual`` without validation, for numpy arrays and torch tensors (hot path)."""
    xp = array_namespace(p)
    r = xp.clip(p - q, 0, None)
    mass = r.sum(axis=-1, keepdims=True)
    return xp.where(mass > RESIDUAL_EPS, r / xp.where(mass > RESIDUAL_EPS, mass, 1.0), p)


def residual(p, q) -> np.ndarray:
    """r(x) = max(p(x) - q(x), 0) / sum_y max(p(y) - q(y), 0): what speculative sampling draws
    from after rejecting a draft token. When that mass is <= 1e-12 (p == q up to rounding, so
    a rejection has probability ~0) returns p instead of normalising rounding noise."""
    p, q = check_probs(p, "p"), check_probs(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    return residual_rows(p, q)


def acceptance_rate(p, q):
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that speculative
    sampling accepts a token drafted from q when the target is p (per row)."""
    p, q = check_probs(p, "p"), check_probs(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    a = np.minimum(p, q).sum(axis=-1)
    return float(a) if a.ndim == 0 else a
