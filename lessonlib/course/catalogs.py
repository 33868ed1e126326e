"""The Persian edition's gettext catalogs: one ``locale/fa/NAME.po`` per English notebook.

Which English notebooks have a Persian edition, their markdown cells (one entry each: ``msgctxt``
the cell id, ``msgid`` the English, ``msgstr`` the Persian), reading and writing catalogs with
``polib``, ``merge`` / ``extract`` (msgmerge's rules: new cells get empty entries, changed ones turn
fuzzy, removed ones obsolete) and ``translation``, the current Persian of one cell: current by
content, the hash of the English it was approved against (``lessonlib.course.drift``).
``python -m lessonlib.course.translate`` (``translate``) is the command line.
"""
from __future__ import annotations

import pathlib

import nbformat
import polib

from lessonlib import paths
from lessonlib.course import drift
from lessonlib.jsonio import write_atomic

ROOT = paths.ROOT
LANG = "fa"
SOURCES = (("notebooks", "[0-9][0-9]_*.ipynb"), ("solutions", "[0-9][0-9]_*.ipynb"))
BUILD = "python -m lessonlib.course.translate build"
APPROVE = "python -m lessonlib.course.translate approve"
STATUS = "X-Translation-Status"  # "in progress" until the translator sets "complete"
COMPLETE = "complete"
HEADER = """\
Persian translation of {source} (the course on speculative decoding and EAGLE).

One entry per markdown cell: msgctxt is the English cell's id, msgid its English text, msgstr
the Persian. Write for a Persian reader, not word for word; keep technical terms in English
where Persian readers use them (draft, target, EAGLE, KV cache, ...) and render the others
as locale/fa/glossary.tsv says (translate check lints every catalog against it). Keep the
Markdown structure, links and numbers. Write formulas as $...$ and identifiers or commands in
backticks: the build shows both left to right inside the right-to-left text (plain-text
formulas such as K + 1 can come out reordered).

"#, fuzzy" means the English changed after this entry was translated; the English it was
translated from is under "#| msgid". A translation is current only when its "# approved:"
comment holds the hashes of the cell's English now and of this msgstr (lessonlib.course.drift);
deleting the fuzzy line does not make it current. Update msgstr, then run
    python -m lessonlib.course.translate approve {name} CELL-ID
which records the hashes and refuses a Persian that did not change while the English did
(--unchanged-persian-ok, recorded in the entry, when the English edit needs no Persian change)
or that lacks one of the English's numbers, code spans, links or formulas. When every entry is
translated and current, set {status} to "{complete}".
Then regenerate the Persian notebooks: {build}"""


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
    """A catalog as polib reads it; one that does not parse raises ValueError naming the file."""
    try:  # wrapwidth 0: msgid/msgstr lines are the Markdown lines, never re-wrapped (readable diffs)
        return polib.pofile(str(path), wrapwidth=0)
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"catalog {path} does not parse ({err}); fix it, or restore it from git and "
                         "run: python -m lessonlib.course.translate extract") from None


def header(source: str) -> str:
    """The comment at the top of the catalog of the English notebook ``source``."""
    return HEADER.format(source=source, name=pathlib.PurePosixPath(source).stem, status=STATUS,
                         complete=COMPLETE, build=BUILD)


def new_catalog(source: str) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.header = header(source)
    po.metadata = {"Project-Id-Version": "lessonlib course", "Language": LANG, "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit",
                   "X-Source": source, STATUS: "in progress", drift.MARK: drift.MARK_VALUE}
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
            write_atomic(path, text)
        report[path] = changes
    return report


# --- reading a translation (build) ---------------------------------------------------------

def translation(po: polib.POFile | None, cell_id: str, english: str) -> str | None:
    """The Persian for one cell, or None when there is no current one (missing, empty, obsolete,
    or not approved against exactly this English: ``drift.current``): such a cell stays English."""
    entry = po.find(cell_id, by="msgctxt") if po is not None else None
    return entry.msgstr if entry is not None and drift.current(entry, english) else None
