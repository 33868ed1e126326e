"""No English prose in what the Persian notebooks show, outside a stated list.

Every stored output a Persian notebook shows (printed lines and displayed Markdown; fenced blocks
are a model's reply, kept verbatim on purpose) is scanned for runs of three English words
(``test_messages.english_runs``, which skips code, values and the gallery's English bug names). A
cell may show English only when it is on ``STAYS_ENGLISH`` with its reason; the list is exact (an
entry whose cell no longer shows English fails too), so it only shrinks.
"""
import json

import pytest

from lessonlib import paths
from lessonlib.course.rtl import strip_isolates
from tests.course.test_messages import english_runs

MODEL_TEXT = "a model's own text (a sample or a reply), shown as it wrote it"
SOURCE = "source code shown as source (a docstring is code)"
NAMES = "the settings' names (chain draft-kl K=3, draft model (draft-kl)) as the benchmarks and the record name them"
STAYS_ENGLISH = {
    ("notebooks/fa/00_start_here.ipynb", "llm-00-demo"): "the request sent to the model, as sent",
    ("solutions/fa/01_exact_rule.ipynb", "cell-25"): SOURCE,
    ("solutions/fa/01_exact_rule.ipynb", "gallery-01-source"): SOURCE,
    ("solutions/fa/01_exact_rule.ipynb", "gallery-01-check"): "a detector's names for its tests: the reference's here, "
                                                               "the student's own in the exercise",
    ("solutions/fa/01_exact_rule.ipynb", "llm-your-rule-run"): MODEL_TEXT,
    ("solutions/fa/03_distill_draft.ipynb", "83271554"): MODEL_TEXT,
    ("solutions/fa/03_distill_draft.ipynb", "edbc9fb6"): "--scale gpu: a command-line flag and its value, as typed",
    ("solutions/fa/04_eagle_tree.ipynb", "28abed60"): MODEL_TEXT,
    ("solutions/fa/04_eagle_tree.ipynb", "5c8ea68e"): MODEL_TEXT,
    ("solutions/fa/04_eagle_tree.ipynb", "ebe9d5b6"): NAMES,
    ("solutions/fa/04_eagle_tree.ipynb", "babb9d11"): NAMES,
    ("solutions/fa/04_eagle_tree.ipynb", "llm-draft-model-rows"): NAMES,  # "draft model chain K=1": the real LLM's
    ("solutions/fa/05_high_temperature.ipynb", "d6bf7ffa"): MODEL_TEXT,
    ("solutions/fa/05_high_temperature.ipynb", "419cb476"): "the tuning document (outputs/skill-speculative-tuning.md) "
                                                            "is written in English; the cell prints part of it",
}
PERSIAN = sorted(p.relative_to(paths.ROOT).as_posix()
                 for folder in ("notebooks/fa", "solutions/fa") for p in (paths.ROOT / folder).glob("*.ipynb"))


def shown_english(cell: dict) -> list[str]:
    """The lines of ``cell``'s stdout and displayed Markdown with English prose, fenced blocks apart."""
    found = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            text = "".join(output["text"])
        else:
            text = "".join(output.get("data", {}).get("text/markdown", ""))
        fenced = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and english_runs(strip_isolates(line)):
                found.append(line)
    return found


def english_cells(path: str) -> dict[str, list[str]]:
    cells = json.loads((paths.ROOT / path).read_text(encoding="utf-8"))["cells"]
    return {cell.get("id"): found for cell in cells if cell["cell_type"] == "code" and (found := shown_english(cell))}


@pytest.mark.parametrize("path", PERSIAN)
def test_a_persian_notebook_shows_english_only_where_the_list_says_why(path):
    found = english_cells(path)
    unlisted = {cell: lines[:2] for cell, lines in found.items() if (path, cell) not in STAYS_ENGLISH}
    assert not unlisted, f"{path}: English prose in these cells' outputs: {unlisted}"
    gone = sorted(cell for (where, cell) in STAYS_ENGLISH if where == path and cell not in found)
    assert not gone, f"{path}: listed as showing English but no longer do (remove them from STAYS_ENGLISH): {gone}"


def test_every_listed_notebook_exists_and_the_scan_sees_english():
    assert {where for where, _ in STAYS_ENGLISH} <= set(PERSIAN) and len(PERSIAN) == 6
    # negative control: the English notebook's displayed findings are English prose the scan catches
    english = json.loads((paths.ROOT / "solutions/03_distill_draft.ipynb").read_text(encoding="utf-8"))["cells"]
    assert sum(bool(shown_english(cell)) for cell in english) >= 5
    fenced = {"outputs": [{"output_type": "stream", "name": "stdout",
                           "text": "```\nthis is what the model wrote\n```\nand this is what the course says\n"}]}
    assert shown_english(fenced) == ["and this is what the course says"]


# --- displayed Markdown: one translation, live and stored ------------------------------------

HELDOUT = [{"draft": name, "corpus": corpus, "alpha_T1": 0.5 + i / 100, "greedy_T0": 0.4, "bits_per_byte": 1.5}
           for i, name in enumerate(["target (itself)", "random init", "draft-kl (shipped)", "draft-ce (shipped)",
                                     "your draft (fkl, 12 steps)", "unigram", "bigram", "bigram, code only"])
           for corpus in ("code", "prose")]


def _both(make):
    """(English, Persian) of what ``make()`` returns, the Persian made live with the language set."""
    from lessonlib.course import messages

    english = make()
    messages.use("fa")
    try:
        return english, make()
    finally:
        messages.use("en")


def test_a_displayed_markdown_reads_the_same_live_and_translated_from_the_stored_english():
    from lessonlib.course import outputs
    from lessonlib.course.reports import distill_draft as report

    result = {(r["draft"], r["corpus"]): r for r in HELDOUT}
    here, there = {"code": 1.1, "prose": 1.6}, {"code": 0.8, "prose": 1.5}
    for make in (lambda: report.heldout_markdown(HELDOUT, 2048, here, there),
                 lambda: report.findings_markdown(result, "your draft (fkl, 12 steps)", 12, 2048,
                                                  {0.0: 0.63, 1.0: 0.54}, 5, 5, "tvd")):
        english, persian = _both(make)
        assert english == outputs.markdown(english, "en") and not english.startswith("<div")
        assert persian == outputs.markdown(english, "fa"), "the build would store another text than a re-run shows"
        assert persian.startswith('<div dir="rtl" lang="fa">')
        assert english_runs(persian) == [] and english_runs(english)  # negative control: the English has prose
    table = report.heldout_markdown(HELDOUT, 2048, {"code": 1.1}, {"code": 0.8})
    persian = outputs.markdown(table, "fa")
    assert "| مدل |" in persian and "| مقداردهی اولیهٔ تصادفی |" in persian


def test_a_table_cell_without_a_template_stays_as_it_is():
    from lessonlib.course import outputs

    md = "| model | a column nobody translated |\n|---|---|\n| draft-kl (shipped) | 0.5 |"
    fa = outputs.markdown(md, "fa")
    assert "| مدل | a column nobody translated |" in fa and "| draft-kl (همراه دوره) | 0.5 |" in fa
    assert english_runs(fa) == ["column nobody translated"]  # the scan sees what was left


def test_show_table_prints_aligned_text_outside_a_notebook_and_refuses_ragged_rows(capsys):
    from lessonlib.course import reports

    reports.show_table(["engine", "step (ms)"], [["native", "13.2"], ["readable f32", "54.7"]])
    assert capsys.readouterr().out.splitlines() == ["engine        step (ms)", "native             13.2",
                                                    "readable f32       54.7"]
    with pytest.raises(ValueError, match="rows must have 2 cells each, like header"):
        reports.table_text(["a", "b"], [[1]])


def test_readme_fa_states_what_stays_english():
    """README.fa.md lists what stays English, each kind of exception the scan allows and the figures."""
    text = (paths.ROOT / "README.fa.md").read_text(encoding="utf-8")
    section = text.split("### آنچه انگلیسی می‌ماند", 1)[1].split("\n### ", 1)[0]
    for named in ("`--scale gpu`", "`chain draft-kl K=3`", "docstring", "detector",
                  "`outputs/skill-speculative-tuning.md`", "matplotlib", "`docs/`", "test_persian_outputs.py"):
        assert named in section, named
