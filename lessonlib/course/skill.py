"""The lesson's deliverable: a tuning procedure for speculative decoding, built from measurements.

* ``recommend(alpha, c, temperature, concurrency, ...)`` -- the decision as a dict: which draft,
  K = argmax_K E(alpha, K) / (K c + r), tree width, temperature gate, concurrency limit, fallback
  thresholds and what to monitor. r is the cost of the verify forward relative to a one-token
  step; r = 1 while the target is memory-bound (batch 1, few tokens), which gives Leviathan et
  al.'s E / (K c + 1).
* ``build_skill(measurements)`` -- renders ``outputs/skill-speculative-tuning.md`` from the
  measurements notebook 5 writes to ``outputs/benchmarks/temperature.json`` (schema below).
* ``python -m lessonlib.skill`` regenerates the file; ``python -m lessonlib.skill --alpha 0.7
  --c 0.05 --temperature 0.8`` prints the decision for your own numbers.

Measurements schema (``temperature.json``; lists are aligned with ``temperatures``)::

    {"schema": 1, "source": str, "corpus": str, "heldout_tokens": int, "device": str,
     "temperatures": [T...],
     "c": {draft: c},                                    # measured cost ratio per draft model
     "alpha": {draft: {"sampled": [...], "greedy": [...], "mismatch": [...],
                       "coverage": {w: [...]}}},          # teacher-forced acceptance per T
     "mismatch_draft_temperature": float,
     "wallclock": {draft: {"temperatures": [...], "k": [...], "speedup": [...], "tau": [...]}},
     "forward_cost": {"tokens": [...], "cost": [...]} | null,  # target forward over n tokens
     "fallback": {"k": int, "c": float, "policy": {...}, "phases": [{"temperature": T, "tokens": n}],
                  "tokens_per_second": {"always": [...], "never": [...], "policy": [...]}}}
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import pathlib
import sys

import numpy as np

from .fallback import FallbackPolicy, alpha_for_speedup, breakeven_temperature
from .theory import breakeven_alpha, expected_tokens_per_verify

ROOT = pathlib.Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "outputs" / "benchmarks" / "temperature.json"
SKILL_FILE = ROOT / "outputs" / "skill-speculative-tuning.md"
CONCURRENCIES = tuple(2 ** i for i in range(11))  # 1 ... 1024


def _check_forward_cost(forward_cost):
    sizes, costs = (np.asarray(x, dtype=float) for x in forward_cost)
    if (sizes.ndim != 1 or sizes.shape != costs.shape or len(sizes) < 2 or sizes[0] != 1
            or np.any(np.diff(sizes) <= 0) or not np.all(np.isfinite(costs)) or np.any(costs <= 0)):
        raise ValueError("forward_cost must be (tokens, cost) with tokens increasing from 1 and costs > 0, "
                         f"at least two points; got {forward_cost!r}")
    return sizes, costs / costs[0]


def verify_cost(tokens, concurrency=1, forward_cost=None):
    """Cost of a target forward over ``tokens`` new tokens per sequence at batch ``concurrency``,
    relative to a one-token step at the same batch: r = f(B n) / f(B).

    f(n) = measured cost of a forward over n tokens / cost over one, from ``forward_cost`` =
    (tokens, cost) pairs, interpolated linearly and extended along its last segment. None means
    f = 1 (a memory-bound target whose verify costs one step), the assumption of E / (K c + 1).
    A roofline max(1, n / F) is the curve ([1, F, 2F], [1, 1, 2]).
    """
    n = np.asarray(tokens, dtype=float)
    if forward_cost is None:
        return np.ones_like(n)
    sizes, costs = _check_forward_cost(forward_cost)
    slope = (costs[-1] - costs[-2]) / (sizes[-1] - sizes[-2])

    def f(x):
        x = np.asarray(x, dtype=float)
        return np.where(x <= sizes[-1], np.interp(x, sizes, costs), costs[-1] + (x - sizes[-1]) * slope)

    return f(concurrency * n) / f(concurrency)


def speedup_grid(alpha, c, k_max=16, coverage=None, concurrency=1, forward_cost=None):
    """Predicted speedup S[w, K] for tree width w (rows, ``widths``) and K = 1..k_max (columns).

    Width w = w candidates at the first draft position, each continued by a chain to depth K
    (w K nodes): tokens per verify = 1 + alpha_w E(alpha, K - 1), with alpha_w the chance the
    target's token is among the w candidates (alpha_1 = alpha, so w = 1 is the chain E(alpha, K)).
    The draft runs K batched steps (cost K c); the verify costs r(w K + 1).
    Returns (widths, S, tokens per verify), the last two of shape (len(widths), k_max).
    """
    widths, alpha_w = [1], [alpha]
    for w, a in sorted((coverage or {}).items()):
        if int(w) > 1:
            widths.append(int(w))
            alpha_w.append(float(a))
    ks = np.arange(1, k_max + 1)
    tail = np.concatenate([[1.0], np.atleast_1d(expected_tokens_per_verify(alpha, ks[:-1]))]) if k_max > 1 \
        else np.ones(1)  # E(alpha, K - 1), with E(alpha, 0) = 1
    tokens = 1 + np.asarray(alpha_w)[:, None] * tail[None, :]
    nodes = np.asarray(widths)[:, None] * ks[None, :] + 1
    return widths, tokens / (ks[None, :] * c + verify_cost(nodes, concurrency, forward_cost)), tokens


def alpha_from_tau(tau, k):
    """Invert tau = E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha) for alpha (bisection).

    Engines report the mean accepted length tau (vLLM: 1 + accepted / drafts from its
    ``vllm:spec_decode_num_accepted_tokens_total`` and ``..._num_drafts_total`` counters);
    this turns it into the per-token alpha the formulas use.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not np.isscalar(tau) or not 1 <= tau <= k + 1:
        raise ValueError(f"tau must be in [1, k + 1] = [1, {k + 1}], got {tau!r}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_tokens_per_verify(mid, k) < tau else (lo, mid)
    return 0.5 * (lo + hi)


def _as_candidates(alpha, c):
    alphas = dict(alpha) if isinstance(alpha, dict) else {"draft": alpha}
    if not alphas:
        raise ValueError("alpha must be a number or a non-empty dict {draft name: alpha}")
    costs = dict(c) if isinstance(c, dict) else {name: c for name in alphas}
    if set(costs) != set(alphas):
        raise ValueError(f"c must give a cost for every draft in alpha: {sorted(alphas)}, got {sorted(costs)}")
    for name in alphas:
        a, cost = alphas[name], costs[name]
        if not np.isscalar(a) or not np.isfinite(a) or not 0 <= a <= 1:
            raise ValueError(f"alpha[{name!r}] must be an acceptance rate in [0, 1], got {a!r}")
        if not np.isscalar(cost) or not np.isfinite(cost) or cost < 0:
            raise ValueError(f"c[{name!r}] must be a finite number >= 0, got {cost!r}")
    return alphas, costs


def recommend(alpha, c, temperature=1.0, concurrency=1, *, alpha_curve=None, coverage=None,
              forward_cost=None, k_max=16, margin=0.2, window=32, probe_every=16):
    """The tuning decision for one workload, as a dict.

    alpha, c: measured acceptance rate and cost ratio at this workload's temperature; numbers,
        or dicts {draft name: value} to choose between drafts.
    temperature, concurrency: the workload's sampling temperature and batch (concurrent requests).
    alpha_curve: {draft name: (temperatures, alphas)} measured alpha(T), for the temperature gate.
    coverage: {w: alpha_w}, the chance the target's token is among the draft's top-w candidates,
        for the tree width ({draft name: {w: alpha_w}} when alpha is a dict).
    forward_cost: measured (tokens, cost) of one target forward over n tokens, for the verify cost
        r and the concurrency limit (see ``verify_cost``); None = r = 1 (memory-bound throughout).
    margin: speculate only if the predicted speedup is >= 1 + margin (covers loop overhead, which
        costs real loops ~10-15% of the prediction, and estimation error); also the fallback
        policy's switch-on threshold.
    """
    alphas, costs = _as_candidates(alpha, c)
    if not np.isscalar(temperature) or not temperature >= 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, (int, np.integer)) or concurrency < 1:
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError(f"k_max must be an integer >= 1, got {k_max!r}")
    if not np.isscalar(margin) or not margin >= 0:
        raise ValueError(f"margin must be a number >= 0, got {margin!r}")
    unknown = set(alpha_curve or {}) - set(alphas)

    coverages = (coverage or {}) if isinstance(alpha, dict) else {"draft": coverage}
    unknown |= set(coverages) - set(alphas)
    if unknown:
        raise ValueError(f"alpha_curve / coverage name drafts not in alpha: {sorted(unknown)}")
    candidates = {}
    for name in alphas:
        a, cost = alphas[name], costs[name]
        widths, grid, tokens = speedup_grid(a, cost, k_max, coverages.get(name), concurrency, forward_cost)
        wi, ki = np.unravel_index(int(np.argmax(grid)), grid.shape)
        curve = (alpha_curve or {}).get(name)
        gate = breakeven_temperature(curve[0], curve[1], cost) if curve is not None else None
        candidates[name] = {"alpha": float(a), "c": float(cost), "k": int(ki) + 1, "tree_width": widths[wi],
                            "expected_speedup": float(grid[wi, ki]), "expected_tokens_per_verify": float(tokens[wi, ki]),
                            "temperature_gate": gate}
    best = max(candidates, key=lambda name: candidates[name]["expected_speedup"])
    chosen = candidates[best]
    a, cost, k = chosen["alpha"], chosen["c"], chosen["k"]

    reasons = []
    speculate = chosen["expected_speedup"] >= 1 + margin
    if not speculate:
        reasons.append(f"best predicted speedup {chosen['expected_speedup']:.3f} < 1 + margin = {1 + margin:.3f}")
    gate = chosen["temperature_gate"]
    if gate is not None and temperature >= gate:
        speculate = False
        reasons.append(f"temperature {temperature} >= this draft's break-even temperature {gate:.3f}")

    limit = None
    if forward_cost is not None:  # the largest batch at which some K, w still predicts >= 1 + margin
        ok = [b for b in CONCURRENCIES
              if speedup_grid(a, cost, k_max, coverages.get(best), b, forward_cost)[1].max() >= 1 + margin]
        limit = max(ok) if ok else 0
        if concurrency > limit:
            speculate = False
            reasons.append(f"concurrency {concurrency} > limit {limit}")

    r = float(verify_cost(k + 1, concurrency, forward_cost))
    lo, hi = 1 / (k * cost + r), (k + 1) / (k * cost + r)
    fallback = {"k": k, "r": r, "window": window, "min_rounds": window, "probe_every": probe_every,
                "probe_window": min(8, window), "off_below": 1.0, "on_above": 1 + margin,
                "alpha_off": alpha_for_speedup(1.0, k, cost, r) if lo <= 1.0 <= hi else None,
                "alpha_on": alpha_for_speedup(1 + margin, k, cost, r) if lo <= 1 + margin <= hi else None}
    tau = chosen["expected_tokens_per_verify"]
    return {
        "speculate": bool(speculate),
        "draft": best if speculate else "none",
        "best_candidate": best,
        "k": k,
        "tree_width": chosen["tree_width"],
        "expected_speedup": chosen["expected_speedup"],
        "expected_tokens_per_verify": tau,
        "breakeven_alpha": float(breakeven_alpha(k, cost)),
        "breakeven_alpha_best_k": float(cost),  # alpha < c: no K pays (E <= 1 + K alpha < 1 + K c)
        "temperature_gate": gate,
        "concurrency_limit": limit,
        "fallback": fallback,
        "monitor": {"alpha_expected": a, "alpha_alert_below": fallback["alpha_off"],
                    "tau_expected": tau, "tau_alert_below": k * cost + r,  # E at the break-even alpha
                    "p99_inter_token_latency": "alert if above the same workload's P99 with speculation off"},
        "candidates": candidates,
        "reasons": reasons,
        "inputs": {"temperature": float(temperature), "concurrency": int(concurrency),
                   "forward_cost": None if forward_cost is None else [list(map(float, x)) for x in forward_cost],
                   "k_max": int(k_max), "margin": float(margin)},
    }


# ----------------------------------------------------------------------------- the skill file

def load_measurements(path=MEASUREMENTS):
    """Read and validate the measurements JSON notebook 5 writes."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run solutions/05_high_temperature.ipynb to measure it")
    m = json.loads(path.read_text())
    validate_measurements(m)
    return m


def validate_measurements(m):
    """Raise ValueError naming the first missing or malformed field."""
    for key in ("temperatures", "c", "alpha", "corpus", "heldout_tokens"):
        if key not in m:
            raise ValueError(f"measurements lack {key!r} (schema in lessonlib.skill's docstring)")
    n = len(m["temperatures"])
    for draft, curves in m["alpha"].items():
        if draft not in m["c"]:
            raise ValueError(f"measurements give alpha for {draft!r} but no c[{draft!r}]")
        for kind in ("sampled", "greedy"):
            if len(curves.get(kind, ())) != n:
                raise ValueError(f"alpha[{draft!r}][{kind!r}] must have one value per temperature ({n})")


def _fmt(x, digits=2):
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "none in range"
    return f"{x:.{digits}f}"


def _row(cells):
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _vllm(method, model, k, extra=None):
    config = {"method": method, "model": model, "num_speculative_tokens": k} if model else \
        {"method": method, "num_speculative_tokens": k}
    config.update(extra or {})
    return f"--speculative-config '{json.dumps(config)}'"


def _main_draft(m):
    return "draft-kl" if "draft-kl" in m["alpha"] else sorted(m["alpha"])[0]


def _forward_cost(m):
    fc = m.get("forward_cost")
    return None if fc is None else (fc["tokens"], fc["cost"])


def worked_examples(m, temperatures=(0.0, 1.0, 2.0)):
    """recommend() for the course's main draft at a few measured temperatures (exact values)."""
    draft = _main_draft(m)
    ts = np.asarray(m["temperatures"], dtype=float)
    out = []
    for t in temperatures:
        if not np.any(np.isclose(ts, t)):
            continue
        i = int(np.flatnonzero(np.isclose(ts, t))[0])
        curves = m["alpha"][draft]
        alpha = {f"{draft} sampled": curves["sampled"][i], f"{draft} greedy": curves["greedy"][i]}
        cost = {name: m["c"][draft] for name in alpha}
        curve = {f"{draft} sampled": (ts, curves["sampled"]), f"{draft} greedy": (ts, curves["greedy"])}
        out.append(recommend(alpha, cost, float(t), 1, alpha_curve=curve, forward_cost=_forward_cost(m)))
    return out


def build_skill(m):
    """Render the skill file (Markdown) from validated measurements."""
    validate_measurements(m)
    draft = _main_draft(m)
    ts = [float(t) for t in m["temperatures"]]
    c = float(m["c"][draft])
    curves = m["alpha"][draft]
    examples = worked_examples(m)
    kinds = [k for k in ("sampled", "greedy", "mismatch") if k in curves]
    gates = {kind: breakeven_temperature(ts, curves[kind], c) for kind in kinds}
    L = []
    add = L.append
    add("# Skill: tuning speculative decoding for a workload\n")
    add(f"Generated by `python -m lessonlib.skill` from `{m.get('source', 'outputs/benchmarks/temperature.json')}` "
        f"(measured on {m.get('device', 'an unnamed device')}, held-out `{m['corpus']}`, "
        f"{m['heldout_tokens']} tokens). Do not edit by hand: re-run the notebook or the command.\n")
    add("Letters: p = target, q = draft, K = draft length, α = per-token acceptance rate, "
        "c = (one draft step) / (one target step), τ = tokens per target forward, T = temperature.\n")
    add("## The arithmetic everything below uses\n")
    add("- Tokens per verify: E(α, K) = (1 − α^(K+1)) / (1 − α)  (Leviathan et al. 2023, eq. 1).")
    add("- Speedup: S = E(α, K) / (K·c + r), r = cost of the verify forward over K+1 tokens relative to a "
        "one-token step; r = 1 while the target is memory-bound (Leviathan et al. Thm 3.8 is r = 1).")
    add("- Best K = argmax_K S. Break-even α for a fixed K: S = 1. For the best K, speculation pays iff α > c "
        "(K = 1 gives (1 + α)/(1 + c); and E(α, K) ≤ 1 + Kα < 1 + Kc when α < c).")
    add("- α must be the per-token rate: accepted / (accepted + rejections). An engine's "
        "\"accepted / drafted\" undercounts it (drafts after a rejection are never judged); "
        "convert a reported mean accepted length τ with `lessonlib.skill.alpha_from_tau(tau, K)`.\n")

    add("## Decision procedure\n")
    add("1. **Measure c** on the serving hardware: time one draft step and one target step at the "
        f"workload's batch. Course measurement: c = {c:.3f} for `{draft}` against `target` "
        f"({m.get('device', 'CPU')}). Published: c = 0.02 / 0.04 / 0.11 for T5-small / base / large drafting "
        "for T5-XXL (Leviathan et al. Table 4).")
    add("2. **Measure α on a calibration set at the workload's temperature**, teacher-forced: one target and "
        "one draft forward over held-out text give p_T and q_T at every position. A sampled draft tempered "
        "like the target has α = Σ min(p_T, q_T); a deterministic candidate x (greedy chain, top-k tree, "
        "n-gram) is accepted with probability p_T(x).")
    add("3. **Choose the draft**: measure α and c for each candidate you have and take the one with the "
        "largest max_K S; none if that is below 1 + margin (margin 0.2 here). Candidates, with published "
        "greedy speedups (Spec-Bench, Vicuna-7B, A100, batch 1 — Xia et al. 2024) where they exist:\n")
    add(_row(["what you have", "draft", "published"]))
    add(_row(["---"] * 3))
    add(_row(["no draft; output repeats the input (code edits, RAG, summaries)", "n-gram prompt lookup "
              "(`method: ngram`) or lookahead decoding", "prompt lookup 1.66×, Lookahead 1.34×"]))
    add(_row(["a much smaller model with the same tokenizer", "small same-family draft (`draft_model`)",
              "68M draft 1.52×; HF assisted generation: ≥ 10× smaller, up to 2×"]))
    add(_row(["compute to train a small model", "draft distilled from the target",
              "DistillSpec: 10–45% more speedup than undistilled (Zhou et al. 2024)"]))
    add(_row(["compute to train heads on the target's features", "Medusa heads, or an EAGLE-style head",
              "Medusa 1.71×, EAGLE 2.10×, EAGLE-2 2.36×; EAGLE-3 LLaMA-3.1-8B MT-bench 4.40× (T = 0)"]))
    add(_row(["high temperature with a deterministic draft, or a saturated batch", "none (plain decoding)",
              "see steps 6–8"]))
    pair = [d for d in ("draft-ce", "draft-kl") if d in m["alpha"]]
    if len(pair) == 2 and 1.0 in ts:
        i = ts.index(1.0)
        add(f"\nCourse measurement at T = 1 (sampled, held-out `{m['corpus']}`): α = "
            f"{m['alpha']['draft-ce']['sampled'][i]:.3f} for `draft-ce` (trained on text) vs "
            f"{m['alpha']['draft-kl']['sampled'][i]:.3f} for `draft-kl` (distilled, same size).")
    add("")
    add("4. **K** = argmax_K E(α, K)/(K·c + r) — `lessonlib.theory.optimal_k(alpha, c)` at r = 1. "
        "Re-derive it whenever α or c changes; the table below is that formula.")
    add("5. **Tree width**: with deterministic candidates, w candidates catch the target's token with "
        "probability α_w = Σ_{top-w} p_T (measure it like α); take the width maximising "
        "(1 + α_w E(α, K−1)) / (K·c + r(wK + 1)). Wider trees only pay while the verify forward stays "
        "memory-bound (r ≈ 1), i.e. at low concurrency.")
    add("6. **Temperature gate**: interpolate the measured α(T) and stop speculating above the temperature "
        "where α falls to the break-even value (`lessonlib.fallback.breakeven_temperature`). It depends on "
        "the draft kind: see the measurements below.")
    fc = _forward_cost(m)
    measured = ("Course measurement, target on this machine, cost of a forward over n tokens / one token: "
                + ", ".join(f"n = {n:g}: {x / fc[1][0]:.2f}" for n, x in zip(*fc)) + ". ") if fc else ""
    add("7. **Verify cost and concurrency limit**: measure f(n) = cost of one target forward over n tokens / "
        "cost over one. At batch B the verify of K+1 drafts per sequence costs r = f(B(K+1)) / f(B) steps "
        "(`lessonlib.skill.verify_cost`); r ≈ 1 while the forward is memory-bound, and grows once it is "
        f"compute-bound. {measured}Speculate only for B with max_K S ≥ 1 + margin. Published: EAGLE-3 "
        "still gave 1.38× at batch 64 in SGLang on H100, EAGLE-1 0.99× (Li et al. 2025).")
    pol = {name: p.default for name, p in inspect.signature(FallbackPolicy).parameters.items()}
    add(f"8. **Fallback rule** (`lessonlib.fallback.FallbackPolicy`, defaults): α̂ = MLE over the last W = "
        f"{pol['window']} verifications; switch to plain decoding when E(α̂, K)/(K·c + r) < "
        f"{pol['off_below']:g}; while off, run one speculative round (a probe) every {pol['probe_every']} plain "
        f"tokens, and at once again while probes accept drafts; switch back when the last "
        f"{pol['probe_window']} probes predict ≥ {pol['on_above']:g}. r = 1 is the textbook formula; "
        "better, r = (round cost − K·c) measured from real rounds, which also counts the verify's extra "
        "tokens and the loop's own work. Thresholds for the recommended K: `recommend(...)['fallback']` "
        "(alpha_off, alpha_on, computed with r = f(K + 1)).")
    add("9. **Monitor**: α̂ (per-token MLE) and τ against their calibration values, and P99 inter-token "
        "latency against the same workload with speculation off. In vLLM, τ = 1 + Δaccepted/Δdrafts from the "
        "Prometheus counters `vllm:spec_decode_num_accepted_tokens_total` and "
        "`vllm:spec_decode_num_drafts_total`; α = `alpha_from_tau(τ, K)`.\n")

    add("## Optimal K = argmax_K E(α, K)/(K·c + 1)\n")
    alphas_tab, cs_tab = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95), (0.02, 0.05, 0.1, round(c, 3), 0.3)
    add(_row(["α \\ c"] + [f"{x:g}" for x in cs_tab]))
    add(_row(["---"] * (len(cs_tab) + 1)))
    for a in alphas_tab:
        cells = []
        for x in cs_tab:
            r = recommend(a, x, k_max=16, margin=0.0)
            cells.append(f"K={r['k']}, S={r['expected_speedup']:.2f}")
        add(_row([f"{a:g}"] + cells))
    add(f"\n(c = {c:.3f} is this course's measured draft; the others bracket published drafts.)\n")

    add(f"## Course measurements: α(T) for `{draft}` (c = {c:.3f})\n")
    header = ["T"] + [f"α {k}" for k in kinds]
    cov = curves.get("coverage", {})
    header += [f"α top-{w}" for w in sorted(cov, key=int)]
    add(_row(header))
    add(_row(["---"] * len(header)))
    for i, t in enumerate(ts):
        cells = [f"{t:g}"] + [f"{curves[k][i]:.3f}" for k in kinds] + [f"{cov[w][i]:.3f}" for w in sorted(cov, key=int)]
        add(_row(cells))
    add("")
    if "mismatch" in kinds:
        add(f"\"mismatch\": the draft samples at T_q = {m.get('mismatch_draft_temperature')} whatever the target's T "
            "(the engine bug of forgetting to temper the draft); still exact, but α = Σ min(p_T, q_Tq) is lower.")
    add("Break-even temperature (best K, α(T) = c): " + "; ".join(
        f"{k}: {_fmt(gates[k])}" for k in kinds) + ".\n")
    wall = m.get("wallclock", {}).get(draft)
    if wall:
        add(f"Measured wall-clock speedup of `{draft}` at its best K (real decoding, same machine):\n")
        add(_row(["T", "best K", "τ", "speedup"]))
        add(_row(["---"] * 4))
        for t, k, tau, s in zip(wall["temperatures"], wall["k"], wall.get("tau", [None] * len(wall["k"])), wall["speedup"]):
            add(_row([f"{t:g}", k, _fmt(tau), f"{s:.2f}×"]))
        add("")

    add("## Worked example: this course's models\n")
    for ex in examples:
        add(f"- T = {ex['inputs']['temperature']:g}: candidates " + ", ".join(
            f"{name} (α = {v['alpha']:.3f}, best K = {v['k']}, S = {v['expected_speedup']:.2f}, "
            f"gate T = {_fmt(v['temperature_gate'])})" for name, v in ex["candidates"].items())
            + f" → **{ex['draft']}**" + (f", K = {ex['k']}" if ex["speculate"] else "")
            + (f" ({'; '.join(ex['reasons'])})" if ex["reasons"] else "") + ".")
    add("")
    fb = m.get("fallback")
    if fb:
        add(f"\nFallback policy on a stream whose temperature changes (K = {fb['k']}, c = {fb['c']:.3f}, "
            f"policy {json.dumps(fb.get('policy', {}))}), tokens/s measured per phase:\n")
        add(_row(["phase T", "tokens", "always speculate", "never", "policy"]))
        add(_row(["---"] * 5))
        tps = fb["tokens_per_second"]
        for i, ph in enumerate(fb["phases"]):
            add(_row([f"{ph['temperature']:g}", ph["tokens"], f"{tps['always'][i]:.0f}", f"{tps['never'][i]:.0f}",
                      f"{tps['policy'][i]:.0f}"]))
        add("")

    add("## Ready-to-paste vLLM configurations\n")
    add("Current vLLM takes one JSON `--speculative-config` (the old `--speculative_model` / "
        "`--num_speculative_tokens` flags are gone). `num_speculative_tokens` is K from step 4: replace it "
        "with `python -m lessonlib.skill --alpha <your α> --c <your c>`. Model pairs are the ones in vLLM's "
        "documentation (docs.vllm.ai, features/speculative_decoding: draft_model, eagle, n-gram).\n")
    k_course = examples[0]["k"] if examples else 4
    basis = (f"K = {k_course} is this course's recommendation for `{draft}` at T = "
             f"{examples[0]['inputs']['temperature']:g} (α = {examples[0]['candidates'][next(iter(examples[0]['candidates']))]['alpha']:.2f}, "
             f"c = {c:.2f})" if examples else "K = 4 is the lesson's default")
    add("```bash")
    add(f"# draft model (small same-family model); {basis}")
    add(f"vllm serve Qwen/Qwen3-8B {_vllm('draft_model', 'Qwen/Qwen3-0.6B', k_course)}")
    add("# EAGLE head (feature-level draft trained for this target)")
    add(f"vllm serve meta-llama/Meta-Llama-3-8B-Instruct {_vllm('eagle', 'yuhuili/EAGLE-LLaMA3-Instruct-8B', k_course)}")
    add("# EAGLE-3 head")
    add(f"vllm serve meta-llama/Llama-3.1-8B-Instruct "
        f"{_vllm('eagle3', 'RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3', k_course)}")
    add("# no draft at all: n-gram prompt lookup")
    add(f"vllm serve Qwen/Qwen3-8B {_vllm('ngram', None, k_course, {'prompt_lookup_max': 4})}")
    add("```\n")
    add("## Sources\n")
    add("- Leviathan, Kalai, Matias 2023, Fast Inference from Transformers via Speculative Decoding (eq. 1, Thm 3.8, "
        "Cor 3.9, Table 4).")
    add("- Xia et al. 2024, Spec-Bench. Zhou et al. 2024, DistillSpec. Li et al. 2025, EAGLE-3.")
    add("- vLLM documentation, Speculative Decoding (draft_model, EAGLE, n-gram pages) and its spec-decode metrics.")
    add("- Course measurements: `solutions/05_high_temperature.ipynb` → `outputs/benchmarks/temperature.json`.\n")
    add("<!-- decision (machine-readable, checked by tests/test_skill.py) -->")
    add("```json")
    add(json.dumps(_finite({"c": c, "examples": examples, "breakeven_temperature": gates,
                            "temperatures": ts, "alpha": {k: curves[k] for k in kinds}}),
                   sort_keys=True, default=_jsonable, allow_nan=False))
    add("```")
    return "\n".join(L) + "\n"


def _finite(x):
    """The same structure with infinities as None (standard JSON has no Infinity)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and math.isinf(x):
        return None
    return x


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def decision_block(markdown):
    """The machine-readable JSON block at the end of a skill file."""
    start = markdown.rindex("```json\n") + len("```json\n")
    return json.loads(markdown[start : markdown.index("\n```", start)])


def write_skill(measurements_path=MEASUREMENTS, out_path=SKILL_FILE):
    """Regenerate the skill file from the measurements JSON; returns the output path."""
    text = build_skill(load_measurements(measurements_path))
    out_path = pathlib.Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text)
    return out_path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m lessonlib.skill", description=__doc__.split("\n\n")[0])
    parser.add_argument("--alpha", type=float, help="print the decision for this measured alpha instead")
    parser.add_argument("--c", type=float, default=0.1, help="draft / target cost ratio (with --alpha)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--measurements", default=str(MEASUREMENTS))
    parser.add_argument("--out", default=str(SKILL_FILE))
    args = parser.parse_args(argv)
    if args.alpha is not None:
        print(json.dumps(recommend(args.alpha, args.c, args.temperature, args.concurrency,
                                   ), indent=2, default=_jsonable))
        return 0
    print(f"wrote {write_skill(args.measurements, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
