"""The Persian edition of the course, single-sourced from the English notebooks.

Translations live in gettext catalogs, one per English notebook, read and written with ``polib``::

    locale/fa/00_start_here.po      <- notebooks/00_start_here.ipynb
    locale/fa/01_exact_rule.po      <- solutions/01_exact_rule.ipynb   (and so on)

Each markdown cell of an English notebook is one entry: ``msgctxt`` is the cell's stable id,
``msgid`` its English source, ``msgstr`` the Persian. Code cells are never translated.

    python -m lessonlib.course.translate extract   # create/update locale/fa/*.po from the English
                                                   # (and messages.po, claims.po: the printed sentences)
    python -m lessonlib.course.translate build     # write notebooks/fa/, solutions/fa/, exercises/fa/
    python -m lessonlib.course.translate check     # exit 1 on untranslated/stale/obsolete cells or stale files
    python -m lessonlib.course.translate stats     # translated / fuzzy / stale / missing per notebook
    python -m lessonlib.course.translate approve NAME [CELL...]  # record: translated from this English
    python -m lessonlib.course.translate migrate   # once, for catalogs made before the drift check

``extract`` works like gettext's msgmerge: a new English cell gets an empty entry; a translated
cell whose English changed is marked ``fuzzy`` and keeps the English it was translated from as
the previous msgid (``#| msgid``), so the translator sees exactly what changed; a translated
cell that disappeared becomes obsolete (``#~``). ``build`` copies every English notebook
unchanged (code cells, ids, tags, outputs) and replaces each markdown cell that has a current,
non-fuzzy translation by the Persian text in a right-to-left block; any other cell stays
English. A translation is current by content, not by flag: ``approve`` records in the entry a
hash of the English it was made from (and of the Persian), and any other English makes it
stale, fuzzy line or not (``lessonlib.course.drift``); ``check`` also fails on a translation that
lacks one of its English cell's numbers, code spans, links or formulas, and on a term rendered
against the glossary (``lessonlib.course.glossary``, ``locale/fa/glossary.tsv``).
The Persian exercises are generated from the Persian solutions by the exercise
generator (``lessonlib.course.exercises``), exactly as the English ones are.

The catalogs (reading, merging, ``extract``) are ``lessonlib.course.catalogs``, the build
(right-to-left Markdown, links, ``plan``, ``build``) ``lessonlib.course.persian``; this module is
the command line and the checks, and re-exports both modules' names.
"""
from __future__ import annotations

import pathlib
import sys

from lessonlib import cli
from lessonlib.course import catalogs, claim_catalogue, drift, glossary, message_catalogue

# the catalogs and the build, re-exported (noqa: F401): notebooks, tests and scripts use translate.NAME
from lessonlib.course.catalogs import (  # noqa: F401
    BUILD,
    COMPLETE,
    HEADER,
    LANG,
    ROOT,
    SOURCES,
    STATUS,
    catalog_for,
    catalog_path,
    english_notebooks,
    extract,
    load_catalog,
    markdown_cells,
    merge,
    new_catalog,
    translation,
)
from lessonlib.course.persian import (  # noqa: F401
    FOLDERS,
    LINK,
    NOTEBOOK,
    build,
    notebooks_out_of_date,
    persian_notebook,
    persian_path,
    plan,
    relink,
)
from lessonlib.course.rtl import FENCE, INLINE, LTR_CLOSE, LTR_OPEN, RTL_CLOSE, RTL_OPEN, rtl_markdown  # noqa: F401
from lessonlib.jsonio import write_atomic

# --- check and stats -----------------------------------------------------------------------

def _states(po) -> dict[str, list[str]]:
    """Cell ids by state: translated (current: ``drift.current``), fuzzy, stale (a Persian not
    approved against this English, whatever its flags), missing, obsolete."""
    live = [e for e in po if not e.obsolete]
    ok = [e for e in live if drift.current(e, e.msgid)]
    return {"translated": [e.msgctxt for e in ok],
            "fuzzy": [e.msgctxt for e in live if e.fuzzy],
            "stale": [e.msgctxt for e in live if e.msgstr.strip() and not e.fuzzy and e not in ok],
            "missing": [e.msgctxt for e in live if not e.msgstr.strip() and not e.fuzzy],
            "obsolete": [e.msgctxt for e in po if e.obsolete],
            "lacking": [f"{e.msgctxt} lacks {', '.join(drift.carried(e.msgid, e.msgstr))}"
                        for e in ok if drift.carried(e.msgid, e.msgstr)],
            "unchanged_ok": [e.msgctxt for e in ok if (drift.record(e) or {}).get("unchanged_ok")]}


def status(root: pathlib.Path = ROOT, names=()) -> list[dict]:
    """Per English notebook: its catalog's cell ids by state (``_states``), and what extract
    would change."""
    rows = []
    for english in english_notebooks(root, names):
        path = catalog_path(root, english)
        po, changes = catalog_for(root, english)
        states = _states(po)
        marked = po.metadata.get(STATUS, "").strip() == COMPLETE
        changes = changes if path.exists() else ["no catalog yet"]
        rows.append({
            "notebook": english.relative_to(root).as_posix(),
            "catalog": path.relative_to(root).as_posix(), "exists": path.exists(),
            # the header alone is not enough: a truncated catalog keeps its "complete" header
            "marked_complete": marked,
            "complete": marked and not changes and not any(states[k] for k in ("fuzzy", "stale", "missing")),
            "cells": len([e for e in po if not e.obsolete]), **states, "changes": changes,
        })
    return rows


def problems(root: pathlib.Path = ROOT, names=()) -> list[str]:
    """Everything that keeps the Persian edition from being complete and current, glossary
    lint included; for the whole edition (no ``names``) also the two sentence catalogues: the
    library's (``messages.po``) and the notebooks' claims (``claims.po``)."""
    found = []
    if not names and (root.resolve() == ROOT or claim_catalogue.path(root).exists()):  # a small test course has none
        found += [f"messages.po: {line}" for line in message_catalogue.problems()]
        found += [f"claims.po: {line}" for line in claim_catalogue.problems(root)]
    for row in status(root, names):
        cat = row["catalog"]
        if row["changes"]:
            found.append(f"{cat}: not in sync with {row['notebook']} (run extract): "
                         + "; ".join(row["changes"]))
        for state in ("missing", "fuzzy", "stale", "obsolete"):
            if row[state]:
                found.append(f"{cat}: {len(row[state])} {state}: {', '.join(row[state])}")
        if row["fuzzy"] or row["stale"]:
            found.append(f"{cat}: update the Persian of each cell above, then run: "
                         f"{catalogs.APPROVE} {pathlib.PurePosixPath(row['notebook']).stem} CELL-ID")
        found += [f"{cat}: {line}" for line in row["lacking"]]
    return found + glossary.problems(root) + notebooks_out_of_date(root)


def pending(root: pathlib.Path = ROOT, names=()) -> list[str]:
    """The printed sentences with no Persian yet -- the library's (``messages.po``) and the notebooks'
    claims (``claims.po``): they print in English in the Persian edition until translated, and the
    check lists them without failing (a drifted or unfaithful translation still fails: ``problems``)."""
    if names or not (root.resolve() == ROOT or claim_catalogue.path(root).exists()):
        return []
    return ([f"messages.po: {line}" for line in message_catalogue.pending()]
            + [f"claims.po: {line}" for line in claim_catalogue.pending(root)])


def approve(root: pathlib.Path, name: str, cells=(), unchanged_ok: bool = False) -> tuple[list[str], list[str]]:
    """Record that each named cell's Persian (default: every translated cell of notebook
    ``name`` that is not current) is a translation of its English now (``drift.approve_entry``);
    return (approved cell ids, "cell: why refused" lines). Writes the catalog, merged with the
    English as extract would, when any entry was approved. ``unchanged_ok`` needs named cells."""
    if unchanged_ok and not cells:
        raise ValueError("--unchanged-persian-ok: name the cells it is for (it is recorded in each entry)")
    english, = english_notebooks(root, [name])
    path = catalog_path(root, english)
    if not path.exists():
        raise ValueError(f"name: {name} has no catalog yet; run: python -m lessonlib.course.translate extract")
    po, _ = catalog_for(root, english)
    live = {e.msgctxt: e for e in po if not e.obsolete}
    unknown = [c for c in cells if c not in live]
    if unknown:
        raise ValueError(f"cells: {unknown} are not cells of {english.relative_to(root).as_posix()}")
    todo = list(cells) or [c for c, e in live.items() if e.msgstr.strip() and not drift.current(e, e.msgid)]
    approved, refused = [], []
    for cell_id in todo:
        why = drift.approve_entry(live[cell_id], unchanged_ok)
        (refused.append(f"{cell_id}: {why}") if why else approved.append(cell_id))
    if approved:
        write_atomic(path, str(po))
    return approved, refused


def migrate(root: pathlib.Path = ROOT, names=()) -> dict[pathlib.Path, str]:
    """Record hashes in every catalog made before the drift check (``drift.migrate``) and give it
    the current header; one already migrated is left alone. Returns {catalog: what was done}."""
    report = {}
    for english in english_notebooks(root, names):
        path = catalog_path(root, english)
        if not path.exists():
            continue
        po = load_catalog(path)
        if po.metadata.get(drift.MARK) == drift.MARK_VALUE:
            report[path] = "already migrated: approve entries with translate approve"
            continue
        count = drift.migrate(po)
        po.header = catalogs.header(english.relative_to(root).as_posix())
        write_atomic(path, str(po))
        report[path] = f"recorded the hashes of {count} translated entries"
    return report


def uncovered(root: pathlib.Path = ROOT) -> list[str]:
    """Catalogs ``build`` must not use: one that does not parse (ValueError from
    ``load_catalog``), and one that does not cover its notebook (a markdown cell with no entry,
    an entry for a cell that is gone: an empty, truncated or misspelt catalog). Empty: all usable."""
    found = []
    for english in english_notebooks(root):
        path = catalog_path(root, english)
        if not path.exists():
            continue  # no catalog yet: that notebook stays English, as documented
        _, changes = catalog_for(root, english)
        bad = [c for c in changes if c.endswith(": new cell") or ": removed from the English" in c]
        if bad:
            found.append(f"{path.relative_to(root).as_posix()} does not cover "
                         f"{english.relative_to(root).as_posix()} ({len(bad)} cells: {'; '.join(bad[:3])})")
    return found


def check_root(parser, root: pathlib.Path) -> None:
    """Refuse a ``--root`` with no English notebooks (one line, exit 2) instead of "up to date"."""
    if not all((root / folder).is_dir() for folder, _ in SOURCES):
        parser.error(f"--root {root} has no {' and '.join(f + '/' for f, _ in SOURCES)} folders: "
                     "give the repository's root")


def stats_table(rows: list[dict]) -> str:
    states = ("translated", "fuzzy", "stale", "missing", "obsolete")
    head = f"{'notebook':<40} {'cells':>5} " + " ".join(f"{s:>{max(len(s), 5)}}" for s in states) + "  status"
    lines = [head]
    for r in rows:
        state = ("complete" if r["complete"] else "no catalog" if not r["exists"]
                 else "marked complete, but not: run check" if r["marked_complete"] else "in progress")
        if r["unchanged_ok"]:  # visible: approved with --unchanged-persian-ok
            state += f" ({len(r['unchanged_ok'])} approved with unchanged Persian: {', '.join(r['unchanged_ok'])})"
        lines.append(f"{r['notebook']:<40} {r['cells']:>5} "
                     + " ".join(f"{len(r[s]):>{max(len(s), 5)}}" for s in states) + f"  {state}")
    return "\n".join(lines)


def _approve_command(parser, root: pathlib.Path, args) -> int:
    if not args.names:
        parser.error("approve needs a notebook name, e.g. approve 01_exact_rule [CELL-ID ...]")
    approved, refused = approve(root, args.names[0], args.names[1:], args.unchanged_persian_ok)
    for cell_id in approved:
        print(f"{args.names[0]} {cell_id}: approved")
    for line in refused:
        print(f"{args.names[0]} {line}: refused")
    if not approved and not refused:
        print(f"{args.names[0]}: every translated cell is already current")
    return 1 if refused else 0


def _build_command(parser, root: pathlib.Path, args) -> int:
    if args.names:
        parser.error("build takes no notebook names (it writes the whole Persian edition)")
    refused = uncovered(root)
    if refused:  # checked before any notebook is written
        raise ValueError("not building: " + "; ".join(refused)
                         + "; run: python -m lessonlib.course.translate extract")
    for path in build(root):
        print(f"wrote {path.relative_to(root)}")
    return 0


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.translate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["extract", "build", "check", "stats", "approve", "migrate"])
    parser.add_argument("names", nargs="*", help="only these notebooks, e.g. 01_exact_rule (extract, check, stats, "
                        "migrate); approve: one notebook, then the cell ids to approve (default: all not current)")
    parser.add_argument("--unchanged-persian-ok", action="store_true",
                        help="approve: the English edit needs no Persian change (recorded in each named entry)")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    check_root(parser, root)
    if args.unchanged_persian_ok and args.command != "approve":
        parser.error("--unchanged-persian-ok goes with approve only")
    if args.command == "extract":
        for path, changes in extract(root, args.names).items():
            print(f"{path.relative_to(root)}: " + ("; ".join(changes) if changes else "in sync"))
        if not args.names:  # the sentence catalogues: the library's and the notebooks' claims
            if root == ROOT:
                print(f"{message_catalogue.write().relative_to(root)}: merged")
            changes, errors = claim_catalogue.extract(root)
            print(f"{claim_catalogue.path(root).relative_to(root)}: " + ("; ".join(changes) if changes else "in sync"))
            for error in errors:
                print(f"not a literal claim sentence (cannot be translated): {error}")
    elif args.command == "migrate":
        for path, done in migrate(root, args.names).items():
            print(f"{path.relative_to(root)}: {done}")
    elif args.command in ("build", "approve"):
        return (_build_command if args.command == "build" else _approve_command)(parser, root, args)
    elif args.command == "stats":
        print(stats_table(status(root, args.names)))
    else:
        found, waiting = problems(root, args.names), pending(root, args.names)
        print("\n".join(found) if found else "the Persian edition is up to date" if waiting
              else "the Persian edition is complete and up to date")
        if waiting:  # not an error: these print in English in the Persian edition until translated
            print(f"pending ({len(waiting)}: shown in English in the Persian edition until translated):\n  "
                  + "\n  ".join(waiting))
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.translate"))
