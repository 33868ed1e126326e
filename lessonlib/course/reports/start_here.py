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
