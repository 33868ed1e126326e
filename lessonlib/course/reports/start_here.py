"""Notebook 00's report plumbing: the stored thread and load benchmarks that section 1 reads back.

After timing its own passes, ``notebooks/00_start_here.ipynb`` reads two stored reports: the
table of record (``outputs/benchmarks/record.json``: plain decoding and the chain draft-kl K = 3
on held-out code prompts, greedy, at one and two torch threads) and ``outputs/benchmarks/load.json``
(the fastest one-token pass, plain decoding and the same chain, idle and with one core kept busy).
``record_threads`` and ``load_rows`` print those tables as the cell always has and return the
few numbers its claims compare (``Threads``, ``Load``); the claims stay in the cell.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from lessonlib.bench import record
from lessonlib.core import kinds
from lessonlib.course.claims import Interval
from lessonlib.course.messages import say
from lessonlib.course.reports import cell, show_table

CHAIN = "chain draft-kl K=3"  # the record's name of the chain the table compares with plain decoding
LOAD_PLAIN, LOAD_CHAIN = "plain T=0", "chain draft-kl K=3, T=0"  # load.json's names of the same two
SETTINGS = ("idle, 1 thread(s)", "busy, 1 thread(s)", "idle, 2 thread(s)", "busy, 2 thread(s)")
UNRECORDED = "8 x 256 (not recorded)"  # the model of a load.json written before it named its model


class Threads(NamedTuple):
    """What the thread claims compare: the table of record at one and two threads."""

    more: float  # plain tokens/s at two threads over one (medians)
    one: Interval  # the chain's speedup at one thread, median [q25, q75]
    two: Interval  # the same at two threads


class Load(NamedTuple):
    """What the load claims compare: a one-token pass's time busy over idle (fastest pass each)."""

    one_busy: float  # one thread: busy / idle
    two_busy: float  # two threads: busy / idle


def by_threads(rows: list[dict], method: str) -> dict[int, dict]:
    """{threads: row} of the record's decode rows of ``method`` on code prompts, greedy."""
    found = record.find(rows, source="decode", method=method, corpus="code", temperature=0.0)
    return {r["threads"]: r for r in found}


def thread_table(plain: Mapping[int, dict], chain: Mapping[int, dict]) -> tuple[list[str], list[list[Any]]]:
    """The thread table's header and one row per thread count both methods have, ascending."""
    header = [say("threads"), say("plain tokens/s"), say("chain draft-kl K = 3 speedup"), say("prompts")]
    rows = [[n, cell(plain[n]["tokens_per_second"], 0), cell(chain[n]["speedup"], unit="×"), chain[n]["prompts"]]
            for n in sorted(set(plain) & set(chain))]
    return header, rows


def record_threads(rows: list[dict]) -> Threads | None:
    """Print the table of record's plain and chain rows by thread count (``rows``: ``record.load()``),
    or say there is none; returns ``Threads`` when both one and two threads are recorded, else None."""
    plain, chain = by_threads(rows, "plain"), by_threads(rows, CHAIN)
    if not plain or not chain:
        print(say("no table of record yet: run `python -m lessonlib.bench decode` to measure both thread settings"))
        return None
    print(say("read from the table of record (median [q25, q75] over held-out code prompts, greedy):"))
    show_table(*thread_table(plain, chain))
    if not {1, 2} <= set(plain) & set(chain):
        return None
    more = plain[2]["tokens_per_second"]["median"] / plain[1]["tokens_per_second"]["median"]
    return Threads(more, Interval.of(chain[1]["speedup"], "×"), Interval.of(chain[2]["speedup"], "×"))


def load_line(name: str, result: Mapping[str, Any]) -> str:
    """One setting's line of the load table: its fastest one-token pass, then plain tokens/s and the
    chain's speedup, or why the chain was skipped."""
    plain, measured = result["chain"].get(LOAD_PLAIN), result["chain"].get(LOAD_CHAIN)
    head = f"  {name:<20} pass {result['pass_table']['ms'][0]:>5.2f} ms   "
    if not measured:
        return head + result["chain"].get("skipped", "")
    return head + (f"plain {cell(plain['tokens_per_second'], 0)} tokens/s   "
                   f"speedup {cell(measured['speedup'], unit='×')}")


def load_rows(report: Mapping[str, Any] | None, shape: str) -> Load | None:
    """Print load.json's table (``report``: ``record.read("load")``), first which model it timed
    against this notebook's ``shape`` ("24 x 160"), or say there is none; returns ``Load`` when it
    has all four settings (idle and busy, one and two threads), else None."""
    if not report:
        print(say("no load.json yet: `python -m lessonlib.bench load` measures the same with one core busy"))
        return None
    results = report["results"]
    timed = {r.get("model", UNRECORDED) for r in results.values()}
    if timed == {shape}:
        print("\n" + say("load.json timed its pass table on a {timed} model", timed=", ".join(timed)))
    else:
        print("\n" + say("load.json timed its pass table on a {timed} model, not this notebook's {shape}: compare its "
                         "rows with each other, not with section 1", timed=", ".join(timed), shape=shape))
    print(say("read from outputs/benchmarks/load.json (fastest one-token pass; plain tokens/s and chain draft-kl K = 3 "
              "speedup at T = 0):"))
    for name, result in results.items():
        print(load_line(name, result))
    if not set(SETTINGS) <= set(results):
        return None
    ms = {name: r["pass_table"]["ms"][0] for name, r in results.items()}
    return Load(ms["busy, 1 thread(s)"] / ms["idle, 1 thread(s)"], ms["busy, 2 thread(s)"] / ms["idle, 2 thread(s)"])


# --- the two targets side by side ------------------------------------------------------------
# the method-name prefixes of every kind of trained draft, both targets' (the registry's, ``core.kinds``)
TRAINED = tuple(p for k in kinds.KINDS + kinds.LLM_KINDS for p in (k.chain, k.tree, k.dynamic) if p)
REAL_ENGINE = "native f16, 1 thread"  # llm_engines.json's row of the engine the real LLM decodes with


class TwoTargets(NamedTuple):
    """What notebook 00's two-target claims compare (each best: the highest median, one thread, T = 0)."""

    real_best: tuple[str, Interval]  # the real LLM's fastest setting (llm.json, edit and chat prompts)
    tiny_best: tuple[str, Interval]  # the tiny target's (the table of record, code prompts)
    real_trained: tuple[str, Interval]  # the fastest setting with a trained draft (any of the real LLM's kinds)
    tiny_trained: tuple[str, Interval]
    r5: tuple[float, float]  # a verify pass over 5 tokens / a one-token step: (real LLM stored, tiny measured)
    alpha: tuple[float, float]  # α while decoding of each trained best (median over prompts): (real, tiny)


def _best(rows: Mapping[str, Interval], trained: bool = False) -> tuple[str, Interval]:
    """The setting with the highest median speedup: of all (``trained`` False) or of those whose draft is
    trained (a name starting with one of ``TRAINED``: EAGLE-3 too)."""
    kept = {m: s for m, s in rows.items() if not trained or m.startswith(TRAINED)}
    name = max(kept, key=lambda m: kept[m].median)
    return name, kept[name]


def two_targets(rows: list[dict], llm: Mapping[str, Any] | None, engines: Mapping[str, Any] | None,
                tiny_ms: Mapping[int, float], tiny_mb: float) -> TwoTargets | None:
    """Show the tiny target (``tiny_ms``: this run's pass times in ms by tokens per pass; ``tiny_mb``: its
    weights in MB) beside the real LLM (``llm``: ``record.read("llm")``, ``engines``: ``record.read(
    "llm_engines")``) with each one's fastest setting from the stored benchmarks; None (and a line
    saying so) when a report is missing."""
    if not llm or not engines or REAL_ENGINE not in engines.get("rows", {}):
        print(say("no stored benchmark of the real LLM yet: python -m lessonlib.bench llm measures it"))
        return None
    kept = [r for r in record.find(rows, temperature=0.0, corpus="code") if r["threads"] == 1 and r.get("speedup")
            and r["method"] != "plain" and r["source"] in ("decode", "tree")]
    tiny = {r["method"]: Interval.of(r["speedup"], "×") for r in kept}
    at = llm["by_threads"]["1"]["methods"]
    spreads = {f"{m} ({kind})": row["spread"] for kind in ("edit", "chat")
               for m, row in at[kind].items() if m != "plain"}
    real = {m: Interval.of(s["speedup"], "×") for m, s in spreads.items()}
    step = engines["rows"][REAL_ENGINE]
    real_trained, tiny_trained = _best(real, trained=True), _best(tiny, trained=True)
    tiny_alpha = next(r["alpha"]["median"] for r in kept if r["method"] == tiny_trained[0])
    found = TwoTargets(_best(real), _best(tiny), real_trained, tiny_trained, (step["r"]["5"], tiny_ms[5] / tiny_ms[1]),
                       (spreads[real_trained[0]]["alpha"]["median"], tiny_alpha))
    show_table(["target", say("weights read per step"), say("one-token step (ms)"), "r(5)",
                say("fastest setting"), say("fastest with a trained draft")],
               [[say("real LLM (native f16, stored)"), f"{step['weight_bytes'] / 1e6:.0f} MB", f"{step['step_ms']:.1f}",
                 f"{found.r5[0]:.2f}", f"{found.real_best[0]}: {found.real_best[1]}",
                 f"{found.real_trained[0]}: {found.real_trained[1]}, α {found.alpha[0]:.2f}"],
                [say("tiny target (this run; its speedups stored)"), f"{tiny_mb:.0f} MB", f"{tiny_ms[1]:.2f}",
                 f"{found.r5[1]:.2f}", f"{found.tiny_best[0]}: {found.tiny_best[1]}",
                 f"{found.tiny_trained[0]}: {found.tiny_trained[1]}, α {found.alpha[1]:.2f}"]])
    return found
