"""Where lessonlib reads and writes: the one place that knows the repository's layout.

``ASSETS`` holds the shipped tokenizer and checkpoints. ``OUTPUTS`` is where benchmarks,
figures and the skill file go; ``LESSONLIB_OUTPUTS`` moves it (the test suite points it at
a temporary folder so that running the tests leaves ``git status`` unchanged).
"""
from __future__ import annotations

import os
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent
ROOT = PACKAGE.parent
ASSETS = PACKAGE / "assets"


def outputs() -> pathlib.Path:
    """The outputs folder, read from the environment at call time (tests move it). An empty
    ``LESSONLIB_OUTPUTS`` is an error (it would mean the current folder), not a default."""
    text = os.environ.get("LESSONLIB_OUTPUTS")
    if text is None:
        return ROOT / "outputs"
    if not text.strip():
        raise ValueError("environment variable LESSONLIB_OUTPUTS is empty: set it to a folder "
                         "or unset it (default: the repository's outputs/)")
    path = pathlib.Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"environment variable LESSONLIB_OUTPUTS must name a folder, got the file {text!r}")
    return path


def benchmarks() -> pathlib.Path:
    return outputs() / "benchmarks"
