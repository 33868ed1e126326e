"""The skill file: ``outputs/skill-speculative-tuning.md``, rendered from validated measurements.

``build_skill(m)`` returns the Markdown; ``write_skill()`` reads the measurements and writes
the file, both paths resolved at call time through ``lessonlib.paths``. Every number in the
file comes from the measurements or from ``recommend`` (one cost model: ``recommend``'s
docstring), and the machine-readable block at its end lets the tests check the arithmetic.

The sections themselves live in ``sections`` (the header and the decision procedure) and
``tables`` (the tables, the worked example, the vLLM configurations); this module computes the
context they share, joins them and adds the sources and the machine-readable decision.
"""
from __future__ import annotations

import contextlib
import json
import math
import pathlib
from collections.abc import Iterator

import numpy as np

from lessonlib import paths, runs
from lessonlib.bench import record
from lessonlib.core import theory
from lessonlib.course.skill import concurrency, draft_free, kinds_gate, measured, real_llm, schema, sections, tables
from lessonlib.course.skill.recommend import (
    MARGIN,
    breakeven_alpha_best_k,
    temperature_gate,
    verify_cost,
    worked_examples,
)
from lessonlib.course.skill.tables import K_TABLE_MAX, TABLE_ALPHAS, TABLE_COSTS  # noqa: F401 (re-exported)
from lessonlib.jsonio import jsonable, write_atomic

FILE_NAME = "skill-speculative-tuning.md"


def skill_path() -> pathlib.Path:
    """Where the skill file is written (resolved now: tests move the outputs folder)."""
    return paths.outputs() / FILE_NAME


def _kind_gate(alphas, ts, c, fc):
    """The gate of the chain recommended at the first measured temperature, for one kind of draft."""
    k, _ = tables.best_chain(alphas[0], c, fc)
    r = float(verify_cost(k + 1, 1, fc))
    return {"k": k, "r": r, "alpha_off": float(theory.alpha_for_speedup(1.0, k, c, r)),
            "temperature": temperature_gate(ts, alphas, k, c, r)}


def _context(m):
    """Everything the sections share, computed once."""
    schema.validate_measurements(m)
    draft = schema.main_draft(m)
    ts = [float(t) for t in m["temperatures"]]
    c, curves, fc = float(m["c"][draft]), m["alpha"][draft], schema.forward_cost(m)
    kinds = [k for k in ("sampled", "greedy", "mismatch") if k in curves]
    how = m.get("c_measured", "warm")
    c_text = f"warm c = {c:.3f}" if how == "warm" else f"c = {c:.3f} in the decoding loop" + (
        f", warm c = {m['c_warm'][draft]:.3f}" if draft in m.get("c_warm", {}) else "")
    return {"m": m, "draft": draft, "ts": ts, "c": c, "curves": curves, "fc": fc, "kinds": kinds,
            "c_measured": how, "c_text": c_text, "examples": worked_examples(m, margin=MARGIN),
            "gates": {kind: _kind_gate(curves[kind], ts, c, fc) for kind in kinds},
            "alpha_best": breakeven_alpha_best_k(c, 16, 1, fc)}


def _sources_and_decision(x):
    decision = {"c": x["c"], "c_measured": x["c_measured"], "examples": x["examples"], "gates": x["gates"],
                "forward_cost": None if x["fc"] is None else [list(map(float, v)) for v in x["fc"]],
                "margin": MARGIN, "temperatures": x["ts"], "alpha": {k: x["curves"][k] for k in x["kinds"]},
                "breakeven_alpha_best_k": x["alpha_best"], "k_table_max": K_TABLE_MAX,
                "kinds_at_t1": x["kinds_t1"], "real_llm": x["real_llm_decision"], "measurements_run": runs.of(x["m"])}
    return [
        "## Sources\n",
        "- Leviathan, Kalai, Matias 2023, Fast Inference from Transformers via Speculative Decoding (eq. 1, Thm 3.8, "
        "Cor 3.9, Table 4).",
        "- Xia et al. 2024, Spec-Bench. Zhou et al. 2024, DistillSpec. Li et al. 2025, EAGLE-3.",
        "- vLLM documentation, Speculative Decoding (draft_model, EAGLE, n-gram pages) and its spec-decode metrics.",
        "- Course measurements: `solutions/05_high_temperature.ipynb` → `outputs/benchmarks/temperature.json`; "
        "the table of record (`python -m lessonlib.bench tree` and `sampled`).\n",
        "<!-- decision (machine-readable, checked by tests/course/test_skill.py) -->",
        "```json",
        json.dumps(_portable(json.loads(json.dumps(decision, default=jsonable))), sort_keys=True, allow_nan=False),
        "```",
    ]


def build_skill(m, record_rows=(), batch=None):
    """Render the skill file (Markdown) from measurements (validated first: ValueError names a bad field)
    and the table of record's rows (``bench.record.load()``), for the draft-free methods. ``batch``:
    the batched benchmark's report for the concurrency section (None: ``concurrency.load()``, the
    outputs folder's or the shipped one; ``{}``: none, the section says the gate is the model's)."""
    x = _context(m)
    with reading("record"):
        x |= {"draft_free": draft_free.lines(record_rows) + kinds_gate.lines(record_rows),
              "lookup_k": draft_free.lookup_k(record_rows), "kinds_t1": kinds_gate.gate(record_rows),
              "examples": measured.overrule(x["examples"], record_rows, x["draft"]),
              "real_llm": real_llm.lines(record_rows), "real_llm_decision": real_llm.decide(record_rows),
              "eagle3_k": real_llm.eagle3_k(record_rows)}
    x["batch"] = concurrency.load() if batch is None else batch
    with reading("batch"):
        batch_lines = concurrency.lines(x)
    parts = sections.SECTIONS + tables.SECTIONS[:-1] + (lambda _: x["real_llm"],) + tables.SECTIONS[-1:] + \
        (lambda _: batch_lines, _sources_and_decision)  # the real LLM's section before the vLLM configurations
    return "\n".join(line for section in parts for line in section(x)) + "\n"


@contextlib.contextmanager
def reading(stem: str) -> Iterator[None]:
    """Reading a benchmark report's fields: one that is missing or of the wrong type raises
    ValueError naming the report's file and the command that rebuilds it, not a KeyError."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError, StopIteration) as err:
        path = record.where(stem) or f"{stem}.json"
        raise ValueError(f"{path} lacks a field the skill file needs or holds one of the wrong type ({err!r}); "
                         f"rebuild it with: python -m lessonlib.bench {stem}") from None


SIGNIFICANT = 12  # digits the machine-readable block keeps of each float (see _portable)


def _portable(x):
    """The same structure with infinities as None (standard JSON has no Infinity), NaN refused, and
    every float rounded to ``SIGNIFICANT`` significant digits: two CPUs (AVX2 and AVX-512 reduce in
    different orders) differ in a float's last bits, and the committed file must not depend on which
    one rendered it; 12 digits keep the arithmetic the tests re-check exact to 1e-11."""
    if isinstance(x, dict):
        return {k: _portable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_portable(v) for v in x]
    if isinstance(x, (float, np.floating)):
        if math.isnan(x):
            raise ValueError("the skill file's decision block holds a NaN: the measurements are incomplete")
        return None if math.isinf(x) else float(f"{float(x):.{SIGNIFICANT}g}")
    return x


def decision_block(markdown):
    """The machine-readable JSON block at the end of a skill file."""
    start = markdown.rindex("```json\n") + len("```json\n")
    return json.loads(markdown[start : markdown.index("\n```", start)])


def write_skill(measurements_path=None, out_path=None):
    """Regenerate the skill file from the measurements JSON; returns the output path.

    Defaults: ``schema.measurements_path()`` and ``skill_path()``, resolved now; the draft-free rows come
    from the table of record in the outputs folder, else the shipped one."""
    text = build_skill(schema.load_measurements(measurements_path), record.load())
    out_path = pathlib.Path(out_path) if out_path is not None else skill_path()
    return write_atomic(out_path, text)
