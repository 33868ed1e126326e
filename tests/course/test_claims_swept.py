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


# Claims that give their verdict as a bool are those whose values a re-run on another machine measures the
# same (no timing, no sampling seed that the machine could change), by kind; every other claim is swept.
# A new claim given as a bool fails ``test_every_claim_not_swept_is_declared`` until it is swept or
# listed here with the kind that makes its values reproducible.
NOT_SWEPT = {
    "exact arithmetic, enumeration or token equality (numpy's seeded synthetic logits included)": (
        "as T rises from {lo:g} to {hi:g}, α rises", "prompt lookup's reply is plain decoding's",
        "at every α of the table the best speedup",
        "your expected_speedup at c = 0 reproduces", "the break-even α rises with K",
        "on {n} (α, c) pairs with α > c", "the linear rule picks the longest chain",
        "each node sits at prefix_len + its depth", "all {n} tokens of the tree decoder"),
    "a statistical test that states its own noise (seeded samples; p-values, z-scores, standard errors)": (
        "the scalar-q residual lands closer", "both rules are exact (TV of the exact laws",
        "the largest |z| over {n} comparisons", "tvd gains over ce by more than 2 standard errors"),
    "teacher-forced α on the shipped weights and the fixed held-out text (no sampling, no timing)": (
        "its greedy agreement at T = 0",
        "both trained drafts are far above the bigram", "(a) the sampled draft's α rises",
        "(b) the greedy draft's α falls", "draft-kl's sampled α is above draft-ce's",
        "the measured τ is above E(α̅, 4)", "for the sampled draft the gap shrinks",
        "at T = 2 one sampled candidate is accepted", "trained to match the target's distribution"),
    "a committed report the notebook reads (its numbers change only when the regeneration re-runs the notebook)": (
        "τ decides the race for the EAGLE chains",),
    "counts over seeded streams (where the policy switched, in tokens; not a timing)": (
        "the policy was off in the T = 2 phase", "it switched back on in the second T = 0 phase"),
}


def test_every_claim_not_swept_is_declared():
    """Each claim given as a bool is of a kind in ``NOT_SWEPT``, and each listed claim still exists
    (a stale entry would let a new boolean claim with the same start pass)."""
    calls = [call for path in NOTEBOOKS for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" for call in _claim_calls(cell.source)]
    sentences = [ast.literal_eval(call.args[0]) for call in calls if not isinstance(call.args[1], ast.Lambda)]
    starts = [start for starts in NOT_SWEPT.values() for start in starts]
    undeclared = [s for s in sentences if not any(s.startswith(start) for start in starts)]
    assert not undeclared, "claims given as a bool whose values a re-run could measure otherwise:\n" + "\n".join(
        undeclared)
    stale = [start for start in starts if sum(s.startswith(start) for s in sentences) != 1]
    assert not stale, f"NOT_SWEPT entries matching no boolean claim, or more than one: {stale}"


def test_the_mark_is_what_a_fragile_claim_prints():
    c = claims.claim("{s}", lambda s, **_: s.median > 1.1, show=False, s=claims.Interval(1.12, 1.0, 1.3))
    assert MARK in c.text
