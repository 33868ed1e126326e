"""Notebook 03's report module: the record row it picks, the speedup table and the pooled α it prints.

Synthetic inputs with the answer worked out here independently (the record's best K among rows
that must be filtered out, Thm 3.8 by its formula, pooled α that differs from a mean of means).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lessonlib.bench import record
from lessonlib.course.claims import Interval
from lessonlib.course.reports import distill_draft as report


def _summary(median, q25, q75, n=5):
    return {"median": median, "q25": q25, "q75": q75, "n": n}


def _row(k, speedup, **fields):
    row = {"source": "decode", "family": "chain draft-kl", "corpus": "code", "temperature": 0.0, "threads": 1,
           "k": k, "speedup": _summary(speedup, speedup - 0.1, speedup + 0.1), "prompts": 5}
    return row | fields


RECORD = [_row(1, 1.10), _row(3, 1.30), _row(5, 1.20),
          _row(2, 9.0, threads=2), _row(2, 9.0, corpus="prose"), _row(2, 9.0, source="tree"),
          _row(2, 9.0, temperature=1.0), _row(2, 9.0, family="chain draft-ce")]


def test_record_row_is_the_best_k_of_this_draft_t_corpus_and_thread_count():
    assert report.record_row(RECORD, "draft-kl", 0.0, threads=1)["k"] == 3
    assert report.record_row(RECORD, "draft-kl", 1.0, threads=1)["k"] == 2
    assert report.record_row(RECORD, "draft-kl", 0.0, threads=4) is None
    assert report.record_row(RECORD, "draft-big", 0.0, threads=1) is None


def test_record_row_on_the_committed_record_agrees_with_a_plain_filter():
    rows = record.load()
    for name, t in (("draft-kl", 0.0), ("draft-ce", 0.0), ("draft-kl", 1.0)):
        found = [r for r in rows if r.get("source") == "decode" and r.get("family") == f"chain {name}"
                 and r.get("corpus") == "code" and r.get("temperature") == t and r.get("threads") == 1]
        best = report.record_row(rows, name, t, threads=1)
        if found:
            assert best["speedup"]["median"] == max(r["speedup"]["median"] for r in found)
        else:
            assert best is None


def test_best_k_takes_the_records_k_and_three_without_one():
    records = {("draft-kl", 0.0): {"k": 5}, ("draft-ce", 0.0): None}
    assert report.best_k(records) == {("draft-kl", 0.0): 5, ("draft-ce", 0.0): 3}


def _spread(alpha, c, speedup):
    return {"tau": _summary(2.0, 1.8, 2.1), "alpha": _summary(alpha, alpha - 0.05, alpha + 0.05),
            "c": _summary(c, c - 0.02, c + 0.02), "r": _summary(1.3, 1.2, 1.4), "speedup": speedup}


SPREAD = {("draft-kl", 0.0): _spread(0.6, 0.5, _summary(0.92, 0.67, 0.99)),
          ("draft-ce", 1.0): _spread(0.8, 0.25, _summary(1.50, 1.40, 1.60))}
KS = {("draft-kl", 0.0): 2, ("draft-ce", 1.0): 4}
RECORDS = {("draft-kl", 0.0): _row(2, 1.08), ("draft-ce", 1.0): None}


def test_speedup_rows_predict_by_thm_3_8_and_keep_the_order():
    rows = report.speedup_rows(SPREAD, KS, RECORDS)
    assert [(r.name, r.t, r.k) for r in rows] == [("draft-kl", 0.0, 2), ("draft-ce", 1.0, 4)]
    for row, (alpha, k, c) in zip(rows, ((0.6, 2, 0.5), (0.8, 4, 0.25))):
        expected = (1 - alpha ** (k + 1)) / (1 - alpha) / (k * c + 1)
        assert row.predicted == pytest.approx(expected, rel=1e-12)
    assert rows[0].here == Interval(0.92, 0.67, 0.99, "×") and rows[1].record is None
    assert rows[0].predicted == pytest.approx(0.98) and rows[1].predicted == pytest.approx(1.6808)
    assert not rows[0].here < rows[0].predicted  # [0.67, 0.99] reaches above 0.98
    assert rows[1].here < rows[1].predicted  # [1.40, 1.60] lies wholly below 1.68


def test_speedup_table_has_a_header_and_one_line_per_row_with_its_cells():
    rows = report.speedup_rows(SPREAD, KS, RECORDS)
    text = report.speedup_table(rows, 5, 48, threads=1)
    head, table = text.split("\n\n")
    assert head == "Median [q25, q75] over 5 held-out code prompts, 48 new tokens, 1 torch thread(s):"
    lines = table.split("\n")
    assert len(lines) == 4 and all(line.count("|") == 11 for line in lines)
    assert lines[2] == ("| draft-kl | 0 | 2 | 2.00 [1.80, 2.10] | 0.600 [0.550, 0.650] | 0.500 [0.480, 0.520] | "
                        f"1.30 [1.20, 1.40] | {rows[0].predicted:.2f}× | 0.92× [0.67, 0.99] | "
                        "1.08× [0.98, 1.18], 5 prompts |")
    assert lines[3].startswith("| draft-ce | 1 | 4 |")
    assert lines[3].endswith("| 1.50× [1.40, 1.60] | not in the record |")


@pytest.mark.parametrize(("measured", "word"), [((0.92, 0.67, 0.99), "overlaps"), ((0.8, 0.7, 0.9), "below"),
                                                ((1.5, 1.3, 1.7), "above")])
def test_against_record_says_where_the_interval_lies(measured, word):
    row = report.speedup_rows({("draft-kl", 0.0): _spread(0.6, 0.5, _summary(*measured))}, {("draft-kl", 0.0): 2},
                              {("draft-kl", 0.0): _row(2, 1.08)})[0]
    here = f"{measured[0]:.2f}× [{measured[1]:.2f}, {measured[2]:.2f}]"
    assert report.against_record(row) == (f"    draft-kl at T = 0: the speedup measured here ({here}) {word} "
                                          "the record's (1.08× [0.98, 1.18])")


@pytest.mark.parametrize(("measured", "word"), [((0.8, 0.7, 0.9), "below"), ((0.9, 0.8, 2.0), "overlaps"),
                                                ((3.0, 2.5, 3.5), "above")])
def test_against_prediction_says_where_the_interval_lies_against_thm_3_8(measured, word):
    row = report.speedup_rows({("draft-kl", 0.0): _spread(0.6, 0.5, _summary(*measured))}, {("draft-kl", 0.0): 2},
                              {("draft-kl", 0.0): _row(2, 1.08)})[0]
    assert 0.9 < row.predicted < 1.3  # the prediction the three intervals are placed around
    here = f"{measured[0]:.2f}× [{measured[1]:.2f}, {measured[2]:.2f}]"
    assert report.against_prediction(row) == (f"draft-kl at T = 0: the speedup measured here ({here}) {word} Thm "
                                              f"3.8's {row.predicted:.2f}×, which leaves out r and the per-round work")


def test_against_record_refuses_a_row_without_a_record():
    row = report.speedup_rows(SPREAD, KS, RECORDS)[1]
    with pytest.raises(ValueError, match="no row in the record"):
        report.against_record(row)


def _stats(accepted, judged):
    return SimpleNamespace(accepted=accepted, judged=judged, alpha=accepted / judged)


HUMAN = "teacher-forced on human text"
POSITIONS = [np.array([1.0, 0.0]), np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.0]), np.array([0.5, 0.5]),
             np.array([0.25])]
DECODED = [_stats(1, 1), _stats(1, 9), _stats(3, 4), _stats(2, 2), _stats(0, 4)]
KINDS = {(HUMAN, 0.0): POSITIONS, (HUMAN, 1.0): POSITIONS[::-1],
         (report.DECODING, 0.0): DECODED, (report.DECODING, 1.0): DECODED[:4] + [_stats(4, 4)]}


def test_pooled_alpha_counts_positions_and_judged_drafts_not_prompts():
    pooled = report.pooled(KINDS)
    assert pooled[HUMAN, 0.0] == pytest.approx(6.25 / 10)  # the mean of the prompts' means would be 0.45
    assert pooled[report.DECODING, 0.0] == pytest.approx(7 / 20)  # the mean of the prompts' α would be 0.572
    assert pooled[report.DECODING, 1.0] == pytest.approx(11 / 20)
    found = report.alpha_kinds(KINDS)
    assert (found[HUMAN, 0.0].n, found[report.DECODING, 0.0].n) == (10, 20)
    assert found[report.DECODING, 0.0].decoding and not found[HUMAN, 1.0].decoding


def test_alpha_kinds_lines_show_each_kind_with_spread_pooled_and_sample():
    lines = report.alpha_kinds_lines(KINDS, 5, 48, {"greedy_T0": 0.518, "alpha_T1": 0.577})
    assert len(lines) == 4
    assert lines[0].startswith("draft-kl, 5 held-out code prompts, 48 tokens each:")
    means = [a.mean() for a in POSITIONS]  # 0.5, 1, 0, 0.5, 0.25: median 0.5, quartiles 0.25 and 0.5
    assert np.quantile(means, [0.25, 0.5, 0.75]).tolist() == [0.25, 0.5, 0.5]
    assert lines[1] == (f"  {HUMAN:<45} T = 0: 0.500 [0.250, 0.500], pooled 0.625 (10 positions)   "
                        "T = 1: 0.500 [0.250, 0.500], pooled 0.625 (10 positions)")
    assert lines[2].startswith(f"  {report.DECODING:<45} T = 0: ") and "pooled 0.350 (20 judged drafts)" in lines[2]
    assert lines[2].endswith("pooled 0.550 (20 judged drafts)")
    assert lines[3] == "  teacher-forced on 2,048 human tokens (above)  T = 0: 0.518   T = 1: 0.577"
