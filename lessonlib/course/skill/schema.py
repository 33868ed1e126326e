"""The measurements the skill file is built from: ``temperature.json``, load and validate.

Notebook 5 writes them to ``lessonlib.paths.benchmarks() / "temperature.json"`` (the
``LESSONLIB_OUTPUTS`` environment variable moves that folder; the path is resolved at call
time). Lists are aligned with ``temperatures``; fields marked (optional) may be absent::

    {"schema": 1, "source": str, "corpus": str, "heldout_tokens": int, "device": str,
     "temperatures": [T, ...],                  # >= 0, strictly increasing
     "c": {draft: c},                           # one draft step / one one-token target step
     "c_measured": "warm" | "in the decoding loop",   # how c was timed (optional; default "warm")
     "c_warm": {draft: c},                      # (optional) the warm figure, when c is in-loop
     "alpha": {draft: {"sampled": [...], "greedy": [...], "mismatch": [...],   # teacher-forced
                       "coverage": {w: [...]}}},  # alpha_w: the target's token among the top w
     "mismatch_draft_temperature": float,
     "alpha_decoding": {draft: {"temperatures": [...], "sampled": [...], "greedy": [...],
                                "prompts": int}},  # (optional) alpha = accepted / judged while decoding
     "wallclock": {draft: {"temperatures": [...], "k": [...], "speedup": [...], "tau": [...],  # (optional)
                           "kind": "sampled" | "greedy", "prompts": int,
                           "speedup_q25": [...], "speedup_q75": [...]}},   # median and IQR over prompts
     "forward_cost": {"tokens": [1, ...], "cost": [...]} | null,   # r(n): forward over n tokens
     "fallback": {"k": int, "c": float, "policy": {...}, "phases": [{"temperature": T, "tokens": n}],
                  "tokens_per_second": {"always": [...], "never": [...], "policy": [...]}}},  # (optional)
     "run": {"id": str, "git_revision": str, "written": str}}   # (optional) lessonlib.runs.stamp

Every alpha, coverage and c is checked (alpha and coverage in [0, 1], c finite and >= 0, no
NaN); ``validate_measurements`` raises ValueError naming the first bad field.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from lessonlib import paths, runs
from lessonlib.core.validate import check_int, check_ks
from lessonlib.jsonio import jsonable, read_json, write_atomic

FILE_NAME = "temperature.json"
C_MEASURED = ("warm", "in the decoding loop")


def measurements_path() -> pathlib.Path:
    """Where notebook 5 writes the measurements (resolved now: tests move the outputs folder)."""
    return paths.benchmarks() / FILE_NAME


def load_measurements(path=None):
    """Read and validate the measurements JSON (default: ``measurements_path()``)."""
    path = pathlib.Path(path) if path is not None else measurements_path()
    rebuild = "run solutions/05_high_temperature.ipynb (its measuring cells write it)"
    m = read_json(path, rebuild)
    try:
        validate_measurements(m)
    except ValueError as err:
        raise ValueError(f"{path}: {err}; {rebuild}") from None
    return m


def write_measurements(m, path=None) -> pathlib.Path:
    """Validate the measurements, record the run that made them (``runs.stamp``, under "run") and
    write them atomically (default: ``measurements_path()``); returns the path."""
    m = {**m, "run": runs.stamp()}
    validate_measurements(m)
    path = pathlib.Path(path) if path is not None else measurements_path()
    return write_atomic(path, json.dumps(m, indent=1, default=jsonable) + "\n")


def _numbers(values, field, n=None, lo=None, hi=None, positive=False):
    """A 1-D list of finite numbers (of length n, within [lo, hi], > 0 if ``positive``)."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"measurements {field} must be a list of numbers, got {values!r}") from None
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ValueError(f"measurements {field} must be a 1-D list of finite numbers, got {values!r}")
    if n is not None and len(arr) != n:
        raise ValueError(f"measurements {field} must have one value per temperature ({n}), got {len(arr)}")
    if (lo is not None and np.any(arr < lo)) or (hi is not None and np.any(arr > hi)) \
            or (positive and np.any(arr <= 0)):
        bound = "> 0" if positive else f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"measurements {field} must be {bound}, got {values!r}")
    return arr


def _cost(value, field):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"measurements {field} must be a finite cost ratio >= 0, got {value!r}")


def _costs(costs, field):
    if not isinstance(costs, dict) or not costs:
        raise ValueError(f"measurements {field} must be a non-empty dict {{draft: c}}, got {costs!r}")
    for draft, value in costs.items():
        _cost(value, f"{field}[{draft!r}]")


def _alpha(m, n):
    if not isinstance(m["alpha"], dict) or not m["alpha"]:
        raise ValueError("measurements 'alpha' must be a non-empty dict {draft: {kind: [alpha per T]}}")
    for draft, curves in m["alpha"].items():
        if draft not in m["c"]:
            raise ValueError(f"measurements give alpha for {draft!r} but no c[{draft!r}]")
        for kind in ("sampled", "greedy") + (("mismatch",) if "mismatch" in curves else ()):
            _numbers(curves.get(kind), f"alpha[{draft!r}][{kind!r}]", n, 0.0, 1.0)
        for w, values in curves.get("coverage", {}).items():
            if not str(w).isdigit() or int(w) < 2:
                raise ValueError(f"measurements alpha[{draft!r}]['coverage'] widths must be integers >= 2, got {w!r}")
            _numbers(values, f"alpha[{draft!r}]['coverage'][{w!r}]", n, 0.0, 1.0)


def _alpha_decoding(m):
    for draft, row in m.get("alpha_decoding", {}).items():
        ts = _numbers(row.get("temperatures"), f"alpha_decoding[{draft!r}]['temperatures']", lo=0.0)
        for kind in ("sampled", "greedy"):
            if kind in row:
                _numbers(row[kind], f"alpha_decoding[{draft!r}][{kind!r}]", len(ts), 0.0, 1.0)
        _count(row.get("prompts", 1), f"alpha_decoding[{draft!r}]['prompts']")


def _count(value, field):
    check_int(value, f"measurements {field}", minimum=1)


def _wallclock(m):
    for draft, row in m.get("wallclock", {}).items():
        ts = _numbers(row.get("temperatures"), f"wallclock[{draft!r}]['temperatures']", lo=0.0)
        _numbers(row.get("k"), f"wallclock[{draft!r}]['k']", len(ts), lo=1.0)
        check_ks(row["k"], f"measurements wallclock[{draft!r}]['k']")
        _numbers(row.get("speedup"), f"wallclock[{draft!r}]['speedup']", len(ts), positive=True)
        for key in ("tau", "speedup_q25", "speedup_q75"):
            if key in row:
                _numbers(row[key], f"wallclock[{draft!r}][{key!r}]", len(ts), lo=1.0 if key == "tau" else 0.0)
        _count(row.get("prompts", 1), f"wallclock[{draft!r}]['prompts']")
        if row.get("kind", "sampled") not in ("sampled", "greedy"):
            raise ValueError(f"measurements wallclock[{draft!r}]['kind'] must be 'sampled' or 'greedy', "
                             f"got {row['kind']!r}")


def _fallback(fb):
    if fb is None:
        return
    _count(fb.get("k"), "fallback['k']")
    _cost(fb.get("c"), "fallback['c']")
    phases = fb.get("phases") or []
    if not phases or any(not {"temperature", "tokens"} <= set(p) for p in phases):
        raise ValueError("measurements fallback['phases'] must be a non-empty list of {'temperature', 'tokens'}")
    for name in ("always", "never", "policy"):
        _numbers(fb.get("tokens_per_second", {}).get(name), f"fallback['tokens_per_second'][{name!r}]",
                 len(phases), positive=True)


def validate_measurements(m):
    """Raise ValueError naming the first missing or malformed field (schema: the module docstring)."""
    if not isinstance(m, dict):
        raise ValueError(f"measurements must be a dict (the JSON object notebook 5 writes), got {type(m).__name__}")
    for key in ("temperatures", "c", "alpha", "corpus", "heldout_tokens"):
        if key not in m:
            raise ValueError(f"measurements lack {key!r} (schema in lessonlib.course.skill.schema)")
    ts = _numbers(m["temperatures"], "temperatures", lo=0.0)
    if len(ts) < 2 or np.any(np.diff(ts) <= 0):
        raise ValueError(f"measurements temperatures must be at least 2, strictly increasing, "
                         f"got {m['temperatures']!r}")
    _count(m["heldout_tokens"], "heldout_tokens")
    _costs(m["c"], "c")
    if "c_warm" in m:
        _costs(m["c_warm"], "c_warm")
    if m.get("c_measured", "warm") not in C_MEASURED:
        raise ValueError(f"measurements c_measured must be one of {C_MEASURED}, got {m['c_measured']!r}")
    _alpha(m, len(ts))
    _alpha_decoding(m)
    _wallclock(m)
    _fallback(m.get("fallback"))
    if m.get("forward_cost") is not None:
        fc = m["forward_cost"]
        if not isinstance(fc, dict) or not {"tokens", "cost"} <= set(fc):
            raise ValueError(f"measurements forward_cost must be {{'tokens': [...], 'cost': [...]}} or null, "
                             f"got {fc!r}")
        check_forward_cost((fc["tokens"], fc["cost"]))


def check_forward_cost(forward_cost):
    """(tokens, cost) of a target forward over n new tokens -> (n, f(n)) with f(1) = 1, or ValueError."""
    try:
        sizes, costs = (np.asarray(x, dtype=float) for x in forward_cost)
    except (TypeError, ValueError):
        sizes = costs = np.zeros(0)
    if (sizes.ndim != 1 or sizes.shape != costs.shape or len(sizes) < 2 or sizes[0] != 1
            or np.any(np.diff(sizes) <= 0) or not np.all(np.isfinite(costs)) or np.any(costs <= 0)):
        raise ValueError("forward_cost must be (tokens, cost) with tokens increasing from 1 and costs > 0, "
                         f"at least two points; got {forward_cost!r}")
    return sizes, costs / costs[0]


def main_draft(m):
    """The draft the skill file is about: ``draft-kl`` (the course's distilled draft) if measured."""
    return "draft-kl" if "draft-kl" in m["alpha"] else sorted(m["alpha"])[0]


def forward_cost(m):
    """The measured r(n) curve as (tokens, cost), or None (r = 1)."""
    fc = m.get("forward_cost")
    return None if fc is None else (fc["tokens"], fc["cost"])
