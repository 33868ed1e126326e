"""Printed English back into the student's language: a stored output matched against the templates.

The Persian build copies the English notebooks' stored outputs; ``translate_output`` turns each
printed line into the language through the same catalogues ``messages.say`` reads, by matching the
line against the English templates (each placeholder a named group) and filling the translation
with the values found, so a stored run reads the same as a re-run prints, bidi isolates included
(``rtl.isolate_line``). ``markdown`` does the same for a displayed Markdown, line by line and cell by
cell of its tables, and lays it out right to left. A line no template rendered stays as it is.
"""
from __future__ import annotations

import functools
import re
import string
from typing import NamedTuple

from lessonlib.course import messages
from lessonlib.course.rtl import isolate_text, rtl_markdown, strip_isolates

# A placeholder's value: as short as the line allows, but never ending inside brackets, so an
# interval's "1.60× [1.50, 1.70]" is one value even where the template goes on with ", {next}";
# nor inside quotes, so a check's case name 'alpha 0.8, K 4: c = 0 vs c = 0.2' is one value
# before the ": " that follows it (a quote only where no letter touches it from outside: "draft's").
_VALUE = r"""(?:(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)"[^"\n]*"(?!\w)|\[[^\[\]\n]*\]|[^\[\]\n])+?"""
# A template's last value runs up to " — " or the end of the line, never across " — " (even when
# ``_whole_line`` fullmatches): what follows the dash is another template, a claim's verdict.
_LAST_VALUE = r"(?:[^\[\]\n—]|(?<! )—|\[[^\[\]\n]*\])+?"  # no " —" inside (a lookahead per character is slow)


class _Template(NamedTuple):
    """One translated template, ready to match its English rendering."""

    pattern: re.Pattern  # the English rendering, placeholders as named groups
    translated: str  # the template in the language
    key: str  # its longest literal piece: a cheap substring test before the regex
    free: bool  # may be found inside a longer line (``_free_text``)


class _Table(NamedTuple):
    by_length: list[_Template]  # longest pattern first
    by_words: list[_Template]  # most literal words first: "{case}: path" over "{act} accepted {n}"
    searchable: list[_Template]  # those ``translate_line`` may find inside free text, longest first


FREE_TEXT_WORDS = 3  # a template shorter than this many words is translated only as a whole line or value


def _free_text(english: str, words: int) -> bool:
    """May ``english`` be found inside a longer line? Yes for ``FREE_TEXT_WORDS`` words or more (a short
    case name such as "token {i}" or a label such as "best K" would also match English that a re-run
    prints untranslated), and for a claim's verdict ("— holds here"), which the dash sets apart."""
    return words >= FREE_TEXT_WORDS or english.startswith("— ")


def _compile(english: str) -> re.Pattern:
    """The regex of ``english``'s rendering: each placeholder a named group (a repeated one a backreference)."""
    pieces = list(string.Formatter().parse(english))
    parts = [r"(?<!\w)"]  # a template matches whole words only ("above" not in "aboveground")
    for i, (literal, name, _, _) in enumerate(pieces):
        parts.append(re.escape(literal))
        if name is None:
            continue
        if f"(?P<{name}>" in "".join(parts):
            parts.append(f"(?P={name})")
        elif i == len(pieces) - 1 or not pieces[i + 1][0]:  # nothing after it: up to " — " or the end
            parts.append(f"(?P<{name}>{_LAST_VALUE})(?= — |$)")
        else:
            parts.append(f"(?P<{name}>{_VALUE})")
    parts.append(r"(?!\w)")
    return re.compile("".join(parts))


@functools.cache
def _patterns(lang: str) -> _Table:
    """Every translated template of ``lang``, compiled, in the three orders the matching uses."""
    templates = []
    for english, translated in messages.catalogue(lang).items():
        literals = [literal for literal, _, _, _ in string.Formatter().parse(english)]
        words = sum(len(re.findall(r"[A-Za-z]{2,}", literal)) for literal in literals)
        templates.append(_Template(_compile(english), translated, max((x.strip() for x in literals), key=len),
                                   _free_text(english, words)))
    by_length = sorted(templates, key=lambda t: -len(t.pattern.pattern))
    literal = lambda t: len(t.pattern.pattern.replace(_LAST_VALUE, "").replace(_VALUE, ""))  # noqa: E731
    return _Table(by_length, sorted(by_length, key=lambda t: -literal(t)), [t for t in by_length if t.free])


def _column(value: str, spec: str) -> str:
    """A column's value ("{name:<36}", "{x:>42}", "{n:9}") laid out again for its translation: the
    padding the English layout added is dropped, the rest kept, and the width applied to what is left.
    Without an alignment character the English value's padding tells it (a number pads on the left)."""
    align = spec[0] if spec[0] in "<>^" else (">" if value[:1].isspace() and not value[-1:].isspace() else "<")
    width = spec.lstrip("<>^")
    if align == "<":  # padding on the right; a leading indent is the value's own
        return value[:len(value) - len(value.lstrip())] + format(value.strip(), "<" + width)
    return format(value.strip(), align + width)


def _fill(template: str, found: dict[str, str]) -> str:
    """``template`` with each placeholder replaced by the text found for it (already formatted)."""
    out = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        out.append(_column(found[name], spec) if re.fullmatch(r"[<>^]?\d+", spec or "") else found[name])
    return "".join(out)


def _split_list(text: str) -> list[str]:
    """``text`` split at each "; " outside brackets, parentheses and quotes (one item if none)."""
    items, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"" and (i == 0 or not text[i - 1].isalnum()):
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth == 0 and text.startswith("; ", i):
            items.append(text[start:i])
            start = i + 2
    return items + [text[start:]]


def _whole_line(text: str, lang: str, value: bool) -> str | None:
    """``text`` in ``lang`` if one template renders all of it, else None. A line is matched only by a
    template that begins with words (a check's "✓ exercise 1a: {verified}", "  hint: {hint}"; one that
    begins with a placeholder would match too much); a placeholder's value (``value``) by any, and a
    "; "-separated value item by item (a ✓ line's "scalar-q residual (caught: …); always accept (caught: …)")."""
    full = text.rstrip("\n")
    if value and full.strip() != full:  # a value padded to a column: the words inside, the padding kept
        inner = _whole_line(full.strip(), lang, value)
        return None if inner is None else full[:len(full) - len(full.lstrip())] + inner + text[len(full.rstrip()):]
    if value and len(full) > 2 and full[0] == full[-1] and full[0] in "'\"":  # a quoted name: 'random case 3'
        inner = _whole_line(full[1:-1], lang, value)  # quoted again as repr quotes it, the ZWNJ left as it is
        return None if inner is None else repr(inner).replace("\\u200c", "\u200c") + text[len(full):]
    items = _split_list(full) if value else [full]
    if len(items) > 1:  # a list of whole templates first: one template's values would swallow the separators
        done = [_whole_line(item, lang, value) for item in items]
        if None not in done:
            return "; ".join(done) + text[len(full):]  # type: ignore[arg-type]
    indent = full[:len(full) - len(full.lstrip(" "))]  # the indent of a ✓ line's later items stays as it is
    for pattern, translated, key, _ in _patterns(messages._checked(lang)).by_words:
        if key not in full or (not value and pattern.pattern.startswith(r"(?<!\w)(?P<")):
            continue
        for head, body in (("", full), (indent, full[len(indent):])) if indent else (("", full),):
            match = pattern.fullmatch(body)
            if match is not None:
                return head + _fill(translated, _values(match, lang)) + text[len(full):]
    return None


def _values(match: re.Match, lang: str) -> dict[str, str]:
    """Each placeholder's text in ``lang``: a value word (``word``), or translated as a value."""
    return {name: messages.words(lang).get(text) or _whole_line(text, lang, True) or translate_line(text, lang)
            for name, text in match.groupdict().items()}


def translate_line(line: str, lang: str) -> str:
    """One printed line in ``lang``: a template that renders the whole line first (``_whole_line``), else
    every span that a translated template rendered is replaced."""
    whole = _whole_line(line, lang, False)
    if whole is not None:
        return whole
    for pattern, translated, key, _ in _patterns(messages._checked(lang)).searchable:
        if key not in line:
            continue
        match = pattern.search(line)
        if match is not None:
            head, tail = line[:match.start()], line[match.end():]
            middle = _fill(translated, _values(match, lang))  # a value can itself be a translated word ("above")
            return translate_line(head, lang) + middle + translate_line(tail, lang)
    return line


FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def translate_output(text: str, lang: str) -> str:
    """Printed English (a stored stream output) in ``lang``, line by line; unknown lines unchanged, and
    the lines of a fenced block (a model's reply, printed between ``` lines) verbatim: what a model
    wrote is not the course speaking, even where a line of it reads like a template ("return {what}")."""
    if messages._checked(lang) == messages.SOURCE:
        return text
    out, fence = [], None
    for line in text.splitlines(keepends=True):
        marker = FENCE.match(line)
        if fence is None and marker:
            fence = marker[1]
        elif fence is not None:
            fence = None if marker and marker[1].startswith(fence) and not line.strip().strip(fence[0]) else fence
        elif line.strip():
            line = isolate_text(translate_line(line, lang))
        out.append(line)
    return "".join(out)


def _table_cell(text: str, lang: str) -> str:
    """One cell of a Markdown table in ``lang``: a template that renders all of it (its name may begin
    with a placeholder: "{name} (shipped)"), else translated as a line."""
    if not text or set(text) <= set("-: "):
        return text
    return _whole_line(text, lang, True) or translate_line(text, lang)


def markdown(text: str, lang: str | None = None) -> str:
    """Markdown a cell displays (``display(Markdown(...))``), in ``lang`` (default: the current one):
    English lines and table cells translated through the catalogues as printed lines are, a Persian
    line (``say``'s) kept, bidi isolates dropped (Markdown is laid out by its own ``dir``), and the
    whole wrapped right to left (``rtl.rtl_markdown``). The Persian build calls it on the stored
    English, so a stored display reads as a re-run shows it."""
    lang = messages._checked(lang or messages.language())
    if lang == messages.SOURCE:
        return text
    lines = []
    for line in strip_isolates(text).split("\n"):
        row = line.strip()
        if row.startswith("|") and row.endswith("|") and len(row) > 1:
            line = "| " + " | ".join(_table_cell(c.strip(), lang) for c in row[1:-1].split("|")) + " |"
        elif row:
            line = translate_line(line, lang)
        lines.append(line)
    return rtl_markdown("\n".join(lines))


def localise(text: str) -> str:
    """Printed English from a lower layer (a benchmark's line, the machine's description) in the current
    language."""
    return translate_output(text, messages.language())
