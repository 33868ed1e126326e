"""The catalogue of the library's sentences, ``locale/fa/messages.po``, found by reading the code.

Every sentence the course library shows a student is an English template passed to
``messages._``, ``messages.say`` or ``messages.N_`` with a string literal (see ``messages``).
``scan`` reads the modules of ``lessonlib/course`` (AST, no import) and collects those literals;
a call whose first argument is anything else (an f-string, a variable, a concatenation) is a
problem it reports, so no sentence reaches a student without passing through the catalogue.
A few templates are data, not calls: the names of the negative controls (``wrong.CATALOGUE``)
and of the gallery's two exact samplers, which the checks print (``data_templates``). The
gallery's bugs keep their English names, as the lesson's table of them does (``ENGLISH_NAMES``).

    python -m lessonlib.course.message_catalogue           # merge new templates into messages.po
    python -m lessonlib.course.message_catalogue --check   # exit 1: a template without a current translation

``merge`` adds a new template as an empty entry, keeps every translation, and marks an entry
whose template is gone obsolete (``#~``: kept to copy from). ``problems`` lists what keeps the
catalogue from being complete: non-literal calls, templates with a placeholder that is not a
plain name (``{case!r}``, ``{s[alpha]}``: format the value first), and templates whose Persian is
missing, fuzzy or has another set of placeholders than the English.
"""
from __future__ import annotations

import ast
import collections
import pathlib
import re
import string
import sys

import polib

from lessonlib import cli, paths
from lessonlib.course import messages
from lessonlib.jsonio import write_atomic

PACKAGE = paths.ROOT / "lessonlib" / "course"
# messages.py is the API itself (its _ and say pass templates on); claims.py translates the
# notebooks' claim sentences, whose catalogue is claims.po (lessonlib.course.claim_catalogue)
SKIP = ("messages.py", "claims.py")
CALLS = ("_", "say", "N_")
CATALOGUE = messages.LOCALE / "fa" / "messages.po"
PROSE = re.compile(r"(?<![\w'])[a-z]{2,}(?:[ ,;:]+[a-z]{2,}){2,}(?![\w'])")  # three lowercase English words in a row
HEADER = """\
Persian translation of the course library's sentences (the course on speculative decoding and EAGLE).

One entry per English template the library shows a student: a check's ✓/✗ line, its cases,
expected/got labels and hints, the widgets' text, the exercise prompt (the code passes it to
messages._ / say / N_; lessonlib.course.message_catalogue finds it). msgid is the English
template, msgstr the Persian. Keep every placeholder ({name}, {n:.3g}) exactly, and the numbers,
identifiers, formulas and backticked code of the English; render terms as locale/fa/glossary.tsv
says. An empty or fuzzy msgstr is not used: the student then reads the English.
After changing the code run: python -m lessonlib.course.message_catalogue"""

# the first line every notebook prints (core.backend.describe: the backend, then threads.describe), as
# whole-line templates: the device stays as it is, the words around it are translated
DESCRIBE = tuple(f"running on: {{device}}; {threads}" for threads in (
    "{n} torch thread (course default; LESSONLIB_THREADS overrides)",
    "{n} torch threads (course default; LESSONLIB_THREADS overrides)",
    "{n} torch thread (LESSONLIB_THREADS={n})", "{n} torch threads (LESSONLIB_THREADS={n})",
    "torch's default thread count (LESSONLIB_THREADS=0)"))


def _name(func: ast.expr) -> str | None:
    """``_`` / ``say`` / ``N_`` called as a name or as ``messages.X``; None for any other call."""
    if isinstance(func, ast.Name) and func.id in CALLS:
        return func.id
    if isinstance(func, ast.Attribute) and func.attr in CALLS and isinstance(func.value, ast.Name) \
            and func.value.id == "messages":
        return func.attr
    return None


def scan_source(source: str, where: str) -> tuple[dict[str, list[str]], list[str]]:
    """({template: ["file:line", ...]}, problems) of one module's source."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    problems = []
    for node in ast.walk(ast.parse(source, where)):
        if not isinstance(node, ast.Call) or _name(node.func) is None:
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            found[first.value].append(f"{where}:{node.lineno}")
        else:  # an f-string, a name, a concatenation: the scan cannot see the sentence
            problems.append(f"{where}:{node.lineno}: {_name(node.func)}(...) needs a string literal as its first "
                            f"argument, got {ast.unparse(first) if first is not None else 'nothing'}")
    return dict(found), problems + _shadowed(source, where)


def _shadowed(source: str, where: str) -> list[str]:
    """Functions that call ``_(...)`` and also bind ``_`` (``a, _ = f()``, ``for _ in ...``): there ``_`` is
    the throwaway, not the translation, and the call fails when it runs."""
    problems = []
    for func in ast.walk(ast.parse(source, where)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = list(ast.walk(func))
        binds = [n for n in nodes if isinstance(n, ast.Name) and n.id == "_" and isinstance(n.ctx, ast.Store)]
        calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_" for n in nodes)
        if binds and calls:
            problems.append(f"{where}:{binds[0].lineno}: {func.name}() binds _ and calls _(...) for a translation: "
                            "name the throwaway otherwise")
    return problems


def scan(package: pathlib.Path = PACKAGE) -> tuple[dict[str, list[str]], list[str]]:
    """Every template under ``package`` (its .py files, recursively, less ``SKIP``) and the problems."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    problems = []
    for path in sorted(pathlib.Path(package).rglob("*.py")):
        if path.name in SKIP and path.parent == pathlib.Path(package):
            continue
        where = path.relative_to(paths.ROOT).as_posix() if path.is_relative_to(paths.ROOT) else str(path)
        templates, trouble = scan_source(path.read_text(encoding="utf-8"), where)
        for template, places in templates.items():
            found[template] += places
        problems += trouble
    return dict(found), problems


def english_names() -> list[str]:
    """The gallery's bugs: the checks print their names in English in every language, because the
    lesson's table lists them (each beside the public thread it reproduces) under those names."""
    from lessonlib.course import gallery

    return [sampler.name for sampler in gallery.GALLERY if sampler.bug]


def bare_prose(source: str) -> list[str]:
    """String literals of a module that read as English prose (``PROSE`` outside backticks) but are
    not templates: not in a ``_`` / ``say`` / ``N_`` call, not a docstring, not a dict key or a
    subscript (a key is looked up, never shown). Such a literal would reach a student in English."""
    tree = ast.parse(source)
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) is not None:
            exempt.update(id(sub) for arg in node.args[:1] for sub in ast.walk(arg))
        elif isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body \
                and isinstance(node.body[0], ast.Expr):
            exempt.add(id(node.body[0].value))
        elif isinstance(node, ast.Dict):
            exempt.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            exempt.add(id(node.slice))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt
            and PROSE.search(re.sub(r"`[^`]*`", "", node.value))]


def data_templates() -> dict[str, list[str]]:
    """Sentences that live in data: the names of the negative controls and of the gallery's exact
    samplers (the checks print them), the exercises' stub messages (``BEGIN SOLUTION`` markers) and the
    record's provenance line (``bench.record.quoted``)."""
    from lessonlib.bench import profile, record
    from lessonlib.course import exercises, gallery, gallery_detect
    from lessonlib.course.checks import wrong

    found: dict[str, list[str]] = collections.defaultdict(list)
    for message, notebooks in exercises.solution_messages().items():
        found[message] += notebooks
    for entry in wrong.CATALOGUE:
        if entry.control:  # printed in the ✓ line; the other entries appear only in the instructor notes
            found[entry.name].append(f"lessonlib/course/checks/wrong/ex{entry.exercise[0]}.py")
    for sampler in gallery.GALLERY:
        if not sampler.bug:
            found[sampler.name].append("lessonlib/course/gallery.py")
        found[sampler.symptom].append("lessonlib/course/gallery.py")  # notebook 01 prints every symptom
    for label in gallery_detect.TWO_SIDED:
        found[label].append("lessonlib/course/gallery_detect.py")
    for line in DESCRIBE:
        found[line].append("lessonlib/core/backend.py")
    # the bench layer cannot import messages: the lines and names a notebook shows of it (outputs.localise)
    found[record.QUOTED + "{reports}"].append("lessonlib/bench/record.py")
    for name in profile.NAMES:
        found[name].append("lessonlib/bench/profile.py")
    return dict(found)


def templates(package: pathlib.Path = PACKAGE) -> tuple[dict[str, list[str]], list[str]]:
    """``scan`` plus ``data_templates``."""
    found, problems = scan(package)
    for template, places in data_templates().items():
        found.setdefault(template, []).extend(places)
    return found, problems


def placeholder_problem(template: str) -> str | None:
    """Why ``template`` cannot be a catalogue template (None when it can): a placeholder must be a
    plain name, so the translation can place it freely and ``translate_output`` can find it."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        return f"does not parse as a format string ({error})"
    for _literal, name, _spec, conversion in parsed:
        if name is not None and (not name.isidentifier() or conversion is not None):
            return f"placeholder {{{name}{'!' + conversion if conversion else ''}}} is not a plain name"
    return None


def _placeholders(template: str) -> collections.Counter:
    return collections.Counter(messages.fields(template))


def pending(lang: str = "fa", package: pathlib.Path = PACKAGE, locale: pathlib.Path = messages.LOCALE) -> list[str]:
    """The library's sentences with no current ``lang`` translation yet: they print in English in
    that edition until translated (not an error: writing a message never waits for its translation)."""
    found, _ = templates(package)
    table = messages.catalogue(lang, locale)
    return [f"{places[0]}: no current {lang} translation of {template!r}" for template, places in sorted(found.items())
            if not placeholder_problem(template) and template not in table]


def problems(lang: str = "fa", package: pathlib.Path = PACKAGE, locale: pathlib.Path = messages.LOCALE) -> list[str]:
    """What is wrong with the library's catalogue in ``lang`` (empty: nothing): a call the scan cannot
    read, a template with a placeholder that is not a plain name, a translation whose placeholders
    differ from its English. A sentence with no translation yet is ``pending``, not wrong."""
    found, trouble = templates(package)
    table = messages.catalogue(lang, locale)
    for template, places in sorted(found.items()):
        why = placeholder_problem(template)
        if why:
            trouble.append(f"{places[0]}: {template!r} {why}")
        elif template not in table:
            continue  # pending
        elif _placeholders(table[template]) != _placeholders(template):
            trouble.append(f"{places[0]}: the {lang} translation of {template!r} has placeholders "
                           f"{sorted(_placeholders(table[template]).elements())}, the English "
                           f"{sorted(_placeholders(template).elements())}")
    return trouble


def merge(found: dict[str, list[str]], path: pathlib.Path = CATALOGUE) -> polib.POFile:
    """The catalogue at ``path`` updated to the templates ``found``: new ones empty, translations kept,
    vanished ones obsolete, entries in the order of the code."""
    old = polib.pofile(str(path), wrapwidth=0) if path.exists() else None
    po = polib.POFile(wrapwidth=0)
    po.header = HEADER
    po.metadata = {"Project-Id-Version": "lessonlib course", "Language": path.parent.name, "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit",
                   "X-Source": "messages._ / say / N_ in lessonlib/course (lessonlib.course.message_catalogue)"}
    known = {e.msgid: e for e in old} if old is not None else {}
    for template, places in found.items():
        files = dict.fromkeys(place.rsplit(":", 1)[0] for place in places)  # no line numbers: no churn on every edit
        entry = polib.POEntry(msgid=template, msgstr="", occurrences=[(name, "") for name in files])
        if template in known:
            entry.msgstr, entry.flags = known[template].msgstr, list(known[template].flags)
        po.append(entry)
    for msgid, entry in known.items():
        if msgid not in found and entry.msgstr:
            entry.obsolete = True
            po.append(entry)
    return po


def write(path: pathlib.Path = CATALOGUE) -> pathlib.Path:
    """Merge the code's templates into ``path`` (atomically); returns the path."""
    found, _problems = templates()
    write_atomic(path, merge(found, path).__unicode__())
    messages.catalogue.cache_clear()
    return path


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.message_catalogue",
                                description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report templates without a current translation")
    args = parser.parse_args(argv)
    if not args.check:
        print(f"wrote {write().relative_to(paths.ROOT)}")
    trouble = problems()
    for line in trouble:
        print(line)
    print("messages.po is complete" if not trouble else f"{len(trouble)} problems")
    return 1 if trouble else 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.message_catalogue"))
