"""A committed report is current: measured on the default engine by a run that names its code.

The committed reports are what the notebooks and the skill file read as "this machine's
measurement"; one written by a forward the course no longer runs (before the native forward, or
before runs were stamped) teaches numbers nobody can reproduce. Each such report fails here,
by name, with its rebuild command. The rule itself is checked on synthetic reports, with the
historical cases as negative controls."""
from __future__ import annotations

import json
import warnings

import pytest

from lessonlib import paths
from lessonlib.bench import current, record
from lessonlib.engines import PREFERRED, resolve

REPORTS = sorted((paths.ROOT / "outputs" / "benchmarks").glob("*.json"))
RUN = {"id": "regen-x", "git_revision": "abc1234", "written": "2026-12-06T00:00:00Z"}


def _report(machine: dict | None = None, run: dict | None = RUN) -> dict:
    out: dict = {"rows": []}
    if machine is not None:
        out["machine"] = machine
    if run is not None:
        out["run"] = run
    return out


def test_the_default_is_what_auto_picks_where_native_builds():
    from lessonlib.engines import unavailable
    if unavailable("native") is not None:
        pytest.skip(f"the native forward does not build here: {unavailable('native')}")
    assert resolve("auto") == PREFERRED == "native"


def test_a_report_on_the_default_engine_with_a_run_is_current():
    assert current.why_historical(_report({"engine": PREFERRED}), "decode") is None
    # an older report that names its path only: the path's first word is its engine
    assert current.why_historical(_report({"decode_path": f"{PREFERRED}: every model ..."}), "tree") is None
    assert current.why_historical(_report({"engine": PREFERRED}), "tree") is None
    # the setup's machine counts as well (kinds, sampled, calibration keep it there)
    assert current.why_historical({"setup": {"machine": {"engine": PREFERRED}}, "run": RUN}, "kinds") is None


@pytest.mark.parametrize("report, words", [
    (_report({"decode_path": "fast: every model loaded with pack=True ..."}), ["load.json", "fast engine", "native"]),
    (_report({"engine": "readable"}), ["readable engine"]),
    (_report({"platform": "x"}), ["no engine"]),                     # a machine without a path
    (_report(None), ["no engine"]),                                   # no machine at all
    (_report({"engine": PREFERRED}, run=None), ["no run"]),         # no run stamp
    (_report({"engine": PREFERRED}, run={"id": "x"}), ["no run"]),  # a run without its code revision
])
def test_a_historical_report_says_why_and_how_to_rebuild(report, words):
    why = current.why_historical(report, "load")
    assert why is not None
    for word in words:
        assert word in why
    assert "python -m lessonlib.bench load" in why


def test_a_report_without_decoding_needs_its_run_only():
    assert current.why_historical(_report(None), "record") is None
    assert current.why_historical(_report(None, run=None), "record") is not None


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="report must be a dict"):
        current.engine_of(["not", "a", "report"])  # type: ignore[arg-type]


def test_reading_a_historical_report_warns_under_the_cell(tmp_path):
    (tmp_path / "load.json").write_text(json.dumps(_report({"decode_path": "fast: ..."})))
    with pytest.warns(UserWarning, match="historical"):
        record.read("load", tmp_path)
    (tmp_path / "load.json").write_text(json.dumps(_report({"engine": PREFERRED})))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        record.read("load", tmp_path)  # current: no warning


@pytest.mark.parametrize("path", REPORTS, ids=[p.stem for p in REPORTS])
def test_no_committed_report_is_historical(path):
    report = json.loads(path.read_text())
    why = current.why_historical(report, path.stem)
    assert why is None, why
