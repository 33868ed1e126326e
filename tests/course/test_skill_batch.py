"""The skill file's concurrency part (issue 31): the gate and the best K per batch size from the batched
benchmark's report when there is one (the model otherwise, said so), the model's prediction beside it
with its ratio, the P99 alert from the measured tail, and vLLM's per-batch-size setting."""
import numpy as np
import pytest

from lessonlib import paths
from lessonlib.core import theory
from lessonlib.course import skill
from lessonlib.course.skill import concurrency
from lessonlib.course.skill.recommend import MARGIN, measured_limit


def _spread(v):
    return {"median": v, "q25": v - 0.05, "q75": v + 0.05, "n": 5}


def _report(speedups=(1.3, 1.25, 1.1, 0.8), ks=(2, 2, 1, 1), alpha=0.7, c=0.05, fc=((1, 8, 64), (1.0, 1.0, 8.0))):
    rows = []
    for B, s, k in zip((1, 2, 4, 8), speedups, ks):
        chains = [{"k": kk, "speedup": s if kk == k else s - 0.1, "alpha": alpha, "c": c, "r": 1.0 + 0.1 * kk,
                   "spread": {"speedup": _spread(s if kk == k else s - 0.1)}} for kk in (1, 2)]
        rows.append({"batch": B, "chains": chains, "best_k": k, "best_speedup": s, "best_spread": _spread(s)})
    latency = [{"batch": 1, "method": "plain", "mean_ms": 5.0, "p50_ms": 5.0, "p99_ms": 7.0, "p99_over_mean": 1.4},
               {"batch": 1, "method": "chain K=2", "mean_ms": 4.0, "p50_ms": 0.0, "p99_ms": 12.0, "p99_over_mean": 3.0}]
    return {"setup": {"ks": [1, 2], "batches": [1, 2, 4, 8], "temperature": 0.0, "prompts": 5},
            "rows": rows, "forward_cost": {"tokens": list(fc[0]), "cost": list(fc[1])}, "latency": latency}


def test_the_model_column_is_the_cost_model_on_the_runs_own_inputs():
    rows = concurrency.table(_report())
    for r in rows:  # f flat to 8 tokens, then linear: r(B(K+1)) / r(B) = f(B (K + 1)) / f(B)
        f = lambda n: np.interp(n, (1, 8, 64), (1.0, 1.0, 8.0))  # noqa: E731
        expect = [float(theory.expected_tokens_per_verify(0.7, k)) / (k * 0.05 + f(r["batch"] * (k + 1))
                                                                      / f(r["batch"])) for k in (1, 2)]
        assert r["speedup_predicted"] == pytest.approx(max(expect)) and r["k_predicted"] == 1 + int(np.argmax(expect))
        assert r["predicted_over_measured"] == pytest.approx(r["speedup_predicted"] / r["speedup"])
        assert r["r_predicted_over_measured"] == pytest.approx(r["r_predicted"] / r["r"])


def test_the_gate_is_the_measurement_not_the_model():
    report = _report()
    g = concurrency.gate(concurrency.table(report))
    assert g["limit"] == 2 and g["crossover"] == 8  # 1.25 >= 1 + margin at B = 2, 1.1 at B = 4 is not
    assert g["limit"] == measured_limit(concurrency.measured(report), MARGIN)
    # control: a memory-bound model (f flat) predicts speculation pays at every batch; the measurement does not
    flat = _report(fc=((1, 64), (1.0, 1.0)))
    assert concurrency.gate(concurrency.table(flat))["crossover_predicted"] is None
    alpha, c = 0.7, 0.05
    model = skill.recommend(alpha, c, 0.0, 8, forward_cost=((1, 64), (1.0, 1.0)))
    measured = skill.recommend(alpha, c, 0.0, 8, forward_cost=((1, 64), (1.0, 1.0)),
                               measured_concurrency=concurrency.measured(flat))
    assert model["speculate"] and model["concurrency_source"] == "model" and model["concurrency_limit"] == 1024
    assert not measured["speculate"] and measured["concurrency_limit"] == 2
    assert measured["concurrency_source"] == "measured" and any("measured limit" in why for why in measured["reasons"])
    assert measured["k_measured_at_concurrency"] == 1


def test_the_section_prints_the_gate_the_p99_alert_and_the_vllm_setting():
    text = "\n".join(concurrency.lines({"batch": _report()}))
    assert "speculate while B ≤ 2" in text and "crossover, where the best K is no faster than plain, is B = 8" in text
    assert "exceeds 12.0 ms" in text and "plain decoding's: 7.0 ms" in text and "3.00 with speculation" in text
    assert "the tail grows relative to the mean" in text and "(holds here)" in text
    assert '"disable_by_batch_size": 2' in text and "vllm.config.speculative" in text
    assert "model / measured" in text
    assert "is the cost model's" in "\n".join(concurrency.lines({"batch": None}))  # no report: said so
    assert concurrency.vllm_setting(0) == {"disable_by_batch_size": 2}  # vLLM's minimum


def test_the_skill_file_uses_the_batched_report(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    m = skill.load_measurements(paths.ROOT / "outputs" / "benchmarks" / "temperature.json")
    with_report = skill.build_skill(m, (), batch=_report())
    assert "## Concurrency: measured" in with_report and "speculate while B ≤ 2" in with_report
    assert "No batched measurement yet" in skill.build_skill(m, (), batch={})
