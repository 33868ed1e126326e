"""The skill file's decision on the real LLM: SmolLM2-135M-Instruct on this CPU (``bench llm``).

Its rows come from the table of record (``lessonlib.bench.record``, source ``llm``): every method
against plain decoding on the ``edit`` and ``chat`` prompt sets, at T = 0 and T = 1. Per prompt set
and temperature, each drafter family (prompt lookup, lookahead, each trained drafter of
``core.kinds.LLM_KINDS``) at its best one-thread setting by median speedup; the decision is the
fastest of them when its median reaches ``kinds_gate.MIN_SPEEDUP``, else plain decoding. Without
those rows the section says which command measures them.
"""
from __future__ import annotations

from lessonlib.bench import common, record
from lessonlib.core import kinds as core_kinds
from lessonlib.course.skill.kinds_gate import MIN_SPEEDUP

DRAFT_FREE = ("prompt lookup", "lookahead")
EAGLE3 = "smollm2-eagle3"


def family(method: str) -> str | None:
    """The drafter family a ``bench llm`` method belongs to: a draft-free method's name, or a real-LLM
    kind's report label ("EAGLE-3 (SmolLM2)"); None for anything else."""
    for name in DRAFT_FREE:
        if method.startswith(name + " "):
            return name
    for k in core_kinds.LLM_KINDS:
        if method.startswith((k.chain + " ", k.tree + " ")):
            return k.report
    return None


def best(rows, threads: int = 1) -> dict[tuple[str, float], dict[str, dict]]:
    """{(prompt set, T): {family: its best row by median speedup}} of the record's ``llm`` rows."""
    out: dict[tuple[str, float], dict[str, dict]] = {}
    for r in rows:
        fam = family(r["method"]) if r.get("source") == "llm" and r.get("speedup") else None
        if fam is None or r.get("threads") != threads:
            continue
        at = out.setdefault((r["corpus"], float(r["temperature"])), {})
        if fam not in at or r["speedup"]["median"] > at[fam]["speedup"]["median"]:
            at[fam] = r
    return out


def decide(rows) -> dict[str, dict]:
    """{"<prompt set> T = <T>": {"method", "speedup", "on"}}: the fastest family's best setting, on iff
    its median speedup >= ``MIN_SPEEDUP`` (the skill's per-kind gate)."""
    out = {}
    for (corpus, t), fams in sorted(best(rows).items()):
        top = max(fams.values(), key=lambda r: r["speedup"]["median"])
        out[f"{corpus} T = {t:g}"] = {"method": top["method"], "speedup": top["speedup"]["median"],
                                      "on": top["speedup"]["median"] >= MIN_SPEEDUP}
    return out


def eagle3_k(rows) -> int | None:
    """The chain length of the EAGLE-3 head's fastest greedy chain on the real LLM (one thread, any prompt
    set), None when unmeasured: the ``num_speculative_tokens`` of its vLLM configuration."""
    chain = core_kinds.kind(EAGLE3).chain + " K="
    found = [r for r in rows if r.get("source") == "llm" and r.get("speedup") and r.get("threads") == 1
             and float(r["temperature"]) == 0.0 and r["method"].startswith(chain)]
    return int(max(found, key=lambda r: r["speedup"]["median"])["method"][len(chain):]) if found else None


def lines(rows) -> list[str]:
    """Markdown lines: the section's table (one row per prompt set, T and family) and the decisions."""
    found = best(rows)
    if not found:
        return ["## The real LLM on this CPU\n",
                "None recorded yet (`python -m lessonlib.bench llm` measures SmolLM2-135M-Instruct's drafters and "
                "refreshes the record).\n"]
    first = next(iter(next(iter(found.values())).values()))
    table = [[corpus, f"{t:g}", fam, f"`{r['method']}`", record.cell(r, "alpha"), record.cell(r, "tau"),
              record.cell(r, "speedup", unit="×")]
             for (corpus, t), fams in sorted(found.items())
             for fam, r in sorted(fams.items(), key=lambda kv: -kv[1]["speedup"]["median"])]
    chosen = [f"{setting}: " + (f"**`{d['method']}`** ({d['speedup']:.2f}×)" if d["on"] else
                                f"**off**: plain decoding (the best, `{d['method']}`, {d['speedup']:.2f}×)")
              for setting, d in decide(rows).items()]
    return ["## The real LLM on this CPU\n",
            f"The course's second target, SmolLM2-135M-Instruct, reads its weights every step as a large model does "
            f"on a GPU (table of record, `python -m lessonlib.bench llm`: {first.get('path', 'its fastest')} engine, "
            f"median [IQR] over {first['prompts']} prompts per set, 1 thread, every speedup over plain decoding of the "
            f"same prompts; at T = 0 every output equals plain greedy decoding). `edit` prompts ask for a rewrite of "
            f"given code (the reply repeats the prompt), `chat` prompts do not. Each drafter family at its best "
            f"setting; the decision per prompt set and temperature is the fastest family when its median is "
            f"{MIN_SPEEDUP}× or more, else plain decoding.\n",
            common.markdown_table(["prompts", "T", "drafter", "best setting", "α (decoding)", "τ", "speedup"], table),
            "\nDecision: " + "; ".join(chosen) + ".\n"]
