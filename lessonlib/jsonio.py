"""The one ``default=`` hook lessonlib gives ``json.dumps`` (benchmarks, the skill file, the CLI).

Standard library only, like ``paths`` and ``threads``, so every layer may use it.
"""
from __future__ import annotations


def jsonable(x):
    """A JSON value for what ``json`` cannot write itself: numpy scalars and arrays (and torch
    tensors) through their ``tolist()``, any other real number as a float; TypeError otherwise."""
    if hasattr(x, "tolist"):  # numpy scalars (np.bool_ -> bool, np.int64 -> int) and arrays
        return x.tolist()
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"not JSON serialisable: {type(x)}") from None
