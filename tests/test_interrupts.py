"""Files that belong together change together or not at all, and an interrupt leaves no temporary
file (issue 54, item 3): a subprocess paused inside ``jsonio.write_together`` -- every temporary file
written, nothing renamed -- is sent SIGTERM or SIGINT; an interrupt that lands during the renames is
held until they are done; a rename that fails rolls back the ones already made (report, Markdown and
record alike)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from lessonlib import jsonio, paths
from lessonlib.bench import common, record

CHILD = """
import importlib.util, os, pathlib, signal, sys, threading, time
folder, mode, source = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
# Python's own SIGINT handler whatever was inherited: a background job of a shell without job control
# starts with SIGINT ignored, and so would this child (the interrupt would never arrive)
signal.signal(signal.SIGINT, signal.default_int_handler)
spec = importlib.util.spec_from_file_location("jsonio", source)  # standard library only: no numpy, no torch
jsonio = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jsonio)
# a worker thread, as numpy's and torch's: the kernel may hand it a signal sent to the process
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
if mode == "pause":
    def pause():
        print("ready", flush=True)
        time.sleep(60)
    jsonio.BEFORE_COMMIT = pause
else:  # the signal arrives between the first rename and the second
    replace = os.replace
    def replace_then_signal(src, dst):
        replace(src, dst)
        os.kill(os.getpid(), signal.SIGTERM)
    os.replace = replace_then_signal
jsonio.write_together({folder / "report.json": "new" * 2_000_000, folder / "report.md": "new table"})
print("not reached when interrupted", flush=True)
"""


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _start(tmp_path, mode):
    (tmp_path / "report.json").write_text("old")
    (tmp_path / "report.md").write_text("old table")
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), mode, jsonio.__file__], cwd=paths.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_mid_write_leaves_the_old_pair_and_no_temporary_file(tmp_path, sig):
    child = _start(tmp_path, "pause")
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert len(_leftovers(tmp_path)) == 2  # paused with both temporary files written (the control)
        child.send_signal(sig)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode != 0 and "not reached" not in out
    if sig == signal.SIGTERM:
        assert child.returncode == -signal.SIGTERM  # it still ends as SIGTERM ends a process
    assert (tmp_path / "report.json").read_text() == "old" and (tmp_path / "report.md").read_text() == "old table"
    assert _leftovers(tmp_path) == []


def test_sigterm_during_the_renames_is_held_until_both_are_made(tmp_path):
    child = _start(tmp_path, "signal-between-renames")
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM and "not reached" not in out
    assert (tmp_path / "report.md").read_text() == "new table" and (tmp_path / "report.json").stat().st_size == 6e6
    assert _leftovers(tmp_path) == []


def _fail_on_rename(monkeypatch, n):
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == n and str(src).endswith(".tmp") and ".old." not in str(src):
            raise OSError("disk gone")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_a_report_its_markdown_and_the_record_change_together_or_not_at_all(tmp_path, monkeypatch):
    report = {"settings": {"new_tokens": 8, "prompt_len": 4, "repeats": 1}, "plain": [], "rows": []}
    record.write_with("decode", report, "old decode table\n", tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"decode.json", "decode.md", "record.json", "record.md"}
    for n in (2, 3, 4):  # the second, third or last rename fails: the earlier ones are rolled back
        calls = _fail_on_rename(monkeypatch, n)
        with pytest.raises(OSError, match="disk gone"):
            record.write_with("decode", report | {"seconds": n}, "new decode table\n", tmp_path)
        monkeypatch.undo()
        assert len(calls) >= n and {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    # control: without a failure all four change, and the record's run is the new report's
    record.write_with("decode", report | {"seconds": 9}, "new decode table\n", tmp_path)
    new_decode = json.loads((tmp_path / "decode.json").read_text())
    assert new_decode["seconds"] == 9 and (tmp_path / "decode.md").read_text() == "new decode table\n"
    assert json.loads((tmp_path / "record.json").read_text())["rows"] == []
    assert _leftovers(tmp_path) == []


def test_the_record_is_built_from_the_report_being_written(tmp_path):
    """write_with rebuilds the record from the new report, not from the old file beside it."""
    row = {"corpus": "code", "temperature": 0.0, "threads": 1, "draft": "d", "k": 2, "method": "chain d K=2",
           "prompts": 5, "spread": {"speedup": {"median": 1.5, "q25": 1.4, "q75": 1.6, "n": 5}}}
    base = {"settings": {"new_tokens": 8, "prompt_len": 4, "repeats": 1}, "plain": []}
    common.write_report("decode", base | {"rows": []}, "old\n", tmp_path)  # an old report with no rows
    record.write_with("decode", base | {"rows": [row]}, "new\n", tmp_path)
    rows = json.loads((tmp_path / "record.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["chain d K=2"] and rows[0]["speedup"]["median"] == 1.5
    assert json.loads((tmp_path / "record.json").read_text())["source_runs"]["decode"] == \
        json.loads((tmp_path / "decode.json").read_text())["run"]["id"]


def test_write_atomic_is_write_together_of_one_file(tmp_path):
    assert jsonio.write_atomic(tmp_path / "a.txt", "x") == tmp_path / "a.txt" and _leftovers(tmp_path) == []
    with pytest.raises(IsADirectoryError, match="folder"):
        jsonio.write_together({tmp_path / "b.txt": "y", tmp_path: "z"})
    assert not (tmp_path / "b.txt").exists()  # refused before anything was written
