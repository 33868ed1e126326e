"""Which run made an artifact: one id per regeneration, stamped into everything the course writes.

``python -m lessonlib.regenerate`` sets ``LESSONLIB_RUN`` for every step it starts (benchmarks,
notebooks, the skill file), so all the artifacts of one regeneration carry the same id and a test
can tell when committed files come from different runs. A process started on its own (a student
running one benchmark) gets an id of its own, made once per process: the UTC time it was first
asked for and the git revision (with ``+dirty`` when the working tree had changes).

Standard library only, like ``paths`` and ``jsonio``, so every layer may use it.
"""
from __future__ import annotations

import datetime
import functools
import os
import re
import subprocess

from lessonlib import paths

ENV = "LESSONLIB_RUN"
PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,79}")  # a run id: one printable word, no spaces


def git_revision(root=paths.ROOT) -> str:
    """The short git revision of ``root`` (+dirty when tracked files changed), or 'unknown'."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


@functools.lru_cache(maxsize=1)
def _own_id() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{git_revision()}"


def run_id() -> str:
    """``LESSONLIB_RUN`` when set (checked: one word of letters, digits and ``_.:+-``), else this
    process's own id."""
    text = os.environ.get(ENV)
    if text is None:
        return _own_id()
    if not PATTERN.fullmatch(text):
        raise ValueError(f"environment variable {ENV} must be one word of letters, digits and _.:+- "
                         f"(at most 80 characters), got {text!r}")
    return text


def stamp() -> dict:
    """What an artifact records about the run that wrote it: {"id", "git_revision", "written"}."""
    now = datetime.datetime.now(datetime.UTC)
    return {"id": run_id(), "git_revision": git_revision(), "written": f"{now:%Y-%m-%dT%H:%M:%SZ}"}


def of(report) -> str | None:
    """The run id an artifact's JSON records (None for a file written before runs were stamped)."""
    run = report.get("run") if isinstance(report, dict) else None
    return run.get("id") if isinstance(run, dict) else None
