"""Reading a student's numbers whatever their type, and the tolerance their precision allows.

A student may return a Python number, a list, a numpy array or scalar, or a torch tensor, in
float64, float32, float16 or bfloat16 (or a list of such scalars). ``to_float64`` turns any of
them into a float64 array and names the lowest precision it saw; anything else (a string, a
dict, a ragged list, complex numbers) raises ``NotNumbers`` with what came back, so the check can
show a ✗ that names what was expected instead of a traceback.

A lower precision is not a wrong answer: ``LOW_PRECISION`` is the relative tolerance each dtype's
rounding needs. Every comparison records the loosest tolerance it applied (``applied``), so a ✓
line prints the tolerance that was actually used (``phrase``), not only the one it aims at.
"""
from __future__ import annotations

import numpy as np

from lessonlib.course.messages import say

# relative tolerance for answers computed in a lower precision (2^-23, 2^-10, 2^-7 machine epsilons,
# with room for a few roundings): a float32 answer is not a wrong answer
LOW_PRECISION = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}
RANK = {"bfloat16": 0, "float16": 1, "float32": 2}  # lower: coarser

# the loosest tolerance applied since the last reset (framework.run_check resets it; rejects keeps it)
APPLIED: dict = {"dtype": None, "rtol": 0.0}


class NotNumbers(TypeError):
    """The value is not a number or an array of numbers; ``str()`` says what it is."""


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def dtype_name(value) -> str:
    """'float32', 'bfloat16', 'int64' … for a numpy or torch value ('' for Python numbers)."""
    return str(getattr(value, "dtype", "")).rsplit(".", 1)[-1]


def coarser(a: str | None, b: str | None) -> str | None:
    """The lower of two precisions (None and float64 rank above every low precision)."""
    ranked = [d for d in (a, b) if d in RANK]
    return min(ranked, key=RANK.__getitem__) if ranked else None


def to_float64(value) -> tuple[np.ndarray, str | None]:
    """(float64 array, the lowest float precision seen: 'float32' / 'float16' / 'bfloat16' or None)."""
    if value is None or isinstance(value, (str, bytes, dict, set)):
        raise NotNumbers(type(value).__name__)
    if _is_tensor(value):
        tensor = value.detach().cpu()
        if tensor.is_complex():
            raise NotNumbers(say("a complex tensor ({dtype})", dtype=dtype_name(tensor)))
        name = dtype_name(tensor)
        return tensor.double().numpy(), name if name in RANK else None  # bfloat16 has no numpy dtype
    if isinstance(value, (list, tuple)):
        parts = [to_float64(v) for v in value]
        low = None
        for _arr, name in parts:
            low = coarser(low, name)
        try:
            return np.array([arr for arr, _name in parts], dtype=np.float64), low
        except ValueError:
            raise NotNumbers(say("a ragged list (rows of different lengths)")) from None
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        raise NotNumbers(type(value).__name__) from None
    if arr.dtype.kind in "biuf":
        name = dtype_name(arr)
        return arr.astype(np.float64), name if name in RANK else None
    if arr.dtype == object and arr.ndim > 0:  # e.g. an array of tensors
        return to_float64(arr.tolist())
    if arr.dtype.kind == "c":
        raise NotNumbers(say("complex numbers ({dtype})", dtype=dtype_name(arr)))
    raise NotNumbers(type(value).__name__)


def ndim(value) -> int | None:
    """The number of axes of an array-like (None when it is not one: a string, a dict)."""
    if isinstance(value, (str, bytes, dict)):
        return None
    try:
        return int(np.ndim(value))
    except (TypeError, ValueError, RuntimeError):  # np.ndim reads some values through np.asarray
        return int(getattr(value, "ndim", 0))


def rounded_dtype(value) -> str | None:
    """The dtype a ``Rounded`` number remembers (None for any other value)."""
    return value.dtype if isinstance(value, Rounded) else None


def low_precision(value) -> float:
    """The relative tolerance ``value``'s float dtype allows (0 for float64, integers and Python numbers)."""
    name = dtype_name(value)
    return LOW_PRECISION.get(name, 0.0)


def record(dtype: str | None, rtol: float) -> float:
    """Note that a comparison applied ``rtol`` (at least the one ``dtype`` needs); returns the rtol used."""
    rtol = max(rtol, LOW_PRECISION.get(dtype or "", 0.0))
    if dtype in RANK and rtol > APPLIED["rtol"]:
        APPLIED.update(dtype=dtype, rtol=rtol)
    return rtol


def reset() -> dict:
    """Forget what was applied; returns the state before (to put back with ``APPLIED.update``)."""
    before = dict(APPLIED)
    APPLIED.update(dtype=None, rtol=0.0)
    return before


def phrase(stated: str) -> str:
    """The tolerance a ✓ line states: ``stated`` (already in the student's language), or, when an
    answer in a lower precision was judged more loosely, the looser tolerance and why."""
    if APPLIED["dtype"] is None:
        return stated
    return say("{rtol:g} relative (the precision of your {dtype} values)", rtol=APPLIED["rtol"],
               dtype=APPLIED["dtype"])


class Rounded(float):
    """A number read from a lower-precision answer: a float that remembers its dtype, so that a later
    comparison allows that precision (``low_precision`` reads ``.dtype``)."""

    dtype: str

    def __new__(cls, value: float, dtype: str) -> Rounded:
        number = super().__new__(cls, value)
        number.dtype = dtype
        return number
