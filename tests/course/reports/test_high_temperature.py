"""Notebook 05's report module (lessonlib.course.reports.high_temperature): the tables, intervals, crossings
and temperature.json sections its cells use, checked on small synthetic inputs and on the committed report."""
import json
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lessonlib.course.claims import Interval
from lessonlib.course.reports import high_temperature as report

ROOT = pathlib.Path(__file__).resolve().parents[3]
TEMPS = [0.0, 1.0, 2.0]


def spread(median, q25, q75):
    return {"median": median, "q25": q25, "q75": q75, "n": 5}


def test_measured_crossing_interpolates_the_first_fall_below_one():
    rows = [(0.0, 3, 2.0, 1.5), (1.0, 3, 2.0, 1.1), (2.0, 2, 1.8, 0.7), (3.0, 1, 1.5, 1.2)]
    # between T = 1 (1.1) and T = 2 (0.7): 1 + 0.1 / 0.4, not the later rise at T = 3
    assert report.measured_crossing(rows) == pytest.approx(1.25)
    assert report.measured_crossing([(0.5, 1, 1.0, 0.9), (1.0, 1, 1.0, 0.5)]) == 0.5  # already below: the first T
    assert report.measured_crossing([(0.0, 1, 1.0, 1.0), (1.0, 1, 1.0, 1.3)]) == float("inf")  # 1.0 is not below 1


def test_wall_intervals_pick_the_rows_above_t0_and_the_closest_to_its_prediction():
    wall = {"sampled": [(0.0, 3, 2.5, 1.6, 1.9, 1.7), (1.0, 3, 2.0, 1.1, 1.5, 1.3)],
            "greedy": [(0.0, 3, 2.5, 1.5, 1.9, 1.7), (1.0, 2, 1.5, 0.8, 1.0, 0.9)]}
    wall_spread = {"sampled": [spread(1.6, 1.4, 1.8), spread(1.1, 1.0, 1.4)],
                   "greedy": [spread(1.5, 1.3, 1.7), spread(0.8, 0.7, 0.95)]}
    w = report.wall_intervals(wall, wall_spread)
    assert w.speed["greedy"][1] == Interval(0.8, 0.7, 0.95, "×")
    assert [(s.median, p) for s, p in w.above_t0] == [(1.1, 1.5), (0.8, 1.0)]  # T > 0 only, both drafts
    assert w.closest == w.above_t0[1]  # 0.95 / 1.0 beats 1.4 / 1.5


def test_tokens_until_counts_from_the_phase_start():
    trace = {"position": np.array([0, 4, 10, 11, 12, 20, 24]),
             "action": np.array(["speculate", "speculate", "speculate", "plain", "probe", "plain", "speculate"])}
    assert report.tokens_until(trace, 10, False) == 1  # first non-speculative step at 11
    assert report.tokens_until(trace, 12, True) == 12  # the speculative step at 24
    assert report.tokens_until(trace, 25, True) is None


def test_the_alpha_table_prints_every_temperature_and_the_limits(capsys):
    rng = np.random.default_rng(0)
    kinds = ("sampled", "greedy", "top4", "mismatch")
    alpha = {(corpus, name): {k: rng.uniform(size=(len(TEMPS), n)) for k in kinds}
             for corpus, n in (("code", 7), ("prose", 3)) for name in ("draft-kl", "draft-ce")}
    mean = {key: {k: v.mean(axis=1) for k, v in kinds_.items()} for key, kinds_ in alpha.items()}
    report.print_alpha_table(mean, alpha, TEMPS, vocab=2048)
    lines = capsys.readouterr().out.splitlines()
    assert "positions: code 7, prose 3" in lines[0]
    row = next(line for line in lines if line.startswith(" 2.0"))
    kl, ce, prose = mean["code", "draft-kl"], mean["code", "draft-ce"], mean["prose", "draft-kl"]
    expect = [kl["sampled"][2], ce["sampled"][2], kl["greedy"][2], kl["top4"][2], kl["mismatch"][2],
              prose["sampled"][2], prose["greedy"][2]]
    assert [float(x) for x in row.split()[1:]] == pytest.approx(expect, abs=5e-4)
    assert f"{1 / 2048:.5f}" in lines[-2] and f"{4 / 2048:.5f}" in lines[-2]


def test_the_drift_table_labels_the_buckets_and_sets_held_out_alpha_beside(capsys):
    drift = {2.0: {"sampled": np.array([0.5, 0.4]), "greedy": np.array([0.3, 0.2])}}
    drift_spread = {2.0: {"sampled": spread(0.45, 0.4, 0.5), "greedy": spread(0.25, 0.2, 0.3)}}
    kl = {"sampled": np.array([0.6, 0.55, 0.52]), "greedy": np.array([0.6, 0.4, 0.33])}
    report.print_drift(drift, drift_spread, kl, TEMPS, n_prompts=5, bucket=16)
    out = capsys.readouterr().out
    assert "5 prompts x 32 generated tokens" in out and "  0-15    16-31" in out
    assert "T = 2.0, greedy   α:   0.300    0.200" in out and "(held-out text: 0.330)" in out


def test_the_policy_table_reports_switches_and_streams_within_ten_percent(capsys):
    ratio = np.array([[1.0, 0.95, 0.5], [0.92, 0.85, 0.95], [0.5, 0.5, 0.5], [0.9, 0.89, 1.0], [1.0, 0.7, 0.8]])
    tps = {"always": np.array([300.0, 100, 300]), "never": np.array([200.0, 200, 200]),
           "policy": np.array([290.0, 190, 250])}
    run = SimpleNamespace(tps_runs=[{}] * 5, tps=tps, ratio=ratio, left_early=1,  # ratio: streams x phases
                          reaction={"off in the T = 2 phase": [3, None], "on in the second T = 0 phase": [None, 17]})
    report.print_policy_streams(run, [(0.0, 40), (2.0, 40), (0.0, 40)], k=3, c=0.1, r=1.5)
    lines = capsys.readouterr().out.splitlines()
    assert f"{4 / 1.8:.2f}×" in lines[0] and "stays off" not in lines[0]  # (K + 1) / (Kc + r) = 2.22 >= 1.2
    within = [int(line.split()[-3]) for line in lines if line.startswith(("0 (T=", "1 (T=", "2 (T="))]
    assert within == [4, 1, 2]  # ratio >= 0.9, per phase
    assert "after 3, never tokens" in lines[-4] and "after never, 17 tokens" in lines[-3]
    assert "in 1 of 5 streams" in lines[-2] and "median over 5 streams" in lines[1]


def test_the_serving_lines_choose_the_branch_the_rows_support(capsys):
    rows = [{"batch": 1, "speedup": 1.5, "speedup_predicted": 1.6, "r": 1.0, "r_predicted": 1.1,
             "predicted_over_measured": 1.07},
            {"batch": 8, "speedup": 0.9, "speedup_predicted": 1.2, "r": 1.4, "r_predicted": 1.3,
             "predicted_over_measured": 1.33}]
    tails = {(1, "plain"): (np.array([1.0]), {"mean_ms": 2.0, "p50_ms": 1.5, "p99_ms": 6.0, "p99_over_mean": 3.0})}
    report.print_serving(rows, {"crossover": 8, "crossover_predicted": 16}, tails)
    out = capsys.readouterr().out
    assert "B = 1: 1.07, B = 8: 1.33" in out and "below the model's (holds here)" in out
    assert "r there is not below the model's r" in out and "P99 / mean 3.00" in out
    rows[1]["speedup"] = 1.3  # above the model at B = 8: the other sentence
    report.print_serving(rows, {"crossover": None, "crossover_predicted": 16}, {})
    assert "not always below the model's" in capsys.readouterr().out


def test_the_costs_quote_the_record_row_of_this_thread_count_only(capsys):
    in_loop = {"c": spread(0.12, 0.11, 0.13), "r": spread(1.3, 1.2, 1.4)}
    measured = {"plain": [{"target_forward_seconds": 0.002}, {"target_forward_seconds": 0.004}]}
    warm = {1: 0.001, 2: 0.0011, 4: 0.0012}
    row = {"source": "decode", "family": "chain draft-kl", "k": 3, "corpus": "code", "temperature": 0.0,
           "c": spread(0.2, 0.19, 0.21), "r": spread(1.1, 1.0, 1.2), "prompt_tokens": 96, "new_tokens": 64,
           "repeats": 3}
    report.print_costs(in_loop, measured, warm, 0.1, [dict(row, threads=torch.get_num_threads() + 1)], here=(48, 24, 2))
    out = capsys.readouterr().out
    assert "no K = 3 chain" in out and "in the loop 3.00 ms" in out and " 1.00   1.10   1.20" in out
    report.print_costs(in_loop, measured, warm, 0.1, [dict(row, threads=torch.get_num_threads())], here=(48, 24, 2))
    out = capsys.readouterr().out
    assert "c = 0.200 [0.190, 0.210]" in out and "here 48-token prompts, 24 new tokens, fastest of 2" in out


def test_the_sections_rebuild_the_committed_temperature_json():
    """From the committed report back to the notebook's variables, and through the sections to the same JSON."""
    committed = json.loads((ROOT / "outputs" / "benchmarks" / "temperature.json").read_text())
    mean = {("code", name): {"sampled": np.array(a["sampled"]), "greedy": np.array(a["greedy"]),
                             "mismatch": np.array(a["mismatch"]), "top4": np.array(a["coverage"]["4"])}
            for name, a in committed["alpha"].items()}
    assert report.alpha_section(mean) == committed["alpha"]
    w = committed["wallclock"]["draft-kl"]
    wall = {"sampled": [(t, k, tau, s, 0.0, 0.0) for t, k, tau, s in zip(w["temperatures"], w["k"], w["tau"],
                                                                          w["speedup"])]}
    wall_spread = {"sampled": [spread(s, lo, hi) for s, lo, hi in zip(w["speedup"], w["speedup_q25"],
                                                                       w["speedup_q75"])]}
    assert report.wallclock_section(wall, wall_spread, w["prompts"]) == w
    assert report.wallclock_section(wall, wall_spread, 7)["prompts"] == 7
