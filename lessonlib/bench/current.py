"""Is a benchmark report current? Measured on the default engine, by a run that names its code.

A report's numbers are those of the forward that decoded them (``common.decode_path``: the
native C forward, the PyTorch fast path, or the readable model). When the default engine
changes, a report written before is *historical*: its speedups, c and r describe a forward the
course no longer runs, and a notebook or the skill file that reads it as current teaches a
number nobody can reproduce. So:

* ``engine_of(report)`` -- the engine a report's measurements used ("native", "fast", "readable"),
  or None when the report predates the field;
* ``why_historical(report)`` -- None for a current report, else one line: which engine measured
  it against which default (``engines.PREFERRED``; ``bench batch``'s B sequences at once:
  ``engines.batched``), or that it names no run (no code revision);
* ``record.read`` warns with that line when a notebook reads a historical report (the warning
  shows under the cell), and ``tests/bench/test_current.py`` fails when a committed report is
  historical: regenerate it (``python -m lessonlib.bench STEM``).

The default is ``engines.PREFERRED``: what ``engine="auto"`` picks wherever the native forward
builds (everywhere the course is meant to run; elsewhere the fast path is a fallback, not a
new default).
"""
from __future__ import annotations

from lessonlib import runs
from lessonlib.engines import PREFERRED

# B sequences at once: engines.batched (the fast path's weights with a batch axis; native.c at B = 1)
BATCHED = "batched"
# the default engine of a report whose rows are not batch-1 decoding (the rest: engines.PREFERRED)
DEFAULT_FOR = {"batch": BATCHED}
# reports with no decoding in them: a run stamp is all they need (which engine is moot)
NO_ENGINE = {"record": "built from the other reports; each of its rows carries its own path",
             "temperature": "written by notebook 05 from its own run, which the notebook's provenance test checks"}


def engine_of(report: dict) -> str | None:
    """The engine of ``report``'s measurements: its machine's ``engine``, else the first word of its
    ``decode_path`` (reports written before ``engine`` was recorded), else None."""
    if not isinstance(report, dict):
        raise ValueError(f"report must be a dict (a benchmark's JSON), got {type(report).__name__}")
    machine = report.get("machine") or report.get("setup", {}).get("machine") or {}
    if not isinstance(machine, dict):
        return None
    if machine.get("engine"):
        return str(machine["engine"])
    path = machine.get("decode_path") or ""
    return path.split(":")[0] if path else None


def why_historical(report: dict, stem: str = "") -> str | None:
    """None when ``report`` is current (it names its run and code revision, and its engine is
    ``PREFERRED``), else one line saying why it is historical and how to rebuild it."""
    rebuild = f"; rebuild it with: python -m lessonlib.bench {stem}" if stem else ""
    name = f"{stem}.json" if stem else "this report"
    run = report.get("run") if isinstance(report, dict) else None
    if runs.of(report) is None or not isinstance(run, dict) or not run.get("git_revision"):
        return f"{name} names no run or code revision: it predates the run stamps{rebuild}"
    if stem in NO_ENGINE:
        return None
    engine, default = engine_of(report), DEFAULT_FOR.get(stem, PREFERRED)
    if engine != default:
        what = "no engine" if engine is None else f"the {engine} engine"
        return f"{name} was measured on {what}, not the default {default}: its numbers are historical{rebuild}"
    return None
