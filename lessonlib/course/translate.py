"""The Persian edition of the course, single-sourced from the English notebooks.

Translations live in gettext catalogs, one per English notebook, read and written with ``polib``::

    locale/fa/00_start_here.po      <- notebooks/00_start_here.ipynb
    locale/fa/01_exact_rule.po      <- solutions/01_exact_rule.ipynb   (and so on)

Each markdown cell of an English notebook is one entry: ``msgctxt`` is the cell's stable id,
``msgid`` its English source, ``msgstr`` the Persian. Code cells are never translated.

    python -m lessonlib.course.translate extract   # create/update locale/fa/*.po from the English
    python -m lessonlib.course.translate build     # write notebooks/fa/, solutions/fa/, exercises/fa/
    python -m lessonlib.course.translate check     # exit 1 on untranslated/fuzzy/obsolete cells or stale files
    python -m lessonlib.course.translate stats     # translated / fuzzy / missing per notebook

``extract`` works like gettext's msgmerge: a new English cell gets an empty entry; a translated
cell whose English changed is marked ``fuzzy`` and keeps the English it was translated from as
the previous msgid (``#| msgid``), so the translator sees exactly what changed; a translated
cell that disappeared becomes obsolete (``#~``). ``build`` copies every English notebook
unchanged (code cells, ids, tags, outputs) and replaces each markdown cell that has a current,
non-fuzzy translation by the Persian text in a right-to-left block; any other cell stays
English. The Persian exercises are generated from the Persian solutions by the exercise
generator (``lessonlib.course.exercises``), exactly as the English ones are.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys

import nbformat
import polib

from lessonlib import paths
from lessonlib.course import exercises

ROOT = paths.ROOT
LANG = "fa"
SOURCES = (("notebooks", "[0-9][0-9]_*.ipynb"), ("solutions", "[0-9][0-9]_*.ipynb"))
FOLDERS = ("notebooks", "solutions", "exercises")
BUILD = "python -m lessonlib.course.translate build"
STATUS = "X-Translation-Status"  # "in progress" until the translator sets "complete"
COMPLETE = "complete"
HEADER = """\
Persian translation of {source} (the course on speculative decoding and EAGLE).

One entry per markdown cell: msgctxt is the English cell's id, msgid its English text, msgstr
the Persian. Write for a Persian reader, not word for word; keep technical terms in English
where Persian readers use them (speculative decoding, draft, target, EAGLE, KV cache, ...), as
the lesson's glossary does. Keep the Markdown structure, links and numbers. Write formulas as
$...$ and identifiers or commands in backticks: the build shows both left to right inside the
right-to-left text (plain-text formulas such as K + 1 can come out reordered).

"#, fuzzy" means the English changed after this entry was translated; the English it was
translated from is under "#| msgid". Update msgstr, then delete the fuzzy line and the "#|"
lines. When every entry is translated and none is fuzzy, set {status} to "{complete}".
Then regenerate the Persian notebooks: {build}"""

RTL_OPEN, RTL_CLOSE = f'<div dir="rtl" lang="{LANG}">', "</div>"
LTR_OPEN, LTR_CLOSE = '<span dir="ltr">', "</span>"
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})")
# Code spans first, so that a $ inside code is not read as math; display math ($$...$$) is left
# alone (MathJax centres it and lays it out left to right); inline math is wrapped like code.
INLINE = re.compile(r"(?P<code>(?<!`)(?P<ticks>`+)(?!`)[^\n]+?(?<!`)(?P=ticks)(?!`))"
                    r"|(?P<display>(?<!\\)\$\$(?s:.+?)(?<!\\)\$\$)"
                    r"|(?P<math>(?<!\\)\$[^$\n]+?(?<!\\)\$|\\\([^\n]+?\\\))")
LINK = re.compile(r"""(?P<lead>\]\(\s*<?|\b(?:src|href)\s*=\s*["'])(?P<target>[^)\s"'<>]+)""")
NOTEBOOK = re.compile(r"[0-9][0-9]_[^/]*\.ipynb")


# --- which files ---------------------------------------------------------------------------

def english_notebooks(root: pathlib.Path = ROOT, names=()) -> list[pathlib.Path]:
    """The English notebooks that have a Persian edition (optionally only those named)."""
    found = [p for folder, pattern in SOURCES for p in sorted((root / folder).glob(pattern))]
    unknown = set(names) - {p.stem for p in found} - {p.name for p in found}
    if unknown:
        raise ValueError(f"names: no English notebook called {sorted(unknown)}; "
                         f"expected some of {[p.stem for p in found]}")
    return [p for p in found if not names or p.stem in names or p.name in names]


def catalog_path(root: pathlib.Path, english: pathlib.Path) -> pathlib.Path:
    return root / "locale" / LANG / f"{english.stem}.po"


def persian_path(english: pathlib.Path, folder: str | None = None) -> pathlib.Path:
    """notebooks/X.ipynb -> notebooks/fa/X.ipynb (or another top folder: exercises/fa/X.ipynb)."""
    parent = english.parent if folder is None else english.parent.parent / folder
    return parent / LANG / english.name


def markdown_cells(nb: nbformat.NotebookNode, where: str) -> list[tuple[str, str]]:
    """(cell id, English source) of every non-empty markdown cell; ids must exist and be unique."""
    cells, seen = [], set()
    for index, cell in enumerate(nb.cells):
        cell_id = cell.get("id")
        if not cell_id:
            raise ValueError(f"{where}, cell {index}: no cell id (nbformat 4.5 ids key the translations)")
        if cell_id in seen:
            raise ValueError(f"{where}, cell {index}: duplicate cell id {cell_id!r}")
        seen.add(cell_id)
        if cell.cell_type == "markdown" and cell.source.strip():
            cells.append((cell_id, cell.source))
    return cells


# --- catalogs (extract) --------------------------------------------------------------------

def load_catalog(path: pathlib.Path) -> polib.POFile:
    # wrapwidth 0: msgid/msgstr lines are the Markdown lines, never re-wrapped (readable diffs)
    return polib.pofile(str(path), wrapwidth=0)


def new_catalog(source: str) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.header = HEADER.format(source=source, status=STATUS, complete=COMPLETE, build=BUILD)
    po.metadata = {"Project-Id-Version": "lessonlib course", "Language": LANG, "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit",
                   "X-Source": source, STATUS: "in progress"}
    return po


def _update_entry(entry: polib.POEntry, text: str) -> str | None:
    """Bring one existing entry to the current English text; say what changed (None: nothing)."""
    change = None
    if entry.obsolete:  # the cell came back
        entry.obsolete, change = False, "revived"
    if entry.fuzzy and entry.previous_msgid == text:  # the English went back to what was translated
        entry.flags.remove("fuzzy")
        entry.msgid, entry.previous_msgid = text, None
        return change or "no longer fuzzy"
    if entry.msgid != text:
        if entry.msgstr and not entry.fuzzy:
            entry.flags.append("fuzzy")
            entry.previous_msgid = entry.msgid  # what the translation was made from
        entry.msgid = text
        change = "fuzzy" if entry.msgstr else "English updated"
    if not entry.fuzzy:
        entry.previous_msgid = None  # tidy: a stale "#|" line after the translator's fix
    return change


def merge(po: polib.POFile, cells: list[tuple[str, str]]) -> list[str]:
    """Update ``po`` in place to the English ``cells``; return the changes, one line each.

    Entries end up in notebook order, obsolete ones last. Removed cells with a translation
    become obsolete (the translation may be reused if the cell returns); removed cells without
    one are dropped. An empty list means the catalog was already in sync with the English.
    """
    by_id = {entry.msgctxt: entry for entry in po}
    changes, ordered = [], []
    for cell_id, text in cells:
        entry = by_id.pop(cell_id, None)
        if entry is None:
            entry = polib.POEntry(msgctxt=cell_id, msgid=text, msgstr="")
            changes.append(f"{cell_id}: new cell")
        elif (change := _update_entry(entry, text)) is not None:
            changes.append(f"{cell_id}: {change}")
        ordered.append(entry)
    for cell_id, entry in by_id.items():
        if entry.obsolete:
            ordered.append(entry)
        elif entry.msgstr:
            entry.obsolete = True
            ordered.append(entry)
            changes.append(f"{cell_id}: removed from the English, translation kept as obsolete")
        else:
            changes.append(f"{cell_id}: removed from the English (had no translation)")
    po[:] = ordered
    return changes


def catalog_for(root: pathlib.Path, english: pathlib.Path) -> tuple[polib.POFile, list[str]]:
    """The merged catalog of one English notebook and the changes extract would make to it."""
    rel = english.relative_to(root).as_posix()
    cells = markdown_cells(nbformat.read(english, as_version=4), rel)
    path = catalog_path(root, english)
    po = load_catalog(path) if path.exists() else new_catalog(rel)
    changes = merge(po, cells)
    if not path.exists():
        changes.insert(0, f"new catalog with {len(cells)} cells")
    return po, changes


def extract(root: pathlib.Path = ROOT, names=()) -> dict[pathlib.Path, list[str]]:
    """Create or update the catalog of every English notebook; return {catalog: changes}."""
    report = {}
    for english in english_notebooks(root, names):
        po, changes = catalog_for(root, english)
        path = catalog_path(root, english)
        text = str(po)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        report[path] = changes
    return report


# --- right to left -------------------------------------------------------------------------

def _isolate_ltr(prose: str) -> str:
    """Wrap inline code and inline math in an LTR span: inside RTL text a span like
    `--flag` or $K + 1$ would otherwise have its edge characters moved to the wrong end."""
    def wrap(match: re.Match) -> str:
        return match[0] if match["display"] else f"{LTR_OPEN}{match[0]}{LTR_CLOSE}"
    return INLINE.sub(wrap, prose)


def _blocks(text: str) -> list[tuple[str, str]]:
    """Split Markdown into ("prose", ...) and ("code", ...) parts at top-level fenced code blocks."""
    blocks, lines, fence = [], [], None
    for line in text.split("\n"):
        opens = FENCE.match(line) if fence is None else None
        closes = fence is not None and re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line)
        if opens:
            blocks.append(("prose", "\n".join(lines)))
            lines, fence = [line], opens["fence"]
        elif closes:
            blocks.append(("code", "\n".join(lines + [line])))
            lines, fence = [], None
        else:
            lines.append(line)
    blocks.append(("code" if fence else "prose", "\n".join(lines)))
    return [(kind, body) for kind, body in blocks if body.strip()]


def rtl_markdown(text: str) -> str:
    """Persian Markdown as it goes into the notebook: prose in ``<div dir="rtl">`` blocks (blank
    lines around the content so the Markdown inside still renders), inline code and math in LTR
    spans, and fenced code blocks between the RTL blocks, left to right."""
    parts = []
    for kind, body in _blocks(text):
        if kind == "code":
            parts.append(body)
        else:
            parts.append(f"{RTL_OPEN}\n\n{_isolate_ltr(body.strip(chr(10)))}\n\n{RTL_CLOSE}")
    return "\n\n".join(parts)


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


# --- building the Persian notebooks ----------------------------------------------------------

def translation(po: polib.POFile | None, cell_id: str, english: str) -> str | None:
    """The Persian for one cell, or None when there is no current, reviewed one (missing, empty,
    fuzzy, obsolete, or made for other English text): such a cell stays English."""
    entry = po.find(cell_id, by="msgctxt") if po is not None else None
    if entry is None or entry.fuzzy or not entry.msgstr.strip() or entry.msgid != english:
        return None
    return entry.msgstr


def persian_notebook(root: pathlib.Path, english: pathlib.Path) -> nbformat.NotebookNode:
    """The Persian edition of one English notebook (in memory)."""
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
            exercise = exercises.exercise_notebook(nb, f"{LANG}/{english.name}")
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
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def notebooks_out_of_date(root: pathlib.Path = ROOT) -> list[str]:
    """Persian notebooks that differ from what ``build`` would write (empty when in sync)."""
    return exercises.stale(plan(root), root, "no English source", "out of date")


# --- check and stats -----------------------------------------------------------------------

def status(root: pathlib.Path = ROOT, names=()) -> list[dict]:
    """Per English notebook: its catalog's cell ids by state, and what extract would change."""
    rows = []
    for english in english_notebooks(root, names):
        path = catalog_path(root, english)
        po, changes = catalog_for(root, english)
        live = [e for e in po if not e.obsolete]
        rows.append({
            "notebook": english.relative_to(root).as_posix(),
            "catalog": path.relative_to(root).as_posix(), "exists": path.exists(),
            "complete": po.metadata.get(STATUS, "").strip() == COMPLETE,
            "cells": len(live),
            "translated": [e.msgctxt for e in live if e.msgstr.strip() and not e.fuzzy],
            "fuzzy": [e.msgctxt for e in live if e.fuzzy],
            "missing": [e.msgctxt for e in live if not e.msgstr.strip() and not e.fuzzy],
            "obsolete": [e.msgctxt for e in po if e.obsolete],
            "changes": changes if path.exists() else ["no catalog yet"],
        })
    return rows


def problems(root: pathlib.Path = ROOT, names=()) -> list[str]:
    """Everything that keeps the Persian edition from being complete and current."""
    found = []
    for row in status(root, names):
        cat = row["catalog"]
        if row["changes"]:
            found.append(f"{cat}: not in sync with {row['notebook']} (run extract): "
                         + "; ".join(row["changes"]))
        for state in ("missing", "fuzzy", "obsolete"):
            if row[state]:
                found.append(f"{cat}: {len(row[state])} {state}: {', '.join(row[state])}")
    return found + notebooks_out_of_date(root)


def stats_table(rows: list[dict]) -> str:
    head = f"{'notebook':<40} {'cells':>5} {'translated':>10} {'fuzzy':>5} {'missing':>7} {'obsolete':>8}  status"
    lines = [head]
    for r in rows:
        state = "complete" if r["complete"] else ("no catalog" if not r["exists"] else "in progress")
        lines.append(f"{r['notebook']:<40} {r['cells']:>5} {len(r['translated']):>10} {len(r['fuzzy']):>5} "
                     f"{len(r['missing']):>7} {len(r['obsolete']):>8}  {state}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessonlib.course.translate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["extract", "build", "check", "stats"])
    parser.add_argument("names", nargs="*", help="only these notebooks, e.g. 01_exact_rule (extract, check, stats)")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "extract":
        for path, changes in extract(root, args.names).items():
            print(f"{path.relative_to(root)}: " + ("; ".join(changes) if changes else "in sync"))
    elif args.command == "build":
        for path in build(root):
            print(f"wrote {path.relative_to(root)}")
    elif args.command == "stats":
        print(stats_table(status(root, args.names)))
    else:
        found = problems(root, args.names)
        print("\n".join(found) if found else "the Persian edition is complete and up to date")
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
