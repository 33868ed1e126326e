"""Where lessonlib reads and writes: the one place that knows the repository's layout.

``ASSETS`` holds the shipped tokenizer and checkpoints. ``outputs()`` is where benchmarks,
figures and the skill file go; ``LESSONLIB_OUTPUTS`` moves it (the test suite points it at
a temporary folder so that running the tests leaves ``git status`` unchanged). The exercise
notebooks call ``use_student_outputs()`` first, so a student's run writes under
``exercises/my-outputs/`` (ignored by git) and never over the course's tracked ``outputs/``;
readers of a benchmark report fall back to the shipped one (``bench.record.read``).
"""
from __future__ import annotations

import os
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent
ROOT = PACKAGE.parent
ASSETS = PACKAGE / "assets"
STUDENT_OUTPUTS = ROOT / "exercises" / "my-outputs"  # in .gitignore


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


def use_student_outputs() -> pathlib.Path:
    """Send this process's writes to ``STUDENT_OUTPUTS`` unless ``LESSONLIB_OUTPUTS`` already
    names a folder (the test suite's temporary one, or the student's own choice); returns the
    outputs folder now in use."""
    if os.environ.get("LESSONLIB_OUTPUTS") is None:
        os.environ["LESSONLIB_OUTPUTS"] = str(STUDENT_OUTPUTS)
    return outputs()


def benchmarks() -> pathlib.Path:
    return outputs() / "benchmarks"


def screenshots() -> pathlib.Path:
    """Where the browser test saves its screenshots: ``LESSONLIB_SCREENSHOTS`` when set (the
    regeneration points it at the repository's ``outputs/screenshots`` while every other write
    of the test run stays in its temporary outputs), else ``outputs()/screenshots``."""
    text = os.environ.get("LESSONLIB_SCREENSHOTS")
    if text is None:
        return outputs() / "screenshots"
    if not text.strip():
        raise ValueError("environment variable LESSONLIB_SCREENSHOTS is empty: set it to a folder or unset it")
    return pathlib.Path(text)
