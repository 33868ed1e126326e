"""The tuning decision and the skill file (lessonlib.course.skill): one cost model, checked inputs,
paths resolved at call time, and a committed skill file that matches the committed measurements."""
import copy
import json
import math
import re

import numpy as np
import pytest
from float_text import differences

from lessonlib import paths
from lessonlib.bench import record
from lessonlib.core import theory
from lessonlib.course import skill
from lessonlib.course.skill import draft_free, measured
from lessonlib.course.skill.__main__ import main
from lessonlib.course.skill.kinds_gate import MIN_SPEEDUP
from lessonlib.decoding import fallback

ALPHAS = (0.05, 0.2, 0.4, 0.6, 0.75, 0.9, 0.97)
COSTS = (0.0, 0.02, 0.1, 0.25, 0.6)
CURVE = ([1, 2, 4, 8, 16], [1.0, 1.1, 1.3, 1.7, 2.6])  # a measured-looking r(n): verify dearer than a step


def roofline(flat):
    """The curve max(1, n / F) as (tokens, cost) points for ``forward_cost``."""
    return ([1, flat, 2 * flat], [1.0, 1.0, 2.0])


def curve_cost(n, forward_cost):
    """Independent reference for r(n): linear interpolation, extended along the last segment."""
    if forward_cost is None:
        return 1.0
    (x0, x1), (y0, y1) = forward_cost[0][-2:], forward_cost[1][-2:]
    f = y1 + (n - x1) * (y1 - y0) / (x1 - x0) if n >= x1 else float(np.interp(n, *forward_cost))
    return f / forward_cost[1][0]


def speedup(alpha, k, c, forward_cost=None):
    """Independent reference for the one cost model: E(alpha, K) / (K c + r(K + 1))."""
    return theory.expected_tokens_per_verify(alpha, k) / (k * c + curve_cost(k + 1, forward_cost))


def brute_force_k(alpha, c, k_max=16, forward_cost=None):
    return 1 + int(np.argmax([speedup(alpha, k, c, forward_cost) for k in range(1, k_max + 1)]))


# ----------------------------------------------------------------------------- the decision

@pytest.mark.parametrize("c", COSTS)
def test_recommended_k_is_the_argmax_of_its_formula(c):
    for alpha in ALPHAS:
        r = skill.recommend(alpha, c)
        assert r["k"] == brute_force_k(alpha, c) == theory.optimal_k(alpha, c, k_max=16)
        assert r["tree_width"] == 1 and r["r"] == 1.0
        assert r["expected_speedup"] == pytest.approx(theory.expected_speedup(alpha, r["k"], c))
        assert r["expected_tokens_per_verify"] == pytest.approx(theory.expected_tokens_per_verify(alpha, r["k"]))
        with_r = skill.recommend(alpha, c, forward_cost=CURVE)
        assert with_r["k"] == brute_force_k(alpha, c, forward_cost=CURVE)
        assert with_r["expected_speedup"] == pytest.approx(speedup(alpha, with_r["k"], c, CURVE))


def test_k_cap_is_reported_not_silent():
    capped = skill.recommend(0.95, 0.02)  # the optimum is K = 31, beyond the default k_max = 16
    assert capped["k"] == 16 and capped["k_at_cap"]
    wide = skill.recommend(0.95, 0.02, k_max=64)
    assert wide["k"] == brute_force_k(0.95, 0.02, 64) == 31 and not wide["k_at_cap"]
    assert not skill.recommend(0.6, 0.1)["k_at_cap"]


def test_tree_width_and_k_maximise_the_tree_formula_with_concurrency():
    # independent reference: tokens 1 + a_w E(a, K-1), cost K c + max(1, B(wK+1)/F)/max(1, B/F)
    alpha, c, cov, flat = 0.6, 0.05, {2: 0.75, 4: 0.85, 8: 0.9}, 32
    for b in (1, 2, 4, 16):
        best, arg = -1, None
        for w, aw in [(1, alpha)] + sorted(cov.items()):
            for k in range(1, 17):
                tail = 1.0 if k == 1 else theory.expected_tokens_per_verify(alpha, k - 1)
                s = (1 + aw * tail) / (k * c + max(1, b * (w * k + 1) / flat) / max(1, b / flat))  # roofline
                if s > best:
                    best, arg = s, (w, k)
        r = skill.recommend(alpha, c, 1.0, b, coverage=cov, forward_cost=roofline(flat))
        assert (r["tree_width"], r["k"]) == arg and r["expected_speedup"] == pytest.approx(best)
    assert skill.recommend(alpha, c, 1.0, 1, coverage=cov, forward_cost=roofline(flat))["tree_width"] > 1
    assert skill.recommend(alpha, c, 1.0, 16, coverage=cov, forward_cost=roofline(flat))["tree_width"] == 1


@pytest.mark.parametrize("forward_cost", [None, CURVE])
@pytest.mark.parametrize("c", (0.02, 0.1, 0.25))
def test_breakeven_values_use_the_same_cost_model(c, forward_cost):
    for alpha in (0.4, 0.75, 0.9):
        r = skill.recommend(alpha, c, margin=0.2, forward_cost=forward_cost)
        k, rr = r["k"], r["r"]
        assert rr == pytest.approx(curve_cost(k + 1, forward_cost))
        assert speedup(r["breakeven_alpha"], k, c, forward_cost) == pytest.approx(1.0, abs=1e-9)
        fb = r["fallback"]
        assert (fb["k"], fb["c"], fb["r"]) == (k, c, rr)
        assert fb["alpha_off"] == pytest.approx(r["breakeven_alpha"])
        if np.isfinite(fb["alpha_on"]):
            assert speedup(fb["alpha_on"], k, c, forward_cost) == pytest.approx(1.2, abs=1e-9)
        # the policy built from these settings switches at the same alpha
        assert fallback.FallbackPolicy(k, c, r=rr).alpha_off == pytest.approx(fb["alpha_off"])
        best = r["breakeven_alpha_best_k"]
        assert max(speedup(best, kk, c, forward_cost) for kk in range(1, 17)) == pytest.approx(1.0, abs=1e-9)
        assert r["monitor"]["tau_alert_below"] == pytest.approx(k * c + rr)  # E at the break-even alpha
        if forward_cost is None:
            assert best == pytest.approx(c)  # r = 1: no K pays below alpha = c (Cor. 3.9)
        else:
            assert best > c  # a dearer verify raises it


def test_temperature_gate_is_where_the_fallback_switches_off():
    """Issue 14.5: the gate prices the verify with the same measured r as the speedups."""
    ts, alphas, c = [0.0, 0.5, 1.0, 1.5, 2.0], [0.62, 0.55, 0.4, 0.25, 0.1], 0.1
    r = skill.recommend(0.62, c, 0.0, alpha_curve={"draft": (ts, alphas)}, forward_cost=CURVE)
    k, _, gate = r["k"], r["r"], r["temperature_gate"]
    assert ts[0] < gate < ts[-1]
    assert np.interp(gate, ts, alphas) == pytest.approx(r["fallback"]["alpha_off"], abs=1e-9)
    assert speedup(np.interp(gate, ts, alphas), k, c, CURVE) == pytest.approx(1.0, abs=1e-9)
    assert speedup(np.interp(gate - 0.01, ts, alphas), k, c, CURVE) > 1 > speedup(np.interp(gate + 0.01, ts, alphas),
                                                                                  k, c, CURVE)
    # negative control: the old gate (best K, r = 1: alpha(T) = c) is a different, later temperature
    assert fallback.breakeven_temperature(ts, alphas, c) > gate + 0.3
    above = skill.recommend(0.62, c, gate + 0.05, alpha_curve={"draft": (ts, alphas)}, forward_cost=CURVE)
    assert not above["speculate"] and any("gate" in why for why in above["reasons"])
    # a round no dearer than a plain step pays at every alpha: no gate
    assert skill.temperature_gate(ts, alphas, 2, 0.0, 1.0) == math.inf
    for args, name in (((2, 0.1, np.nan), "r"), ((2, 0.1, 0.0), "r"), ((0, 0.1, 1.2), "k"), ((2, -0.1, 1.2), "c")):
        with pytest.raises(ValueError, match=f"^{name} must"):
            skill.temperature_gate(ts, alphas, *args)


def test_concurrency_limit_is_the_last_batch_that_still_pays():
    alpha, c, flat = 0.7, 0.05, roofline(64)
    r = skill.recommend(alpha, c, 1.0, 1, forward_cost=flat)
    limit = r["concurrency_limit"]
    assert limit in skill.CONCURRENCIES and limit < max(skill.CONCURRENCIES)

    def pays(b):
        return skill.speedup_grid(alpha, c, 16, None, b, flat)[1].max()

    assert skill.verify_cost(5, 1, flat) == pytest.approx(1.0) and skill.verify_cost(5, 64, flat) == pytest.approx(5.0)
    assert pays(limit) >= 1.2 > pays(2 * limit)
    over = skill.recommend(alpha, c, 1.0, 2 * limit, forward_cost=flat)
    assert not over["speculate"] and over["draft"] == "none" and any("concurrency" in why for why in over["reasons"])
    assert skill.recommend(alpha, c, 1.0, 1024)["concurrency_limit"] is None  # not measured: no limit claimed


def test_draft_choice_temperature_gate_and_none():
    r = skill.recommend({"small": 0.6, "head": 0.8}, {"small": 0.1, "head": 0.03})
    assert r["draft"] == "head" and r["speculate"]
    assert r["candidates"]["small"]["k"] == theory.optimal_k(0.6, 0.1, 16)
    low = skill.recommend({"small": 0.1}, {"small": 0.1})
    assert not low["speculate"] and low["draft"] == "none" and low["best_candidate"] == "small"
    curve = {"greedy": ([0.0, 1.0, 2.0], [0.8, 0.4, 0.02])}
    hot = skill.recommend({"greedy": 0.8}, {"greedy": 0.1}, temperature=1.9, alpha_curve=curve)
    k, gate = hot["k"], hot["temperature_gate"]
    assert np.interp(gate, *curve["greedy"]) == pytest.approx(theory.breakeven_alpha(k, 0.1))  # r = 1: S(K) = 1
    assert not hot["speculate"] and any("gate" in why for why in hot["reasons"])
    assert skill.recommend({"greedy": 0.8}, {"greedy": 0.1}, temperature=0.5, alpha_curve=curve)["speculate"]


def test_one_inverse_for_tau_breakeven_and_thresholds():
    for k in (1, 3, 5):
        for alpha in (0.0, 0.3, 0.8, 1.0):
            tau = theory.expected_tokens_per_verify(alpha, k)
            assert skill.alpha_from_tau(tau, k) == pytest.approx(alpha, abs=1e-9)
            assert theory.alpha_for_speedup(tau, k, 0.0) == pytest.approx(alpha, abs=1e-9)
    ks, cs = np.array([1, 2, 4, 8]), np.array([0.0, 0.05, 0.2, 0.9])
    np.testing.assert_allclose(theory.alpha_for_speedup(1.0, ks, cs), theory.breakeven_alpha(ks, cs), atol=1e-12)
    assert theory.alpha_for_speedup(6.0, 4, 0.1) == math.inf and theory.alpha_for_speedup(0.5, 4, 0.1) == 0.0
    assert fallback.alpha_for_speedup(1.0, 3, 0.1, 1.3) == theory.alpha_for_speedup(1.0, 3, 0.1, 1.3)
    with pytest.raises(ValueError, match="tau"):
        skill.alpha_from_tau(7.0, 5)
    with pytest.raises(ValueError, match="k must"):
        skill.alpha_from_tau(2.0, 0)
    for bad, name in ((dict(speedup=np.nan), "speedup"), (dict(r=0.0), "r"), (dict(r=np.inf), "r"), (dict(c=-1), "c")):
        args = {"speedup": 1.0, "k": 3, "c": 0.1, "r": 1.0} | bad
        with pytest.raises(ValueError, match=f"^{name} must"):
            theory.alpha_for_speedup(**args)


@pytest.mark.parametrize("kwargs, name", [
    (dict(alpha=1.5, c=0.1), r"^alpha must"),
    (dict(alpha=2.0, c=0.1), r"^alpha must"),
    (dict(alpha=-0.1, c=0.1), r"^alpha must"),
    (dict(alpha=np.nan, c=0.1), r"^alpha must"),
    (dict(alpha={}, c=0.1), r"^alpha must"),
    (dict(alpha={"a": 1.2}, c=0.1), r"^alpha\['a'\] must"),
    (dict(alpha=0.5, c=-0.1), r"^c must"),
    (dict(alpha=0.5, c=np.inf), r"^c must"),
    (dict(alpha=0.5, c=np.nan), r"^c must"),
    (dict(alpha={"a": 0.5}, c={"a": -1.0}), r"^c\['a'\] must"),
    (dict(alpha={"a": 0.5}, c={"b": 0.1}), r"^c must give"),
    (dict(alpha=0.5, c=0.1, coverage={2: 1.7}), r"^coverage\[2\] must"),
    (dict(alpha=0.5, c=0.1, coverage={2: np.nan}), r"^coverage\[2\] must"),
    (dict(alpha=0.5, c=0.1, coverage={2: -0.1}), r"^coverage\[2\] must"),
    (dict(alpha=0.5, c=0.1, coverage={2.5: 0.6}), r"^coverage widths"),
    (dict(alpha={"a": 0.5}, c=0.1, coverage={"a": {4: 1.7}}), r"^coverage\['a'\]\[4\] must"),
    (dict(alpha=0.5, c=0.1, temperature=-1.0), r"^temperature"),
    (dict(alpha=0.5, c=0.1, temperature=np.nan), r"^temperature"),
    (dict(alpha=0.5, c=0.1, concurrency=0), r"^concurrency"),
    (dict(alpha=0.5, c=0.1, concurrency=2.5), r"^concurrency"),
    (dict(alpha=0.5, c=0.1, k_max=0), r"^k_max"),
    (dict(alpha=0.5, c=0.1, margin=-0.1), r"^margin"),
    (dict(alpha=0.5, c=0.1, margin=np.nan), r"^margin"),
    (dict(alpha={"a": 0.5}, c=0.1, alpha_curve={"b": ([0, 1], [0.5, 0.4])}), "not in alpha"),
    (dict(alpha={"a": 0.5}, c=0.1, alpha_curve={"a": ([0, 1], [0.5, np.nan])}), r"^alpha_curve\['a'\] alphas"),
    (dict(alpha={"a": 0.5}, c=0.1, alpha_curve={"a": ([1, 0], [0.5, 0.4])}), r"^alpha_curve\['a'\] must"),
    (dict(alpha=0.5, c=0.1, forward_cost=([2, 4], [1.0, 1.5])), r"^forward_cost"),
    (dict(alpha=0.5, c=0.1, forward_cost=([1, 4], [1.0, -1.5])), r"^forward_cost"),
])
def test_recommend_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        skill.recommend(**kwargs)


def test_good_input_at_the_edges_is_accepted():
    # negative control for the bad-input table: the boundary values themselves are valid
    for alpha, c, cov in ((0.0, 0.0, {2: 0.0}), (1.0, 0.0, {2: 1.0}), (0.5, 1.0, {4: 0.7})):
        assert skill.recommend(alpha, c, coverage=cov)["k"] >= 1


# ----------------------------------------------------------------------------- the measurements

def synthetic_measurements(full=False):
    ts = [0.0, 0.3, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0]
    m = {
        "schema": 1, "source": "synthetic (tests)", "corpus": "code", "heldout_tokens": 1000, "device": "test",
        "temperatures": ts,
        "c": {"draft-kl": 0.12},
        "alpha": {"draft-kl": {
            "sampled": [0.62, 0.63, 0.66, 0.69, 0.72, 0.76, 0.81, 0.87, 0.93],
            "greedy": [0.62, 0.61, 0.55, 0.48, 0.40, 0.31, 0.20, 0.09, 0.02],
            "mismatch": [0.30, 0.40, 0.55, 0.65, 0.72, 0.70, 0.62, 0.50, 0.35],
            "coverage": {"4": [0.85, 0.84, 0.80, 0.72, 0.63, 0.52, 0.37, 0.18, 0.05]}}},
        "mismatch_draft_temperature": 1.0,
        "forward_cost": None,
    }
    if full:
        m |= {"c_measured": "in the decoding loop", "c_warm": {"draft-kl": 0.09},
              "alpha_decoding": {"draft-kl": {"temperatures": [0.0, 1.0], "sampled": [0.5, 0.6],
                                              "greedy": [0.5, 0.3], "prompts": 5}},
              "wallclock": {"draft-kl": {"temperatures": [0.0, 1.0], "k": [3, 3], "tau": [2.1, 2.3],
                                         "speedup": [1.3, 1.4], "speedup_q25": [1.2, 1.3],
                                         "speedup_q75": [1.4, 1.5], "prompts": 5}},
              "fallback": {"k": 3, "c": 0.12, "policy": {"window": 16, "r": 1.3},
                           "phases": [{"temperature": 0.0, "tokens": 100}, {"temperature": 2.0, "tokens": 100}],
                           "tokens_per_second": {"always": [500, 300], "never": [450, 450], "policy": [490, 440]}}}
    return m


@pytest.mark.parametrize("field, value, name", [
    ("temperatures", [0.0, 0.0, 1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0], "temperatures"),
    ("c", {"draft-kl": -0.1}, r"c\['draft-kl'\]"),
    ("c", {"draft-kl": float("nan")}, r"c\['draft-kl'\]"),
    ("c", {"draft-kl": float("inf")}, r"c\['draft-kl'\]"),
    ("heldout_tokens", 0, "heldout_tokens"),
    ("c_measured", "guessed", "c_measured"),
    ("forward_cost", {"tokens": [2, 4], "cost": [1.0, 1.2]}, "forward_cost"),
])
def test_validation_rejects_bad_fields(field, value, name):
    m = synthetic_measurements()
    m[field] = value
    with pytest.raises(ValueError, match=name):
        skill.validate_measurements(m)


@pytest.mark.parametrize("path, value, name", [
    (("sampled", 0), 1.2, r"alpha\['draft-kl'\]\['sampled'\]"),
    (("greedy", 3), float("nan"), r"alpha\['draft-kl'\]\['greedy'\]"),
    (("mismatch", 1), -0.01, r"alpha\['draft-kl'\]\['mismatch'\]"),
    (("coverage", "4", 2), 1.7, r"\['coverage'\]\['4'\]"),
    (("coverage", "4", 2), float("nan"), r"\['coverage'\]\['4'\]"),
])
def test_validation_rejects_alpha_and_coverage_outside_0_1(path, value, name):
    m = synthetic_measurements()
    node = m["alpha"]["draft-kl"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValueError, match=name):
        skill.build_skill(m)


def test_validation_rejects_missing_and_misaligned_fields():
    m = synthetic_measurements()
    del m["c"]
    with pytest.raises(ValueError, match="'c'"):
        skill.build_skill(m)
    m = synthetic_measurements()
    m["alpha"]["draft-kl"]["greedy"] = [0.5]
    with pytest.raises(ValueError, match="greedy"):
        skill.build_skill(m)
    m = synthetic_measurements(full=True)
    m["wallclock"]["draft-kl"]["speedup"] = [1.3]
    with pytest.raises(ValueError, match=r"wallclock\['draft-kl'\]\['speedup'\]"):
        skill.build_skill(m)
    m = synthetic_measurements(full=True)
    m["alpha_decoding"]["draft-kl"]["greedy"] = [0.5, 1.5]
    with pytest.raises(ValueError, match="alpha_decoding"):
        skill.build_skill(m)
    skill.validate_measurements(synthetic_measurements(full=True))  # control: the unmodified ones pass


# ----------------------------------------------------------------------------- the skill file

def check_skill_arithmetic(markdown):
    """Every decision in the file is the argmax / root of the one cost model it states."""
    block = skill.decision_block(markdown)
    c, fc, ts = block["c"], block["forward_cost"], block["temperatures"]
    assert block["examples"], "the worked example must be there"
    for ex in block["examples"]:
        assert ex["inputs"]["forward_cost"] == fc
        for cand in ex["candidates"].values():
            k = cand["k"]
            assert k == brute_force_k(cand["alpha"], cand["c"], forward_cost=fc)  # K = argmax of its own formula
            assert cand["expected_speedup"] == pytest.approx(speedup(cand["alpha"], k, cand["c"], fc))
            assert speedup(cand["breakeven_alpha"], k, cand["c"], fc) == pytest.approx(1.0, abs=1e-9)
        chosen = ex["candidates"][ex["best_candidate"]]
        assert ex["fallback"]["alpha_off"] == pytest.approx(chosen["breakeven_alpha"])  # gate and fallback agree
        if "measured" in ex and ex["measured"]["speedup"] < MIN_SPEEDUP:  # a measurement below the bar decides
            assert not ex["speculate"] and ex["draft"] == "none"
        assert ex["fallback"]["r"] == pytest.approx(curve_cost(ex["k"] + 1, fc))
    for kind, g in block["gates"].items():
        alphas = block["alpha"][kind]
        assert (g["k"] == brute_force_k(alphas[0], c, forward_cost=fc)
                and g["r"] == pytest.approx(curve_cost(g["k"] + 1, fc)))
        assert speedup(g["alpha_off"], g["k"], c, fc) == pytest.approx(1.0, abs=1e-9)
        if g["temperature"] is not None and g["temperature"] > ts[0]:
            assert np.interp(g["temperature"], ts, alphas) == pytest.approx(g["alpha_off"], abs=1e-9)
            assert all(a > g["alpha_off"] for t, a in zip(ts, alphas) if t < g["temperature"])  # the first crossing
        elif g["temperature"] is None:  # never crosses in range
            assert min(alphas) > g["alpha_off"]
    # every K in the printed table is the argmax for its row's alpha and column's c (and r)
    table = markdown[markdown.index("## Optimal K"):markdown.index("## Course measurements")]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [float(x) for x in re.findall(r"\| ([0-9.]+)", lines[0])]
    assert len(header) == 5 and "K≥" not in table
    for line in lines[2:]:
        cells = line.strip("| ").split(" | ")
        for j, (c_col, cell) in enumerate(zip(header, cells[1:])):
            col_fc = fc if j == len(header) - 1 else None  # the course column uses the measured r
            assert int(re.search(r"K=(\d+)", cell)[1]) == brute_force_k(float(cells[0]), c_col, 64, col_fc)
    # ready-to-paste vLLM configurations: current JSON syntax for the three methods
    configs = [json.loads(m) for m in re.findall(r"--speculative-config '(\{.*?\})'", markdown)]
    assert {cfg["method"] for cfg in configs} >= {"draft_model", "eagle", "eagle3"}
    assert all(isinstance(cfg["num_speculative_tokens"], int) and cfg["num_speculative_tokens"] >= 1 for cfg in configs)
    assert "--speculative_model " not in markdown and "--num_speculative_tokens " not in markdown


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("forward_cost", [None, {"tokens": CURVE[0], "cost": CURVE[1]}])
def test_built_skill_file_arithmetic_is_right(forward_cost, full):
    m = synthetic_measurements(full)
    m["forward_cost"] = forward_cost
    text = skill.build_skill(m)
    check_skill_arithmetic(text)
    # the procedure warns where its inputs are optimistic, and states its K cap
    assert "A warm c is not the c decoding pays" in text
    assert "Teacher-forced α overstates a deterministic draft's α on generated text" in text
    assert "K is searched over 1..64" in text
    if full:
        assert "c = 0.120 in the decoding loop, warm c = 0.090" in text
        assert "the warm c came out below the in-loop c (0.090 against 0.120)" in text
        m["c_warm"] = {d: 0.15 for d in m["c_warm"]}  # the other way round is said the other way
        assert "the warm c came out above the in-loop c (0.150 against 0.120)" in skill.build_skill(m)
        assert "median [IQR] over 5 prompts" in text and "1.30× [1.20, 1.40]" in text
    else:
        assert "speedups it predicts are unchecked" in text
        assert "warm c = 0.120" in text and "an example, not a median" not in text  # no wall-clock rows


def test_arithmetic_check_catches_a_wrong_file():
    # negative controls: the check above must fail on a file whose K or gate is wrong
    m = synthetic_measurements()
    m["forward_cost"] = {"tokens": CURVE[0], "cost": CURVE[1]}
    text = skill.build_skill(m)
    wrong_k = re.sub(r"\| 0\.7 \| K=(\d+)", lambda g: f"| 0.7 | K={int(g[1]) + 1}", text, count=1)
    assert wrong_k != text
    with pytest.raises(AssertionError):
        check_skill_arithmetic(wrong_k)
    block = skill.decision_block(text)
    block["gates"]["greedy"]["temperature"] = fallback.breakeven_temperature(block["temperatures"],
                                                                             block["alpha"]["greedy"], block["c"])
    start = text.rindex("```json\n") + len("```json\n")
    wrong_gate = text[:start] + json.dumps(block) + "\n```\n"
    with pytest.raises(AssertionError):  # the r = 1, best-K gate is not the one cost model's
        check_skill_arithmetic(wrong_gate)


def test_paths_resolve_at_call_time(tmp_path, monkeypatch, capsys):
    committed = paths.ROOT / "outputs" / "skill-speculative-tuning.md"
    before = committed.read_bytes() if committed.exists() else None
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    assert skill.measurements_path() == skill.MEASUREMENTS == tmp_path / "benchmarks" / "temperature.json"
    assert skill.skill_path() == skill.SKILL_FILE == tmp_path / "skill-speculative-tuning.md"
    with pytest.raises(FileNotFoundError, match="05_high_temperature"):
        skill.write_skill()
    skill.MEASUREMENTS.parent.mkdir(parents=True)
    skill.MEASUREMENTS.write_text(json.dumps(synthetic_measurements()))
    assert skill.write_skill() == skill.SKILL_FILE and skill.SKILL_FILE.read_text().startswith("# Skill")
    skill.SKILL_FILE.unlink()
    assert main([]) == 0 and skill.SKILL_FILE.exists()
    assert str(skill.SKILL_FILE) in capsys.readouterr().out
    assert main(["--alpha", "0.7", "--c", "0.05"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == theory.optimal_k(0.7, 0.05, 16)
    assert (committed.read_bytes() if committed.exists() else None) == before  # the repository's file untouched


def test_committed_skill_file_is_current_and_right():
    # the committed files, read from the repository (not from LESSONLIB_OUTPUTS)
    measurements = paths.ROOT / "outputs" / "benchmarks" / "temperature.json"
    committed = paths.ROOT / "outputs" / "skill-speculative-tuning.md"
    text = committed.read_text()
    rows = record.load(paths.ROOT / "outputs" / "benchmarks")
    # equal up to the last bits of a float (tests/float_text.py: root finding differs in the 16th digit between
    # CPUs); a real change moves a number by far more, or changes the text
    assert not differences(text, skill.build_skill(skill.load_measurements(measurements), rows)), \
        "regenerate with: python -m lessonlib.course.skill"
    assert not differences("0.30102720147095063", "0.3010272014709506")
    assert differences("0.30102720147", "0.30112720147")
    check_skill_arithmetic(text)
    # control: the comparison is not vacuous -- other measurements give another file
    other = copy.deepcopy(skill.load_measurements(measurements))
    other["c"] = {name: value * 1.5 for name, value in other["c"].items()}
    assert skill.build_skill(other, rows) != text
    assert skill.build_skill(skill.load_measurements(measurements)) != text  # the draft-free rows are in it


def _record_row(family, method, speedup, source="tree", temperature=0.0):
    def spread(v):
        return {"median": v, "q25": v - 0.1, "q75": v + 0.1, "n": 5}

    k = int(method.rsplit("=", 1)[1]) if "=" in method else None
    return {"source": source, "family": family, "method": method, "k": k, "corpus": "code", "temperature": temperature,
            "threads": 1, "prompts": 5, "alpha": spread(0.8), "tau": spread(2.5), "speedup": spread(speedup)}


def test_draft_free_section_reads_the_record():
    rows = [_record_row("prompt lookup", "prompt lookup k=4", 1.9),
            _record_row("prompt lookup", "prompt lookup k=8", 2.2),
            _record_row("lookahead", "lookahead W4 N3 G4", 1.3),
            _record_row("chain draft-kl", "chain draft-kl K=3", 1.8),
            _record_row("prompt lookup", "prompt lookup k=12", 9.9, temperature=1.0),  # another setting: not shown
            _record_row("prompt lookup", "prompt lookup k=16", 9.9, source="decode")]
    text = "\n".join(draft_free.lines(rows))
    assert "`prompt lookup k=8`" in text and "2.20× [2.10, 2.30]" in text  # the best setting of its family
    assert "k=4`" not in text and "9.90" not in text and "lookahead W4 N3 G4" in text
    assert "chain draft-kl K=3" in text and "over 5 prompts, 1 thread" in text
    # without draft-free rows the section names the command that measures them
    for missing in ([], rows[3:4]):
        assert "none recorded yet" in "\n".join(draft_free.lines(missing)) and draft_free.lookup_k(missing) is None
    assert draft_free.lookup_k(rows) == 8  # the vLLM ngram config proposes the best lookup length


def measured_row(method, k, t, median, threads=1, source="decode"):
    spread = {"median": median, "q25": median - 0.05, "q75": median + 0.05}
    return {"source": source, "method": method, "k": k, "temperature": t, "threads": threads, "speedup": spread,
            "tau": spread, "prompts": 5, "corpus": "code", "new_tokens": 128}


def test_a_prediction_never_overrides_a_measurement_of_the_same_setting():
    """The synthetic draft is predicted on at T = 0 and 1 (K from its formula). The record's one-thread
    rows of the same chain, K and temperature decide: under 1.1x off, at or above on with the
    measurement cited; other K, two threads, truncation or a greedy q at T > 0 are other settings."""
    m = synthetic_measurements()
    examples = {ex["inputs"]["temperature"]: ex for ex in skill.worked_examples(m)}
    assert examples[0.0]["speculate"] and examples[1.0]["speculate"]
    k0, k1 = examples[0.0]["k"], examples[1.0]["k"]
    rows = [measured_row(f"chain draft-kl K={k0}", k0, 0.0, 0.95), measured_row(f"chain draft-kl K={k0}", k0, 0.0, 1.05,
                                                                                  source="kinds"),
            measured_row(f"draft-kl chain K={k1} (decode loop) (T = 1)", k1, 1.0, 1.4, source="sampled"),
            measured_row(f"chain draft-kl K={k1 + 1}", k1 + 1, 1.0, 0.5),  # another K
            measured_row(f"chain draft-kl K={k1}", k1, 1.0, 0.5, threads=2),  # two threads
            measured_row(f"draft-kl chain K={k1} (T = 1, top-p 0.95)", k1, 1.0, 0.5),  # truncation
            measured_row(f"draft-kl chain K={k1} · greedy (T = 1)", k1, 1.0, 0.5)]  # the greedy candidate's
    out = {ex["inputs"]["temperature"]: ex for ex in measured.overrule(list(examples.values()), rows, "draft-kl")}
    assert not out[0.0]["speculate"] and out[0.0]["measured"]["speedup"] == pytest.approx(1.0)
    assert out[0.0]["measured"]["rows"] == 2 and "does not override a measurement" in out[0.0]["reasons"][-1]
    assert out[1.0]["speculate"] and out[1.0]["measured"] == {
        "speedup": 1.4, "rows": 1, "k": k1, "methods": [f"sampled: draft-kl chain K={k1} (decode loop) (T = 1)"]}
    assert out[2.0] == examples[2.0]  # nothing measured: the prediction stands
    # rendered: the off decision and its reason in the worked example, no contradiction left
    text = skill.build_skill(m, rows)
    assert "- T = 0: candidates" in text and "→ **off**: plain decoding (measured 1.00×" in text
    assert f"measured 1.40× at K = {k1}" in text and "the prediction stands unchecked" in text
    check_skill_arithmetic(text)
