"""When a translation is current: by the content it was made from, never by a flag.

Each translated entry of a notebook catalog (``locale/fa/NAME.po``) carries one translator
comment, written by ``python -m lessonlib.course.translate approve NAME [CELL...]``::

    # approved: source-sha256=3f2a9c1b0d4e5f67 persian-sha256=a1b2c3d4e5f60718

``source`` is a hash of the English (``msgid``) the translator approved the Persian against,
``persian`` a hash of that Persian (``msgstr``). An entry is current only when both match the
English the notebook has now and the Persian the catalog holds: an English edit makes it stale
whatever its flags say (deleting ``#, fuzzy`` changes nothing), and so does a Persian edit not
yet approved; a stale entry is treated as untranslated (the build keeps the English cell,
``check`` fails naming it). ``approve`` refuses
an entry whose English changed while its Persian did not, unless the translator says the change
needs no Persian change (``--unchanged-persian-ok``, recorded in the comment for all to see),
and an entry whose Persian lacks something the English has (``carried``).

``carried`` is what a translation must carry over unchanged: the English cell's numbers (Persian
digits count as the same number), code spans and fenced code, links and math, compared as
multisets. ``migrate`` records the hashes of every current entry of a catalog made before this
check existed (once: a migrated catalog says so in its header, and migrate refuses it after).
"""
from __future__ import annotations

import collections
import hashlib
import re

import polib

MARK = "X-Drift-Check"  # header field of a migrated (or new) catalog
MARK_VALUE = "source-sha256"
PREFIX = 16  # hex digits kept of each sha256: collisions are not the risk, a forgotten update is
RECORD = re.compile(r"^approved: source-sha256=(?P<source>[0-9a-f]+) persian-sha256=(?P<persian>[0-9a-f]+)"
                    r"(?P<ok> unchanged-persian-ok)?$")
UNCHANGED_OK = "unchanged-persian-ok"

_DIGITS = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩٫", "01234567890123456789.")
# a code span may wrap onto the next line (CommonMark), never across a blank line
_CODE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$|(?<!`)(`+)(?!`)(?:[^\n]|\n(?!\n))+?(?<!`)\2(?!`)",
                   re.M | re.S)
_MATH = re.compile(r"(?<!\\)\$\$.+?(?<!\\)\$\$|(?<!\\)\$[^$\n]+?(?<!\\)\$|\\\(.+?\\\)", re.S)
_LINK = re.compile(r"""\]\(\s*<?(?P<a>[^)\s<>]+)|\b(?:src|href)\s*=\s*["'](?P<b>[^"']+)""")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def digest(text: str) -> str:
    """The hash a record keeps of ``text`` (the first PREFIX hex digits of its sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:PREFIX]


def record(entry: polib.POEntry) -> dict | None:
    """{"source", "persian", "unchanged_ok"} of the entry's approval comment, None without one."""
    for line in (entry.tcomment or "").splitlines():
        match = RECORD.match(line.strip())
        if match:
            return {"source": match["source"], "persian": match["persian"], "unchanged_ok": bool(match["ok"])}
    return None


def _write_record(entry: polib.POEntry, unchanged_ok: bool) -> None:
    """Replace the entry's approval comment by one for its current English and Persian."""
    line = f"approved: source-sha256={digest(entry.msgid)} persian-sha256={digest(entry.msgstr)}"
    others = [x for x in (entry.tcomment or "").splitlines() if not RECORD.match(x.strip())]
    entry.tcomment = "\n".join(others + [line + (f" {UNCHANGED_OK}" if unchanged_ok else "")])


def current(entry: polib.POEntry | None, english: str) -> bool:
    """Whether ``entry`` is live and holds the very Persian approved against exactly ``english``."""
    if entry is None or entry.obsolete or entry.fuzzy or not entry.msgstr.strip() or entry.msgid != english:
        return False
    found = record(entry)
    return found is not None and found["source"] == digest(english) and found["persian"] == digest(entry.msgstr)


# --- what a translation carries over ---------------------------------------------------------

def _items(text: str) -> dict[str, collections.Counter]:
    """The numbers, code, links and math of a Markdown text, each kind a multiset."""
    text = text.translate(_DIGITS)
    links = [m["a"] or m["b"] for m in _LINK.finditer(text)]
    plain = re.sub(r"(?<=\d)(?:,|٬|\{,\})(?=\d{3}(?!\d))", "", text)  # 10,000 = 10٬000 = 10{,}000
    numbers = _NUMBER.findall(re.sub(r"(?<![\d.])\.(?=\d)", "0.", plain))  # .05 = 0.05
    code = (" ".join(m[0].split()) if not m[1] else m[0] for m in _CODE.finditer(text))  # a wrapped span: one line
    return {"number": collections.Counter(numbers), "code": collections.Counter(code),
            "link": collections.Counter(links), "math": collections.Counter(_MATH.findall(text))}


def carried(english: str, persian: str) -> list[str]:
    """What the Persian lacks of the English's numbers, code, links and math ("number 45",
    "code `x`"), one item per missing occurrence; empty when it carries all of them. The Persian
    may have more (a formula where the English had plain text)."""
    have = _items(persian)
    missing = []
    for kind, wanted in _items(english).items():
        for item, count in sorted((wanted - have[kind]).items()):
            missing += [f"{kind} {item}"] * count
    return missing


# --- approving and migrating -----------------------------------------------------------------

def approve_entry(entry: polib.POEntry, unchanged_ok: bool = False) -> str | None:
    """Mark ``entry`` as translated from its current English; return why it is refused (None: done).

    Refused: an obsolete or empty entry, a Persian that lacks what the English carries, and a
    Persian left unchanged since its last approval while the English changed (unless
    ``unchanged_ok``: the translator says the edit needs no Persian change; it is recorded).
    """
    if entry.obsolete or not entry.msgstr.strip():
        return "no Persian to approve" if not entry.obsolete else "obsolete (the cell is gone)"
    lacking = carried(entry.msgid, entry.msgstr)
    if lacking:
        return "the Persian lacks " + ", ".join(lacking)
    old = record(entry)
    english_changed = old is not None and old["source"] != digest(entry.msgid)
    if old is not None and english_changed and old["persian"] == digest(entry.msgstr) and not unchanged_ok:
        return ("the English changed since the last approval but the Persian did not: update the "
                f"msgstr, or pass --{UNCHANGED_OK} if the English edit needs no Persian change")
    if "fuzzy" in entry.flags:
        entry.flags.remove("fuzzy")
    entry.previous_msgid = None
    _write_record(entry, unchanged_ok and english_changed)
    return None


def migrate(po: polib.POFile) -> int:
    """Record hashes for every translated, non-fuzzy entry of a catalog made before the drift
    check (fuzzy ones stay stale); mark the catalog migrated. Returns the entries recorded."""
    if po.metadata.get(MARK) == MARK_VALUE:
        raise ValueError(f"po: this catalog is already migrated ({MARK}: {MARK_VALUE}); "
                         "approve entries one by one with: python -m lessonlib.course.translate approve")
    count = 0
    for entry in po:
        if not entry.obsolete and not entry.fuzzy and entry.msgstr.strip() and record(entry) is None:
            _write_record(entry, False)
            count += 1
    po.metadata[MARK] = MARK_VALUE
    return count
