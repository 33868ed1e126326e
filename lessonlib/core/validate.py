"""One validation module: every public function checks its input with these, and each
raises ``ValueError`` naming the argument and what was expected. Nothing is clipped.

Counts (K, token ids) are integers; an integer-valued float such as 2.0 is accepted and
converted (numpy grids are float), 2.5, True and NaN are not.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, TypeGuard, overload

import numpy as np
import numpy.typing as npt

from lessonlib.core.backend import Array, array_namespace, is_torch

if TYPE_CHECKING:  # for annotations only: core never imports torch at run time
    import torch

PROB_TOL = 1e-6  # rows must sum to 1 within this
# integer dtypes a token tensor may have (by name, so that checking one never imports torch)
TOKEN_TENSOR_DTYPES = ("torch.int64", "torch.int32", "torch.int16", "torch.int8", "torch.uint8")


def _is_real(value: object) -> TypeGuard[float]:
    """A real number that is not a bool (True is not 1 here): an int, a float or a numpy
    scalar (typed as float: all of them compare and convert alike)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_int(value: object, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int; integer-valued floats pass, bools, fractions, NaN and inf do not.
    ``minimum`` / ``maximum``: inclusive bounds."""
    if not _is_real(value) or not math.isfinite(value) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        low = "" if minimum is None else f" >= {minimum}"
        high = "" if maximum is None else f" <= {maximum}"
        raise ValueError(f"{name} must be an integer{low}{' and' if low and high else ''}{high}, got {value!r}")
    return int(value)


def check_k(k: object, name: str = "k") -> int:
    """A draft length: an integer >= 1."""
    return check_int(k, name, minimum=1)


K_MAX = 10**6  # the longest draft length the theory accepts (int64 and float64 stay exact far beyond)


def check_ks(k: npt.ArrayLike, name: str = "k", maximum: int = K_MAX) -> np.ndarray:
    """An array of draft lengths (the theory functions are vectorised), each an integer in
    [1, ``maximum``] (1e20 would overflow int64 into a negative K); returned as int64 of k's shape."""
    kk = np.asarray(k)
    if kk.dtype == bool or not np.issubdtype(kk.dtype, np.number) or not np.all(np.isfinite(kk)) \
            or not np.all(np.mod(kk, 1) == 0) or (kk < 1).any() or (kk > maximum).any():
        raise ValueError(f"{name} must be an integer in [1, {maximum}], got {k!r}")
    return kk.astype(np.int64)


def _reals(x: npt.ArrayLike, name: str, what: str) -> np.ndarray:
    """``x`` as float64 of its shape; strings, bools (True is not 1) and objects raise naming ``name``."""
    if isinstance(x, (bool, np.bool_, str, bytes)) or np.asarray(x).dtype.kind not in "iuf":
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return np.asarray(x, dtype=np.float64)


def check_unit(x: npt.ArrayLike, name: str) -> np.ndarray:
    """Values in [0, 1] (alpha, coverage, a probability), scalar or array (float64 of x's
    shape); NaN is rejected."""
    a = _reals(x, name, "a number in [0, 1]")
    if np.isnan(a).any() or (a < 0).any() or (a > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    return a


def check_alpha(alpha: npt.ArrayLike, name: str = "alpha") -> np.ndarray:
    """An acceptance rate alpha in [0, 1], scalar or array (``check_unit``)."""
    return check_unit(alpha, name)


def check_nonnegative(x: npt.ArrayLike, name: str, what: str = "a finite number >= 0") -> np.ndarray:
    """Finite values >= 0 (a cost ratio c, a verify cost r, seconds), scalar or array (float64
    of x's shape)."""
    a = _reals(x, name, what)
    if not np.all(np.isfinite(a)) or (a < 0).any():
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return a


def check_positive(x: npt.ArrayLike, name: str, what: str = "a finite number > 0") -> np.ndarray:
    """Finite values > 0 (a speedup, a verify cost r), scalar or array (float64 of x's shape)."""
    a = _reals(x, name, what)
    if not np.all(np.isfinite(a)) or (a <= 0).any():
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return a


def check_c(c: npt.ArrayLike, name: str = "c") -> np.ndarray:
    """A draft cost ratio c = draft step / one-token target step: finite and >= 0."""
    return check_nonnegative(c, name, "a finite cost ratio >= 0 (draft step / one-token target step)")


def check_positive_number(x: object, name: str, what: str = "a finite number > 0") -> float:
    """One finite number > 0 (a speedup, a cost, a concentration), as a float."""
    if not _is_real(x) or not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be {what}, got {x!r}")
    return float(x)


def check_interval(x: object, name: str, interval: str) -> float:
    """One number in ``interval``, written as in maths: "[0, 1]", "(0, 1]", "(0, 1)" (a round
    bracket leaves its end out), as a float. NaN fails every comparison, so it never passes."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    if not _is_real(x) or not (low < x if interval[0] == "(" else low <= x) \
            or not (x < high if interval[-1] == ")" else x <= high):
        raise ValueError(f"{name} must lie in {interval}, got {x!r}")
    return float(x)


def check_temperature(temperature: object, name: str = "temperature") -> float:
    """A sampling temperature: a finite number >= 0 (T <= 1e-5 means greedy)."""
    if not _is_real(temperature) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {temperature!r}")
    return float(temperature)


# the course's one rng rule: sampling (T > 1e-5) needs an explicit generator, greedy decoding none
# (no seeded default: two calls expecting independent samples would get identical ones)
SAMPLING_RNG = "rng (an explicit numpy.random.Generator is needed when temperature > 1e-5)"


def check_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """An explicit seeded generator: ``numpy.random.default_rng(seed)``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"{name} must be a numpy.random.Generator (np.random.default_rng(seed)), "
                         f"got {type(rng).__name__}")
    return rng


def check_round_counts(result: Any, name: str = "speculate") -> tuple[int, int]:
    """A round's reported (accepted, drafted): integers with drafted >= 1 and
    0 <= accepted <= drafted (accepted = -1 would emit no token; accepted > drafted would count
    tokens never drafted)."""
    try:
        accepted, drafted = result
    except (TypeError, ValueError):
        raise ValueError(f"{name} must return (accepted, drafted), got {result!r}") from None
    drafted = check_int(drafted, f"drafted (returned by {name})", minimum=1)
    return check_int(accepted, f"accepted (returned by {name})", minimum=0, maximum=drafted), drafted


def check_finite_1d(values: npt.ArrayLike, name: str, min_len: int = 1) -> np.ndarray:
    """A 1-D sequence of at least ``min_len`` finite numbers, as float64 (n,)."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) < min_len or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a 1-D sequence of at least {min_len} finite numbers, got {values!r}")
    return arr


def check_token_ids(tokens: npt.ArrayLike, vocab_size: int, name: str = "tokens") -> np.ndarray:
    """Integer token ids in [0, vocab_size), as an int64 array of tokens' shape."""
    t = np.asarray(tokens)
    if t.size and (not np.issubdtype(t.dtype, np.integer)):
        if not np.issubdtype(t.dtype, np.floating) or not np.all(np.mod(t, 1) == 0):
            raise ValueError(f"{name} must be integer token ids, got {t.dtype} values")
    t = t.astype(np.int64)
    if t.size and (t.min() < 0 or t.max() >= vocab_size):
        bad = int(t[(t < 0) | (t >= vocab_size)][0])
        raise ValueError(f"{name} must be token ids in [0, {vocab_size}) (the vocabulary size), got {bad}")
    return t


def check_token_sequence(tokens: npt.ArrayLike, vocab_size: int, name: str = "tokens") -> np.ndarray:
    """What a model's ``logits(tokens)`` takes: a non-empty 1-D sequence of token ids in
    [0, vocab_size), as int64 (n,)."""
    t = check_token_ids(tokens, vocab_size, name)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of token ids, got shape {t.shape}")
    return t


def check_token_tensor(idx: torch.Tensor, vocab_size: int, name: str = "tokens") -> None:
    """A torch tensor of token ids in [0, vocab_size), checked where it enters a model: the
    embedding's own IndexError names neither the argument nor the vocabulary. One min/max on
    the ids (a few microseconds), no copy to numpy."""
    if idx.numel() and str(idx.dtype) not in TOKEN_TENSOR_DTYPES:
        raise ValueError(f"{name} must be integer token ids, got dtype {idx.dtype}")
    if idx.numel():
        low, high = (int(v) for v in idx.aminmax())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"{name} must be token ids in [0, {vocab_size}) (the vocabulary size), got {bad}")


@overload
def check_probs(p: torch.Tensor, name: str = "p", ndim: tuple[int, ...] = (1, 2)) -> torch.Tensor: ...
@overload
def check_probs(p: npt.ArrayLike, name: str = "p", ndim: tuple[int, ...] = (1, 2)) -> np.ndarray: ...
def check_probs(p: Any, name: str = "p", ndim: tuple[int, ...] = (1, 2)) -> Any:
    """``p`` as a float64 array (numpy, or torch kept as torch) after checking that it holds
    probability rows: finite, non-negative, each row summing to 1 within 1e-6. ``ndim``: the
    dimensions allowed, e.g. (V,) and (N, V) by default."""
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


def check_same_vocab(p: Array, q: Array, p_name: str = "p", q_name: str = "q") -> None:
    """Two sets of rows over the same vocabulary: the same last axis (..., V)."""
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(f"{p_name} and {q_name} must share a vocabulary, got sizes {p.shape[-1]} and {q.shape[-1]}")


def check_same_shape(p: np.ndarray, q: np.ndarray, p_name: str = "p", q_name: str = "q") -> None:
    """Two distributions compared entry by entry (residual, acceptance rate, TV): one shape."""
    if p.shape != q.shape:
        raise ValueError(f"{p_name} and {q_name} must have the same shape, got {p.shape} and {q.shape}")


def check_finite_logits(logits: np.ndarray, whose: str = "the model's") -> np.ndarray:
    """Logits ((n, V) float64) refused if they hold NaN or +inf (a model with non-finite weights
    or activations would otherwise decode token 0 forever: the argmax of NaN); -inf is a masked
    token. One sum per forward, a few microseconds."""
    if not np.isfinite(logits.sum()) and (np.isnan(logits).any() or np.isposinf(logits).any()):
        raise ValueError(f"{whose} logits hold NaN or inf (non-finite weights or inputs); "
                         "models.load refuses such checkpoints -- rebuild or reload the model")
    return logits


def check_head_fits(width: object, vocab: object, target_width: int, target_vocab: int, name: str) -> None:
    """A head built in memory must read its target's width and vocabulary (``models.load_head``
    checks a saved head's metadata; drafters check any head they are handed)."""
    if width != target_width or vocab != target_vocab:
        raise ValueError(f"{name} must be built for this target: width {width} and vocabulary {vocab}, "
                         f"this target has width {target_width} and vocabulary {target_vocab}")
