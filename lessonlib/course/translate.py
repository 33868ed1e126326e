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

The catalogs (reading, merging, ``extract``) are ``lessonlib.course.catalogs``, the build
(right-to-left Markdown, links, ``plan``, ``build``) ``lessonlib.course.persian``; this module is
the command line and the checks, and re-exports both modules' names.
"""
from __future__ import annotations

import pathlib
import sys

from lessonlib import cli

# the catalogs and the build, re-exported (noqa: F401): notebooks, tests and scripts use translate.NAME
from lessonlib.course.catalogs import (BUILD, COMPLETE, HEADER, LANG, ROOT, SOURCES, STATUS,  # noqa: F401
                                       catalog_for, catalog_path, english_notebooks, extract, load_catalog,
                                       markdown_cells, merge, new_catalog, translation)
from lessonlib.course.persian import (FENCE, FOLDERS, INLINE, LINK, LTR_CLOSE, LTR_OPEN, NOTEBOOK,  # noqa: F401
                                      RTL_CLOSE, RTL_OPEN, build, notebooks_out_of_date, persian_notebook,
                                      persian_path, plan, relink, rtl_markdown)


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
    head = f"{'notebook':<40} {'cells':>5} {'translated':>10} {'fuzzy':>5} {'missing':>7} {'obsolete':>8}  status"
    lines = [head]
    for r in rows:
        state = "complete" if r["complete"] else ("no catalog" if not r["exists"] else "in progress")
        lines.append(f"{r['notebook']:<40} {r['cells']:>5} {len(r['translated']):>10} {len(r['fuzzy']):>5} "
                     f"{len(r['missing']):>7} {len(r['obsolete']):>8}  {state}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.translate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["extract", "build", "check", "stats"])
    parser.add_argument("names", nargs="*", help="only these notebooks, e.g. 01_exact_rule (extract, check, stats)")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    check_root(parser, root)
    if args.command == "extract":
        for path, changes in extract(root, args.names).items():
            print(f"{path.relative_to(root)}: " + ("; ".join(changes) if changes else "in sync"))
    elif args.command == "build":
        if args.names:
            parser.error("build takes no notebook names (it writes the whole Persian edition)")
        refused = uncovered(root)
        if refused:  # checked before any notebook is written
            raise ValueError("not building: " + "; ".join(refused)
                             + "; run: python -m lessonlib.course.translate extract")
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
    sys.exit(cli.run(main, prog="python -m lessonlib.course.translate"))
