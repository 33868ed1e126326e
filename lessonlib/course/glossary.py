"""One glossary for the Persian edition, and the lint that holds every catalog to it.

``locale/fa/glossary.tsv`` has one row per English term, tab-separated::

    term    persian    keep_english    avoid    allowed

``persian`` is the rendering; ``keep_english`` says when the English stays: ``always`` (the
English is the term in Persian prose too: draft, target, EAGLE) or ``gloss`` (the Persian in
prose; the English only as a gloss in parentheses beside it, in code, formulas, links and the
first column of a table such as the lesson's glossary); ``avoid`` lists renderings that must not
appear (``;``-separated: a half-English compound, a competing Persian word); ``allowed`` lists
English names that contain the term and stay English (``speculative sampling``, a method).

``lint`` reads the Persian (``msgstr``) of every catalog, the notebook catalogs and, when they
exist, ``messages.po`` and ``claims.po``, and reports each term rendered against the glossary:
a ``gloss`` term left in English in the prose, or an ``avoid`` rendering anywhere outside code
(link texts included).
"""
from __future__ import annotations

import pathlib
import re

import polib

from lessonlib import paths

ROOT = paths.ROOT
GLOSSARY = pathlib.Path("locale") / "fa" / "glossary.tsv"
COLUMNS = ("term", "persian", "keep_english", "avoid", "allowed")
KEEP = ("always", "gloss")

_NOT_PROSE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$|(`+).+?\2|(?<!\\)\$\$.+?(?<!\\)\$\$"
                        r"|(?<!\\)\$[^$\n]+?(?<!\\)\$|\\\(.+?\\\)|!?\[[^\]\n]*\]\([^)\n]*\)|<[^>\n]*>"
                        r"|^\|[^|\n]*\||\{[^{}\n]*\}", re.M | re.S)  # last: a template's {placeholder}
_CODE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$|(`+).+?\2", re.M | re.S)
_PARENS = re.compile(r"\([^()]*\)")


def load(root: pathlib.Path = ROOT) -> list[dict]:
    """The glossary's rows as dicts (``avoid`` and ``allowed`` as lists); a malformed row raises
    ValueError naming the line."""
    path = pathlib.Path(root) / GLOSSARY
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) > len(COLUMNS) or len(cells) < 3 or not cells[0].strip() or cells[2] not in KEEP:
            raise ValueError(f"{path}, line {number}: expected tab-separated {', '.join(COLUMNS)} "
                             f"(keep_english one of {KEEP}), got {line!r}")
        cells += [""] * (len(COLUMNS) - len(cells))
        text = dict(zip(COLUMNS, (c.strip() for c in cells)))
        row: dict = {**text, "avoid": [x.strip() for x in text["avoid"].split(";") if x.strip()],
                     "allowed": [x.strip() for x in text["allowed"].split(";") if x.strip()]}
        rows.append(row)
    return rows


def prose(markdown: str) -> str:
    """The running text of a Persian Markdown cell or message template: without code, formulas,
    links, HTML tags, a table row's first cell, ``{placeholders}`` and parenthesised glosses
    (innermost first)."""
    text = _NOT_PROSE.sub(" ", markdown)
    while _PARENS.search(text):
        text = _PARENS.sub(" ", text)
    return text


def _english(term: str) -> re.Pattern:
    """The English term as a word (a Persian suffix may follow it: roundها), plural s allowed; not
    inside an identifier (distillation_loss) or a unit (tokens/s)."""
    return re.compile(rf"(?<![\w/-]){re.escape(term)}s?(?![A-Za-z0-9_/-])", re.I)  # not in an identifier or unit


def findings(text: str, rows: list[dict]) -> list[str]:
    """What one Persian text gets wrong against the glossary rows, one line per finding."""
    body, words = prose(text), _CODE.sub(" ", text)  # an avoided rendering is wrong in a link's text too
    found = []
    for row in rows:
        bare = body
        for name in row["allowed"]:
            bare = re.sub(re.escape(name), " ", bare, flags=re.I)
        if row["keep_english"] == "gloss" and _english(row["term"]).search(bare):
            found.append(f"{row['term']!r} in English: write «{row['persian']}»")
        found += [f"«{bad}» for {row['term']!r}: write «{row['persian']}»" for bad in row["avoid"] if bad in words]
    return found


def catalogs(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every Persian catalog the lint reads: the notebooks', then messages.po and claims.po."""
    folder = pathlib.Path(root) / "locale" / "fa"
    notebooks = sorted(folder.glob("[0-9][0-9]_*.po"))
    return notebooks + [folder / name for name in ("messages.po", "claims.po") if (folder / name).exists()]


def lint(root: pathlib.Path = ROOT, paths_=None) -> list[str]:
    """Every term rendered against the glossary in the catalogs (default: ``catalogs(root)``),
    one line each: "catalog cell: finding"."""
    rows = load(root)
    found = []
    for path in catalogs(root) if paths_ is None else paths_:
        try:
            po = polib.pofile(str(path), wrapwidth=0)
        except (OSError, ValueError) as err:
            raise ValueError(f"catalog {path} does not parse ({err})") from None
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        for entry in po:
            if entry.obsolete or not entry.msgstr.strip():
                continue
            where = entry.msgctxt or entry.msgid[:40]
            found += [f"{rel} {where}: {line}" for line in findings(entry.msgstr, rows)]
    return found


def problems(root: pathlib.Path = ROOT) -> list[str]:
    """The lint's findings, for ``translate check`` (no glossary file: nothing to hold to)."""
    return lint(root) if (pathlib.Path(root) / GLOSSARY).exists() else []
