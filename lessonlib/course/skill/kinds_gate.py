"""The skill file's per-kind gate at T > 0: each draft kind's best measured setting at T = 1.

The rows come from the table of record (``lessonlib.bench.record``, source ``sampled``: ``python
-m lessonlib.bench sampled``, every kind with each tree rule). A kind whose best setting at T = 1
is under ``MIN_SPEEDUP`` is turned off there: plain decoding serves it. Without those rows the
section says which command measures them.
"""
from __future__ import annotations

from lessonlib.bench import common, record
from lessonlib.core import kinds as core_kinds

MIN_SPEEDUP = 1.1  # below this median speedup a kind is not worth its risk and memory at that temperature
KINDS = tuple(k.label for k in core_kinds.KINDS)  # the sampled benchmark's labels (core.kinds)


def kind_of(method: str) -> str | None:
    """The label of the kind ``method`` runs (``core.kinds.of_method``), None for plain or lookup."""
    found = core_kinds.of_method(method)
    return None if found is None else found.label


def best_at(rows, setting: str = "T = 1") -> dict[str, dict]:
    """{kind: its best record row (by median speedup) in ``setting`` of the sampled benchmark}."""
    out: dict[str, dict] = {}
    for r in rows:
        if r.get("source") != "sampled" or not r["method"].endswith(f"({setting})") or not r.get("speedup"):
            continue
        kind = kind_of(r["method"])
        if kind and (kind not in out or r["speedup"]["median"] > out[kind]["speedup"]["median"]):
            out[kind] = r
    return out


def gate(rows, setting: str = "T = 1") -> dict[str, dict]:
    """{kind: {"method", "speedup", "on"}}: on iff the best setting's median speedup >= MIN_SPEEDUP."""
    return {kind: {"method": r["method"], "speedup": r["speedup"]["median"],
                   "on": r["speedup"]["median"] >= MIN_SPEEDUP} for kind, r in best_at(rows, setting).items()}


def lines(rows) -> list[str]:
    """Markdown lines: one table row per draft kind, its best setting at T = 1 and the gate."""
    best = best_at(rows)
    if not best:
        return ["\nDraft kinds at T = 1: none recorded yet (`python -m lessonlib.bench sampled` measures every kind "
                "with each tree rule and refreshes the record).\n"]
    first = next(iter(best.values()))
    table = [[kind, f"`{r['method']}`", record.cell(r, "tau"), record.cell(r, "speedup", unit="×"),
              "speculate" if r["speedup"]["median"] >= MIN_SPEEDUP else "**off**: plain decoding"]
             for kind, r in best.items()]
    return [f"\nDraft kinds at T = 1 (table of record, `python -m lessonlib.bench sampled`: held-out code, median "
            f"[IQR] over {first['prompts']} prompts, each kind at its best setting and tree rule). A kind whose best "
            f"is under {MIN_SPEEDUP}× is turned off at T = 1. Sample tree candidates from q (rule with / without "
            "replacement): deterministic candidates collapse as T grows.\n",
            common.markdown_table(["draft kind", "best setting at T = 1", "τ", "speedup", "at T = 1"], table)]
