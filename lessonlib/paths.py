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
    """The outputs folder, read from the environment at call time (tests move it)."""
    return pathlib.Path(os.environ.get("LESSONLIB_OUTPUTS", ROOT / "outputs"))


def benchmarks() -> pathlib.Path:
    return outputs() / "benchmarks"
