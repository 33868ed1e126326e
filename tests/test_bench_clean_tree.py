"""Running the course under the tests leaves the repository as it was (issue 14, item 7).

Notebook 05 is the notebook that writes files (``benchmarks/temperature.json`` and the skill
file). Executed under the test suite -- whose ``tests/conftest.py`` points ``LESSONLIB_OUTPUTS``
at a temporary folder, inherited by the kernel -- it must leave ``git status --porcelain``
exactly as it found it, and write its files into that folder instead. Slow (the notebook runs
once more, in memory: the stored outputs are not touched), but part of the default test run.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "solutions" / "05_high_temperature.ipynb"


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)  # one whole notebook run, like an nbval notebook (pyproject.toml)
def test_executing_notebook_05_leaves_git_status_unchanged(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare against")
    import nbformat
    from nbclient import NotebookClient

    outputs = pathlib.Path(os.environ["LESSONLIB_OUTPUTS"]).resolve()  # set by tests/conftest.py
    if outputs == REPO or REPO in outputs.parents:
        pytest.skip("LESSONLIB_OUTPUTS points into the repository (refreshing the shipped outputs on purpose)")
    before = git_status()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert git_status() == before, "executing notebook 05 changed the working tree"
    assert (outputs / "benchmarks" / "temperature.json").exists()  # it did write, elsewhere
    assert (outputs / "skill-speculative-tuning.md").exists()
