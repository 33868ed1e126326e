"""Claims that can fail: every stored claim whose condition is a function of its values was swept
across its measured spreads when its notebook ran (``claims.sweep``); none may be fragile.

A fragile claim holds (or fails) at this run's medians but flips when a measured interval is
shifted across its own spread, i.e. on a re-run. The fix is to rewrite the claim so its
threshold and direction leave room for the spread, or to measure longer until the interval
excludes the alternative; a listed claim is never "fixed" by loosening the sweep."""
from __future__ import annotations

import ast

import nbformat
import pytest

from lessonlib import paths
from lessonlib.course import claims

NOTEBOOKS = [paths.ROOT / "notebooks" / "00_start_here.ipynb",
             *sorted((paths.ROOT / "solutions").glob("0*.ipynb"))]
MARK = claims.FRAGILE.split("{")[0].strip()  # "(fragile: the verdict flips ... at"


def _stored_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _claim_calls(source: str) -> list[ast.Call]:
    try:
        tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id == "claim" and len(n.args) >= 2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_stored_claim_is_fragile(path):
    nb = nbformat.read(path, as_version=4)
    fragile = [line for cell in nb.cells if cell.cell_type == "code"
               for line in _stored_text(cell).splitlines() if MARK in line]
    assert not fragile, f"{path.name}: claims whose verdict flips within their measured spread:\n" + "\n".join(fragile)


def test_most_claims_give_their_condition_as_a_function_so_they_are_swept():
    calls = [call for path in NOTEBOOKS for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" for call in _claim_calls(cell.source)]
    swept = [call for call in calls if isinstance(call.args[1], ast.Lambda)]
    assert len(calls) > 100  # the notebooks state their findings as claims
    assert len(swept) >= 0.6 * len(calls), f"only {len(swept)} of {len(calls)} claims are swept"


def test_the_mark_is_what_a_fragile_claim_prints():
    c = claims.claim("{s}", lambda s, **_: s.median > 1.1, show=False, s=claims.Interval(1.12, 1.0, 1.3))
    assert MARK in c.text
