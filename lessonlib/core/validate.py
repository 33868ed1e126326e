"""One validation module: every public function checks its input with these, and each
raises ``ValueError`` naming the argument and what was expected. Nothing is clipped.

Counts (K, token ids) are integers; an integer-valued float such as 2.0 is accepted and
converted (numpy grids are float), 2.5, True and NaN are not.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from lessonlib.core.backend import array_namespace, is_torch

PROB_TOL = 1e-6  # rows must sum to 1 within this


def check_int(value, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int; integer-valued floats pass, bools, fractions, NaN and inf do not.
    ``minimum`` / ``maximum``: inclusive bounds."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        low = "" if minimum is None else f" >= {minimum}"
        high = "" if maximum is None else f" <= {maximum}"
        raise ValueError(f"{name} must be an integer{low}{' and' if low and high else ''}{high}, got {value!r}")
    return int(value)


def check_k(k, name: str = "k") -> int:
    """A draft length: an integer >= 1."""
    return check_int(k, name, minimum=1)


def check_ks(k, name: str = "k") -> np.ndarray:
    """An array of draft lengths (the theory functions are vectorised), each an integer >= 1."""
    kk = np.asarray(k)
    if kk.dtype == bool or not np.issubdtype(kk.dtype, np.number) or not np.all(np.isfinite(kk)) \
            or not np.all(np.mod(kk, 1) == 0) or (kk < 1).any():
        raise ValueError(f"{name} must be an integer >= 1, got {k!r}")
    return kk.astype(np.int64)


def check_unit(x, name: str) -> np.ndarray:
    """Values in [0, 1] (alpha, coverage, a probability), scalar or array; NaN is rejected."""
    a = np.asarray(x, dtype=np.float64)
    if np.isnan(a).any() or (a < 0).any() or (a > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    return a


def check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    return check_unit(alpha, name)


def check_nonnegative(x, name: str, what: str = "a finite number >= 0") -> np.ndarray:
    """Finite values >= 0 (a cost ratio c, a verify cost r, seconds), scalar or array."""
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)) or (a < 0).any():
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return a


def check_c(c, name: str = "c") -> np.ndarray:
    """A draft cost ratio c = draft step / one-token target step: finite and >= 0."""
    return check_nonnegative(c, name, "a finite cost ratio >= 0 (draft step / one-token target step)")


def check_temperature(temperature, name: str = "temperature") -> float:
    """A sampling temperature: a finite number >= 0 (T <= 1e-5 means greedy)."""
    if isinstance(temperature, (bool, np.bool_)) or not isinstance(temperature, numbers.Real) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {temperature!r}")
    return float(temperature)


def check_rng(rng, name: str = "rng") -> np.random.Generator:
    """An explicit seeded generator: ``numpy.random.default_rng(seed)``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"{name} must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    return rng


def check_round_counts(result, name: str = "speculate") -> tuple[int, int]:
    """A round's reported (accepted, drafted): integers with drafted >= 1 and
    0 <= accepted <= drafted (accepted = -1 would emit no token; accepted > drafted would count
    tokens never drafted)."""
    try:
        accepted, drafted = result
    except (TypeError, ValueError):
        raise ValueError(f"{name} must return (accepted, drafted), got {result!r}") from None
    drafted = check_int(drafted, f"drafted (returned by {name})", minimum=1)
    return check_int(accepted, f"accepted (returned by {name})", minimum=0, maximum=drafted), drafted


def check_finite_1d(values, name: str, min_len: int = 1) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) < min_len or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a 1-D sequence of at least {min_len} finite numbers, got {values!r}")
    return arr


def check_token_ids(tokens, vocab_size: int, name: str = "tokens") -> np.ndarray:
    """Integer token ids in [0, vocab_size), as an int64 array."""
    t = np.asarray(tokens)
    if t.size and (not np.issubdtype(t.dtype, np.integer)):
        if not np.issubdtype(t.dtype, np.floating) or not np.all(np.mod(t, 1) == 0):
            raise ValueError(f"{name} must be integer token ids, got {t.dtype} values")
    t = t.astype(np.int64)
    if t.size and (t.min() < 0 or t.max() >= vocab_size):
        bad = int(t[(t < 0) | (t >= vocab_size)][0])
        raise ValueError(f"{name} must be token ids in [0, {vocab_size}) (the vocabulary size), got {bad}")
    return t


def check_probs(p, name: str = "p", ndim: tuple[int, ...] = (1, 2)):
    """``p`` as a float64 array (numpy, or torch kept as torch) after checking that it holds
    probability rows: finite, non-negative, each row summing to 1 within 1e-6."""
    if not is_torch(p):
        p = np.asarray(p, dtype=np.float64)
    if p.ndim not in ndim:
        raise ValueError(f"{name} must have {' or '.join(map(str, ndim))} dimensions, got shape {tuple(p.shape)}")
    if p.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) axis")
    xp = array_namespace(p)
    if bool(xp.isnan(p).any()) or bool(xp.isinf(p).any()):
        raise ValueError(f"{name} must be finite, found NaN or inf")
    if bool((p < 0).any()):
        raise ValueError(f"{name} must be non-negative, min is {float(p.min()):.3g}")
    worst = float(abs(p.sum(axis=-1) - 1).max()) if 0 not in p.shape else 0.0  # every row, not the mean
    if worst > PROB_TOL:
        raise ValueError(f"{name} rows must sum to 1 (within {PROB_TOL}), off by {worst:.3g}")
    return p


def check_same_vocab(p, q, p_name="p", q_name="q"):
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"{p_name} and {q_name} must share a vocabulary, got sizes {p.shape[-1]} and {q.shape[-1]}")


