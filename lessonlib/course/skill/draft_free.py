"""The skill file's draft-free choice: the course's own prompt-lookup and lookahead numbers.

They come from the table of record (``lessonlib.bench.record``, rows of ``python -m
lessonlib.bench tree``): for each draft-free family, its best setting by median speedup on
held-out code at T = 0, next to the best chain of the distilled draft in the same run.
Without a record the section says which command measures them.
"""
from __future__ import annotations

from lessonlib.bench import common, record

FAMILIES = (("prompt lookup", "n-gram prompt lookup"),
            ("lookup + draft", "prompt lookup, the draft where it finds nothing"),
            ("lookahead", "lookahead decoding"))
BASELINE = "chain draft-kl"  # the tree benchmark's chain rows (the draft the course distils)


def _best(rows, family):
    rows = [r for r in rows if r["family"] == family and r.get("speedup")]
    return max(rows, key=lambda r: r["speedup"]["median"]) if rows else None


def _code_t0(rows):
    return [r for r in rows if r["source"] == "tree" and r["corpus"] == "code" and r["temperature"] == 0]


def lookup_k(rows) -> int | None:
    """The proposal length of the best prompt-lookup row (for the vLLM ``ngram`` config), None if unmeasured."""
    best = _best(_code_t0(rows), "prompt lookup")
    return int(best["k"]) if best and best.get("k") else None


def lines(rows) -> list[str]:
    """Markdown lines: one table row per draft-free family measured in the record's tree rows."""
    tree = _code_t0(rows)
    found = [(label, _best(tree, family)) for family, label in FAMILIES + ((BASELINE, "chain, distilled draft"),)]
    found = [(label, r) for label, r in found if r is not None]
    if not any(r["family"] != BASELINE for _, r in found):
        return ["\nCourse measurement of the draft-free methods: none recorded yet "
                "(`python -m lessonlib.bench tree` measures them and refreshes the record).\n"]
    first = found[0][1]
    table = [[label, f"`{r['method']}`", record.cell(r, "alpha"), record.cell(r, "tau"),
              record.cell(r, "draft_cost_per_round", 3), record.cell(r, "speedup", unit="×")] for label, r in found]
    lookup = dict(found).get(FAMILIES[0][1])
    cost = lookup and lookup.get("draft_cost_per_round")
    why = (f"Prompt lookup's drafting cost {cost['median']:.3f} of a one-token target step per round here, so its "
           "speedup is set by α and the verify cost alone; " if cost else "Prompt lookup needs no draft model; ")
    return [f"\nCourse measurement, held-out code, T = 0, greedy output identical to plain (table of record, "
            f"`python -m lessonlib.bench tree`: median [IQR] over {first['prompts']} prompts, {first['threads']} "
            f"thread{'s' if first['threads'] != 1 else ''}, each family at its best setting). " + why +
            "it pays where the output repeats the input or itself. α is accepted / judged while decoding.\n",
            common.markdown_table(["method", "setting", "α (decoding)", "τ", "draft cost / round", "speedup"], table)]

