"""The one ``default=`` hook lessonlib gives ``json.dumps`` (benchmarks, the skill file, the CLI),
the one atomic file write (``write_atomic``) and the one reader of the JSON files the course writes.

Standard library only, like ``paths`` and ``threads``, so every layer may use it.
"""
from __future__ import annotations

import json
import os
import pathlib
import tempfile


def jsonable(x):
    """A JSON value for what ``json`` cannot write itself: numpy scalars and arrays (and torch
    tensors) through their ``tolist()``, any other real number as a float; TypeError otherwise."""
    if hasattr(x, "tolist"):  # numpy scalars (np.bool_ -> bool, np.int64 -> int) and arrays
        return x.tolist()
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"not JSON serialisable: {type(x)}") from None


def write_atomic(path, data: str | bytes, encoding: str = "utf-8") -> pathlib.Path:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never half
    of one: a temporary file in the same folder, flushed, then ``os.replace``. Returns the path."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give the name of the file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path, rebuild: str, kind: type = dict):
    """A JSON file the course wrote: its value, which must be a ``kind``; a missing, truncated or
    non-JSON file raises FileNotFoundError / ValueError naming the file and ``rebuild`` (the
    command that writes it again)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; write it with: {rebuild}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is corrupt ({err}); rebuild it with: {rebuild}") from None
    if not isinstance(value, kind):
        raise ValueError(f"{path} must hold a JSON {'object' if kind is dict else kind.__name__}, "
                         f"got {type(value).__name__}; rebuild it with: {rebuild}")
    return value
