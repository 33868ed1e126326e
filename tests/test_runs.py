"""Run ids (issue 30, item 2): one id per regeneration, stamped into every benchmark report."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lessonlib import paths, runs
from lessonlib.bench import common


def test_the_environment_names_the_run_and_every_report_carries_it(tmp_path, monkeypatch):
    monkeypatch.setenv(runs.ENV, "regen-20261202-abc")
    common.write_report("x", {"rows": []}, "# x\n", tmp_path)
    stamp = json.loads((tmp_path / "x.json").read_text())["run"]
    assert stamp["id"] == "regen-20261202-abc" and runs.of({"run": stamp}) == "regen-20261202-abc"
    assert stamp["git_revision"] == runs.git_revision() and stamp["written"].endswith("Z")


def test_a_process_on_its_own_keeps_one_id_and_two_processes_differ_in_time_or_agree_on_revision(monkeypatch):
    monkeypatch.delenv(runs.ENV, raising=False)
    assert runs.run_id() == runs.run_id()  # one id per process
    code = "from lessonlib import runs; print(runs.run_id())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={k: v for k, v in __import__("os").environ.items() if k != runs.ENV}).stdout.strip()
    assert runs.PATTERN.fullmatch(other) and other.split("-", 1)[1] == runs.git_revision()


@pytest.mark.parametrize("bad", ["", "two words", "a/b", "x" * 81, "-leading"])
def test_a_bad_run_id_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(runs.ENV, bad)
    with pytest.raises(ValueError, match=runs.ENV):
        runs.run_id()


def test_old_reports_have_no_run_and_say_so():
    assert runs.of({"rows": []}) is None and runs.of({"run": "text"}) is None and runs.of([]) is None


def test_git_revision_outside_a_repository_is_unknown(tmp_path):
    assert runs.git_revision(tmp_path) == "unknown"
    assert runs.git_revision(paths.ROOT) != "unknown"
