"""Every command checks every flag and environment variable it will use before any work (issue 54,
item 4): the output folder is writable, ``LESSONLIB_RUN`` and ``LESSONLIB_THREADS`` are valid, and
sizes are refused by name -- one line, exit code 2. The benchmark's work is replaced by a function
that fails the test, so a check that came after the work would show here as "work started"."""
from __future__ import annotations

import json

import pytest

from lessonlib import cli
from lessonlib.bench import __main__ as bench
from lessonlib.bench import batch, calibration, decode, record
from lessonlib.course import regenerate


def _no_work(*args, **kwargs):
    raise AssertionError("work started before the command line was checked")


@pytest.fixture
def guarded(monkeypatch, tmp_path):
    for module, name in ((decode, "measure"), (batch, "bench_batch"), (calibration, "pairs"),
                         (record, "write"), (regenerate, "run")):
        monkeypatch.setattr(module, name, _no_work)
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path / "outputs"))
    (tmp_path / "a-file").write_text("not a folder")
    return tmp_path


def _refused(main, argv, capsys) -> str:
    try:
        code = cli.run(main, argv, prog="lessonlib")
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


FILE, UNDER_FILE = "{tmp}/a-file", "{tmp}/a-file/reports"
CASES = {  # name: (argv, environment, what the one line names)
    "decode --out a file": (["decode", "--out", FILE], {}, "--out"),
    "decode --out under a file": (["decode", "--out", UNDER_FILE], {}, "--out"),
    "decode LESSONLIB_OUTPUTS a file": (["decode"], {"LESSONLIB_OUTPUTS": FILE}, "LESSONLIB_OUTPUTS"),
    "decode LESSONLIB_OUTPUTS under a file": (["decode"], {"LESSONLIB_OUTPUTS": UNDER_FILE}, "LESSONLIB_OUTPUTS"),
    "decode LESSONLIB_RUN with a space": (["decode"], {"LESSONLIB_RUN": "a b"}, "LESSONLIB_RUN"),
    "decode LESSONLIB_THREADS 99999": (["decode"], {"LESSONLIB_THREADS": "99999"}, "LESSONLIB_THREADS"),
    "decode --ks 1000": (["decode", "--ks", "1000"], {}, "--ks"),
    "decode --ks past the context": (["decode", "--ks", "60", "--prompt-len", "100", "--new-tokens", "100"], {},
                                     "--ks"),
    "batch --batches 100000": (["batch", "--batches", "1", "100000"], {}, "--batches"),
    "batch --ks 1000": (["batch", "--ks", "1000"], {}, "--ks"),
    "batch --out under a file": (["batch", "--out", UNDER_FILE], {}, "--out"),
    "calibration --out a file": (["calibration", "--out", FILE], {}, "--out"),
    "calibration LESSONLIB_RUN": (["calibration"], {"LESSONLIB_RUN": "../x"}, "LESSONLIB_RUN"),
    "record LESSONLIB_RUN": (["record"], {"LESSONLIB_RUN": ""}, "LESSONLIB_RUN"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bench_refuses_before_any_work(name, guarded, monkeypatch, capsys):
    argv, env, named = CASES[name]
    argv = [a.format(tmp=guarded) for a in argv]
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(tmp=guarded))
    line = _refused(bench.main, argv, capsys)
    assert named in line, line


def test_control_good_flags_reach_the_work(guarded, capsys):
    """The guard itself works: valid flags pass every check and reach the (replaced) work."""
    with pytest.raises(AssertionError, match="work started"):
        bench.main(["decode", "--ks", "1", "2", "--out", str(guarded / "new" / "folder")])
    with pytest.raises(AssertionError, match="work started"):
        bench.main(["batch", "--batches", "1", "256"])


@pytest.mark.parametrize("argv, named", [(["--from", ""], "--from"), (["--only", " "], "--only"),
                                         (["--only", "skill", ""], "--only")])
def test_regenerate_refuses_empty_step_names(argv, named, guarded, capsys):
    assert named in _refused(regenerate.main, argv, capsys)


@pytest.mark.parametrize("content", ['{"id": "r", "steps": [', '["a", "list"]', '{"id": "r", "steps": 3}',
                                     '{"id": "r", "steps": ["x"]}'])
def test_a_broken_run_json_is_named_before_any_step_runs(content, guarded, capsys):
    outputs = guarded / "outputs"
    outputs.mkdir()
    (outputs / regenerate.MANIFEST).write_text(content)
    line = _refused(regenerate.main, ["--only", "skill"], capsys)
    assert "run.json" in line and "regenerate" in line, line
    with pytest.raises(ValueError, match="run.json"):
        regenerate.write_manifest({"id": "r", "steps": []})


def test_regenerate_refuses_unwritable_outputs_and_a_bad_run(guarded, monkeypatch, capsys):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(guarded / "a-file" / "out"))
    assert "LESSONLIB_OUTPUTS" in _refused(regenerate.main, ["--only", "skill"], capsys)
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(guarded / "outputs"))
    monkeypatch.setenv("LESSONLIB_RUN", "no spaces allowed")
    assert "LESSONLIB_RUN" in _refused(regenerate.main, ["--only", "skill"], capsys)
    monkeypatch.delenv("LESSONLIB_RUN")
    (guarded / "outputs").mkdir()
    (guarded / "outputs" / regenerate.MANIFEST).write_text(json.dumps({"id": "r", "steps": []}))
    with pytest.raises(AssertionError, match="work started"):  # control: a good run.json passes
        regenerate.main(["--only", "skill"])
