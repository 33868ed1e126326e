"""bench llm-engines' arithmetic: r(n), the bound and the compiled engine's build time, from
synthetic timings (the measurement itself runs in the regeneration, never under test)."""
from __future__ import annotations

import pytest

from lessonlib.bench import llm_engines
from lessonlib.bench.llm_engines import SIZES


def _runs(step: float, per_token: float, bandwidth: float) -> dict:
    return {1: {"bandwidth_gb_s": bandwidth, "seconds": {
        name: {n: step + per_token * (n - 1) for n in SIZES} for name in ("readable f32", "readable f32 compiled")}}}


def test_report_rows_r_and_bound_from_the_timings():
    engines = {"readable f32": (None, 540_000_000), "readable f32 compiled": (None, 540_000_000)}
    rep = llm_engines.report(engines, _runs(0.05, 0.01, 27.0), 128, {"readable f32 compiled": 95.0})
    row = rep["rows"]["readable f32, 1 thread"]
    assert row["step_ms"] == pytest.approx(50.0)
    assert row["r"][5] == pytest.approx((0.05 + 0.04) / 0.05)  # t(5) / t(1)
    assert row["bound_ms"] == pytest.approx(1e3 * 540e6 / 27e9)
    assert row["step_over_bound"] == pytest.approx(0.05 / (540e6 / 27e9))
    assert rep["compile_seconds"] == {"readable f32 compiled": 95.0}
    text = llm_engines.markdown(rep)
    assert "readable f32 compiled: its first pass of each size" in text and "95 s" in text
    assert "readable f32 compiled, 1 thread" in text


def test_without_compile_the_report_names_no_build_time():
    engines = {"readable f32": (None, 4)}
    rep = llm_engines.report(engines, {1: {"bandwidth_gb_s": 1.0, "seconds": {
        "readable f32": {n: float(n) for n in SIZES}}}}, 128)
    assert rep["compile_seconds"] == {} and "first pass" not in llm_engines.markdown(rep)


def test_bad_context_is_one_line_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        llm_engines.main(["--context", "500", "--no-write"])
    assert "--context" in capsys.readouterr().err
