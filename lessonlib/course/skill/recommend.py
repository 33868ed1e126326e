"""The tuning decision: one cost model, the speedup grid over K and tree width, and ``recommend``.

One cost model prices everything here (Leviathan et al. 2023, eq. 1 and Thm 3.8, with the
verify forward priced as measured instead of as one step)::

    S(alpha, K, w) = (1 + alpha_w E(alpha, K - 1)) / (K c + r(w K + 1))

    E(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha)       tokens per target forward of a chain
    c           = one draft step / one one-token target step, both in the decoding loop
    r(n)        = a target forward over n new tokens / a one-token target step
                  (``verify_cost``; r = 1 without a measured curve: a memory-bound verify)
    alpha_w     = the chance the target's token is among w candidates (alpha_1 = alpha);
                  w = 1 is the chain, S = E(alpha, K) / (K c + r(K + 1)).

The best K and width, the break-even alpha, the temperature gate, the fallback thresholds,
the alerts and the concurrency limit all use this S: it switches off where S falls to 1
(``OFF_BELOW``) and speculation is recommended (or switched back on) where S >= 1 + margin.
Every inverse of S goes through ``lessonlib.core.theory.alpha_for_speedup``.
``worked_examples(m)`` is ``recommend`` on the course's own measurements (``schema``).
"""
from __future__ import annotations

import inspect
import math

import numpy as np

from lessonlib.core import theory
from lessonlib.core.theory import K_MAX_SEARCH
from lessonlib.core.validate import check_c, check_int, check_positive_number, check_temperature, check_unit
from lessonlib.course.skill import schema
from lessonlib.course.skill.schema import check_forward_cost
from lessonlib.decoding.fallback import FallbackPolicy, breakeven_temperature

CONCURRENCIES = tuple(2 ** i for i in range(11))  # batches the concurrency limit is searched over: 1 ... 1024
POLICY_DEFAULTS = {name: p.default for name, p in inspect.signature(FallbackPolicy).parameters.items()
                   if p.default is not inspect.Parameter.empty}  # window, probe_every, probe_window, ...
# the decision's thresholds are the fallback policy's, so the two cannot drift apart: speculation
# switches off where S falls to OFF_BELOW (1) and starts, or switches back on, at 1 + MARGIN (1.2)
OFF_BELOW = float(POLICY_DEFAULTS["off_below"])
MARGIN = round(POLICY_DEFAULTS["on_above"] - OFF_BELOW, 12)


# ----------------------------------------------------------------------------- the cost model

def verify_cost(tokens, concurrency=1, forward_cost=None):
    """r: a target forward over ``tokens`` new tokens per sequence at batch ``concurrency``,
    relative to a one-token step at the same batch: r = f(B n) / f(B).

    f(n) = measured cost of a forward over n tokens / cost over one, from ``forward_cost`` =
    (tokens, cost) pairs, interpolated linearly and extended along its last segment. None means
    f = 1 (a memory-bound target whose verify costs one step), the assumption of E / (K c + 1).
    A roofline max(1, n / F) is the curve ([1, F, 2F], [1, 1, 2]).
    """
    n = np.asarray(tokens, dtype=float)
    if forward_cost is None:
        return np.ones_like(n)
    sizes, costs = check_forward_cost(forward_cost)
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
    alpha, c = float(check_unit(alpha, "alpha")), float(check_c(c))
    k_max = check_int(k_max, "k_max", minimum=1)
    widths, alpha_w = [1], [alpha]
    for w, a in sorted(_coverage(coverage, "coverage").items()):
        if w > 1:
            widths.append(w)
            alpha_w.append(a)
    ks = np.arange(1, k_max + 1)
    tail = np.concatenate([[1.0], np.atleast_1d(theory.expected_tokens_per_verify(alpha, ks[:-1]))]) if k_max > 1 \
        else np.ones(1)  # E(alpha, K - 1), with E(alpha, 0) = 1
    tokens = 1 + np.asarray(alpha_w)[:, None] * tail[None, :]
    nodes = np.asarray(widths)[:, None] * ks[None, :] + 1
    return widths, tokens / (ks[None, :] * c + verify_cost(nodes, concurrency, forward_cost)), tokens


def alpha_from_tau(tau, k):
    """The per-token alpha whose E(alpha, K) equals a measured mean accepted length tau.

    Engines report tau (vLLM: 1 + accepted / drafts from its
    ``vllm:spec_decode_num_accepted_tokens_total`` and ``..._num_drafts_total`` counters);
    this turns it into the alpha the formulas use (``theory.alpha_for_speedup(tau, k, 0)``).
    """
    k = check_int(k, "k", minimum=1)
    if not np.isscalar(tau) or not 1 <= tau <= k + 1:
        raise ValueError(f"tau must be a number in [1, k + 1] = [1, {k + 1}], got {tau!r}")
    return float(theory.alpha_for_speedup(tau, k, 0.0))


def breakeven_alpha_best_k(c, k_max=16, concurrency=1, forward_cost=None):
    """The least alpha at which some chain K in 1..k_max breaks even (S = 1) with the measured r.

    With r = 1 this is c (K = 1 gives (1 + alpha)/(1 + c); E(alpha, K) <= 1 + K alpha < 1 + K c
    whenever alpha < c, Leviathan et al. Cor. 3.9); a verify dearer than a step raises it.
    """
    ks = np.arange(1, check_int(k_max, "k_max", minimum=1) + 1)
    return float(np.min(theory.alpha_for_speedup(OFF_BELOW, ks, c, verify_cost(ks + 1, concurrency, forward_cost))))


def temperature_gate(temperatures, alphas, k, c, r):
    """The first temperature at which the chain of length ``k`` stops paying: S(alpha(T), k) = 1.

    alpha(T) is the measured curve, interpolated linearly; S = E / (k c + r) with r = r(k + 1),
    so the gate is where alpha(T) falls to alpha_off = alpha_for_speedup(1, k, c, r), the same
    point at which the fallback policy running this k switches off. inf if it never does.
    """
    k, c = check_int(k, "k", minimum=1), float(check_c(c))
    r = check_positive_number(r, "r", "a finite number > 0 (target forward over k + 1 tokens / one-token step)")
    if k * c + r <= 1:  # a round no dearer than a plain step: every alpha pays
        return math.inf
    # E / (k c + r) = 1  <=>  E = k c' + 1 with c' = c + (r - 1) / k: the r = 1 function answers it
    return breakeven_temperature(temperatures, alphas, c + (r - 1) / k, k=k)


# ----------------------------------------------------------------------------- checking the inputs

def _coverage(coverage, label):
    """{w: alpha_w} with integer widths >= 1 and alpha_w in [0, 1]; keys may be strings (JSON)."""
    out = {}
    for w, a in (coverage or {}).items():
        try:
            width = check_int(int(w) if isinstance(w, str) else w, f"{label} width", minimum=1)
        except ValueError:
            raise ValueError(f"{label} widths must be integers >= 1, got {w!r}") from None
        if not np.isscalar(a):
            raise ValueError(f"{label}[{w!r}] must be a coverage in [0, 1], got {a!r}")
        out[width] = float(check_unit(a, f"{label}[{w!r}]"))
    return out


def _curve(curve, label):
    """A measured alpha(T): (temperatures >= 0, strictly increasing; alphas in [0, 1]), same length."""
    try:
        t, a = (np.asarray(x, dtype=float) for x in curve)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be (temperatures, alphas), got {curve!r}") from None
    if t.ndim != 1 or t.shape != a.shape or len(t) < 2 or not np.all(np.isfinite(t)) or t[0] < 0 \
            or np.any(np.diff(t) <= 0):
        raise ValueError(f"{label} must be (temperatures, alphas) of the same length >= 2, temperatures >= 0 "
                         f"and strictly increasing; got {curve!r}")
    return t, check_unit(a, f"{label} alphas")


def _as_candidates(alpha, c):
    """{draft: alpha}, {draft: c} from numbers or dicts, each checked (alpha in [0, 1], c finite >= 0)."""
    named = isinstance(alpha, dict)
    alphas = dict(alpha) if named else {"draft": alpha}
    if not alphas:
        raise ValueError("alpha must be a number or a non-empty dict {draft name: alpha}")
    costs = dict(c) if isinstance(c, dict) else {name: c for name in alphas}
    if set(costs) != set(alphas):
        raise ValueError(f"c must give a cost for every draft in alpha: {sorted(alphas)}, got {sorted(costs)}")
    for name in alphas:
        a_label, c_label = (f"alpha[{name!r}]", f"c[{name!r}]") if named else ("alpha", "c")
        if not np.isscalar(alphas[name]) or isinstance(alphas[name], str):
            raise ValueError(f"{a_label} must be an acceptance rate in [0, 1], got {alphas[name]!r}")
        if not np.isscalar(costs[name]) or isinstance(costs[name], str):
            raise ValueError(f"{c_label} must be a finite cost ratio >= 0, got {costs[name]!r}")
        alphas[name] = float(check_unit(alphas[name], a_label))
        costs[name] = float(check_c(costs[name], c_label))
    return alphas, costs


def _check_settings(temperature, concurrency, k_max, margin, window=1, probe_every=1):
    check_temperature(temperature)
    concurrency = check_int(concurrency, "concurrency", minimum=1)
    k_max = check_int(k_max, "k_max", minimum=1, maximum=K_MAX_SEARCH)  # the grid has k_max rows
    if isinstance(margin, (bool, np.bool_)) or not np.isscalar(margin) or not np.isfinite(margin) \
            or not margin >= 0:
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    check_int(window, "window", minimum=1)
    check_int(probe_every, "probe_every", minimum=1)
    return concurrency, k_max


# ----------------------------------------------------------------------------- the decision

def _candidate(a, cost, coverage, curve, k_max, concurrency, forward_cost):
    """Best (w, K) of one draft and, for the chain of that K, its break-even alpha and gate."""
    widths, grid, tokens = speedup_grid(a, cost, k_max, coverage, concurrency, forward_cost)
    wi, ki = np.unravel_index(int(np.argmax(grid)), grid.shape)
    k = int(ki) + 1
    r = float(verify_cost(k + 1, concurrency, forward_cost))
    gate = temperature_gate(curve[0], curve[1], k, cost, r) if curve is not None else None
    return {"alpha": a, "c": cost, "k": k, "k_at_cap": k == k_max, "tree_width": widths[wi],
            "expected_speedup": float(grid[wi, ki]), "expected_tokens_per_verify": float(tokens[wi, ki]),
            "r": r, "breakeven_alpha": float(theory.alpha_for_speedup(OFF_BELOW, k, cost, r)),
            "temperature_gate": gate}


def _concurrency_limit(a, cost, k_max, coverage, forward_cost, margin):
    """The largest batch in CONCURRENCIES at which some K, w still predicts >= 1 + margin (0: none)."""
    ok = [b for b in CONCURRENCIES
          if speedup_grid(a, cost, k_max, coverage, b, forward_cost)[1].max() >= 1 + margin]
    return max(ok) if ok else 0


def _fallback(chosen, margin, window, probe_every):
    """FallbackPolicy settings for the chosen K, with the thresholds priced like the decision."""
    k, cost, r = chosen["k"], chosen["c"], chosen["r"]
    return {"k": k, "c": cost, "r": r, "window": window, "min_rounds": window, "probe_every": probe_every,
            "probe_window": min(POLICY_DEFAULTS["probe_window"], window), "off_below": OFF_BELOW,
            "on_above": 1 + margin,
            "alpha_off": float(theory.alpha_for_speedup(OFF_BELOW, k, cost, r)),
            "alpha_on": float(theory.alpha_for_speedup(1 + margin, k, cost, r))}


def _per_draft(alpha, alphas, coverage, alpha_curve):
    """recommend's coverage and alpha curves, checked: ({draft: coverage or None}, {draft: curve})."""
    coverages = dict(coverage or {}) if isinstance(alpha, dict) else {"draft": coverage}
    unknown = (set(alpha_curve or {}) | {n for n, v in coverages.items() if v}) - set(alphas)
    if unknown:
        raise ValueError(f"alpha_curve / coverage name drafts not in alpha: {sorted(unknown)}")
    coverages = {name: _coverage(coverages.get(name), "coverage" if name == "draft" else f"coverage[{name!r}]")
                 for name in alphas}
    curves = {name: _curve(curve, f"alpha_curve[{name!r}]") for name, curve in (alpha_curve or {}).items()}
    return coverages, curves


def measured_limit(measured, margin=MARGIN):
    """The concurrency limit a batched measurement gives: the largest measured B whose best
    median speedup is >= 1 + margin (0: none). ``measured``: {B: {"speedup": s, "k": K}}, e.g.
    ``concurrency.measured(report)`` from ``python -m lessonlib.bench batch``."""
    ok = [int(b) for b, row in measured.items() if row["speedup"] >= 1 + margin]
    return max(ok) if ok else 0


def _reasons(chosen, temperature, concurrency, k_max, coverage, forward_cost, margin, measured=None):
    """Why the chosen draft should not speculate (empty: it should), and the concurrency limit
    (measured when ``measured`` is given, else the model's; None without either)."""
    reasons = []
    if chosen["expected_speedup"] < 1 + margin:
        reasons.append(f"best predicted speedup {chosen['expected_speedup']:.3f} < 1 + margin = {1 + margin:.3f}")
    gate = chosen["temperature_gate"]
    if gate is not None and temperature >= gate:
        reasons.append(f"temperature {temperature} >= the gate {gate:.3f} of this draft at K = {chosen['k']}")
    limit = None
    if measured:
        limit = measured_limit(measured, margin)
    elif forward_cost is not None:
        limit = _concurrency_limit(chosen["alpha"], chosen["c"], k_max, coverage, forward_cost, margin)
    if limit is not None and concurrency > limit:
        reasons.append(f"concurrency {concurrency} > {'measured ' if measured else ''}limit {limit}")
    return reasons, limit


def recommend(alpha, c, temperature=1.0, concurrency=1, *, alpha_curve=None, coverage=None,
              forward_cost=None, k_max=16, margin=MARGIN, window=POLICY_DEFAULTS["window"],
              probe_every=POLICY_DEFAULTS["probe_every"], measured_concurrency=None):
    """The tuning decision for one workload, as a dict (one cost model: see the module docstring).

    alpha, c: acceptance rate (accepted / judged) and cost ratio at this workload's temperature;
        numbers, or dicts {draft name: value} to choose between drafts. alpha in [0, 1], c >= 0.
    temperature, concurrency: the workload's sampling temperature and batch (concurrent requests).
    alpha_curve: {draft name: (temperatures, alphas)} measured alpha(T), for the temperature gate.
    coverage: {w: alpha_w}, the chance the target's token is among the draft's top-w candidates,
        for the tree width ({draft name: {w: alpha_w}} when alpha is a dict); each in [0, 1].
    forward_cost: measured (tokens, cost) of one target forward over n tokens, for r(n) and the
        concurrency limit (see ``verify_cost``); None = r = 1 (memory-bound throughout).
    k_max: K is searched over 1..k_max; ``k_at_cap`` says when the optimum may lie beyond it.
    margin: speculate only if the predicted speedup is >= 1 + margin, also the fallback's
        switch-on threshold; it covers the loop's own work (not in S) and estimation error.
    measured_concurrency: {B: {"speedup": best median speedup, "k": its K}} measured at batch B
        (``python -m lessonlib.bench batch``, ``concurrency.measured``): the concurrency limit
        then comes from it (``measured_limit``), not from the model, and a measured B gives its K.

    The gate, break-even alpha and fallback thresholds judge the chain of the chosen K (the
    fallback policy estimates a chain's alpha), priced with r = r(K + 1) at this batch.
    """
    alphas, costs = _as_candidates(alpha, c)
    concurrency, k_max = _check_settings(temperature, concurrency, k_max, margin, window, probe_every)
    coverages, curves = _per_draft(alpha, alphas, coverage, alpha_curve)
    if forward_cost is not None:
        check_forward_cost(forward_cost)
    candidates = {name: _candidate(alphas[name], costs[name], coverages[name], curves.get(name),
                                   k_max, concurrency, forward_cost) for name in alphas}
    best = max(candidates, key=lambda name: candidates[name]["expected_speedup"])
    chosen = candidates[best]
    gate = chosen["temperature_gate"]
    reasons, limit = _reasons(chosen, temperature, concurrency, k_max, coverages[best], forward_cost, margin,
                              measured_concurrency)
    speculate = not reasons
    fallback = _fallback(chosen, margin, window, probe_every)
    k, tau = chosen["k"], chosen["expected_tokens_per_verify"]
    return {
        "speculate": speculate, "draft": best if speculate else "none", "best_candidate": best,
        "k": k, "k_at_cap": chosen["k_at_cap"], "tree_width": chosen["tree_width"], "r": chosen["r"],
        "expected_speedup": chosen["expected_speedup"], "expected_tokens_per_verify": tau,
        "breakeven_alpha": chosen["breakeven_alpha"],
        "breakeven_alpha_best_k": breakeven_alpha_best_k(chosen["c"], k_max, concurrency, forward_cost),
        "temperature_gate": gate, "concurrency_limit": limit, "fallback": fallback,
        "concurrency_source": "measured" if measured_concurrency else "model" if forward_cost is not None else None,
        "k_measured_at_concurrency": (measured_concurrency or {}).get(concurrency, {}).get("k"),
        "monitor": {"alpha_expected": chosen["alpha"], "alpha_alert_below": fallback["alpha_off"],
                    "tau_expected": tau, "tau_alert_below": k * chosen["c"] + chosen["r"],  # E at alpha_off
                    "p99_inter_token_latency": "alert if above the same workload's P99 with speculation off"},
        "candidates": candidates, "reasons": reasons,
        "inputs": {"temperature": float(temperature), "concurrency": concurrency,
                   "forward_cost": None if forward_cost is None else [list(map(float, x)) for x in forward_cost],
                   "k_max": k_max, "margin": float(margin)},
    }


def worked_examples(m, temperatures=(0.0, 1.0, 2.0), margin=MARGIN):
    """recommend() for the course's main draft, sampled and greedy, at a few measured temperatures."""
    draft = schema.main_draft(m)
    ts = np.asarray(m["temperatures"], dtype=float)
    curves = m["alpha"][draft]
    out = []
    for t in temperatures:
        hit = np.flatnonzero(np.isclose(ts, t))
        if len(hit) == 0:
            continue
        i = int(hit[0])
        alpha = {f"{draft} {kind}": curves[kind][i] for kind in ("sampled", "greedy")}
        cost = {name: m["c"][draft] for name in alpha}
        curve = {f"{draft} {kind}": (ts, curves[kind]) for kind in ("sampled", "greedy")}
        out.append(recommend(alpha, cost, float(t), 1, alpha_curve=curve, forward_cost=schema.forward_cost(m),
                             margin=margin))
    return out
