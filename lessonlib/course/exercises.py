"""Generate the student notebooks in ``exercises/`` from the instructor notebooks in ``solutions/``.

``solutions/NN_name.ipynb`` is the single source. In its code cells an answer sits between two
marker lines; the text after ``BEGIN SOLUTION`` becomes the stub's message::

    def residual(p, q):
        \"\"\"...\"\"\"
        ### BEGIN SOLUTION exercise 1a: return max(p - q, 0) normalised
        ...the answer...
        ### END SOLUTION

becomes, in ``exercises/NN_name.ipynb``::

    def residual(p, q):
        \"\"\"...\"\"\"
        raise NotImplementedError("exercise 1a: return max(p - q, 0) normalised")

and every output, execution count and timing record is cleared. In a Persian exercise
(``exercises/fa/``, generated from ``solutions/fa/`` by the Persian build) the prompt that replaces
a hidden answer is the Persian of ``locale/fa/messages.po``; the stub's message stays English in
the code, like all code, and is shown in Persian where it is shown (``widgets.safe_call``).

    python -m lessonlib.course.exercises                  # (re)write exercises/ from solutions/
    python -m lessonlib.course.exercises 01_exact_rule    # only that notebook
    python -m lessonlib.course.exercises --check          # exit 1 if exercises/ is out of date
"""
from __future__ import annotations

import copy
import json
import pathlib
import re
import sys

import nbformat

from lessonlib import cli, paths
from lessonlib.course.messages import N_, _, translated
from lessonlib.course.rtl import rtl_markdown
from lessonlib.jsonio import write_atomic

ROOT = paths.ROOT
BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION(?P<message>.*)$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
MESSAGE = re.compile(r"exercise \d+[a-z]?: \S")
# A markdown cell tagged "answer" answers the "Predict before you run" question above it; the
# student sees a prompt instead, so the prediction is theirs before the output tells them. The
# prompt is an English template (messages), in the notebook's language: Persian in exercises/fa/.
ANSWER_TAG = "answer"
ANSWER_PLACEHOLDER = N_("*Your prediction, then compare with the output above.*")
ANSWER_PLACEHOLDER_FA = translated(ANSWER_PLACEHOLDER, "fa")
# The first code cell of every exercise notebook starts with these lines: what a student's run
# writes (exercise 05's measurements and skill file) goes under exercises/my-outputs/, never over
# the course's tracked outputs/ (LESSONLIB_OUTPUTS, when set, still wins: the tests set it).
STUDENT_OUTPUTS = ("import lessonlib.paths\n"
                   "lessonlib.paths.use_student_outputs()  # your run writes under exercises/my-outputs/, "
                   "not over the course's outputs/\n")


def _language(name: str) -> str:
    """The language of a notebook named as ``exercise_notebook`` gets it: "fa" for ``fa/NN_x.ipynb``."""
    return name.split("/", 1)[0] if "/" in name else "en"


def answer_pointer(name: str) -> str:
    """The placeholder of a hidden answer, and where the answer is: the same place in the
    solution notebook ``solutions/<name>`` (``name`` as ``exercise_notebook`` gets it, e.g.
    ``04_eagle_tree.ipynb`` or ``fa/04_eagle_tree.ipynb``, whose pointer is in Persian), linked
    relative to the exercise. The language is the notebook's (``fa/`` for Persian, wrapped right to
    left as ``persian.rtl_markdown`` wraps every Persian markdown cell), not the process's setting:
    one run of the generator writes both editions."""
    link = "../" * (name.count("/") + 1) + f"solutions/{name}"
    lang = _language(name)
    # Markdown, not a printed line: ``_`` and format (``say`` would add the bidi isolates of a printed line)
    text = _("{prompt} The answer: [`{path}`]({link}), the cell right after this question's code cell.", lang).format(
        prompt=translated(ANSWER_PLACEHOLDER, lang), path=f"solutions/{name}", link=link)
    return text if lang == "en" else rtl_markdown(text)  # right to left like every other Persian markdown cell


def solution_messages(root: pathlib.Path = ROOT) -> dict[str, list[str]]:
    """{stub message: [solution notebooks]} of every ``BEGIN SOLUTION`` marker: templates of the
    library's catalogue (``message_catalogue``). The stub's code stays English (a Persian exercise has
    its English notebook's code cells); where the message is shown (``widgets.safe_call``) it is
    turned into the student's language."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for line in cell.source.split("\n") if cell.cell_type == "code" else []:
                begin = BEGIN.match(line)
                if begin and MESSAGE.match(begin["message"].strip()):
                    found.setdefault(begin["message"].strip(), []).append(path.relative_to(root).as_posix())
    return found


def strip_solution(source: str, where: str = "cell") -> str:
    """Replace each marked answer in one code cell's source by a ``NotImplementedError`` stub."""
    out, inside = [], False
    for number, line in enumerate(source.split("\n"), 1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if inside:
                raise ValueError(f"{where}, line {number}: BEGIN SOLUTION inside another solution block")
            message = begin["message"].strip()
            if not MESSAGE.match(message):
                raise ValueError(f"{where}, line {number}: expected '### BEGIN SOLUTION exercise 1a: what to do', "
                                 f"got {line.strip()!r}")
            out.append(f"{begin['indent']}raise NotImplementedError({json.dumps(message, ensure_ascii=False)})")
            inside = True
        elif end:
            if not inside:
                raise ValueError(f"{where}, line {number}: END SOLUTION without a BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "\n".join(out)


def exercise_notebook(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The student version of a solution notebook: answers stubbed, ``answer``-tagged markdown cells
    replaced by a prompt to predict that says where the answer is (``answer_pointer``), outputs and
    timings cleared, and the first code cell made to write under ``exercises/my-outputs/``
    (``STUDENT_OUTPUTS``)."""
    nb = copy.deepcopy(solution)
    first_code = next((cell for cell in nb.cells if cell.cell_type == "code"), None)
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        if ANSWER_TAG in cell.metadata.get("tags", []):
            if cell.cell_type != "markdown":
                raise ValueError(f"{where}: the {ANSWER_TAG!r} tag belongs on a markdown cell, "
                                 f"not a {cell.cell_type} cell")
            cell.source = answer_pointer(name)
        elif cell.cell_type == "code":
            cell.source = strip_solution(cell.source, where)
            if cell is first_code:
                cell.source = STUDENT_OUTPUTS + cell.source
            cell.outputs = []
            cell.execution_count = None
        elif "### BEGIN SOLUTION" in cell.source:
            raise ValueError(f"{where}: solution markers are only allowed in code cells")
        cell.metadata.pop("execution", None)  # per-cell timestamps written by nbconvert
    nb.metadata.pop("widgets", None)  # saved widget state belongs to the executed solution
    nb.metadata["lessonlib"] = {"generated_from": f"solutions/{name}",
                                "regenerate_with": "python -m lessonlib.course.exercises"}
    return nb


def render(solution_path: pathlib.Path) -> str:
    """The exact text ``exercises/`` should hold for one solution notebook."""
    solution = nbformat.read(solution_path, as_version=4)
    nb = exercise_notebook(solution, solution_path.name)
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def plan(root: pathlib.Path = ROOT, names=()) -> dict[pathlib.Path, str | None]:
    """Every exercise path mapped to its expected text (None: a stale file with no solution).

    ``names`` (e.g. ``["01_exact_rule"]``) limits the plan to those notebooks.
    """
    wanted = lambda path: not names or path.stem in names or path.name in names  # noqa: E731
    solutions = [s for s in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")) if wanted(s)]
    expected: dict[pathlib.Path, str | None] = {root / "exercises" / s.name: render(s) for s in solutions}
    for stale in sorted((root / "exercises").glob("[0-9][0-9]_*.ipynb")):
        if wanted(stale):
            expected.setdefault(stale, None)
    return expected


def out_of_date(root: pathlib.Path = ROOT, names=()) -> list[str]:
    """Exercise notebooks that differ from what ``solutions/`` generates (empty when in sync)."""
    return stale(plan(root, names), root, "no matching notebook in solutions/", "differs from its solution")


def stale(planned: dict, root: pathlib.Path, no_source: str, differs: str) -> list[str]:
    """The generated files of a ``plan`` ({path: expected text, or None for an orphan}) that are
    orphaned, missing or differ from what the generator would write; shared with the Persian build (``persian``)."""
    problems = []
    for path, text in planned.items():
        rel = path.relative_to(root).as_posix()
        if text is None:
            problems.append(f"{rel}: {no_source}")
        elif not path.exists():
            problems.append(f"{rel}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{rel}: {differs}")
    return problems


def write(root: pathlib.Path = ROOT, names=()) -> list[pathlib.Path]:
    """Write every exercise notebook; stale ones (no solution) are reported, never deleted."""
    written = []
    for path, text in plan(root, names).items():
        if text is None:
            print(f"warning: {path.relative_to(root)} has no matching solution", file=sys.stderr)
            continue
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_atomic(path, text)
            written.append(path)
    return written


def check_names(parser, root: pathlib.Path, names, folders=("solutions", "exercises")) -> None:
    """Refuse (``parser.error``: one line, exit 2) a ``--root`` that is not a checkout with
    ``folders[0]/`` and a notebook name that matches no notebook there, instead of checking
    nothing and reporting "up to date"."""
    if not (root / folders[0]).is_dir():
        parser.error(f"--root {root} has no {folders[0]}/ folder: give the repository's root")
    known = {p.stem for folder in folders for p in (root / folder).glob("[0-9][0-9]_*.ipynb")}
    for name in names:
        if pathlib.Path(name).stem not in known:
            parser.error(f"no notebook {name!r} in {'/ or '.join(folders)}/ (known: {', '.join(sorted(known))})")


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.exercises", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that exercises/ is up to date")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("names", nargs="*", help="only these notebooks, e.g. 01_exact_rule (default: all)")
    args = parser.parse_args(argv)
    check_names(parser, args.root, args.names)
    if args.check:
        problems = out_of_date(args.root, args.names)
        for problem in problems:
            print(problem)
        print("exercises/ is up to date" if not problems else "run: python -m lessonlib.course.exercises")
        return 1 if problems else 0
    for path in write(args.root, args.names):
        print(f"wrote {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.exercises"))
