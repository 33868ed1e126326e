"""The one definition of every measured quantity the course reports.

Every loop, benchmark, notebook, the skill file and the CLI compute these numbers with the
functions below, so a c in one table means the same thing as a c in another.

* tau -- tokens emitted per target forward: every token a round emits counts, including
  the surplus of the last round beyond the requested length (the theory's E(alpha, K)
  counts them too).
* alpha -- per-token acceptance, accepted / judged, where a round judges its accepted drafts
  plus the one it rejects, if any. Two measurements, two names: ``alpha_teacher_forced``
  (sum_x min(p, q) on human text, ``models.distill.measure_alpha``) and ``alpha_decoding``
  (counted while decoding the target's own output, here).
* c -- one draft step / one one-token target step, both timed inside the decoding loop
  (the draft step in the speculative loop, the target step in plain decoding of the same
  prompt). A warm figure (``timing.warm_seconds``) is named ``c_warm`` wherever shown.
* r(n) -- verify cost: one target forward over n new tokens / one one-token target step.
* speedup -- plain seconds per token / method seconds per token, same prompt, same settings.
* forward bound -- tau / (K c + r(K + 1)): the speedup if a round cost nothing but its
  forwards. measured / forward bound is the share the loop's bookkeeping leaves.

A measured number is reported over >= 5 prompts as its median with a spread (``summary``):
``against_plain`` turns per-prompt runs into per-prompt c, r and speedups, ``summarise`` gives
the median and inter-quartile range of each quantity, ``fmt_spread`` prints one.
"""
from __future__ import annotations

import numpy as np

MIN_PROMPTS = 5  # no conclusion from fewer prompts than this


def tau(emitted: int, target_forwards: int) -> float:
    """Tokens emitted per target forward."""
    if target_forwards < 1:
        raise ValueError(f"target_forwards must be >= 1, got {target_forwards}")
    return emitted / target_forwards


def alpha(accepted: int, judged: int) -> float:
    """Per-token acceptance while decoding: accepted / judged (NaN if nothing was judged)."""
    if not 0 <= accepted <= judged:
        raise ValueError(f"need 0 <= accepted <= judged, got accepted={accepted}, judged={judged}")
    return accepted / judged if judged else float("nan")


def cost_ratio(draft_step_seconds: float, target_step_seconds: float) -> float:
    """c: one draft step / one one-token target step, both timed in the decoding loop."""
    return draft_step_seconds / target_step_seconds


def verify_ratio(forward_seconds: float, target_step_seconds: float) -> float:
    """r(n): a target forward over n new tokens / a one-token target step."""
    return forward_seconds / target_step_seconds


def speedup(plain_seconds_per_token: float, method_seconds_per_token: float) -> float:
    """Plain seconds per token / method seconds per token (same prompt, same settings)."""
    return plain_seconds_per_token / method_seconds_per_token


def forward_bound(tau_value: float, k: float, c: float, r: float) -> float:
    """tau / (k c + r): the speedup of a loop whose rounds cost only their forwards."""
    return tau_value / (k * c + r)


def summary(values, level: float = 0.5) -> dict:
    """Median, inter-quartile range and count of per-prompt values (the spread reported with
    every measured number). ``level`` = 0.5 gives the IQR."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got shape {v.shape}")
    if not 0 < level <= 1:
        raise ValueError(f"level must be in (0, 1], got {level!r}")
    if np.isnan(v).any():
        raise ValueError("values must not contain NaN (leave out the prompts where the quantity is undefined)")
    lo, hi = np.quantile(v, [0.5 - level / 2, 0.5 + level / 2])
    return {"median": float(np.median(v)), "q25": float(lo), "q75": float(hi), "n": int(v.size)}


def fmt_spread(s: dict, digits: int = 2, unit: str = "") -> str:
    """'1.52× [1.41, 1.60], n = 5' for a ``summary``."""
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'])}{unit} [{f.format(s['q25'])}, {f.format(s['q75'])}], n = {s['n']}"


def compare(method_stats: dict, plain_stats: dict, k: float | None = None) -> dict:
    """c, r, speedup and forward bound of one speculative run against plain decoding of the
    same prompt under the same settings (both ``stats`` dicts of the decoding loops).

    The draft step (``draft_forward_seconds``, or a tree round's ``draft_seconds_per_round``
    spread over its depth) and the verify forward come from the method's loop, the one-token
    target step (``target_forward_seconds``) from the plain loop.
    """
    step = plain_stats["target_forward_seconds"]
    out = {"speedup": speedup(plain_stats["seconds_per_token"], method_stats["seconds_per_token"]),
           "r": verify_ratio(method_stats["verify_forward_seconds"], step)}
    if "draft_forward_seconds" in method_stats:
        out["c"] = cost_ratio(method_stats["draft_forward_seconds"], step)
        k = method_stats.get("k", k)
        if k is not None:
            out["forward_bound"] = forward_bound(method_stats["tau"], k, out["c"], out["r"])
    if "draft_seconds_per_round" in method_stats:  # tree drafting: the whole draft of a round
        out["draft_cost_per_round"] = cost_ratio(method_stats["draft_seconds_per_round"], step)
        out["forward_bound"] = method_stats["tau"] / (out["draft_cost_per_round"] + out["r"])
    return out


def against_plain(method_runs, plain_runs, k: float | None = None) -> list[dict]:
    """Each prompt's method stats with its ``compare`` against plain decoding of the same
    prompt added (c, r, speedup, forward bound): prompt i of ``method_runs`` is paired with
    prompt i of ``plain_runs``."""
    if len(method_runs) != len(plain_runs):
        raise ValueError(f"need one plain run per method run, got {len(method_runs)} and {len(plain_runs)}")
    return [dict(stats) | compare(stats, plain, k) for stats, plain in zip(method_runs, plain_runs)]


SUMMARISED = ("tau", "alpha", "c", "r", "speedup", "forward_bound", "draft_cost_per_round", "tokens_per_second",
              "seconds_per_token", "target_forward_seconds", "draft_forward_seconds", "verify_forward_seconds")


def summarise(runs, keys=SUMMARISED) -> dict:
    """{quantity: summary over prompts} for each of ``keys`` that every run reports with a
    number (alpha is NaN when a run judged nothing: those prompts are left out of alpha's)."""
    if len(runs) == 0:
        raise ValueError("runs must hold at least one prompt's stats")
    out = {}
    for key in keys:
        values = [r.get(key) for r in runs]
        if any(v is None for v in values):
            continue
        values = [float(v) for v in values if not np.isnan(float(v))]
        if values:
            out[key] = summary(values)
    return out
