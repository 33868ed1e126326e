"""The exercise generator: stubs replace answers, outputs are cleared, exercises/ is in sync."""
import json
import pathlib
import subprocess

import nbformat
import pytest

from lessonlib.course import exercises

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_exercises_are_up_to_date():
    problems = exercises.out_of_date(ROOT)
    assert not problems, ("exercises/ is out of date; run `python -m lessonlib.course.exercises`:\n"
                          + "\n".join(problems))


def test_every_solution_has_an_exercise():
    solutions = {p.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")}
    generated = {p.name for p in (ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")}
    assert solutions == generated


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_exercise_notebooks_hold_no_answers_and_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        assert "BEGIN SOLUTION" not in cell.source and "END SOLUTION" not in cell.source
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    stubs = [c for c in nb.cells if c.cell_type == "code" and "raise NotImplementedError(\"exercise" in c.source]
    assert stubs, "an exercise notebook without a single exercise stub"


def test_strip_solution_keeps_indentation_and_message():
    source = ("def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION exercise 9z: double x\n    y = 2 * x\n    return y\n"
              "    ### END SOLUTION\n\nprint(1)")
    assert exercises.strip_solution(source) == (
        "def f(x):\n    '''doc'''\n    raise NotImplementedError(\"exercise 9z: double x\")\n\nprint(1)")


def test_stub_raises_not_implemented_with_the_exercise_id():
    source = exercises.strip_solution(
        "def f():\n    ### BEGIN SOLUTION exercise 2b: say \"hi\"\n    return 1\n    ### END SOLUTION\n")
    namespace = {}
    exec(source, namespace)
    with pytest.raises(NotImplementedError, match=r'^exercise 2b: say "hi"$'):
        namespace["f"]()


@pytest.mark.parametrize("source, message", [
    ("### BEGIN SOLUTION exercise 1a: x\nx = 1\n", "never closed"),
    ("x = 1\n### END SOLUTION\n", "without a BEGIN"),
    ("### BEGIN SOLUTION exercise 1a: x\n### BEGIN SOLUTION exercise 1b: y\n### END SOLUTION\n", "inside another"),
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "expected '### BEGIN SOLUTION exercise"),
])
def test_malformed_markers_raise(source, message):
    with pytest.raises(ValueError, match=message):
        exercises.strip_solution(source, "test cell")


def _solution_notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_code_cell(
                    "def f():\n    ### BEGIN SOLUTION exercise 1a: answer\n    return 42\n    ### END SOLUTION")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.cells[1].execution_count = 3
    nb.cells[1].metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00"}
    nb.cells[1].metadata["tags"] = ["keep-me"]
    return nb


def test_exercise_notebook_clears_outputs_counts_and_timings_but_keeps_tags():
    nb = exercises.exercise_notebook(_solution_notebook(), "01_demo.ipynb")
    cell = nb.cells[1]
    assert cell.outputs == [] and cell.execution_count is None
    assert "execution" not in cell.metadata and cell.metadata["tags"] == ["keep-me"]
    assert "return 42" not in cell.source and "exercise 1a: answer" in cell.source
    assert nb.metadata["lessonlib"]["generated_from"] == "solutions/01_demo.ipynb"


def test_markers_in_markdown_are_rejected():
    nb = _solution_notebook()
    nb.cells[0].source = "### BEGIN SOLUTION exercise 1a: no\n### END SOLUTION"
    with pytest.raises(ValueError, match="only allowed in code cells"):
        exercises.exercise_notebook(nb, "01_demo.ipynb")


def _with_prediction(answer_tags=("answer",)):
    nb = _solution_notebook()
    nb.cells[1:1] = [nbformat.v4.new_markdown_cell("**Predict before you run:** what does f return?")]
    answer = nbformat.v4.new_markdown_cell("**Answer:** 42, the stored output above.")
    answer.metadata["tags"] = list(answer_tags)
    nb.cells.append(answer)
    return nb


def test_answer_tagged_markdown_becomes_the_prediction_prompt_and_the_question_stays():
    nb = exercises.exercise_notebook(_with_prediction(("nbval-ignore-output", "answer")), "01_demo.ipynb")
    question, answer = nb.cells[1], nb.cells[-1]
    assert answer.source == exercises.answer_pointer("01_demo.ipynb") == (
        "*Your prediction, then compare with the output above.* The answer: [`solutions/01_demo.ipynb`]"
        "(../solutions/01_demo.ipynb), the cell right after this question's code cell.")
    persian = exercises.answer_pointer("fa/01_demo.ipynb")
    assert persian.count("](../../solutions/fa/01_demo.ipynb)") == 1
    assert persian.startswith('<div dir="rtl" lang="fa">\n\n' + exercises.ANSWER_PLACEHOLDER_FA)
    assert persian.endswith("</div>") and "answer" not in persian.lower()
    assert answer.metadata["tags"] == ["nbval-ignore-output", "answer"]
    assert question.source.startswith("**Predict before you run:**")
    assert nb.cells[0].source == "# Title"  # untagged markdown is left alone


def test_negative_control_an_untagged_answer_would_reach_the_student():
    nb = exercises.exercise_notebook(_with_prediction(answer_tags=()), "01_demo.ipynb")
    assert nb.cells[-1].source.startswith("**Answer:** 42")


def test_answer_tag_on_a_code_cell_is_rejected():
    nb = _solution_notebook()
    nb.cells[1].metadata["tags"] = ["answer"]
    with pytest.raises(ValueError, match="'answer' tag belongs on a markdown cell, not a code cell"):
        exercises.exercise_notebook(nb, "01_demo.ipynb")


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_no_answer_to_a_prediction_reaches_an_exercise_notebook(path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        if exercises.ANSWER_TAG in cell.metadata.get("tags", []):
            assert cell.source == exercises.answer_pointer(path.name), f"cell {index}"
            # the pointer leads to a solution notebook whose cell at this index is that answer
            solution = nbformat.read(ROOT / "solutions" / path.name, as_version=4).cells[index]
            assert solution.source.startswith("**Answer:**") and exercises.ANSWER_TAG in solution.metadata["tags"]
        elif cell.cell_type == "markdown":
            assert not cell.source.lstrip().startswith("**Answer:**"), (
                f"cell {index}: an answer without the 'answer' tag")


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_each_answer_follows_the_code_cell_its_question_precedes(path):
    cells = nbformat.read(path, as_version=4).cells
    for index, cell in enumerate(cells):
        if exercises.ANSWER_TAG in cell.metadata.get("tags", []):
            assert index >= 2 and cell.source.startswith("**Answer:**"), f"cell {index}"
            assert cells[index - 1].cell_type == "code", f"cell {index}: an answer must come right after its code cell"
            assert cells[index - 2].source.startswith("**Predict before you run:**"), (
                f"cell {index}: the question goes right before the code cell that answers it")


def test_check_mode_detects_stale_missing_and_orphaned_exercises(tmp_path, capsys):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    nbformat.write(_solution_notebook(), tmp_path / "solutions" / "01_demo.ipynb")
    assert exercises.main(["--check", "--root", str(tmp_path)]) == 1  # missing
    assert exercises.main(["--root", str(tmp_path)]) == 0
    assert exercises.main(["--check", "--root", str(tmp_path)]) == 0
    written = tmp_path / "exercises" / "01_demo.ipynb"
    assert json.loads(written.read_text())["cells"][1]["outputs"] == []
    nb = _solution_notebook()
    nb.cells[0].source = "# A new title"
    nbformat.write(nb, tmp_path / "solutions" / "01_demo.ipynb")
    assert exercises.out_of_date(tmp_path) == ["exercises/01_demo.ipynb: differs from its solution"]
    (tmp_path / "exercises" / "02_orphan.ipynb").write_text("{}")
    assert "exercises/02_orphan.ipynb: no matching notebook in solutions/" in exercises.out_of_date(tmp_path)
    capsys.readouterr()


def test_names_limit_what_is_written(tmp_path):
    (tmp_path / "solutions").mkdir()
    for name in ("01_demo", "02_other"):
        nbformat.write(_solution_notebook(), tmp_path / "solutions" / f"{name}.ipynb")
    assert exercises.main(["--root", str(tmp_path), "02_other"]) == 0
    assert sorted(p.name for p in (tmp_path / "exercises").iterdir()) == ["02_other.ipynb"]
    assert exercises.out_of_date(tmp_path, ["02_other"]) == []
    assert exercises.out_of_date(tmp_path) == ["exercises/01_demo.ipynb: missing"]


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("**/[0-9][0-9]_*.ipynb")),
                         ids=lambda p: str(p.relative_to(ROOT / "exercises")))
def test_every_exercise_notebook_writes_under_the_students_folder(path):
    """Issue 28: a student's run leaves `git status` clean. The first code cell sends every write
    (exercise 05's temperature.json and skill file) to exercises/my-outputs/, which git ignores."""
    from lessonlib.course import persian

    # a Persian exercise first sets the language (persian.language_cell), then sends the writes away
    cells = [c for c in nbformat.read(path, as_version=4).cells
             if c.cell_type == "code" and not persian.is_language_cell(c)]
    assert cells[0].source.startswith(exercises.STUDENT_OUTPUTS)
    assert all(exercises.STUDENT_OUTPUTS not in c.source for c in cells[1:])
    solution = ROOT / "solutions" / path.relative_to(ROOT / "exercises")  # negative control: the instructor's
    assert exercises.STUDENT_OUTPUTS not in solution.read_text(encoding="utf-8")  # run writes outputs/


def test_use_student_outputs_moves_writes_out_of_the_tracked_outputs(monkeypatch):
    from lessonlib import paths
    from lessonlib.course import skill
    monkeypatch.delenv("LESSONLIB_OUTPUTS", raising=False)
    assert paths.outputs() == ROOT / "outputs"  # the default, for the instructor's run
    exec(exercises.STUDENT_OUTPUTS, {})  # what the exercise notebook's first cell does
    assert paths.outputs() == paths.STUDENT_OUTPUTS == ROOT / "exercises" / "my-outputs"
    for written in (skill.MEASUREMENTS, skill.SKILL_FILE):
        assert paths.STUDENT_OUTPUTS in written.parents and (ROOT / "outputs") not in written.parents
    written = paths.STUDENT_OUTPUTS / "benchmarks" / "temperature.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(written)], cwd=ROOT, check=False)
    if (ROOT / ".git").exists():
        assert ignored.returncode == 0, "exercises/my-outputs/ must be in .gitignore"
    monkeypatch.setenv("LESSONLIB_OUTPUTS", "/tmp/elsewhere")  # a folder already chosen wins (the tests')
    assert paths.use_student_outputs() == pathlib.Path("/tmp/elsewhere")
