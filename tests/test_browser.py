"""The course as a student sees it: JupyterLab in headless Chromium, end to end.

nbval proves the kernels run; this proves the browser shows the result: every notebook with a
widget runs without an error output, every widget renders (no "Error displaying widget"), sliders
move and their figure or text follows, figures arrive as images, every other notebook shows its
stored outputs (figures as images, no error), and the exercise notebook says
"not implemented yet" instead of crashing. The Persian edition renders right to left with its
code and formulas left to right, and every printed Persian line in reading order: the Persian
lesson and exercises 01 and 05 run live, every Persian solution is shown with its stored outputs
(tests/browser_rtl.py, which waits for markdown cells that render late). One JupyterLab server
(on a throwaway copy of the notebooks, so stored outputs never change) and one page serve all
notebooks, in order.

Select with `-m browser`, skip with `-m 'not browser'`. Without Chromium the test is skipped,
except under CI=true, where a missing browser is a failure. Screenshots of passing runs are
written to <outputs>/screenshots/<notebook>.png, <outputs> = lessonlib.paths.outputs(): a
temporary folder under the test suite (tests/conftest.py), so the shipped screenshots change
only when asked to (LESSONLIB_OUTPUTS=outputs python -m pytest -m browser).
"""

import json
import os
import re
from pathlib import Path

import browser_rtl
import browser_support as bs
import nbformat
import pytest

from lessonlib import paths
from lessonlib.course.rtl import isolate_line

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.relative_to(REPO).as_posix()
                   for folder in ("notebooks", "solutions") for p in (REPO / folder).glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def stored_outputs(path: str) -> list[dict]:
    notebook = json.loads((REPO / path).read_text())
    return [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


# A widget needs a live kernel, so every notebook with a widget (sliders, tqdm bars) runs here.
# A notebook without one has nothing for the browser to add beyond showing its outputs: it is
# opened with its stored outputs (nbval executes it), which saves a minute and a half of the run.
LESSONS = [p for p in NOTEBOOKS if any(WIDGET_VIEW in o.get("data", {}) for o in stored_outputs(p))]
STORED = [p for p in NOTEBOOKS if p not in LESSONS]
EXERCISES = [p for p in ["exercises/01_exact_rule.ipynb"] if (REPO / p).exists()]
# The Persian edition (python -m lessonlib.course.translate build); its code is the English code.
# The lesson and one exercise run live; every Persian solution is opened with its stored outputs
# (its code cells are the English solution's, which the tests above run).
PERSIAN = [p for p in ["notebooks/fa/00_start_here.ipynb"] if (REPO / p).exists()]
PERSIAN_SOLUTIONS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "solutions" / "fa").glob("*.ipynb"))
PERSIAN_EXERCISES = [p for p in ["exercises/fa/01_exact_rule.ipynb", "exercises/fa/05_high_temperature.ipynb"]
                     if (REPO / p).exists()]
CHECK_CALL = re.compile(r"checks\.exercise_\w+\(")
NOT_IMPLEMENTED = "not implemented yet"
# Text a broken widget or a raised exception leaves in the page, including inside Output widgets.
BROKEN = ("Error displaying widget", "Loading widget...", "Traceback (most recent call last)")

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab():
    reason = bs.missing_requirement()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser test cannot run under CI=true: {reason}")
        pytest.skip(reason)
    with bs.jupyter_lab(REPO) as server:
        yield server


@pytest.fixture(scope="module")
def page(lab):
    with bs.chromium_browser() as browser:
        page = bs.open_lab(browser, lab)
        yield page
        page.close()


def _where(cell: dict) -> str:
    return f"cell {cell['index']} ({cell['source'][:60]!r})"


def check_run(page, report: dict, path: str) -> None:
    """The notebook opened in its own kernel, ran to the end, and shows no error anywhere."""
    opened, ran, cells = report["opened"], report["ran"], report["cells"]
    assert opened["wanted"] and opened["kernel"] == opened["wanted"], \
        (f"{path} opened in kernel {opened['kernel']!r}, its metadata asks for "
         f"{opened['wanted']!r}; dialogs: {report['dialogs']}")
    assert not report["dialogs"], f"{path}: unexpected dialog {report['dialogs']}"
    errors = [f"{_where(c)}: {e}" for c in cells for e in c["errors"]]
    assert not errors, f"{path}: error outputs:\n" + "\n".join(errors)
    assert ran["result"] == "done", f"{path}: run all {ran['result']} (kernel {ran['status']})"
    unrun = [_where(c) for c in cells if c["type"] == "code" and c["source"].strip()
             and c["executionCount"] is None]
    assert not unrun, f"{path}: cells never executed: {unrun}"
    broken = [f"{_where(c)}: {b!r}" for c in cells for b in BROKEN if b in c["text"]]
    assert not broken, f"{path}: broken outputs:\n" + "\n".join(broken)


def check_figures(page, report: dict, path: str) -> None:
    """Every image/png output is an <img> that loaded (a data URL that decodes to pixels)."""
    for c in report["cells"]:
        where = f"{path} {_where(c)}"
        assert c["images"] >= c["modelImages"], \
            f"{where}: {c['modelImages']} figures in the model, {c['images']} in the page"
        assert c["brokenImages"] == 0, f"{where}: {c['brokenImages']} images did not load"


def check_widgets(page, report: dict, path: str) -> None:
    """Every widget cell rendered controls; each cell's first slider drives what it shows, and
    going back to a value shows exactly what that value showed before."""
    widget_cells = [c for c in report["cells"] if c["widgetOutputs"]]
    for c in widget_cells:
        assert c["widgetViews"], f"{path} {_where(c)}: widget output but no widget rendered"
        progress_only = c["progress"] and not c["controls"]  # a tqdm.auto bar is a widget too
        assert progress_only or c["controls"], f"{path} {_where(c)}: widget cell without controls"
    for c in (c for c in widget_cells if c["sliders"]):
        (r0, d0), (r1, d1), (r2, d2), (r3, d3) = bs.wiggle_slider(page, c["index"])
        where = f"{path} {_where(c)}"
        assert r0 != r1 and r2 == r0 and r3 == r1, f"{where}: slider readouts {[r0, r1, r2, r3]}"
        broken = [b for b in BROKEN for d in (d1, d2, d3) if b in d]
        assert not broken, f"{where}: after moving the slider: {broken}\n{(d1 + d2 + d3)[-2000:]}"
        assert d1 != d0, f"{where}: slider {r0} -> {r1} changed no figure or text"
        # Same value, same output: catches half-drawn figures, stale or stacked outputs.
        differ = [f"at {r}: first\n{a[-400:]}\nthen\n{b[-400:]}"
                  for r, a, b in ((r0, d0, d2), (r1, d1, d3)) if a != b]
        assert not differ, \
            f"{where}: the output at one slider value differs between visits:\n" + "\n".join(differ)


def check_stored(page, report: dict, path: str) -> None:
    """A notebook opened with its stored outputs shows them: figures as images, no error, nothing broken."""
    assert not report["dialogs"], f"{path}: unexpected dialog {report['dialogs']}"
    stored = stored_outputs(path)
    assert any("image/png" in o.get("data", {}) for o in stored), f"{path}: no stored figure to show"
    assert not [o for o in stored if o["output_type"] == "error"], f"{path}: stored error outputs"
    shown = sum(c["images"] for c in report["cells"])
    assert shown >= sum("image/png" in o.get("data", {}) for o in stored), f"{path}: {shown} images shown"
    broken = [f"{_where(c)}: {b!r}" for c in report["cells"] for b in BROKEN if b in c["text"]]
    assert not broken, f"{path}: broken outputs:\n" + "\n".join(broken)


def check_not_implemented(page, report: dict, path: str) -> None:
    """Every check cell of an unsolved exercise says "not implemented yet" (and raised nothing)."""
    checks = [c for c in report["cells"] if c["type"] == "code" and CHECK_CALL.search(c["source"])]
    assert checks, f"{path}: no cell calls checks.exercise_*(...)"
    silent = [_where(c) for c in checks if NOT_IMPLEMENTED not in c["text"]]
    assert not silent, f"{path}: checks that did not say {NOT_IMPLEMENTED!r}: {silent}"


def check_rtl(page, report: dict, path: str) -> None:
    """Translated markdown renders right to left, its inline code and formulas and every code
    editor left to right, judged from computed styles and from where the glyphs landed."""
    cells = browser_rtl.bidi_report(page)
    markdown = [c for c in cells if c["type"] == "markdown"]
    assert markdown, f"{path}: no translated (right-to-left) markdown cell"
    for c in markdown:
        where = f"{path} cell {c['index']}"
        assert c["rendered"] and c["rtlBlocks"] and c["blocks"], \
            f"{where}: RTL markdown not rendered within {bs.RENDER_TIMEOUT_S} s: {c}"
        assert set(c["blocks"]) == {"rtl"}, f"{where}: text blocks with direction {c['blocks']}"
        assert not c["pendingMath"], f"{where}: formulas were never typeset"
        assert c["prose"] is None or c["prose"]["rtlOrder"], f"{where}: Persian laid out left to right: {c['prose']}"
        assert all(x["dir"] == "ltr" for x in c["code"] + c["math"]) and "rtl" not in c["pre"], \
            f"{where}: code or formula right to left: {c['code']} {c['math']} {c['pre']}"
        assert all(x["ltrOrder"] is not False for x in c["code"] + c["math"]), \
            f"{where}: code or formula glyphs in the wrong order: {c['code']} {c['math']}"
    assert any(c["prose"] for c in markdown), f"{path}: no Persian paragraph to measure"
    editors = [c["editor"] for c in cells if c["type"] == "code"]
    assert editors and set(editors) == {"ltr"}, f"{path}: code editors with direction {set(editors)}"


# A printed Persian check line with the three values the Persian review found drawn out of order.
ORDER_SAMPLE = "✓ تمرین 1a: رواداری 1.92252e-12، مقدار [0. 1. 0.5]"
ORDER_RUNS = ["1a", "1.92252e-12", "[0. 1. 0.5]"]


def check_output_order(page, report: dict, path: str) -> None:
    """Every isolated run and Persian line printed in the notebook's outputs is drawn in reading
    order; the sample line too, as ``isolate_line`` lays it out, and (the negative control, in the
    same page and font) not without the isolates."""
    got = browser_rtl.output_order_report(page, [("raw", ORDER_SAMPLE, ORDER_RUNS),
                                                 ("isolated", isolate_line(ORDER_SAMPLE), ORDER_RUNS)])
    isolated, raw = got["samples"]["isolated"], got["samples"]["raw"]
    assert all(r["ordered"] for r in isolated), f"{path}: the isolated sample line is drawn out of order: {isolated}"
    assert [r["ordered"] for r in raw][:2] == [False, False], \
        f"{path}: negative control: without isolates '1a' and '1.92252e-12' should break, measured {raw}"
    runs = [f for f in got["found"] if f["kind"] == "run"]
    lines = [f for f in got["found"] if f["kind"] == "line"]
    assert runs and lines, f"{path}: no isolated Persian output line to measure"
    bad = [f for f in got["found"] if f["ordered"] is False]
    assert not bad, f"{path}: printed text drawn out of reading order: {bad[:5]}"


def _screenshot_focus(cells: list[dict]) -> int | None:
    """The cell a screenshot scrolls to: the first check saying "not implemented yet", else the
    first slider, else the first figure, else None (the top)."""
    firsts = ([c for c in cells if NOT_IMPLEMENTED in c["text"]],
              [c for c in cells if c["sliders"]], [c for c in cells if c["images"]])
    return next((found[0]["index"] for found in firsts if found), None)


def drive(page, lab, path: str, name: str, tmp_path: Path, checks, focus=_screenshot_focus, run: bool = True) -> None:
    """Run `path` in the page, apply each check(page, report, path), screenshot (scrolled to
    the cell focus(cells) names), always close.

    A passing run's screenshot goes to paths.screenshots()/<name>.png, a failing one's to tmp_path.
    """
    report, passed = None, False
    try:
        report = bs.run_notebook(page, path, run=run)
        for check in checks:
            check(page, report, path)
        passed = True
    finally:
        try:
            if report is not None:
                focus_index = focus(report["cells"])
                shot = (paths.screenshots() if passed else tmp_path) / f"{name}.png"
                bs.screenshot(page, focus_index, shot)
                if not passed:
                    print(f"screenshot of the failed run: {shot}\nserver log:\n{lab.log_tail()}")
        finally:
            bs.close_notebook(page)


@pytest.mark.parametrize("path", LESSONS)
def test_lesson_notebook_in_browser(lab, page, path, tmp_path):
    drive(page, lab, path, Path(path).stem, tmp_path, [check_run, check_figures, check_widgets])


@pytest.mark.parametrize("path", STORED)
def test_stored_notebook_renders_in_browser(lab, page, path, tmp_path):
    drive(page, lab, path, Path(path).stem, tmp_path, [check_figures, check_stored], run=False)


def test_every_notebook_is_opened_in_the_browser():
    assert sorted(LESSONS + STORED) == NOTEBOOKS and "notebooks/00_start_here.ipynb" in LESSONS
    assert len(LESSONS) >= 4  # the lesson and the solutions with sliders or progress bars run live


@pytest.mark.parametrize("path", EXERCISES)
def test_exercise_notebook_in_browser(lab, page, path, tmp_path):
    drive(page, lab, path, Path(path).stem + "-exercise", tmp_path,
          [check_run, check_figures, check_not_implemented, check_widgets])


@pytest.mark.parametrize("path", PERSIAN)
def test_persian_lesson_runs_right_to_left_in_browser(lab, page, path, tmp_path):
    # the screenshot starts at the first code cell: left-to-right code, then Persian text below it
    drive(page, lab, path, Path(path).stem + "-fa", tmp_path, [check_run, check_figures, check_rtl, check_output_order],
          focus=lambda cells: next((c["index"] for c in cells if c["type"] == "code"), None))


@pytest.mark.parametrize("path", PERSIAN_SOLUTIONS)
def test_persian_solution_renders_right_to_left_in_browser(lab, page, path, tmp_path):
    drive(page, lab, path, Path(path).stem + "-fa", tmp_path, [check_figures, check_rtl, check_output_order], run=False)


@pytest.mark.parametrize("path", PERSIAN_EXERCISES)
def test_persian_exercise_runs_right_to_left_in_browser(lab, page, path, tmp_path):
    drive(page, lab, path, Path(path).stem + "-exercise-fa", tmp_path,
          [check_run, check_figures, check_rtl, check_output_order])


# A wrong answer (a catalogued mistake) to the first task of each Persian exercise the browser runs: the
# check's failure is what a stuck student reads most, and it prints arrays, tolerances and hints inside
# Persian lines. (path, the stub's first line, the wrong body, what its failure must show)
WRONG = [("exercises/fa/01_exact_rule.ipynb", "def residual",
          "    d = np.maximum(q - p, 0)  # a wrong answer: q - p instead of p - q\n    return d / d.sum()", "1a"),
         ("exercises/fa/05_high_temperature.ipynb", "def breakeven_temperature",
          "    below = np.nonzero(np.asarray(alphas) <= c)[0]  # a wrong answer: no interpolation to the crossing\n"
          "    return np.asarray(temperatures)[below[0]] if len(below) else float('inf')", "5a")]


@pytest.mark.parametrize("path, stub, wrong, task", WRONG, ids=[w[3] for w in WRONG])
def test_persian_exercise_wrong_answer_reads_right_to_left(lab, page, tmp_path, path, stub, wrong, task):
    """A Persian exercise with a wrong answer, run up to that task's check: the failure's lines
    (message, expected and given values, hint) drawn in reading order. The notebook is a copy
    beside the exercise in the lab's staged copy of the course (the checkout is not touched)."""
    nb = nbformat.read(REPO / path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.startswith(stub))
    body = nb.cells[at].source
    nb.cells[at].source = body[:body.index("    raise NotImplementedError")] + wrong
    nb.cells = nb.cells[:at + 2]  # up to the task's check
    name = f"exercises/fa/wrong_answer_{task}.ipynb"
    nbformat.write(nb, lab.root / name)

    def check_wrong_answer(page, report: dict, where: str) -> None:
        errors = "\n".join(e for c in report["cells"] for e in c["errors"])
        assert task in errors and "✗" in errors, f"{where}: no failing {task} check shown: {errors[:300]}"

    drive(page, lab, name, f"{Path(path).stem}-wrong-answer-fa", tmp_path,
          [check_wrong_answer, check_rtl, check_output_order])


def test_every_persian_notebook_kind_is_checked_right_to_left():
    assert PERSIAN == ["notebooks/fa/00_start_here.ipynb"] and len(PERSIAN_SOLUTIONS) == 5
    assert PERSIAN_EXERCISES == ["exercises/fa/01_exact_rule.ipynb", "exercises/fa/05_high_temperature.ipynb"]


_GOOD = {"index": 1, "type": "markdown", "rendered": True, "rtlBlocks": 1, "blocks": ["rtl"], "pendingMath": False,
         "prose": {"text": "متن", "rtlOrder": True}, "code": [{"text": "k", "dir": "ltr", "ltrOrder": None}],
         "math": [], "pre": []}


@pytest.mark.parametrize("bad, message", [
    ({"index": 1, "type": "markdown", "rendered": False, "pendingRender": True}, "not rendered within"),
    ({**_GOOD, "prose": {"text": "متن", "rtlOrder": False}}, "Persian laid out left to right"),
    ({**_GOOD, "code": [{"text": "x_y", "dir": "ltr", "ltrOrder": False}]}, "glyphs in the wrong order"),
])
def test_negative_control_check_rtl_fails_on_a_bad_report(monkeypatch, bad, message):
    """No browser needed: check_rtl judges a report; a late cell that never rendered, Persian laid
    out left to right and reversed code must each fail, the good report (a one-letter span) pass."""
    code_cell = {"index": 0, "type": "code", "editor": "ltr"}
    monkeypatch.setattr(browser_rtl, "bidi_report", lambda page: [code_cell, _GOOD])
    check_rtl(None, {}, "demo.ipynb")
    monkeypatch.setattr(browser_rtl, "bidi_report", lambda page: [code_cell, bad])
    with pytest.raises(AssertionError, match=message):
        check_rtl(None, {}, "demo.ipynb")


@pytest.mark.parametrize("found, message", [
    ([{"index": 3, "kind": "run", "text": "1a", "ordered": False},
      {"index": 3, "kind": "line", "text": "تمرین", "ordered": True}], "out of reading order"),
    ([], "no isolated Persian output line"),
])
def test_negative_control_check_output_order_fails_on_a_bad_report(monkeypatch, found, message):
    """No browser needed: a printed run drawn out of order, or no line to measure, fails; a sample
    whose raw line is drawn in order fails too (the measurement could not tell the two apart)."""
    samples = {"isolated": [{"text": r, "ordered": True} for r in ORDER_RUNS],
               "raw": [{"text": r, "ordered": False} for r in ORDER_RUNS]}
    good = [{"index": 3, "kind": "run", "text": "1a", "ordered": True},
            {"index": 3, "kind": "line", "text": "تمرین", "ordered": True}]
    monkeypatch.setattr(browser_rtl, "output_order_report", lambda page, s: {"found": good, "samples": samples})
    check_output_order(None, {}, "demo.ipynb")
    monkeypatch.setattr(browser_rtl, "output_order_report", lambda page, s: {"found": found, "samples": samples})
    with pytest.raises(AssertionError, match=message):
        check_output_order(None, {}, "demo.ipynb")
    blind = {**samples, "raw": samples["isolated"]}
    monkeypatch.setattr(browser_rtl, "output_order_report", lambda page, s: {"found": good, "samples": blind})
    with pytest.raises(AssertionError, match="negative control"):
        check_output_order(None, {}, "demo.ipynb")
