"""Per-notebook report modules: the plumbing a notebook's cells call so the cell shows the idea.

One module per notebook (d2l's split): table formatting, the intervals a cell compares, the
rows it picks out of a stored report. The claims themselves stay in the notebook, in the cell
that measured them; a module's printed headers pass through ``messages.say`` like the cells'.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessonlib.decoding import measures


def cell(summary: Mapping[str, Any], digits: int = 2, unit: str = "") -> str:
    """'1.52× [1.41, 1.60]': a summary's median and quartiles (``measures.fmt_spread``) without its
    count, which the report modules' tables and lines give once, beside the spread."""
    return measures.fmt_spread(summary, digits, unit, count=False)
