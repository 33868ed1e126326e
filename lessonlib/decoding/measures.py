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

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from lessonlib.core.validate import check_int, check_interval, check_nonnegative, check_positive

if TYPE_CHECKING:  # stats imports this module (tau, alpha): the type only
    from lessonlib.decoding.stats import DecodeStats

MIN_PROMPTS = 5  # no conclusion from fewer prompts than this


def tau(emitted: int, target_forwards: int) -> float:
    """Tokens emitted per target forward (integers: emitted >= 0, target_forwards >= 1)."""
    emitted = check_int(emitted, "emitted", minimum=0)
    return emitted / check_int(target_forwards, "target_forwards", minimum=1)


def alpha(accepted: int, judged: int) -> float:
    """Per-token acceptance while decoding: accepted / judged (NaN if nothing was judged)."""
    accepted, judged = check_int(accepted, "accepted"), check_int(judged, "judged")
    if not 0 <= accepted <= judged:
        raise ValueError(f"need 0 <= accepted <= judged, got accepted={accepted}, judged={judged}")
    return accepted / judged if judged else float("nan")


def cost_ratio(draft_step_seconds: float, target_step_seconds: float) -> float:
    """c: one draft step / one one-token target step, both timed in the decoding loop."""
    return _ratio(draft_step_seconds, "draft_step_seconds", target_step_seconds, "target_step_seconds")


def verify_ratio(forward_seconds: float, target_step_seconds: float) -> float:
    """r(n): a target forward over n new tokens / a one-token target step."""
    return _ratio(forward_seconds, "forward_seconds", target_step_seconds, "target_step_seconds")


def speedup(plain_seconds_per_token: float, method_seconds_per_token: float) -> float:
    """Plain seconds per token / method seconds per token (same prompt, same settings)."""
    return _ratio(plain_seconds_per_token, "plain_seconds_per_token", method_seconds_per_token,
                  "method_seconds_per_token")


def forward_bound(tau_value: float, k: float, c: float, r: float) -> float:
    """tau / (k c + r): the speedup of a loop whose rounds cost only their forwards (``k`` a
    chain's draft length: an integer >= 0, not a fraction)."""
    k, c = check_int(k, "k", minimum=0), float(check_nonnegative(c, "c"))
    return _ratio(tau_value, "tau_value", k * c + float(check_positive(r, "r")), "k c + r")


def _ratio(top: float, top_name: str, bottom: float, bottom_name: str) -> float:
    """top / bottom for measured quantities: top finite and >= 0, bottom finite and > 0 (a zero,
    negative or NaN time is a measurement error, not a ratio)."""
    return float(check_nonnegative(top, top_name)) / float(check_positive(bottom, bottom_name))


def summary(values: npt.ArrayLike, level: float = 0.5, min_count: int = MIN_PROMPTS) -> dict[str, Any]:
    """Median, inter-quartile range and count of per-prompt values (the spread reported with
    every measured number). ``level`` = 0.5 gives the IQR. At least ``min_count`` values (the
    course's rule: >= 5 prompts; pass a smaller ``min_count`` only where fewer is meant)."""
    try:
        raw = np.asarray(values)
        v = raw.astype(np.float64)  # (n_prompts,)
    except (TypeError, ValueError):
        raise ValueError(f"values must be a 1-D sequence of numbers, got {values!r}") from None
    if raw.dtype.kind not in "iuf":  # '1.5' or True would convert silently: a measurement is a number
        raise ValueError(f"values must be a 1-D sequence of numbers (not strings or bools), got {values!r}")
    min_count = check_int(min_count, "min_count", minimum=1)
    if v.ndim != 1 or v.size < min_count:
        raise ValueError(f"values must be a 1-D sequence of at least {min_count} numbers (one per prompt; "
                         f"no conclusion from fewer), got shape {v.shape}")
    level = check_interval(level, "level", "(0, 1]")
    if np.isnan(v).any():
        raise ValueError("values must not contain NaN (leave out the prompts where the quantity is undefined)")
    if np.isinf(v).any():
        raise ValueError("values must be finite, found inf")
    lo, hi = np.quantile(v, [0.5 - level / 2, 0.5 + level / 2])
    return {"median": float(np.median(v)), "q25": float(lo), "q75": float(hi), "n": int(v.size)}


def fmt_spread(s: Mapping[str, Any], digits: int = 2, unit: str = "", count: bool = True) -> str:
    """'1.52× [1.41, 1.60], n = 5' for a ``summary`` (without ', n = 5' when ``count`` is False:
    a table with a prompts column, a line that says n once)."""
    digits = check_int(digits, "digits", minimum=0, maximum=12)
    if not isinstance(s, Mapping) or not all(k in s for k in ("median", "q25", "q75", *(("n",) if count else ()))):
        raise ValueError(f"s must be a summary (a mapping with median, q25, q75{' and n' if count else ''}), "
                         f"got {s!r}")
    f = f"{{:.{digits}f}}"
    text = f"{f.format(s['median'])}{unit} [{f.format(s['q25'])}, {f.format(s['q75'])}]"
    return f"{text}, n = {s['n']}" if count else text


def compare(method: DecodeStats, plain: DecodeStats) -> dict[str, float]:
    """c, r, speedup and forward bound of one speculative run against plain decoding of the
    same prompt under the same settings (both ``DecodeStats`` of the decoding loops).

    The draft cost and the verify forward come from the method's loop, the one-token target
    step (``target_forward_seconds``) from the plain loop. A chain reports c (one draft step)
    and its bound tau / (K c + r); a tree reports its whole round's drafting
    (``draft_cost_per_round``) and the bound tau / (draft cost + r).
    """
    if plain.loop != "plain":
        raise ValueError(f"plain must be the stats of plain decoding, got a {plain.loop!r} loop's")
    step = plain.target_forward_seconds
    out = {"speedup": speedup(plain.seconds_per_token, method.seconds_per_token),
           "r": verify_ratio(method.verify_forward_seconds, step)}
    if method.loop == "chain":
        out["c"] = cost_ratio(method.draft_step_seconds, step)
        assert method.k is not None  # a chain's stats carry its k
        out["forward_bound"] = forward_bound(method.tau, method.k, out["c"], out["r"])
    elif method.loop == "tree":
        out["draft_cost_per_round"] = cost_ratio(method.draft_seconds_per_round, step)
        out["forward_bound"] = method.tau / (out["draft_cost_per_round"] + out["r"])
    return out


def against_plain(method_runs: Sequence[DecodeStats], plain_runs: Sequence[DecodeStats]) -> list[dict[str, Any]]:
    """Each prompt's method stats as a JSON row (``DecodeStats.as_dict``) with its ``compare``
    against plain decoding of the same prompt added (c, r, speedup, forward bound): prompt i of
    ``method_runs`` is paired with prompt i of ``plain_runs``."""
    if len(method_runs) != len(plain_runs):
        raise ValueError(f"need one plain run per method run, got {len(method_runs)} and {len(plain_runs)}")
    return [stats.as_dict() | compare(stats, plain) for stats, plain in zip(method_runs, plain_runs)]


SUMMARISED = ("tau", "alpha", "c", "r", "speedup", "forward_bound", "draft_cost_per_round", "tokens_per_second",
              "seconds_per_token", "target_forward_seconds", "draft_forward_seconds", "verify_forward_seconds")


def summarise(runs: Sequence[Mapping[str, Any] | DecodeStats], keys: Iterable[str] = SUMMARISED,
              min_count: int = MIN_PROMPTS) -> dict[str, dict[str, Any]]:
    """{quantity: summary over prompts} for each of ``keys`` that every run reports with a
    number (alpha is NaN when a run judged nothing: those prompts are left out of alpha's,
    whose n then says how many it has). ``runs``: per-prompt rows (``against_plain``) or the
    loops' ``DecodeStats`` themselves, at least ``min_count`` of them (>= 5 prompts)."""
    min_count = check_int(min_count, "min_count", minimum=1)
    if len(runs) < min_count:
        raise ValueError(f"runs must hold at least {min_count} prompts' stats (no conclusion from fewer), "
                         f"got {len(runs)}")
    rows = [r if isinstance(r, Mapping) else r.as_dict() for r in runs]
    out = {}
    for key in keys:
        values: list[Any] = [r.get(key) for r in rows]
        if any(v is None for v in values):
            continue
        values = [float(v) for v in values if not np.isnan(float(v))]
        if values:
            out[key] = summary(values, min_count=1)
    return out
