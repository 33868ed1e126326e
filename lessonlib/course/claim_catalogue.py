"""The notebooks' claim sentences as one gettext catalogue: ``locale/fa/claims.po``.

Every finding a notebook prints goes through ``claims.claim(sentence, holds, **values)``, whose
sentence is one English template; any other sentence a notebook prints goes through
``messages.say(template, **values)``, collected the same way. This module finds every such
template in the code cells of the English notebooks (the lesson and the solutions; the exercises
are generated from them) and keeps the catalogue in step with them, as ``translate extract`` does
for the markdown cells::

    python -m lessonlib.course.claim_catalogue extract   # create/update locale/fa/claims.po
    python -m lessonlib.course.claim_catalogue check     # exit 1 on anything that is not complete and current

One entry per distinct template: ``msgid`` the English template exactly, ``msgstr`` the Persian
with the same placeholders (``{name:spec}``), ``#:`` lines where the notebooks use it. The words
``claims`` itself prints (the verdicts; ``order``'s "above" / "below" / "overlaps", as value words
with ``msgctxt "value"``) are entries too. The English is the key, so a changed English sentence
cannot keep a translation made for the old one: it is a new, empty entry, and the old entry becomes
obsolete (``#~``, translation kept to copy from); a translation is used only for the exact English
it was made for, whatever its flags say.

A claim whose sentence is not a string literal (an f-string, ``name + "..."``, a variable) cannot
be translated from a catalogue: ``scan`` reports it as an error, naming the notebook, cell and
line; write it as one template with the varying part as a placeholder.
"""
from __future__ import annotations

import ast
import pathlib
import re
import string
import sys
from collections import Counter

import nbformat
import polib

from lessonlib import cli
from lessonlib.course import claims, messages
from lessonlib.course.catalogs import LANG, ROOT, english_notebooks
from lessonlib.jsonio import write_atomic

CATALOGUE = "claims.po"
COMMAND = "python -m lessonlib.course.claim_catalogue extract"
LIBRARY = "lessonlib/course/claims.py"
# what claims.claim prints besides the sentence: (msgctxt, English)
LIBRARY_WORDS = ([(None, claims.SAYS_HOLDS), (None, claims.SAYS_FAILS), (None, claims.MEASURED), (None, claims.FRAGILE)]
                 + [(messages.VALUE, w) for w in claims.ORDER_WORDS])
HEADER = """\
Persian translation of the notebooks' claim sentences (the course on speculative decoding and EAGLE).

One entry per claims.claim(...) template in the English notebooks' code cells: msgid the English
template, msgstr the Persian. Keep every placeholder ({{name}}, {{name:.3f}}) exactly, and the
numbers, identifiers and formulas of the English; the printed line is the Persian sentence with
this run's values, then the verdict. Entries with msgctxt "value" are words the code computes and
a sentence shows as a value. A changed English sentence is a new empty entry; the translation of
the old one is kept as obsolete (#~) to copy from. After editing run: {command}"""


def path(root: pathlib.Path = ROOT) -> pathlib.Path:
    return pathlib.Path(root) / "locale" / LANG / CATALOGUE


# --- finding the templates ---------------------------------------------------------------------

def _python(source: str) -> str:
    """A code cell as plain Python: IPython magics and shell lines become ``pass`` (same lines)."""
    lines = []
    for line in source.split("\n"):
        stripped = line.lstrip()
        lines.append(line[:len(line) - len(stripped)] + "pass" if stripped[:1] in ("%", "!") else line)
    return "\n".join(lines)


SENTENCE_CALLS = ("claim", "say")  # claims.claim, and messages.say for a notebook's other printed sentences


def _is_claim(call: ast.Call) -> bool:
    """``claim(...)`` / ``say(...)`` or any ``x.claim(...)`` / ``x.say(...)``."""
    func = call.func
    return (isinstance(func, ast.Name) and func.id in SENTENCE_CALLS) or (isinstance(func, ast.Attribute)
                                                                          and func.attr in SENTENCE_CALLS)


def sentences(source: str, where: str) -> tuple[list[str], list[str]]:
    """The literal claim templates of one code cell, in source order, and the errors: each claim
    whose sentence is not a string literal. A cell that does not parse is skipped (no templates)."""
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return [], []
    found, errors = [], []
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_claim(n)),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        given = [k.value for k in call.keywords if k.arg == "sentence"]
        arg = call.args[0] if call.args else (given[0] if given else None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):  # "a" "b" is one Constant already
            found.append(arg.value)
        else:
            shown = ast.unparse(arg) if arg is not None else "nothing"
            errors.append(f"{where}, line {call.lineno}: claim's sentence is not a string literal "
                          f"({shown[:70]}): write it as one template, the varying part a placeholder")
    return found, errors


def scan(root: pathlib.Path = ROOT) -> tuple[dict[tuple[str | None, str], list[tuple[str, str]]], list[str]]:
    """{(msgctxt, template): [(file, cell id), ...]} of every claim in the English notebooks, in
    notebook order, then the library's words; and every error ``sentences`` found."""
    root = pathlib.Path(root)
    found: dict[tuple[str | None, str], list[tuple[str, str]]] = {}
    errors: list[str] = []
    for notebook in english_notebooks(root):
        rel = notebook.relative_to(root).as_posix()
        for index, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
            if cell.cell_type != "code":
                continue
            cell_id = cell.get("id") or f"cell {index}"
            templates, bad = sentences(cell.source, f"{rel}, cell {cell_id}")
            errors += bad
            for template in templates:
                found.setdefault((None, template), []).append((rel, cell_id))
    for context, text in LIBRARY_WORDS:
        found.setdefault((context, text), []).append((LIBRARY, ""))
    return found, errors


# --- printed English that no catalogue can reach ------------------------------------------------

# three English words in a row (a word: two letters or more)
ENGLISH_RUN = re.compile(r"(?<![\w{])[A-Za-z][A-Za-z'-]+(?:[ ,:;()/=-]+[A-Za-z][A-Za-z'-]+){2,}")
TRANSLATING = SENTENCE_CALLS + ("_", "localise", "translated")  # calls whose text the catalogues translate


def _literal_text(node: ast.AST) -> str:
    """The literal text of a string or f-string, each placeholder as "{}" (a word run stops there)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else " {} " for v in node.values)
    return ""


def raw_prints(source: str) -> list[tuple[int, str]]:
    """(line, English) of every run of three or more English words that a ``print(...)`` in one code
    cell shows from a literal outside ``say`` / ``claim`` / ``_`` / ``localise``: text a Persian
    notebook would show in English (a cell that does not parse: nothing)."""
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return []
    found = []

    def visit(node: ast.AST, in_print: bool) -> None:
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in TRANSLATING:
                return
            in_print = in_print or name == "print"
        if in_print and isinstance(node, (ast.Constant, ast.JoinedStr)):
            found.extend((node.lineno, run) for run in ENGLISH_RUN.findall(_literal_text(node)))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, in_print)
    visit(tree, False)
    return found


def untranslatable(root: pathlib.Path = ROOT) -> dict[str, list[str]]:
    """{notebook: ["cell id, line n: English", ...]} of ``raw_prints`` over the English notebooks."""
    root = pathlib.Path(root)
    out: dict[str, list[str]] = {}
    for notebook in english_notebooks(root):
        rel = notebook.relative_to(root).as_posix()
        for index, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
            if cell.cell_type == "code":
                cell_id = cell.get("id") or f"cell {index}"
                out.setdefault(rel, []).extend(f"{cell_id}, line {n}: {text}" for n, text in raw_prints(cell.source))
    return out


# --- the catalogue -------------------------------------------------------------------------------

def new_catalogue() -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.header = HEADER.format(command=COMMAND)
    po.metadata = {"Project-Id-Version": "lessonlib course", "Language": LANG, "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit",
                   "X-Source": "claims.claim(...) in notebooks/00_start_here.ipynb and solutions/*.ipynb"}
    return po


def load(where: pathlib.Path) -> polib.POFile:
    """The catalogue as polib reads it; one that does not parse raises ValueError naming the file."""
    try:
        return polib.pofile(str(where), wrapwidth=0)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"catalogue {where} does not parse ({error}); fix it or restore it from git, "
                         f"then run: {COMMAND}") from None


def _label(context: str | None, text: str) -> str:
    return f"{context}: {text!r}" if context else repr(text)


def merge(po: polib.POFile, found: dict[tuple[str | None, str], list[tuple[str, str]]]) -> list[str]:
    """Bring ``po`` in place to the templates ``found``; return the changes, one line each (empty:
    already in step). New templates get empty entries; a template no notebook uses any more keeps
    its translation as an obsolete entry (one without a translation is dropped); an obsolete entry
    whose template is back is revived. Entries end up in notebook order, obsolete ones last."""
    existing = {(e.msgctxt, e.msgid): e for e in po}
    changes, ordered = [], []
    for key, where in found.items():
        entry = existing.pop(key, None)
        # "file#cell", not "file:cell": polib reads what follows a colon as a line number
        occurrences = [(f"{file}#{cell}" if cell else file, "") for file, cell in where]
        if entry is None:
            entry = polib.POEntry(msgctxt=key[0], msgid=key[1], msgstr="", occurrences=occurrences)
            changes.append(f"new: {_label(*key)}")
        elif entry.obsolete:
            entry.obsolete, entry.occurrences = False, occurrences
            changes.append(f"revived: {_label(*key)}")
        elif entry.occurrences != occurrences:
            entry.occurrences = occurrences
            changes.append(f"moved: {_label(*key)}")
        ordered.append(entry)
    for key, entry in existing.items():
        if entry.obsolete:
            ordered.append(entry)
        elif entry.msgstr.strip():
            entry.obsolete, entry.occurrences = True, []
            ordered.append(entry)
            changes.append(f"obsolete (no notebook uses it, translation kept): {_label(*key)}")
        else:
            changes.append(f"removed (no notebook uses it, had no translation): {_label(*key)}")
    po[:] = ordered
    return changes


def catalogue_for(root: pathlib.Path = ROOT) -> tuple[polib.POFile, list[str], list[str]]:
    """The merged catalogue, the changes ``extract`` would make, and the scan's errors."""
    found, errors = scan(root)
    where = path(root)
    po = load(where) if where.exists() else new_catalogue()
    changes = merge(po, found)
    if not where.exists():  # every entry is new: one line, not one per entry
        changes = [f"new catalogue with {len(found)} entries"]
    return po, changes, errors


def extract(root: pathlib.Path = ROOT) -> tuple[list[str], list[str]]:
    """Create or update ``locale/fa/claims.po`` (written atomically, only when it changed); return
    (changes, errors). The catalogue is written even when there are errors: they name claims that
    are missing from it, not entries that are wrong."""
    po, changes, errors = catalogue_for(root)
    where, text = path(root), str(po)
    if not where.exists() or where.read_text(encoding="utf-8") != text:
        write_atomic(where, text)
    return changes, errors


# --- is each translation complete and faithful ----------------------------------------------------

IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*\b")  # verify_chain, prefix_len
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
ARABIC = re.compile("[يكى]")  # Persian writes ی and ک


def placeholders(template: str) -> Counter:
    """The multiset of a template's placeholders with their format specs ("{n:,}" -> {"n:,": 1})."""
    return Counter(f"{name}:{spec}" for _, name, spec, _ in string.Formatter().parse(template) if name is not None)


def literal(template: str) -> str:
    """The template's own text, its placeholders left out."""
    return "".join(text for text, _, _, _ in string.Formatter().parse(template))


def faults(english: str, persian: str) -> list[str]:
    """What a translation lacks or breaks: other placeholders, a number, identifier or formula
    sign of the English missing, Arabic letters. Empty: fine."""
    try:
        theirs = placeholders(persian)
    except ValueError as error:
        return [f"is not a valid template ({error})"]
    found = []
    if theirs != placeholders(english):
        found.append(f"placeholders {sorted(theirs.elements())} differ from the English "
                     f"{sorted(placeholders(english).elements())}")
    for name, pattern in (("numbers", NUMBER), ("identifiers", IDENTIFIER)):
        missing = Counter(pattern.findall(literal(english))) - Counter(pattern.findall(literal(persian)))
        if missing:
            found.append(f"{name} of the English missing: {sorted(missing.elements())}")
    if english.startswith("— ") and not persian.startswith("— "):
        found.append("drops the leading '— ' of the English (a verdict follows its sentence after it)")
    if ARABIC.search(persian):
        found.append("Arabic ي/ك/ى: Persian writes ی and ک")
    return found


def problems(root: pathlib.Path = ROOT) -> list[str]:
    """What is wrong with the claim catalogue (empty: nothing): a claim that is not a literal, a
    catalogue out of step in any other way than new claims, an obsolete or fuzzy entry, a
    translation unfaithful to its English. A claim with no Persian yet is not wrong but pending
    (``pending``): it prints in English in the Persian edition until it is translated, so writing
    a claim never waits for its translation."""
    po, changes, errors = catalogue_for(root)
    found = [f"not a literal: {e}" for e in errors]
    other = [c for c in changes if not c.startswith("new: ")]  # a new claim is pending, not wrong
    if other:
        found.append(f"{CATALOGUE} is not in step with the notebooks (run: {COMMAND}): " + "; ".join(other))
    for entry in po:
        label = _label(entry.msgctxt, entry.msgid)
        if entry.obsolete:
            found.append(f"obsolete: {label}")
        elif entry.fuzzy:
            found.append(f"fuzzy: {label}")
        elif entry.msgstr.strip():
            found += [f"{label} {fault}" for fault in faults(entry.msgid, entry.msgstr)]
    return found


def pending(root: pathlib.Path = ROOT) -> list[str]:
    """The claims with no Persian yet (shown in English in the Persian edition until translated):
    entries without a translation, and new claims ``extract`` has not added yet."""
    po = catalogue_for(root)[0]
    return sorted(f"untranslated: {_label(e.msgctxt, e.msgid)}" for e in po
                  if not e.obsolete and not e.fuzzy and not e.msgstr.strip())


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.claim_catalogue", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["extract", "check"])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / "notebooks").is_dir() or not (root / "solutions").is_dir():
        parser.error(f"--root {root} has no notebooks/ and solutions/ folders: give the repository's root")
    if args.command == "extract":
        changes, errors = extract(root)
        print(f"{path(root).relative_to(root)}: " + ("; ".join(changes) if changes else "in sync"))
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        return 1 if errors else 0
    found = problems(root)
    print("\n".join(found) if found else f"{CATALOGUE}: every claim is translated and current")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.claim_catalogue"))
