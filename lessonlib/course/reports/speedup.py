"""Notebook 02 (how α, K and the draft cost set the speedup): the plumbing of its measured cells.

The notebook's last sections measure the course's tiny models on this CPU, put the measurements
into the speedup formula, time the same weights on three forwards and read the stored peer run
(llama.cpp). The cells keep what they show and the claims they check; this module holds what
surrounds them:

* ``chain_of_record`` picks the table of record's rows for the cell's setting, and
  ``measured_table`` prints the measured τ, α, c, r and speedup beside the record's speedup;
* ``prediction_table`` prints the measured τ and speedup beside the formula's predictions, and
  ``plot_prediction`` draws them;
* ``forward_paths``, ``time_forwards``, ``c_and_r`` and ``forwards_table`` build the readable,
  fast and native model pairs, time their steps against the bound the weights set, and print
  the path table; ``forward_spread`` gives the ratios the claims compare as intervals over the
  timing rounds;
* ``peers_table`` prints the stored peer run and returns the two engines the claims compare.

Every English sentence goes through ``messages.say`` with the template the notebook printed.
The ``*_rows`` functions return the table lines as strings (no printing, no models), so a test
can check the numbers in them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from lessonlib import engines, models
from lessonlib.bench import bandwidth, record
from lessonlib.course import plots
from lessonlib.course.claims import Interval, order
from lessonlib.course.messages import say, word
from lessonlib.course.reports import cell
from lessonlib.decoding import measures

Summary = Mapping[str, Any]  # measures.summary: median, q25, q75 (and n)
Spread = Mapping[int, Mapping[str, Summary]]  # {K: {quantity: summary over prompts}}
SETTING = dict(source="decode", corpus="code", temperature=0.0)  # the record's rows this notebook's run matches


# --- measured: the course's tiny models on this CPU ------------------------------------------------

def chain_of_record(rows: Sequence[dict], threads: int) -> tuple[dict[int, dict], dict | None]:
    """({K: row} of the record's ``chain draft-kl`` rows, the record's plain row or None) for the
    decode benchmark's code prompts, greedy, at ``threads`` torch threads."""
    of_record = {r["k"]: r for r in record.find(rows, family="chain draft-kl", threads=threads, **SETTING)}
    plain = next(iter(record.find(rows, family="plain", threads=threads, **SETTING)), None)
    return of_record, plain


def measured_rows(ks: Sequence[int], spread: Spread, of_record: Mapping[int, dict]) -> list[str]:
    """One table line per K: τ, α, c, r and speedup (median [q25, q75]), the record's speedup and
    where this run's speedup bracket lies against it ('above', 'below', 'overlaps'; '–' without one)."""
    lines = []
    for k in ks:
        s, rec = spread[k], of_record.get(k)
        here = Interval.of(s["speedup"], "×")
        theirs = f"{Interval.of(rec['speedup'], '×'):.2f}" if rec else say("not in the record")
        where = order(here, Interval.of(rec["speedup"], "×")) if rec else "–"
        lines.append(f"{k:>2} {cell(s['tau']):>17} {cell(s['alpha']):>19} {cell(s['c'], 3):>20} {cell(s['r']):>17} "
                     f"{format(here, '.2f'):>18} {theirs:>20}  {where}")
    return lines


def _record_lines(of_record: Mapping[int, dict], plain_of_record: dict | None, plain_spread: Mapping[str, Summary],
                  n_prompts: int, n_new: int, repeats: int) -> list[str]:
    """The lines under the measured table: both runs' settings, or that the record has no rows."""
    if not of_record:
        return [say("the table of record has no chain draft-kl rows for this setting: python -m lessonlib.bench decode "
                    "writes them")]
    r0 = next(iter(of_record.values()))
    plain_rate = (say(", plain {rate} tokens/s", rate=cell(plain_of_record['tokens_per_second'], 0))
                  if plain_of_record else "")
    return [say("table of record: python -m lessonlib.bench decode, {prompts} prompts, {new} new tokens, "
                "fastest of {repeats} runs each{plain}", prompts=r0['prompts'], new=r0['new_tokens'],
                repeats=r0['repeats'], plain=plain_rate),
            say("this cell: {prompts} prompts, {new} new tokens, fastest of {repeats} runs each, plain {rate} tokens/s",
                prompts=n_prompts, new=n_new, repeats=repeats, rate=cell(plain_spread['tokens_per_second'], 0)),
            say("they may differ: fewer tokens and repeats leave more noise in each prompt's time, each run has the "
                "load of its own moment on the machine, and a different plain rate means a different target step, "
                "hence other c and r")]


def measured_table(target: Any, draft: Any, spread: Spread, plain_spread: Mapping[str, Summary], rows: Sequence[dict],
                   *, n_prompts: int, n_new: int, repeats: int) -> dict[int, dict]:
    """Prints the models' sizes, the plain rate, the setting, the table of every K in ``spread``
    beside the record's speedup (``rows``: record.load()) and both runs' settings; returns the
    record's {K: row} it compared with (empty when the record has none for this setting)."""
    threads = torch.get_num_threads()
    of_record, plain_of_record = chain_of_record(rows, threads)
    print(say("target {t:.2f}M parameters, draft {d:.2f}M ({share:.2f} of the target)", t=target.num_params() / 1e6,
              d=draft.num_params() / 1e6, share=draft.num_params() / target.num_params()))
    print(say("plain decoding: {rate} tokens/s; one-token target step {ms:.2f} ms",
              rate=cell(plain_spread['tokens_per_second'], 0),
              ms=1e3 * plain_spread['target_forward_seconds']['median']))
    print(say("median [q25, q75] over {n} held-out prompts, {new} new tokens, fastest of {repeats} runs each, "
              "{threads} torch thread(s)", n=n_prompts, new=n_new, repeats=repeats, threads=threads))
    print(say(" K                 τ        α (decoding)                    c                 r            speedup"
              "      table of record  here vs record"))
    for line in measured_rows(list(spread), spread, of_record):
        print(line)
    print(say("greedy speculative output == greedy target output for every K and every prompt "
              "(against_plain checked it)"))
    for line in _record_lines(of_record, plain_of_record, plain_spread, n_prompts, n_new, repeats):
        print(line)
    return of_record


# --- the measurements in the formula ---------------------------------------------------------------

def prediction_rows(ks: Sequence[int], spread: Spread, e_hat: Sequence[float], predicted: Sequence[float],
                    timed: Sequence[float]) -> list[str]:
    """One table line per K: measured τ, E(α, K), the measured speedup with its [q25, q75], the
    formula E/(Kc + 1) and E/(Kc + r) with that K's measured c and r."""
    lines = []
    for i, k in enumerate(ks):
        s = spread[k]["speedup"]
        lines.append(f"{k:>2} {spread[k]['tau']['median']:>12.2f} {e_hat[i]:>9.2f}   {s['median']:>6.2f}× "
                     f"[{s['q25']:.2f}, {s['q75']:.2f}] {predicted[i]:>17.2f}× {timed[i]:>24.2f}×")
    return lines


def prediction_table(ks: Sequence[int], spread: Spread, alpha_hat: float, c_hat: float, e_hat: Sequence[float],
                     predicted: Sequence[float], timed: Sequence[float]) -> None:
    """Prints the pair's α and c and the ``prediction_rows`` table under its header; returns None."""
    print(say("α = {alpha:.2f} (measured while decoding), c = {c:.3f} (medians over K)", alpha=alpha_hat, c=c_hat))
    print(say(" K   τ measured   E(α, K)   speedup measured [IQR]   formula E/(Kc+1)   E/(Kc+r), measured c and r"))
    for line in prediction_rows(ks, spread, e_hat, predicted, timed):
        print(line)


def prediction_lines(ks: Sequence[int], spread: Spread, predicted: Sequence[float],
                     timed: Sequence[float]) -> list[str]:
    """Per K, where the measured speedup's bracket lies against E/(Kc + 1) ("below" only when
    wholly below; a bracket that holds the prediction: "overlaps", no difference measured) and
    whether E/(Kc + r) lies nearer the measured median -- printed, not claimed: on a quiet run the
    bracket at the best K can reach the formula, so a claim over every K would be fragile."""
    lines = []
    for i, k in enumerate(ks):
        m, f, t = Interval.of(spread[k]["speedup"], "×"), float(predicted[i]), float(timed[i])
        near = abs(t - m.median) < abs(f - m.median)
        lines.append(say("K = {k}: measured {m} against E/(Kc + 1) = {f:.2f}×: {word}; E/(Kc + r) = {t:.2f}× lies "
                         "{nearer}", k=k, m=m, f=f, t=t, word=word(order(m, Interval(f, f, f, "×"))),
                         nearer=say("nearer the measured median") if near else say("no nearer the measured median")))
    return lines


def plot_prediction(ks: Sequence[int], spread: Spread, e_hat: Sequence[float], predicted: Sequence[float],
                    timed: Sequence[float], alpha_hat: float, c_hat: float, n_prompts: int) -> Figure:
    """Returns the figure: measured τ against E(α, K) (left); the measured speedup with its q25–q75,
    the formula's and E/(Kc + r)'s predictions (right)."""
    ks_arr = np.array(ks)
    tau, speedup = (np.array([spread[k][q]["median"] for k in ks]) for q in ("tau", "speedup"))
    lo, hi = (np.array([spread[k]["speedup"][q] for k in ks]) for q in ("q25", "q75"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
    axes[0].plot(ks_arr, e_hat, color="0.6", label=f"E(α = {alpha_hat:.2f}, K)")
    axes[0].plot(ks_arr, tau, "o", color="tab:orange", label="measured τ (median)")
    axes[0].set_xlabel("K")
    axes[0].set_ylabel("tokens per target pass")
    axes[0].legend(frameon=False)
    _ = plots.measured_vs_theory(ks_arr, speedup, predicted, ks_curve=ks_arr, curve=predicted, ax=axes[1])
    axes[1].vlines(ks_arr, lo, hi, color="tab:orange", lw=1, label="measured, q25–q75")
    axes[1].plot(ks_arr, timed, "^", mfc="none", color="tab:green", label="E/(Kc + r), measured c, r")
    axes[1].legend(frameon=False, fontsize=8)
    axes[1].set_title(f"α = {alpha_hat:.2f}, c = {c_hat:.3f}, CPU, {n_prompts} prompts")
    return fig


# --- three forwards of one model -------------------------------------------------------------------

def forward_paths(target: Any, draft: Any) -> dict[str, tuple[Any, Any]]:
    """{path: (target, draft)}: "readable" (models/gpt.py), "fast" (the PyTorch fast path) and, where
    the native forward built, "native" (``target`` and ``draft`` themselves); prints whether the
    native forward runs here and on which weights."""
    fast_pair = (engines.load("target", device="cpu", engine="fast"),  # the PyTorch fast path: what runs where
                 engines.load("draft-kl", device="cpu", engine="fast"))  # native.c does not build
    paths = {"readable": (engines.load("target", device="cpu", engine="packed"), models.load("draft-kl", device="cpu")),
             "fast": fast_pair}
    if target.native is not None:  # the native forward built here: the pair the cells above decoded with
        paths["native"] = (target, draft)
    if target.native is None:
        print(say("the native forward does not run here (python -m lessonlib.bench bandwidth prints why): "
                  "this cell compares the two PyTorch paths"))
    elif target.native.f16:
        print(say("the native forward runs here, reading half-precision copies of the weights"))
    else:
        print(say("the native forward runs here, reading the float32 weights"))
    return paths


FORWARD_ROUNDS = 3  # timing rounds, the models taking turns: the claims' intervals span them


def time_forwards(paths: Mapping[str, tuple[Any, Any]], target: Any) -> tuple[dict, dict[str, float], dict]:
    """({"path role": {n: fastest seconds of a forward over n new tokens}}, {path: forward bound in
    seconds}, {"path role": {n: [each round's fastest]}}): the models take turns
    (``bandwidth.step_rounds``); a path's bound is the bytes of weights it reads divided by the read
    bandwidth measured now. Prints the weights and the bound."""
    rounds = bandwidth.step_rounds({f"{name} {role}": m for name, pair in paths.items()
                                    for role, m in zip(("target", "draft"), pair)}, rounds=FORWARD_ROUNDS)
    steps = {name: {n: min(times) for n, times in by_n.items()} for name, by_n in rounds.items()}
    weight_bytes = sum(p.numel() * p.element_size() for p in target.parameters())  # float32
    read_rate = bandwidth.read_bandwidth(weight_bytes)  # bytes per second, one thread
    bounds = {name: (target.native.nbytes if name == "native" else weight_bytes) / read_rate for name in paths}
    print(say("target weights {mb:.1f} MB in float32: forward bound {ms:.2f} ms at the read bandwidth measured now",
              mb=weight_bytes / 1e6, ms=1e3 * bounds["fast"]))
    return steps, bounds, rounds


def forward_spread(rounds: Mapping[str, Mapping[int, Sequence[float]]], bounds: Mapping[str, float],
                   alpha: float) -> dict[str, Interval]:
    """Intervals over the timing rounds (median [q25, q75] of the per-round values) of what the
    path claims compare: "{a} / {b} step" (one-token target steps), "{path} step / bound" and
    "{path} predicted" (E(α, 5) / (5c + r(6)), c and r of that round)."""
    from lessonlib.core.theory import expected_tokens_per_verify

    step = {name: np.asarray(rounds[f"{name} target"][1]) for name in bounds}
    out = {f"{name} step / bound": step[name] / bounds[name] for name in bounds}
    for name in bounds:
        c, r = np.asarray(rounds[f"{name} draft"][1]) / step[name], np.asarray(rounds[f"{name} target"][6]) / step[name]
        out[f"{name} predicted"] = expected_tokens_per_verify(alpha, 5) / (5 * c + r)
    names = list(bounds)
    for a, b in zip(names[1:], names):  # each path against the one before it: fast / readable, native / fast
        out[f"{a} / {b} step"] = step[a] / step[b]
    return {key: Interval.of(measures.summary(list(values), min_count=len(values))) for key, values in out.items()}


def c_and_r(steps: Mapping[str, Mapping[int, float]], names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """{path: (c, r(6))}: the draft's one-token step and the target's verify over 6 tokens, each
    divided by that path's one-token target step."""
    return {name: (steps[f"{name} draft"][1] / steps[f"{name} target"][1],
                   steps[f"{name} target"][6] / steps[f"{name} target"][1]) for name in names}


def forwards_rows(steps: Mapping[str, Mapping[int, float]], bounds: Mapping[str, float],
                  cost: Mapping[str, tuple[float, float]], predicted: Mapping[str, float]) -> list[str]:
    """One table line per path in ``cost``: the one-token target step (ms), step / bound, r(6), c and
    the predicted speedup at K = 5."""
    lines = []
    for name, (c, r) in cost.items():
        step = steps[f"{name} target"][1]
        lines.append(f" {name:9s} {1e3 * step:9.2f} {step / bounds[name]:13.1f} {r:27.2f} {c:23.3f} "
                     f"{predicted[name]:22.2f}×")
    return lines


def forwards_table(steps: Mapping[str, Mapping[int, float]], bounds: Mapping[str, float],
                   cost: Mapping[str, tuple[float, float]], predicted: Mapping[str, float]) -> None:
    """Prints the header and the ``forwards_rows`` table; returns None."""
    print(say(" path       step (ms)  step / bound   r(6) = verify of 6 / step   c = draft step / step   "
              "E(α, 5) / (5c + r(6))"))
    for line in forwards_rows(steps, bounds, cost, predicted):
        print(line)


# --- the same draft in llama.cpp -------------------------------------------------------------------

def peers_rows(peer_engines: Mapping[str, Mapping[str, float]], k: int) -> list[str]:
    """One table line per engine of the stored peer run: step (ms), c, r(K + 1), τ, the predicted
    and measured chain speedups, and τ / (K·c + 1), the same τ and c with a verify at one step."""
    rk = f"r({k + 1})"
    lines = []
    for name, e in peer_engines.items():
        at_one = measures.forward_bound(e["tau"], k, e["c"], 1.0)
        lines.append(f" {name:15s} {e['step_ms']:9.2f} {e['c']:7.3f} {e[rk]:8.2f} {e['tau']:6.2f} "
                     f"{e['predicted_chain_speedup']:13.2f}x {e['measured_chain_speedup']:9.2f}x {at_one:13.2f}x")
    return lines


def peers_table(peers: Mapping[str, Any] | None) -> SimpleNamespace | None:
    """Prints the stored peer run's setting and table, or how to make one when it holds no llama.cpp
    f16 engine; returns SimpleNamespace(k, rk, engines) (rk the key "r(K+1)" of each engine's
    {quantity: value}), or None without that run."""
    limits = (peers or {}).get("limits", {})
    peer_engines = limits.get("engines", {})
    if peers is None or "llama.cpp f16" not in peer_engines:
        print(say("no llama.cpp measurement stored: run python -m lessonlib.bench peers "
                  "(after pip install -r requirements-peers.txt)"))
        return None
    k = limits["k"]
    print(say("chain of K = {k} with draft-kl, greedy, {threads} thread, {prompts} prompts (peers.json, {version})",
              k=k, threads=limits['threads'], prompts=peers['setup']['prompts'],
              version=peers['setup']['versions'].get('llama-cpp-python')))
    print(say(" engine          step (ms)       c   r(K+1)    tau   tau/(Kc + r)   measured   tau/(Kc + 1)"))
    for line in peers_rows(peer_engines, k):
        print(line)
    return SimpleNamespace(k=k, rk=f"r({k + 1})", engines=peer_engines)

