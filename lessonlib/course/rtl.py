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
