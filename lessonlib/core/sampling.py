"""Turning logits into distributions and distributions into tokens.

* ``softmax`` with temperature; T <= ``GREEDY_TEMPERATURE`` is greedy (one-hot argmax).
* ``top_k_filter`` / ``top_p_filter`` -- truncate and renormalise a distribution.
* ``process`` -- the one place logits become a sampling distribution: temperature, then
  top-k, top-p and min-p, applied alike to the target's rows (p) and the draft's (q).
* ``sample`` -- one token per row by inverse CDF; ``inverse_cdf`` is the same with given
  uniforms, written once for numpy arrays and torch tensors (the batched path uses it).
* ``residual`` -- norm(max(p - q, 0)), where speculative sampling draws after a rejection.

Probability rows live on the last axis (..., V). The input checks are ``core.validate``'s.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from lessonlib.core.backend import ArrayT, array_namespace
from lessonlib.core.validate import (
    check_int,
    check_interval,
    check_probs,
    check_rng,
    check_same_shape,
    check_temperature,
)

if TYPE_CHECKING:  # for annotations only: core never imports torch at run time
    import torch

GREEDY_TEMPERATURE = 1e-5  # at or below this, sampling means argmax
RESIDUAL_EPS = 1e-12  # residual mass at or below this is rounding noise (p == q)


def softmax(logits: npt.ArrayLike, temperature: float = 1.0) -> np.ndarray:
    """p_i = exp(z_i / T) / sum_j exp(z_j / T) along the last axis, computed as
    exp(z_i/T - max z/T) so large logits do not overflow. T <= 1e-5: one-hot at argmax z
    (the first one on ties). Logits may be -inf (masked) but not NaN or +inf.
    ``logits``: (..., V); returns float64 (..., V)."""
    check_temperature(temperature)
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 0 or z.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty last axis, got shape {z.shape}")
    # one pass checks everything: a row's max is NaN if it holds a NaN, +inf if it holds a +inf
    # (and no NaN), -inf if every entry is -inf
    top = z.max(axis=-1, keepdims=True)
    if not np.isfinite(top).all():  # one test on the hot path; the message tells the cases apart
        if np.isnan(top).any() or (top > 0).any():
            raise ValueError("logits must not contain NaN or +inf")
        raise ValueError("logits: every row needs at least one finite entry")
    if temperature <= GREEDY_TEMPERATURE:
        one_hot = np.zeros_like(z)  # not np.eye(V)[...]: that builds a V x V matrix per call
        np.put_along_axis(one_hot, np.argmax(z, axis=-1)[..., None], 1.0, axis=-1)
        return one_hot
    e = z - top  # a new array: the caller's logits are not touched
    if temperature != 1.0:
        e /= temperature
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def top_k_filter(p: npt.ArrayLike, k: int) -> np.ndarray:
    """Keep the k most likely entries of each row (ties broken by index), renormalise.
    ``p``: (V,) or (N, V); returns the same shape."""
    p = check_probs(p)
    return _top_k(p, check_int(k, "k", minimum=1, maximum=p.shape[-1]))


def _top_k(p: np.ndarray, k: int) -> np.ndarray:
    """``top_k_filter`` without the checks. Per row: every entry above the k-th largest value,
    then the entries equal to it in index order until k are kept (a partition, no sort)."""
    def kept(row: np.ndarray) -> np.ndarray:
        t = np.partition(row, row.size - k)[row.size - k]  # the k-th largest value
        keep = row > t
        keep[np.flatnonzero(row == t)[: k - int(keep.sum())]] = True  # ties: the lower indices
        return keep
    return _keep_rows(p, kept)


def _keep_rows(p: np.ndarray, kept: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Each row (V,) of ``p`` (..., V) zeroed outside ``kept(row)`` (a mask or indices), renormalised."""
    rows = p.reshape(-1, p.shape[-1])
    out = np.zeros_like(rows)
    for r, row in enumerate(rows):
        keep = kept(row)
        out[r, keep] = row[keep]
    out = out.reshape(p.shape)
    return out / out.sum(axis=-1, keepdims=True)


def top_p_filter(p: npt.ArrayLike, top_p: float) -> np.ndarray:
    """Nucleus filter: keep the smallest set of most likely entries whose mass reaches top_p
    (always at least one), renormalise. ``p``: (V,) or (N, V); returns the same shape."""
    p = check_probs(p)
    check_interval(top_p, "top_p", "(0, 1]")
    return _nucleus(p, top_p)


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """``top_p_filter`` without the checks. Per row, the entries are ordered by probability,
    ties by index, and kept while the mass strictly before them is short of top_p. Only a prefix
    of that order is sorted: the entries at or above the m-th largest value (m = 256, then 2,048,
    ...), enough once their mass reaches top_p, since every later entry then has at least that
    mass before it. The cumulative sums of the prefix are the full order's, so the same entries
    are kept as by sorting all V (a nucleus at T = 1 over 2,048 tokens: one sort of 2,048 cost
    about 0.2 ms per row, more than the draft step it followed)."""
    V = p.shape[-1]

    def kept(row: np.ndarray) -> np.ndarray:
        m = min(256, V)
        while True:
            cand = np.flatnonzero(row >= np.partition(row, V - m)[V - m]) if m < V else np.arange(V)
            order = cand[np.argsort(-row[cand], kind="stable")]  # cand is in index order: ties stay so
            mass = np.cumsum(row[order])
            if m >= V or mass[-1] >= top_p:
                break
            m = min(8 * m, V)
        return order[mass - row[order] < top_p]  # the mass strictly before each entry is still short of top_p
    return _keep_rows(p, kept)


def check_truncation(top_k: object = None, top_p: object = None, min_p: object = None) -> None:
    """top_k: None or an integer >= 1; top_p: None or in (0, 1]; min_p: None or in [0, 1)."""
    if top_k is not None:
        check_int(top_k, "top_k", minimum=1)
    if top_p is not None:
        check_interval(top_p, "top_p", "(0, 1]")
    if min_p is not None:
        check_interval(min_p, "min_p", "[0, 1)")


def process(logits: npt.ArrayLike, temperature: float, top_k: int | None = None, top_p: float | None = None,
            min_p: float | None = None) -> np.ndarray:
    """The sampling distribution of each row of ``logits`` ((..., V) -> float64 (..., V)):
    softmax(logits / T), then keep the ``top_k`` most likely tokens (ties: lower index), then
    the nucleus of mass ``top_p``, then drop tokens below ``min_p`` times the row's largest
    probability; renormalised after each step (the order of transformers' and vLLM's processors).

    Speculative sampling stays exact under truncation only if the draft's q goes through the
    same processing and the rule judges with the q the draft actually sampled from
    (transformers issue #47932 is the bug of using the q from before truncation). At
    T <= 1e-5 the row is one-hot at the argmax, which no truncation removes."""
    check_truncation(top_k, top_p, min_p)
    top_k = None if top_k is None else int(top_k)  # 2.0 is the integer 2 (numpy's partition needs an int)
    p = softmax(logits, temperature)
    if temperature <= GREEDY_TEMPERATURE:
        return p
    if top_k is not None and top_k < p.shape[-1]:
        p = _top_k(p, top_k)  # p came from softmax: no checks needed
    if top_p is not None and top_p < 1.0:
        p = _nucleus(p, top_p)
    if min_p:
        p = np.where(p >= min_p * p.max(axis=-1, keepdims=True), p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


@overload
def inverse_cdf(p: np.ndarray, u: np.ndarray) -> np.ndarray: ...
@overload
def inverse_cdf(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor: ...
def inverse_cdf(p: Any, u: Any) -> Any:
    """Token index per row of ``p`` (..., V) from uniforms ``u`` in [0, 1) (shape ``p.shape[:-1]``):
    the i with cdf[i-1] <= u * cdf[-1] < cdf[i]; integer indices of shape ``p.shape[:-1]``.
    Zero-probability entries are never chosen. No validation (hot path); works on numpy
    arrays and torch tensors alike (numpy in, numpy out)."""
    xp = array_namespace(p)
    cdf = xp.cumsum(p, axis=-1)
    total = cdf[..., -1:]
    idx = (cdf <= u[..., None] * total).sum(axis=-1)
    # For u < 1, u * total < total in IEEE arithmetic, so idx is always a token with mass; a
    # caller's u == 1.0 would count every entry (an index past the end). Clamp it to the last
    # token with mass (the first index where the cdf reaches its total) rather than fail.
    last = xp.argmax(xp.where(cdf >= total, 1, 0), axis=-1)
    return xp.minimum(idx, last)


def sample(p: npt.ArrayLike, rng: np.random.Generator) -> int | np.ndarray:
    """Draw x ~ p for each row (an int for a 1-D p (V,), an int array (N,) for a 2-D p (N, V)),
    by inverse CDF: one uniform from ``rng`` per row."""
    p = check_probs(p)
    x = inverse_cdf(p, np.asarray(check_rng(rng).random(p.shape[:-1])))
    return int(x) if x.ndim == 0 else x


def residual_rows(p: ArrayT, q: ArrayT) -> ArrayT:
    """``residual`` without validation, for numpy arrays and torch tensors (hot path): rows
    (..., V) of p and q (broadcast against each other), the same kind back."""
    xp = array_namespace(p)
    r = xp.clip(p - q, 0, None)
    mass = r.sum(axis=-1, keepdims=True)
    return xp.where(mass > RESIDUAL_EPS, r / xp.where(mass > RESIDUAL_EPS, mass, 1.0), p)


def residual(p: npt.ArrayLike, q: npt.ArrayLike) -> np.ndarray:
    """r(x) = max(p(x) - q(x), 0) / sum_y max(p(y) - q(y), 0): what speculative sampling draws
    from after rejecting a draft token. When that mass is <= 1e-12 (p == q up to rounding, so
    a rejection has probability ~0) returns p instead of normalising rounding noise.
    ``p``, ``q``: (V,) or (N, V), one shape; returns that shape."""
    p, q = check_probs(p, "p"), check_probs(q, "q")
    check_same_shape(p, q)
    return residual_rows(p, q)


def acceptance_rate(p: npt.ArrayLike, q: npt.ArrayLike) -> float | np.ndarray:
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q): the probability that speculative
    sampling accepts a token drafted from q when the target is p (per row): a float for
    p, q (V,), an array (N,) for (N, V)."""
    p, q = check_probs(p, "p"), check_probs(q, "q")
    check_same_shape(p, q)
    a = np.minimum(p, q).sum(axis=-1)
    return float(a) if a.ndim == 0 else a
