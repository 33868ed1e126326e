"""Run-to-run agreement (issue 30, item 3): the comparison the record reports, on synthetic reports
whose ratios are known, with a row outside the tolerance as the negative control."""
from __future__ import annotations

import copy

import pytest

from lessonlib.bench import agreement, record


def report(speedups, run="run-a", tau=2.0):
    rows = [{"threads": 1, "corpus": "code", "temperature": t, "draft": "draft-kl", "k": k, "speedup": s, "tau": tau}
            for (t, k), s in speedups.items()]
    return {"rows": rows, "run": {"id": run}, "settings": {"prompts": 5}}


A = {(0.0, 1): 1.20, (0.0, 2): 1.50, (1.0, 1): 1.00, (1.0, 2): 1.25}


def test_ratios_and_verdict_on_rows_within_the_tolerance():
    b = {key: s * f for (key, s), f in zip(A.items(), (1.05, 0.95, 1.0, 1.09))}
    result = agreement.compare(report(A), report(b, "run-b"))
    assert result["rows_compared"] == 4 and result["within"] == 4 and result["agree"]
    assert [round(r["ratio"], 6) for r in result["rows"]] == [1.05, 0.95, 1.0, 1.09]
    assert result["max_deviation"] == pytest.approx(0.09) and result["runs"] == ["run-a", "run-b"]
    assert all(r["tau_equal"] for r in result["rows"])
    assert "runs agree: 4 of 4 chain rows within 10%" in record.agreement_line(result)


def test_one_row_off_by_more_than_the_tolerance_breaks_agreement():
    """Negative control: 12 % on one row of four fails the 10 % criterion and is named."""
    b = dict(A) | {(1.0, 2): A[(1.0, 2)] * 1.12}
    result = agreement.compare(report(A), report(b, "run-b"))
    assert not result["agree"] and result["within"] == 3
    line = record.agreement_line(result)
    assert "do not all agree: 3 of 4" in line and "K=2, code T=1" in line and "12.0%" in line


def test_only_shared_rows_are_compared_and_tau_differences_are_shown():
    b = report({(0.0, 1): 1.2 * 1.01, (0.0, 3): 9.0}, "run-b", tau=2.5)
    result = agreement.compare(report(A), b)
    assert result["rows_compared"] == 1 and result["rows"][0]["k"] == 1 and not result["rows"][0]["tau_equal"]


def test_refuses_what_cannot_show_agreement():
    with pytest.raises(ValueError, match="same rows"):  # a run against itself agrees trivially
        agreement.compare(report(A), copy.deepcopy(report(A, "run-b")))
    with pytest.raises(ValueError, match="share no"):
        agreement.compare(report(A), report({(0.7, 9): 1.0}, "run-b"))
    with pytest.raises(ValueError, match="tolerance"):
        agreement.compare(report(A), report({k: v * 1.01 for k, v in A.items()}), tolerance=0)
    with pytest.raises(ValueError, match="list of rows"):
        agreement.compare({"rows": None}, report(A))


def test_a_reports_decode_path_is_read_from_its_machine_record():
    from lessonlib.bench import common
    from lessonlib.engines import native

    here = "native" if native.library() is not None else "fast"  # the native forward where it builds
    assert record._path({"machine": common.machine()}) == here
    with native.turned_off():
        assert record._path({"machine": common.machine()}) == "fast"
        assert common.machine()["native"].startswith("off")
    assert record._path({"setup": {"machine": {"decode_path": "readable: models.gpt"}}}) == "readable"
    assert record._path({"machine": {"threads": 1}}) == "not recorded"


def test_the_record_prints_the_agreement_and_each_sources_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_RUN", "test-run-1")
    b = {key: s * 1.02 for key, s in A.items()}
    result = agreement.compare(report(A), report(b, "run-b"))
    agreement.common.write_report("agreement", result, agreement.markdown(result), tmp_path)
    rows = [{"source": "decode", "run": "test-run-1", "path": "fast"}, {"source": "tree", "run": "other"}]
    lines = record.provenance_lines(rows, tmp_path)
    assert lines[0] == "Runs: decode test-run-1; tree other (separate runs: compare rows of one source)"
    assert lines[1].endswith("decode fast; tree not recorded")
    assert lines[2].startswith("Run-to-run agreement") and "4 of 4" in lines[2]
    assert record.provenance_lines(rows[:1], tmp_path / "none")[0].endswith("(one run)")


def test_two_runs_under_one_regeneration_id_are_told_apart():
    """Under one LESSONLIB_RUN both runs carry the same id: the result names each by when it was written,
    so agreement.md never names one run twice (two different ids stay as they are, above)."""
    a, b = report(A, "regen-1"), report({k: s * 1.01 for k, s in A.items()}, "regen-1")
    a["run"]["written"], b["run"]["written"] = "2026-12-03T06:00:00Z", "2026-12-03T06:11:00Z"
    names = agreement.compare(a, b)["runs"]
    assert names[0] != names[1] and all(n.startswith("regen-1") for n in names)
    assert "06:00:00" in names[0] and "06:11:00" in names[1]


def test_the_record_says_when_its_decode_rows_are_not_from_the_compared_runs(tmp_path):
    """The agreement line describes two runs; when decode.json was re-run since, the record says so (and
    says nothing extra when the decode rows are the second compared run: the negative control)."""
    import json

    result = agreement.compare(report(A, "run-a"), report({k: s * 1.01 for k, s in A.items()}, "run-b"))
    (tmp_path / "agreement.json").write_text(json.dumps(result))
    rows = lambda run: [{"source": "decode", "run": run, "path": "fast"}]  # noqa: E731
    later = record.provenance_lines(rows("run-c"), tmp_path)[-1]
    assert "from another run (run-c)" in later
    assert "another run" not in record.provenance_lines(rows("run-b"), tmp_path)[-1]
