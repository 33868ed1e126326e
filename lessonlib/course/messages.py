"""What the course says to a student, in the student's language: one lookup, English the source.

Every sentence the library prints to a student (a check's ✓/✗ line, its hints, the expected /
got labels, widget labels, the exercise prompts, a ``claims.claim`` verdict) is an English
*template* written in the code, passed through ``_`` (or ``say``) at the moment it is shown::

    print(say("✓ {name}: {n} cases passed", name=name, n=len(cases)))

``_`` returns the template in the current language, ``say`` also formats it. The translations
live in gettext catalogues beside the notebooks' (``locale/fa/messages.po`` for the library's
sentences, ``locale/fa/claims.po`` for the notebooks' claim sentences): ``msgid`` the English
template, ``msgstr`` the Persian with the same placeholders. An entry that is empty or fuzzy is
not used, so a sentence without a current translation prints in English, never half-translated.

The language is one setting: ``use("fa")`` (the first code cell of every Persian notebook calls
it; the build inserts that cell), or the environment variable ``LESSONLIB_LANG`` at import.
English is the default.

``outputs.translate_output`` turns printed English back into the language through the same
catalogues, by matching each line against the templates: the Persian build uses it for the stored
outputs it copies from the English notebooks, so a stored run reads the same as a re-run.
"""
from __future__ import annotations

import functools
import os
import pathlib
import string

import polib

from lessonlib import paths
from lessonlib.course.rtl import isolate_text

SOURCE = "en"
LANGUAGES = (SOURCE, "fa")
LOCALE = paths.ROOT / "locale"
CATALOGUES = ("messages.po", "claims.po")  # the library's sentences; the notebooks' claim sentences
ENV = "LESSONLIB_LANG"


def _checked(lang: str, name: str = "lang") -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"{name} must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


_state = {"lang": _checked(os.environ.get(ENV, SOURCE) or SOURCE, f"environment variable {ENV}")}


def use(lang: str) -> str:
    """Speak ``lang`` from now on (``"en"`` or ``"fa"``); returns the language set."""
    _state["lang"] = _checked(lang)
    return lang


def language() -> str:
    """The language the course speaks now."""
    return _state["lang"]


def _entries(lang: str, locale: pathlib.Path) -> list[polib.POEntry]:
    """Every current entry (non-empty, not fuzzy, not obsolete) of ``lang``'s sentence catalogues."""
    entries = []
    for name in CATALOGUES:
        path = pathlib.Path(locale) / lang / name
        if not path.exists():
            continue
        try:
            po = polib.pofile(str(path), wrapwidth=0)
        except (OSError, ValueError) as error:
            raise ValueError(f"catalogue {path} does not parse: {error}") from None
        entries += [e for e in po if e.msgid and e.msgstr.strip() and not e.fuzzy and not e.obsolete]
    return entries


@functools.cache
def catalogue(lang: str, locale: pathlib.Path = LOCALE) -> dict[str, str]:
    """{English template: translation} of every current entry; value words (``words``) apart."""
    if _checked(lang) == SOURCE:
        return {}
    return {e.msgid: e.msgstr for e in _entries(lang, locale) if e.msgctxt != VALUE}


def _(english: str, lang: str | None = None) -> str:
    """``english`` (a template) in ``lang`` (default: the current language); English when untranslated."""
    if not isinstance(english, str):
        raise ValueError(f"english must be a template string, got {english!r}")
    return catalogue(_checked(lang or language())).get(english, english)


def say(english: str, lang: str | None = None, **values) -> str:
    """``_(english)`` formatted with ``values`` (the placeholders of the English template); in a
    right-to-left language each line bidi-isolated (``rtl.isolate_line``), so it is drawn in reading order."""
    return printed(_(english, lang).format(**values), lang)


def printed(text: str, lang: str | None = None) -> str:
    """A line (or lines) composed for printing in ``lang`` (default: the current language), laid out for
    it: bidi-isolated in a right-to-left language (``rtl.isolate_text``), as ``say`` lays out its own."""
    return text if _checked(lang or language()) == SOURCE else isolate_text(text)


def N_(english: str) -> str:
    """Mark ``english`` as a template and return it unchanged (gettext's ``gettext_noop``).

    For a sentence defined once and shown later (a module-level hint such as ``checks.ex1.RESIDUAL``):
    it stays English in the code, where it may also be compared or used as a key, and is turned into
    the current language where it is shown, by ``translated``. The catalogue scan finds it like ``_``."""
    return english


def translated(text: str, lang: str | None = None) -> str:
    """``text`` in ``lang`` if it is a template (usually one marked with ``N_``), else ``text`` as it is.

    Unlike ``_`` it takes any value: a sentence already translated, a value or a student's own error
    message passes through unchanged, so it is safe where a shown string may or may not be a template."""
    if not isinstance(text, str):
        return text
    return catalogue(_checked(lang or language())).get(text, text)


def fields(template: str) -> list[str]:
    """The placeholder names of a template, in order ("{n} of {total:.0f}" -> ["n", "total"])."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


# --- value words -----------------------------------------------------------------------------
# A word the code computes and a template shows as a placeholder's whole value (``claims.order``'s
# "above" / "below" / "overlaps"). Its entry carries ``msgctxt "value"``: it is translated only as a
# whole value (``word``; ``translate_line`` inside a matched template), never as free text, so the
# "above" of an untranslated English line stays English, as a re-run prints it.
VALUE = "value"


@functools.cache
def words(lang: str, locale: pathlib.Path = LOCALE) -> dict[str, str]:
    """{English word: translation} of every current ``msgctxt "value"`` entry of the catalogues."""
    if _checked(lang) == SOURCE:
        return {}
    return {e.msgid: e.msgstr for e in _entries(lang, locale) if e.msgctxt == VALUE}


def word(value: object, lang: str | None = None) -> object:
    """A value as a template shows it in ``lang``: a value word translated, anything else unchanged."""
    if not isinstance(value, str):
        return value
    return words(_checked(lang or language())).get(value, value)
