"""Test-session setup.

**Outputs go to a temporary folder.** Notebook 05 writes the skill file and
``benchmarks/temperature.json``, the benchmarks write their JSON, the browser test its
screenshots -- all under ``lessonlib.paths.outputs()``, which reads ``LESSONLIB_OUTPUTS`` at call
time. Setting it here, when pytest imports this file (before any test or notebook is collected),
covers the library tests, the nbval kernels and the browser test's JupyterLab (both start with a
copy of ``os.environ``), so running the tests leaves ``git status`` unchanged. A value already in
the environment is kept: an instructor refreshing the shipped files runs
``LESSONLIB_OUTPUTS=outputs python -m pytest ...``.

**Per-test time limits** (pytest-timeout): a library test that hangs fails after
``LIBRARY_TIMEOUT_S`` seconds (``LESSONLIB_TEST_TIMEOUT`` overrides it: the mutation run uses
a tighter one). Notebook cells and the browser test keep the generous limit of pyproject.toml,
and a test that sets its own ``@pytest.mark.timeout`` keeps it.

**The working tree is checked at the end.** ``git status --porcelain --untracked-files=all`` is
read when the session starts and again when it ends; any difference fails the run with the
changed paths listed. That covers every test and every notebook nbval executes (notebook 05
writes the skill file: when its cells ran and passed, the run also checks that the file and
``benchmarks/temperature.json`` did arrive in the temporary folder). Outside a git checkout
(or without git), or with ``LESSONLIB_OUTPUTS`` inside the repository, the check is skipped.
``tests/test_layout.py`` runs a small session in a throwaway repository to show it fails, in one
process and under pytest-xdist (the suite runs on two workers: the controller, which sees every
worker's reports, makes both end-of-session checks; a worker makes neither)."""
import atexit
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

if not os.environ.get("LESSONLIB_OUTPUTS"):
    _outputs = tempfile.mkdtemp(prefix="lessonlib-test-outputs-")
    os.environ["LESSONLIB_OUTPUTS"] = _outputs
    atexit.register(shutil.rmtree, _outputs, ignore_errors=True)

LIBRARY_TIMEOUT_S = float(os.environ.get("LESSONLIB_TEST_TIMEOUT", 300))  # the slowest library test takes ~10 s
HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
WRITER = "solutions/05_high_temperature.ipynb"  # the notebook that writes files
WRITTEN = ("benchmarks/temperature.json", "skill-speculative-tuning.md")
_SESSION = {"before": None, "writer_cells": set(), "writer_passed": set()}
# pytest-xdist (pyproject.toml: -n 2): the workers run the tests and report to the controller,
# which checks the working tree and the writer's files once, after every worker has finished.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")

# The test folders are packages (tests/__init__.py and one in each subfolder), so two test files
# of the same name in different folders do not clash: tests/core/test_tree.py is tests.core.test_tree.
# pytest then puts the repository root on sys.path, not tests/; the helper modules beside this
# file (loop_support, browser_support, browser_rtl) are imported by name from every folder, so
# tests/ goes on sys.path too, before any test module is imported.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="module")
def shipped_target():
    """The shipped target checkpoint on the CPU, loaded once per test module (shared by the KV-cache
    and decoding-loop tests). lessonlib is imported here, not at the top, so this file imports
    nothing of the course (tests/test_layout.py also runs it alone in a throwaway repository)."""
    from lessonlib import models

    return models.load("target", "cpu")


def pytest_collection_modifyitems(config, items):
    _SESSION["writer_cells"] = {item.nodeid for item in items if item.nodeid.startswith(WRITER + "::")}
    for item in items:
        in_tests = HERE in pathlib.Path(str(item.path)).resolve().parents
        if in_tests and item.get_closest_marker("timeout") is None and item.get_closest_marker("browser") is None:
            item.add_marker(pytest.mark.timeout(LIBRARY_TIMEOUT_S))


def git_status() -> str | None:
    """The working tree's state, or None outside a git checkout."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


def refreshing_shipped_outputs() -> bool:
    """LESSONLIB_OUTPUTS or LESSONLIB_SCREENSHOTS points into the repository: the run rewrites
    shipped files on purpose (the regeneration's screenshots step)."""
    for name in ("LESSONLIB_OUTPUTS", "LESSONLIB_SCREENSHOTS"):
        if os.environ.get(name):
            folder = pathlib.Path(os.environ[name]).resolve()
            if folder == REPO or REPO in folder.parents:
                return True
    return False


def pytest_sessionstart(session):
    _SESSION["before"] = None if refreshing_shipped_outputs() or WORKER else git_status()


def pytest_runtest_logreport(report):
    # the controller does not collect: it learns the writer's cells from the workers' reports
    if report.nodeid.startswith(WRITER + "::"):
        _SESSION["writer_cells"].add(report.nodeid)
        if report.when == "call" and report.passed:
            _SESSION["writer_passed"].add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    problems = []
    if _SESSION["before"] is not None:
        before, after = _SESSION["before"], git_status()
        if after != before:
            changed = sorted(set(after.splitlines()) ^ set(before.splitlines()))
            problems.append("running the tests changed the working tree (git status --porcelain):\n  "
                            + "\n  ".join(changed))
    outputs = pathlib.Path(os.environ["LESSONLIB_OUTPUTS"]).resolve()
    whole_writer_ran = _SESSION["writer_cells"] and _SESSION["writer_passed"] == _SESSION["writer_cells"]
    if whole_writer_ran and not refreshing_shipped_outputs() and not WORKER:
        missing = [name for name in WRITTEN if not (outputs / name).exists()]
        if missing:
            problems.append(f"{WRITER} ran but wrote no {missing} under LESSONLIB_OUTPUTS = {outputs}")
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for problem in problems:
            if reporter is not None:
                reporter.write_line(f"ERROR: {problem}", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
