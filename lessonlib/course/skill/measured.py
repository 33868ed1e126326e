"""A prediction never overrides a measurement of the same setting.

The worked examples (``recommend.worked_examples``) predict each candidate's speedup from its
teacher-forced α and the in-loop c. Where the table of record (``bench.record``) measured the same
draft, the same K and the same temperature in the decoding loop on one thread, that measurement
decides: the example is turned off when the measured speedup -- the median over the record's rows
of that setting (one per benchmark that ran it) -- is under ``MIN_SPEEDUP``, the same bar the
per-kind gate uses at T = 1 (``kinds_gate``). A setting no benchmark measured keeps its prediction,
and the file says so.
"""
from __future__ import annotations

import numpy as np

from lessonlib.core import kinds as core_kinds
from lessonlib.course.skill.kinds_gate import MIN_SPEEDUP

TRUNCATION = ("top-k", "top-p", "min-p")  # rows measured under truncation are another setting


def _chain_of(method: str, draft: str) -> bool:
    """Whether ``method`` is a chain of the kind labelled ``draft`` (either naming: the tree
    benchmark's "chain draft-kl K=3", the sampled benchmark's "draft-kl chain K=3 ...")."""
    for k in core_kinds.KINDS:
        if k.label == draft:
            return method.startswith((k.chain + " K=", f"{k.label} chain K="))
    return False


def rows_of(rows, draft: str, candidate: str, k: int, temperature: float) -> list[dict]:
    """The record's one-thread rows of ``draft``'s chain of ``k`` drafts at ``temperature``, plain
    sampling: ``candidate`` "sampled" (drafts drawn from q, the chains' default) or "greedy" (q
    one-hot: rows that say greedy)."""
    out = []
    for r in rows:
        method = r.get("method", "")
        if (not r.get("speedup") or r.get("threads") != 1 or r.get("k") != k or not _chain_of(method, draft)
                or r.get("temperature") is None or not np.isclose(float(r["temperature"]), temperature)
                or any(t in method for t in TRUNCATION)):
            continue
        if temperature > 0 and ("greedy" in method) != (candidate == "greedy"):
            continue
        out.append(r)
    return out


def overrule(examples: list[dict], rows, draft: str) -> list[dict]:
    """``examples`` with each one's measurement added ("measured": the rows' median speedup, how
    many rows, their methods) and, when it is under ``MIN_SPEEDUP``, the example turned off."""
    out = []
    for ex in examples:
        chosen = ex["best_candidate"]
        candidate = chosen.removeprefix(f"{draft} ")
        found = rows_of(rows, draft, candidate, ex["k"], ex["inputs"]["temperature"])
        ex = dict(ex)
        if found:
            median = float(np.median([r["speedup"]["median"] for r in found]))
            ex["measured"] = {"speedup": median, "rows": len(found), "k": ex["k"],
                              "methods": sorted({f"{r['source']}: {r['method']}" for r in found})}
            if median < MIN_SPEEDUP and ex["speculate"]:
                ex.update(speculate=False, draft="none", reasons=[*ex["reasons"], (
                    f"measured {median:.2f}× (median of {len(found)} rows of the table of record: {chosen}, "
                    f"K = {ex['k']}, one thread), under {MIN_SPEEDUP}×; a prediction does not override a "
                    "measurement of the same setting")])
        out.append(ex)
    return out
