"""Persian Markdown laid out right to left: the one wrapper every Persian markdown cell gets.

``rtl_markdown`` puts prose in ``<div dir="rtl">`` blocks and keeps inline code, inline math and
fenced code left to right. It lives apart from the Persian build (``persian``) because the
exercise generator (``exercises``) wraps the answer placeholders it writes into a Persian
exercise with it, and the build in turn calls the generator.
"""
from __future__ import annotations

import re

from lessonlib.course.catalogs import LANG

RTL_OPEN, RTL_CLOSE = f'<div dir="rtl" lang="{LANG}">', "</div>"
LTR_OPEN, LTR_CLOSE = '<span dir="ltr">', "</span>"
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})")
# Code spans first, so that a $ inside code is not read as math; display math ($$...$$) is left
# alone (MathJax centres it and lays it out left to right); inline math is wrapped like code.
INLINE = re.compile(r"(?P<code>(?<!`)(?P<ticks>`+)(?!`)[^\n]+?(?<!`)(?P=ticks)(?!`))"
                    r"|(?P<display>(?<!\\)\$\$(?s:.+?)(?<!\\)\$\$)"
                    r"|(?P<math>(?<!\\)\$[^$\n]+?(?<!\\)\$|\\\([^\n]+?\\\))")


def _isolate_ltr(prose: str) -> str:
    """Wrap inline code and inline math in an LTR span: inside RTL text a span like
    `--flag` or $K + 1$ would otherwise have its edge characters moved to the wrong end."""
    def wrap(match: re.Match) -> str:
        return match[0] if match["display"] else f"{LTR_OPEN}{match[0]}{LTR_CLOSE}"
    return INLINE.sub(wrap, prose)


def _blocks(text: str) -> list[tuple[str, str]]:
    """Split Markdown into ("prose", ...) and ("code", ...) parts at top-level fenced code blocks."""
    blocks: list[tuple[str, str]] = []
    lines: list[str] = []
    fence = None
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


# --- printed lines ---------------------------------------------------------------------------
# A notebook's output area is a left-to-right <pre>: a printed Persian line is laid out by the
# Unicode bidi algorithm with no direction of its own, so "تمرین 1a" splits into "1 … a", a
# "1.92252e-12" breaks at its sign and an array's elements come out reversed. ``isolate_line``
# puts the line in a right-to-left isolate (U+2067 … U+2069) and every left-to-right run in it
# (a number, an array, a name, an English word) in a left-to-right isolate (U+2066 … U+2069).
# It is a function of the printed text alone, so a live print (``messages.say``) and a stored
# output translated by the Persian build (``outputs.translate_output``) come out identical.
LRI, RLI, PDI = "\u2066", "\u2067", "\u2069"
ISOLATES = re.compile(f"[{LRI}{RLI}\u2068{PDI}]")
RTL_LETTER = re.compile(r"[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]")  # Hebrew and Arabic script
# A left-to-right run: from a Latin, Greek or Cyrillic letter or a digit to the last such character
# before the next right-to-left letter (what lies between, spaces and punctuation, goes with it).
_STRONG = r"[0-9A-Za-z\u00C0-\u024F\u0370-\u03FF\u0400-\u04FF]"
_RUN = re.compile(rf"{_STRONG}(?:[^\n\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]*{_STRONG})?")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
# columns padded apart: a table row keeps its left-to-right order. Not a table: a label padded after its
# colon ("خروجی شما:  [...]") or the padding numpy puts between an array's elements ("[0.     0.5]").
_TABLE_GAP = re.compile(r"[^\s:] {2,}\S")
_BRACKETED = re.compile(r"\[[^\[\]]*\]|\([^()]*\)")
_TRAILING_DOT = re.compile(r"\. *(?=[\])])")  # an array's last element "0." before its closing bracket


def _widen(line: str, start: int, end: int, lo: int, hi: int) -> tuple[int, int]:
    """Grow the run ``line[start:end]``, within ``line[lo:hi]``, over what belongs to its value: a sign
    before a number ("-0.5"), brackets or quotes whose partner is inside ("[0. 1.]", "'tvd'"), a
    bracketed value ("(x)"), a closing "×" or "%"."""
    changed = True
    while changed:
        changed = False
        run = line[start:end]
        before, after = line[start - 1:start] if start > lo else "", line[end:end + 1] if end < hi else ""
        for opening, closing in _PAIRS.items():
            if run.count(opening) > run.count(closing) and after == closing:
                end, changed = end + 1, True
            elif run.count(closing) > run.count(opening) and before == opening:
                start, changed = start - 1, True
        for quote in "'\"":  # a quoted value: "'tvd'"
            if run.count(quote) % 2 and after == quote:
                end, changed = end + 1, True
            elif run.count(quote) % 2 and before == quote:
                start, changed = start - 1, True
        if changed:
            continue
        trail = _TRAILING_DOT.match(line, end, hi)  # numpy's "0.]", or "0.    ]" when it pads the columns
        if after in ("×", "%"):
            end, changed = end + 1, True  # "1.60×", "5 %"
        elif trail:
            end, changed = trail.end(), True
        elif before in _PAIRS and after == _PAIRS[before]:
            start, end, changed = start - 1, end + 1, True  # a bracketed value: "[0. 1. 0.5]", "(x)"
        elif before in ("-", "+", "−") and line[start].isdigit():
            start, changed = start - 1, True
    return start, end


def _unmatched(text: str) -> list[int]:
    """Where ``text`` has a bracket without its partner ("0.624 (202 draft" -> [6])."""
    stack: list[int] = []
    lonely = []
    closers = {v: k for k, v in _PAIRS.items()}
    for i, char in enumerate(text):
        if char in _PAIRS:
            stack.append(i)
        elif char in closers:
            if stack and text[stack[-1]] == closers[char]:
                stack.pop()
            else:
                lonely.append(i)
    return sorted(lonely + stack)


def _runs(line: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """The left-to-right runs of ``line[lo:hi]`` as (start, end): widened (``_widen``), and split at a
    bracket whose partner lies outside the run (it belongs to the right-to-left text around it)."""
    found: list[tuple[int, int]] = []
    for match in _RUN.finditer(line, lo, hi):
        if found and match.start() < found[-1][1]:
            continue  # inside the previous run, which a bracket or quote widened over it
        start, end = _widen(line, *match.span(), lo, hi)
        lonely = [start + i for i in _unmatched(line[start:end])]
        if not lonely:
            found.append((start, end))
            continue
        for a, b in zip([start - 1] + lonely, lonely + [end]):
            found += _runs(line, a + 1, b)
    return found


def strip_isolates(text: str) -> str:
    """``text`` without the bidi isolate characters ``isolate_line`` adds."""
    return ISOLATES.sub("", text)


def _is_table_row(line: str) -> bool:
    """Whether ``line`` is a row of padded columns, once its bracketed values are set aside."""
    text, previous = line.strip(), None
    while text != previous:  # innermost brackets first: "[[0.  1.]]"
        previous, text = text, _BRACKETED.sub("[]", text)
    return bool(_TABLE_GAP.search(text))


def isolate_line(line: str) -> str:
    """One printed line laid out in reading order: unchanged without a right-to-left letter; else each
    left-to-right run in an LRI … PDI and (unless the line is a table row, whose columns read left to
    right) the line after its indent in an RLI … PDI. Idempotent: isolates already there are redone."""
    line = strip_isolates(line)
    if not RTL_LETTER.search(line):
        return line
    out, at = [], 0
    for start, end in _runs(line, 0, len(line)):
        out += [line[at:max(start, at)], LRI, line[max(start, at):end], PDI]
        at = end
    body = "".join(out) + line[at:]
    indent = body[:len(body) - len(body.lstrip(" "))]
    if _is_table_row(line):
        return body
    return f"{indent}{RLI}{body[len(indent):]}{PDI}"


def isolate_text(text: str) -> str:
    """``isolate_line`` on each line of ``text``, line ends kept."""
    return "".join(isolate_line(line[:len(line) - len(ending)]) + ending
                   for line in text.splitlines(keepends=True)
                   for ending in [line[len(line.rstrip("\r\n")):]])
