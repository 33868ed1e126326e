"""The tuning decision and the skill file's arithmetic (lessonlib.skill)."""
import json
import re

import numpy as np
import pytest

from lessonlib import skill, theory

ALPHAS = (0.05, 0.2, 0.4, 0.6, 0.75, 0.9, 0.97)
COSTS = (0.0, 0.02, 0.1, 0.25, 0.6)


def roofline(flat):
    """The curve max(1, n / F) as (tokens, cost) points for ``forward_cost``."""
    return ([1, flat, 2 * flat], [1.0, 1.0, 2.0])


def curve_cost(n, forward_cost):
    """Independent reference for f(n): linear interpolation, extended along the last segment."""
    (x0, x1), (y0, y1) = forward_cost[0][-2:], forward_cost[1][-2:]
    if n >= x1:
        return y1 + (n - x1) * (y1 - y0) / (x1 - x0)
    return float(np.interp(n, *forward_cost))


def brute_force_k(alpha, c, k_max=16, forward_cost=None):
    """argmax_K E(alpha, K) / (K c + r), r = f(K + 1) / f(1) at batch 1 (r = 1 without a curve)."""
    r = lambda k: 1.0 if forward_cost is None else curve_cost(k + 1, forward_cost) / forward_cost[1][0]
    return 1 + int(np.argmax([theory.expected_tokens_per_verify(alpha, k) / (k * c + r(k)) for k in range(1, k_max + 1)]))


@pytest.mark.parametrize("c", COSTS)
def test_recommended_k_is_the_argmax_of_its_formula(c):
    for alpha in ALPHAS:
        r = skill.recommend(alpha, c)
        assert r["k"] == brute_force_k(alpha, c) == theory.optimal_k(alpha, c, k_max=16)
        assert r["tree_width"] == 1
        assert r["expected_speedup"] == pytest.approx(theory.expected_speedup(alpha, r["k"], c))
        assert r["expected_tokens_per_verify"] == pytest.approx(theory.expected_tokens_per_verify(alpha, r["k"]))


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


@pytest.mark.parametrize("c", (0.02, 0.1, 0.25))
def test_breakeven_values_satisfy_their_definitions(c):
    for alpha in (0.4, 0.75, 0.9):
        r = skill.recommend(alpha, c, margin=0.2)
        k = r["k"]
        assert theory.expected_speedup(r["breakeven_alpha"], k, c) == pytest.approx(1.0, abs=1e-9)
        assert r["fallback"]["alpha_off"] == pytest.approx(r["breakeven_alpha"])
        if r["fallback"]["alpha_on"] is not None:
            assert theory.expected_speedup(r["fallback"]["alpha_on"], k, c) == pytest.approx(1.2, abs=1e-9)
        best = r["breakeven_alpha_best_k"]
        assert max(theory.expected_speedup(best, kk, c) for kk in range(1, 33)) == pytest.approx(1.0, abs=1e-9)
        assert r["monitor"]["tau_alert_below"] == pytest.approx(k * c + 1)  # E at break-even = K c + 1


def test_concurrency_limit_is_the_last_batch_that_still_pays():
    alpha, c, flat = 0.7, 0.05, roofline(64)
    r = skill.recommend(alpha, c, 1.0, 1, forward_cost=flat)
    limit = r["concurrency_limit"]
    assert limit in skill.CONCURRENCIES and limit < max(skill.CONCURRENCIES)
    pays = lambda b: skill.speedup_grid(alpha, c, 16, None, b, flat)[1].max()
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
    gate = hot["temperature_gate"]
    assert np.interp(gate, *curve["greedy"]) == pytest.approx(0.1)  # alpha(T_gate) = c (best-K break-even)
    assert not hot["speculate"] and "temperature" in hot["reasons"][0]
    assert skill.recommend({"greedy": 0.8}, {"greedy": 0.1}, temperature=0.5, alpha_curve=curve)["speculate"]


def test_alpha_from_tau_inverts_tokens_per_verify():
    for k in (1, 3, 5):
        for alpha in (0.0, 0.3, 0.8, 1.0):
            tau = theory.expected_tokens_per_verify(alpha, k)
            assert skill.alpha_from_tau(tau, k) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="tau"):
        skill.alpha_from_tau(7.0, 5)
    with pytest.raises(ValueError, match="k must"):
        skill.alpha_from_tau(2.0, 0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(alpha=1.5, c=0.1), "alpha"),
    (dict(alpha={}, c=0.1), "alpha"),
    (dict(alpha=0.5, c=-0.1), "c"),
    (dict(alpha={"a": 0.5}, c={"b": 0.1}), "c must give"),
    (dict(alpha=0.5, c=0.1, temperature=-1.0), "temperature"),
    (dict(alpha=0.5, c=0.1, concurrency=0), "concurrency"),
    (dict(alpha=0.5, c=0.1, k_max=0), "k_max"),
    (dict(alpha=0.5, c=0.1, margin=-0.1), "margin"),
    (dict(alpha={"a": 0.5}, c=0.1, alpha_curve={"b": ([0, 1], [0.5, 0.4])}), "not in alpha"),
    (dict(alpha=0.5, c=0.1, forward_cost=([2, 4], [1.0, 1.5])), "forward_cost"),
    (dict(alpha=0.5, c=0.1, forward_cost=([1, 4], [1.0, -1.5])), "forward_cost"),
])
def test_recommend_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        skill.recommend(**kwargs)


# ----------------------------------------------------------------------------- the skill file

def synthetic_measurements():
    ts = [0.0, 0.3, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0]
    return {
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


def check_skill_arithmetic(markdown):
    block = skill.decision_block(markdown)
    c = block["c"]
    assert block["examples"], "the worked example must be there"
    for ex in block["examples"]:
        fc = ex["inputs"]["forward_cost"]
        for name, cand in ex["candidates"].items():
            k = cand["k"]
            assert k == brute_force_k(cand["alpha"], cand["c"], forward_cost=fc)  # K = argmax of its own formula
            r = 1.0 if fc is None else curve_cost(k + 1, fc) / fc[1][0]
            assert cand["expected_speedup"] == pytest.approx(
                theory.expected_tokens_per_verify(cand["alpha"], k) / (k * cand["c"] + r))
        assert theory.expected_speedup(ex["breakeven_alpha"], ex["k"], ex["candidates"][ex["best_candidate"]]["c"]) \
            == pytest.approx(1.0, abs=1e-9)  # break-even of E/(Kc + 1), the fallback rule's threshold
    ts = block["temperatures"]
    for kind, t_star in block["breakeven_temperature"].items():
        alphas = block["alpha"][kind]
        if t_star is not None and np.isfinite(t_star) and t_star > ts[0]:
            assert np.interp(t_star, ts, alphas) == pytest.approx(c, abs=1e-9)  # alpha(T*) = c
    # every K in the printed table is the argmax for its row's alpha and column's c
    table = markdown[markdown.index("## Optimal K"):markdown.index("## Course measurements")]
    header = [float(x) for x in re.findall(r"\| ([0-9.]+)", table.splitlines()[2])]
    for line in table.splitlines()[4:]:
        if not line.startswith("| 0"):
            continue
        cells = line.strip("| ").split(" | ")
        for c_col, cell in zip(header, cells[1:]):
            assert int(re.search(r"K=(\d+)", cell)[1]) == brute_force_k(float(cells[0]), c_col)
    # ready-to-paste vLLM configurations: current JSON syntax for the three methods
    configs = [json.loads(m) for m in re.findall(r"--speculative-config '(\{.*?\})'", markdown)]
    assert {cfg["method"] for cfg in configs} >= {"draft_model", "eagle", "eagle3"}
    assert all(isinstance(cfg["num_speculative_tokens"], int) and cfg["num_speculative_tokens"] >= 1 for cfg in configs)
    assert "--speculative_model " not in markdown and "--num_speculative_tokens " not in markdown


@pytest.mark.parametrize("forward_cost", [None, {"tokens": [1, 2, 4, 8, 16], "cost": [1.0, 1.1, 1.3, 1.7, 2.6]}])
def test_built_skill_file_arithmetic_is_right(forward_cost):
    m = synthetic_measurements()
    m["forward_cost"] = forward_cost
    check_skill_arithmetic(skill.build_skill(m))


def test_build_skill_rejects_incomplete_measurements():
    m = synthetic_measurements()
    del m["c"]
    with pytest.raises(ValueError, match="'c'"):
        skill.build_skill(m)
    m = synthetic_measurements()
    m["alpha"]["draft-kl"]["greedy"] = [0.5]
    with pytest.raises(ValueError, match="greedy"):
        skill.build_skill(m)


def test_shipped_skill_file_is_current_and_right():
    if not skill.SKILL_FILE.exists() or not skill.MEASUREMENTS.exists():
        pytest.skip("outputs/skill-speculative-tuning.md not generated yet (run notebook 5)")
    text = skill.SKILL_FILE.read_text()
    assert text == skill.build_skill(skill.load_measurements()), "regenerate with: python -m lessonlib.skill"
    check_skill_arithmetic(text)
