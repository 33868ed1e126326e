"""Building the Persian notebooks from the English ones and the catalogs (``catalogs``).

``persian_notebook`` copies an English notebook (code cells, ids, tags, outputs) and replaces
each markdown cell that has a current, non-fuzzy translation by the Persian text in a
right-to-left block (``rtl_markdown``), its relative links pointing at the Persian editions
(``relink``). Two things make the notebook speak Persian when it runs, not only when it is read:
a first code cell, tagged ``language`` (``language_cell``), sets the course's language
(``messages.use("fa")``), so checks, hints and claims print in Persian; and the stored printed
output (stdout) of every code cell is translated through the same catalogues
(``outputs.translate_output``), so a stored run reads as a re-run prints. The code cells
themselves are the English ones. ``plan`` maps every Persian notebook, exercises included
(generated from the Persian solutions by ``lessonlib.course.exercises``), to the text it should
hold, and ``build`` writes the ones that changed.
"""
from __future__ import annotations

import copy
import os
import pathlib
import re
import sys

import nbformat

from lessonlib.course import exercises, outputs
from lessonlib.course.catalogs import BUILD, LANG, ROOT, catalog_path, english_notebooks, load_catalog, translation
from lessonlib.course.rtl import RTL_CLOSE, RTL_OPEN, rtl_markdown  # noqa: F401 (re-exported)
from lessonlib.jsonio import write_atomic

FOLDERS = ("notebooks", "solutions", "exercises")

LINK = re.compile(r"""(?P<lead>\]\(\s*<?|\b(?:src|href)\s*=\s*["'])(?P<target>[^)\s"'<>]+)""")
NOTEBOOK = re.compile(r"[0-9][0-9]_[^/]*\.ipynb")
LANGUAGE_TAG = "language"
LANGUAGE_ID = "lessonlib-language"
LANGUAGE_SOURCE = ("# این notebook به فارسی حرف می‌زند: پیام‌ها، راهنماها و نتیجه‌ها به فارسی چاپ می‌شوند\n"
                   "from lessonlib.course import messages\n"
                   f'_ = messages.use("{LANG}")')


def persian_path(english: pathlib.Path, folder: str | None = None) -> pathlib.Path:
    """notebooks/X.ipynb -> notebooks/fa/X.ipynb (or another top folder: exercises/fa/X.ipynb)."""
    parent = english.parent if folder is None else english.parent.parent / folder
    return parent / LANG / english.name


def relink(text: str, english: pathlib.Path, persian: pathlib.Path, root: pathlib.Path) -> str:
    """Rewrite relative links for the Persian notebook's folder; links to a course notebook
    (notebooks/, solutions/, exercises/) point to its Persian edition."""
    def fix(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target, re.I):  # URL, attachment:, anchor, absolute
            return match[0]
        path, hash_, anchor = target.partition("#")
        dest = pathlib.Path(os.path.normpath(english.parent / path))
        if dest.parent.parent == root and dest.parent.name in FOLDERS and NOTEBOOK.fullmatch(dest.name):
            dest = dest.parent / LANG / dest.name
        new = pathlib.Path(os.path.relpath(dest, persian.parent)).as_posix()
        return match["lead"] + new + hash_ + anchor
    return LINK.sub(fix, text)


# --- the notebook speaks Persian when it runs -------------------------------------------------

def language_cell() -> nbformat.NotebookNode:
    """The code cell that sets the course's language, tagged ``language`` (no output)."""
    cell = nbformat.v4.new_code_cell(LANGUAGE_SOURCE, id=LANGUAGE_ID)
    cell.metadata["tags"] = [LANGUAGE_TAG]
    return cell


def is_language_cell(cell: nbformat.NotebookNode) -> bool:
    return LANGUAGE_TAG in cell.get("metadata", {}).get("tags", [])


def with_language_cell(nb: nbformat.NotebookNode, where: str = "notebook") -> nbformat.NotebookNode:
    """``nb`` with the language cell inserted right before its first code cell (at the end when
    it has none), so it runs before anything can print. ValueError if ``nb`` already has one."""
    if any(is_language_cell(c) or c.get("id") == LANGUAGE_ID for c in nb.cells):
        raise ValueError(f"{where} already has a {LANGUAGE_TAG!r} cell (id {LANGUAGE_ID!r}): "
                         "the build inserts it; the English notebook must not have one")
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first, language_cell())
    return nb


def without_language_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without its language cell (what the exercise generator starts from)."""
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if not is_language_cell(c)]
    return out


def translate_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Every stored stdout of ``nb``'s code cells in Persian, line by line through the catalogues
    (``outputs.translate_output``: a line no template rendered stays as it is; the catalogues are
    this checkout's, ``messages.LOCALE``), and every displayed Markdown (``outputs.markdown``: its
    lines and table cells, wrapped right to left). stderr and other rich outputs are left alone:
    warnings, progress bars, figures, reprs."""
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                output.text = outputs.translate_output(output.text, LANG)
            elif "text/markdown" in output.get("data", {}):
                output.data["text/markdown"] = outputs.markdown(output.data["text/markdown"], LANG)
    return nb


# --- building the Persian notebooks ----------------------------------------------------------

def persian_notebook(root: pathlib.Path, english: pathlib.Path) -> nbformat.NotebookNode:
    """The Persian edition of one English notebook (in memory): translated markdown, the language
    cell before the first code cell, stored stdout translated; code cells otherwise unchanged."""
    nb = nbformat.read(english, as_version=4)
    catalog = catalog_path(root, english)
    po = load_catalog(catalog) if catalog.exists() else None
    target = persian_path(english)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue  # code cells, their outputs and metadata are the English ones, untouched
        persian = translation(po, cell.get("id"), cell.source)
        text = rtl_markdown(persian) if persian is not None else cell.source
        cell.source = relink(text, english, target, root)
    nb = with_language_cell(translate_outputs(nb), english.relative_to(root).as_posix())
    nb.metadata["lessonlib"] = {"translated_from": english.relative_to(root).as_posix(),
                                "translations": catalog.relative_to(root).as_posix(),
                                "regenerate_with": BUILD}
    return nb


def _text(nb: nbformat.NotebookNode) -> str:
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def _stale(root: pathlib.Path, expected: dict) -> dict[pathlib.Path, None]:
    """Persian notebooks on disk that no English notebook generates."""
    on_disk = [p for folder in FOLDERS for p in sorted((root / folder / LANG).glob("*.ipynb"))]
    return {p: None for p in on_disk if p not in expected}


def plan(root: pathlib.Path = ROOT) -> dict[pathlib.Path, str | None]:
    """Every Persian notebook mapped to the text it should hold (None: stale, no English source)."""
    expected: dict[pathlib.Path, str | None] = {}
    for english in english_notebooks(root):
        nb = persian_notebook(root, english)
        expected[persian_path(english)] = _text(nb)
        if english.parent.name == "solutions":  # the Persian exercise, from the Persian solution
            # from the solution without its language cell (the generator's first code cell is the
            # English one), then the language cell goes back in before the first code cell
            exercise = exercises.exercise_notebook(without_language_cell(nb), f"{LANG}/{english.name}")
            exercise = with_language_cell(exercise, f"exercises/{LANG}/{english.name}")
            exercise.metadata["lessonlib"]["regenerate_with"] = BUILD
            expected[persian_path(english, "exercises")] = _text(exercise)
    expected.update(_stale(root, expected))
    return expected


def build(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write every Persian notebook that changed; stale ones are reported, never deleted."""
    written = []
    for path, text in plan(root).items():
        if text is None:
            print(f"warning: {path.relative_to(root)} has no English source", file=sys.stderr)
        elif not path.exists() or path.read_text(encoding="utf-8") != text:
            write_atomic(path, text)
            written.append(path)
    return written


def notebooks_out_of_date(root: pathlib.Path = ROOT) -> list[str]:
    """Persian notebooks that differ from what ``build`` would write (empty when in sync)."""
    return exercises.stale(plan(root), root, "no English source", "out of date")
