"""Per-notebook report modules: the plumbing a notebook's cells call so the cell shows the idea.

One module per notebook (d2l's split): table formatting, the intervals a cell compares, the
rows it picks out of a stored report. The claims themselves stay in the notebook, in the cell
that measured them; a module's printed headers pass through ``messages.say`` like the cells'.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lessonlib.bench.common import markdown_table
from lessonlib.course import outputs
from lessonlib.decoding import measures


def cell(summary: Mapping[str, Any], digits: int = 2, unit: str = "") -> str:
    """'1.52× [1.41, 1.60]': a summary's median and quartiles (``measures.fmt_spread``) without its
    count, which the report modules' tables and lines give once, beside the spread."""
    return measures.fmt_spread(summary, digits, unit, count=False)


def table_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The table as aligned plain text: the first column left-aligned, the others right-aligned."""
    cells = [[str(x) for x in header]] + [[str(x) for x in row] for row in rows]
    if any(len(row) != len(header) for row in cells):
        raise ValueError(f"rows must have {len(header)} cells each, like header")
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     .rstrip() for row in cells)


def show_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Display a table in the reader's language: Markdown with its header cells through the catalogues
    (``outputs.markdown``: right to left in Persian, as the Persian build lays out the stored one),
    the aligned plain text beside it for a viewer that shows only text; printed as that text outside
    a notebook (a test, a script)."""
    from IPython import get_ipython
    from IPython.display import display

    plain = table_text(header, rows)
    if get_ipython() is None:
        print(plain)
        return
    display({"text/markdown": outputs.markdown(markdown_table(header, rows)), "text/plain": plain}, raw=True)
