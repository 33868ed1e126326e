"""Notebook 03 (distil a draft): the plumbing behind its speedup table and its α reconciliation.

Two cells of ``solutions/03_distill_draft.ipynb`` compare what they measured with something else:

* the measured-speedup cell puts each draft's speculative decoding next to Leviathan et al.'s
  Thm 3.8 and next to the table of record (``bench.record``): ``record_row`` picks the decode
  benchmark's best-K row, ``speedup_rows`` pairs each measured interval with its prediction and
  its record, ``speedup_table`` is the markdown table and ``against_record`` the line under a
  claim that says where this run lies against the record;
* the reconciliation cell shows three kinds of α for ``draft-kl`` on the same prompts:
  ``alpha_kinds`` pools each kind (accepted / judged drafts while decoding, positions when
  teacher-forced) and ``alpha_kinds_lines`` prints them with their spread over prompts.

The claims stay in the notebook; every sentence printed here goes through ``messages.say``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lessonlib.bench import record
from lessonlib.core import theory
from lessonlib.course import messages, outputs
from lessonlib.course.claims import Interval, order
from lessonlib.course.messages import N_, say
from lessonlib.course.reports import cell
from lessonlib.decoding import measures

Key = tuple[str, float]  # (draft name, temperature)
# The words of the two Markdown tables (``distill.table_markdown``'s header and draft names, and
# ``speedup_table``'s), as templates: ``outputs.markdown`` translates each cell through them.
TABLE_WORDS = (N_("model"), N_("α T=1 {corpus}"), N_("greedy T=0 {corpus}"), N_("bits/byte {corpus}"),
               N_("target (itself)"), N_("random init"), N_("{name} (shipped)"),
               N_("your draft ({loss}, {steps} steps)"), N_("draft"), N_("α (decoding)"),
               N_("predicted E/(Kc+1)"), N_("measured here"), N_("table of record"), N_("{speedup}, {n} prompts"),
               N_("not in the record"))
DECODING = "measured while decoding (accepted / judged)"  # the kind of α counted by the decoding loop
DEFAULT_K = 3  # a draft's K when the record has no row for it


def record_row(rows: Sequence[Mapping[str, Any]], name: str, temperature: float,
               threads: int | None = None) -> Mapping[str, Any] | None:
    """The decode benchmark's best-K row (highest median speedup) for draft ``name`` at ``temperature``
    on code at ``threads`` torch threads (default: this process's), or None when the record has none."""
    threads = torch.get_num_threads() if threads is None else threads
    found = record.find(rows, source="decode", family=f"chain {name}", corpus="code", temperature=temperature,
                        threads=threads)
    return max(found, key=lambda r: r["speedup"]["median"]) if found else None


def best_k(records: Mapping[Key, Mapping[str, Any] | None]) -> dict[Key, int]:
    """{(draft, T): K}: each record row's K, ``DEFAULT_K`` where there is no row."""
    return {key: int(row["k"]) if row else DEFAULT_K for key, row in records.items()}


@dataclass(frozen=True)
class SpeedupRow:
    """One draft at one T: its K, the measured spreads, Thm 3.8's prediction and the record's row."""

    name: str
    t: float
    k: int
    spread: Mapping[str, Mapping[str, Any]]  # measures.summarise of the runs against plain decoding
    here: Interval  # the measured speedup, median [q25, q75] over prompts
    predicted: float  # E(α, K) / (K c + 1) from the median α and c of the same runs
    record: Mapping[str, Any] | None  # the table of record's row, or None


def speedup_rows(spread: Mapping[Key, Mapping[str, Mapping[str, Any]]], ks: Mapping[Key, int],
                 records: Mapping[Key, Mapping[str, Any] | None]) -> list[SpeedupRow]:
    """A ``SpeedupRow`` for each (draft, T) of ``spread``, in its order."""
    out = []
    for (name, t), s in spread.items():
        k = ks[name, t]
        predicted = float(theory.expected_speedup(s["alpha"]["median"], k, s["c"]["median"]))
        out.append(SpeedupRow(name, t, k, s, Interval.of(s["speedup"], "×"), predicted, records[name, t]))
    return out


def speedup_table(rows: Sequence[SpeedupRow], n_prompts: int, new: int, threads: int | None = None) -> str:
    """The markdown table of ``rows`` (τ, α, c, r, predicted, measured, the record's speedup) under a
    line saying what the brackets are over."""
    threads = torch.get_num_threads() if threads is None else threads
    lines = ["| draft | T | K | τ | α (decoding) | c | r | predicted E/(Kc+1) | measured here | table of record |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        s, rec = row.spread, row.record
        reference = (f"{cell(rec['speedup'], unit='×')}, {rec['prompts']} prompts" if rec else "not in the record")
        lines.append(f"| {row.name} | {row.t:g} | {row.k} | {cell(s['tau'])} | {cell(s['alpha'], 3)} | "
                     f"{cell(s['c'], 3)} | {cell(s['r'])} | {row.predicted:.2f}× | {cell(s['speedup'], unit='×')} | "
                     f"{reference} |")
    head = say("Median [q25, q75] over {n} held-out code prompts, {new} new tokens, {threads} torch thread(s):",
               n=n_prompts, new=new, threads=threads)
    return outputs.markdown(head + "\n\n" + "\n".join(lines))


def heldout_markdown(rows: Sequence[Mapping[str, Any]], n_tokens: int, here: Mapping[str, float],
                     there: Mapping[str, float]) -> str:
    """Notebook 03's held-out comparison as Markdown in the reader's language: what it is measured on,
    ``distill.table_markdown(rows)``, and the target's bits/byte ``here`` (on these tokens) beside
    ``there`` (its checkpoint's metadata, on up to 60,000 tokens), per corpus."""
    from lessonlib.models import distill

    pairs = "; ".join(say("{corpus} {here:.3f} here vs {there:.3f} there", corpus=c, here=here[c], there=there[c])
                      for c in here)
    text = (say("Teacher-forced on the first {n:,} held-out tokens of each corpus.", n=n_tokens) + "\n\n"
            + distill.table_markdown(list(rows)) + "\n\n"
            + say("The target's bits/byte here is measured on these {n:,} tokens; the checkpoint metadata printed at "
                  "the top measured the same quantity on up to the first 60,000 held-out tokens: {pairs} — two samples "
                  "of one quantity, not two quantities.", n=n_tokens, pairs=pairs))
    return outputs.markdown(text)


def findings_markdown(result: Mapping[tuple[str, str], Mapping[str, float]], student: str, steps: int, n_tokens: int,
                      decoding: Mapping[float, float], n_prompts: int, ft_steps: int, winner: str) -> str:
    """Notebook 03's findings as Markdown in the reader's language, from ``result`` ({(draft, corpus):
    a held-out row}), the student's draft's name and steps, ``decoding`` ({T: draft-kl's α while
    decoding}) and the equal-budget continuation's ``winner``."""
    corpora = list(dict.fromkeys(c for _, c in result))

    def both(name: str) -> str:
        return ", ".join(f"{c} {result[name, c]['alpha_T1']:.3f} / {result[name, c]['greedy_T0']:.3f}"
                         for c in corpora)
    code = result["draft-kl (shipped)", "code"]["alpha_T1"]
    lines = [say("Teacher-forced α at T = 1 / greedy agreement at T = 0 on the first {n:,} held-out tokens per corpus "
                 "(this run):", n=n_tokens), "",
             say("* `draft-kl` (forward KL to the target): {values}", values=both("draft-kl (shipped)")),
             say("* `draft-ce` (cross-entropy on the text): {values}", values=both("draft-ce (shipped)")),
             say("* your {steps}-step draft: {values}", steps=steps, values=both(student)),
             say("* random init: {random}; unigram: {unigram}; bigram: {bigram}",
                 random=both("random init"), unigram=both("unigram"), bigram=both("bigram")), "",
             say("α of `draft-kl` measured while decoding the target's own output ({n} prompts, median): "
                 "T = 0 {t0:.3f}, T = 1 {t1:.3f}.", n=n_prompts, t0=decoding[0.0], t1=decoding[1.0]), "",
             say("Equal-budget continuation of `draft-base` ({steps} steps each): highest α with `{winner}`; theory "
                 "predicts `tvd`.", steps=ft_steps, winner=winner),
             say("The lesson's \"α 0.6–0.8 for code\": `draft-kl`'s teacher-forced α at T = 1 on held-out code is "
                 "{alpha:.3f}, inside that range.", alpha=code) if 0.6 <= code <= 0.8 else
             say("The lesson's \"α 0.6–0.8 for code\": `draft-kl`'s teacher-forced α at T = 1 on held-out code is "
                 "{alpha:.3f}, outside that range.", alpha=code)]
    return outputs.markdown("\n".join(lines))


def against_prediction(row: SpeedupRow) -> str:
    """The line that says where this run's speedup interval lies against Thm 3.8's prediction, which
    leaves out r and the per-round work (below, overlapping or above): printed, not claimed, since
    five prompts of 48 tokens on a shared machine can stretch the interval over the prediction."""
    p = float(row.predicted)
    return say("{name} at T = {t:g}: the speedup measured here ({here}) {word} Thm 3.8's {predicted:.2f}×, which "
               "leaves out r and the per-round work", name=row.name, t=row.t, here=row.here, predicted=p,
               word=messages.word(order(row.here, Interval(p, p, p, "×"))))


def against_record(row: SpeedupRow) -> str:
    """The line that says whether this run's speedup lies above or below the record's or overlaps it
    (ValueError for a row the record does not have)."""
    if not row.record:
        raise ValueError(f"{row.name} at T = {row.t:g} has no row in the record to compare with")
    reference = Interval.of(row.record["speedup"], "×")
    return say("    {name} at T = {t:g}: the speedup measured here ({here}) {word} the record's ({record})",
               name=row.name, t=row.t, here=row.here, word=messages.word(order(row.here, reference)),
               record=reference)


@dataclass(frozen=True)
class AlphaKind:
    """One kind of α at one T: its per-prompt values, the pooled α and the sample it pools."""

    per_prompt: list[float]
    pooled: float
    n: int  # judged drafts (while decoding) or positions (teacher-forced)
    decoding: bool  # True: accepted / judged drafts of the decoding loop; False: teacher-forced positions


def alpha_kind(kind: str, runs: Sequence[Any]) -> AlphaKind:
    """The ``AlphaKind`` of ``runs``: the decoding loop's stats (``kind`` starting with "measured":
    pooled = all accepted / all judged) or per-position α arrays (pooled = mean over all positions)."""
    if kind.startswith("measured"):
        judged = sum(s.judged for s in runs)
        return AlphaKind([s.alpha for s in runs], sum(s.accepted for s in runs) / judged, judged, True)
    return AlphaKind([float(a.mean()) for a in runs], float(np.concatenate(runs).mean()), sum(len(a) for a in runs),
                     False)


def alpha_kinds(kinds: Mapping[Key, Sequence[Any]]) -> dict[Key, AlphaKind]:
    """{(kind, T): AlphaKind} for every entry of ``kinds`` ({(kind, T): per-prompt runs})."""
    return {(kind, t): alpha_kind(kind, runs) for (kind, t), runs in kinds.items()}


def pooled(kinds: Mapping[Key, Sequence[Any]]) -> dict[Key, float]:
    """{(kind, T): pooled α} for every entry of ``kinds``."""
    return {key: found.pooled for key, found in alpha_kinds(kinds).items()}


def _shown_kind(kind: str) -> str:
    """A kind's name as shown, in the reader's language (the kind itself when it has no template)."""
    shown = {"teacher-forced on human text": say("teacher-forced on human text"),
             "teacher-forced on the target's own output": say("teacher-forced on the target's own output"),
             "measured while decoding (accepted / judged)": say("measured while decoding (accepted / judged)")}
    return shown.get(kind, kind)


def _sample(found: AlphaKind) -> str:
    """What a pooled α counts: '202 judged drafts' or '240 positions'."""
    return say("{n} judged drafts", n=found.n) if found.decoding else say("{n} positions", n=found.n)


def alpha_kinds_lines(kinds: Mapping[Key, Sequence[Any]], n_prompts: int, new: int,
                      reference: Mapping[str, Any]) -> list[str]:
    """The reconciliation's printed lines: a header, one line per kind with T = 0 and T = 1 (median
    [q25, q75] over prompts, pooled α, sample) and the long teacher-forced measurement ``reference``
    (a row of ``distill.Heldout.compare`` with greedy_T0 and alpha_T1)."""
    found = alpha_kinds(kinds)
    lines = [say(
        "draft-kl, {n} held-out code prompts, {new} tokens each: median [q25, q75] over prompts; pooled α; sample",
        n=n_prompts, new=new)]
    for kind in dict.fromkeys(k for k, _ in kinds):
        zero, one = found[kind, 0.0], found[kind, 1.0]
        spread0, spread1 = (cell(measures.summary(f.per_prompt), 3) for f in (zero, one))
        lines.append(say("  {kind:<45} T = 0: {spread0}, pooled {pooled0:.3f} ({sample0})   "
                         "T = 1: {spread1}, pooled {pooled1:.3f} ({sample1})",
                         kind=_shown_kind(kind), spread0=spread0, pooled0=zero.pooled, sample0=_sample(zero),
                         spread1=spread1, pooled1=one.pooled, sample1=_sample(one)))
    lines.append(say("  teacher-forced on 2,048 human tokens (above)  T = 0: {greedy:.3f}   T = 1: {alpha:.3f}",
                     greedy=reference["greedy_T0"], alpha=reference["alpha_T1"]))
    return lines
