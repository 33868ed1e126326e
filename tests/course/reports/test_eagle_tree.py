"""Notebook 04's report module: the intervals and rows its claims compare, and the tables it prints,
checked against values computed here from small synthetic reports and the committed benchmarks."""
import json

import numpy as np
import pytest

from lessonlib import paths
from lessonlib.course.claims import Interval
from lessonlib.course.reports import eagle_tree as et

BENCH = paths.ROOT / "outputs" / "benchmarks"


def spread(median, low, high):
    return {"median": median, "q25": low, "q75": high, "n": 5}


def test_context_rows_draw_on_every_call_and_keep_the_first_row_per_key():
    p_of, q_of = et.context_rows(vocab=4, seed=1)
    first = p_of(())
    again = p_of(())  # draws a second row, keeps the first
    q = q_of(())
    rng = np.random.default_rng(1)
    draws = [rng.dirichlet(np.full(4, 0.7)) for _ in range(3)]
    assert np.array_equal(first, draws[0]) and np.array_equal(again, draws[0])
    assert np.array_equal(q, draws[2])  # not draws[1]: the repeated call used one up
    assert np.array_equal(p_of((1,)), rng.dirichlet(np.full(4, 0.7)))


def test_rule_gap_line_pads_the_shown_name_and_refuses_an_unknown_rule():
    line = et.rule_gap_line("BUG: q before top-k (#47932)", 0.0351)
    assert line == "BUG: q before top-k (#47932)".ljust(38) + " largest gap to the target's law: 3.5e-02"
    with pytest.raises(KeyError):
        et.rule_gap_line("with replacment", 0.1)


def test_target_law_and_the_wrong_rule_on_a_small_tree():
    parents, tokens = np.array([-1, -1, 0]), np.array([0, 1, 1])  # a, b under the context; c (token 1) under a
    p_rows = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    law = et.target_law(parents, tokens, p_rows)
    assert law[(0, 1, 2)] == pytest.approx(0.5 * 0.6 / 3) and law[(0, 2)] == pytest.approx(0.5 * 0.3)
    assert law[(1, 0)] == pytest.approx(0.3 * 0.2) and law[(2,)] == pytest.approx(0.2)
    assert sum(law.values()) == pytest.approx(1.0)
    wrong = et.no_renormalise_law(parents, tokens, p_rows)
    assert sum(wrong.values()) == pytest.approx(1.0)
    assert wrong[(2,)] == pytest.approx(0.5 * 0.7)  # both children failed with the original p
    assert sum(v for k, v in wrong.items() if k[0] == 1) == pytest.approx(0.5 * 0.3)  # b tried after a failed
    assert et.gap(law, wrong) == pytest.approx(max(abs(law.get(k, 0) - wrong.get(k, 0)) for k in set(law) | set(wrong)))
    assert et.gap(law, wrong) == pytest.approx(0.35 - 0.2)  # the sequence (2,): 0.2 under the target


def test_target_law_matches_the_librarys_exact_rule_and_the_wrong_rule_does_not():
    from lessonlib.core import tree
    rng = np.random.default_rng(3)
    parents = np.array([-1, -1, -1, 0, 0, 1, 3])
    tokens = np.concatenate([rng.permutation(4)[:3], rng.permutation(4)[:2], rng.permutation(4)[:1], [1]])
    p_rows = rng.dirichlet(np.ones(4), size=len(parents) + 1)
    law = et.target_law(parents, tokens, p_rows)
    assert et.gap(tree.tree_output_distribution(parents, tokens, p_rows), law) < 1e-12
    assert et.gap(et.no_renormalise_law(parents, tokens, p_rows), law) > 1e-3


def test_sampled_gains_use_the_sampled_rule_with_the_best_median(capsys):
    det = np.array([1.0, 2.0, 2.0, 4.0, 5.0])
    taus = {("chain", "deterministic"): det, ("chain", "sampled, with replacement"): det * 9,
            ("tree", "deterministic"): det, ("tree", "sampled, with replacement"): det * 1.1,
            ("tree", "sampled, without"): det * np.array([2.0, 2.0, 1.0, 1.0, 3.0])}
    gains = et.sampled_gains(taus)  # tree: without has median τ 4.0 (with replacement 2.2)
    assert list(gains) == ["chain", "tree"] and gains["chain"].median == pytest.approx(9.0)
    assert (gains["tree"].median, gains["tree"].low, gains["tree"].high, gains["tree"].unit) == (2.0, 1.0, 2.0, "×")
    assert capsys.readouterr().out.endswith("median [q25, q75]: chain 9.00× [9.00, 9.00], tree 2.00× [1.00, 2.00]\n")


def test_show_sampled_taus_draws_a_bar_per_rule_and_prints_the_medians(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(et.plt, "show", lambda: shown.append(et.plt.gcf()))
    taus = {("chain K=4", "deterministic"): np.array([1.0, 1.5, 2.0]),
            ("chain K=4", "sampled, with replacement"): np.array([2.0, 2.25, 9.0])}
    assert et.show_sampled_taus(taus) == {("chain K=4", "deterministic"): 1.5,
                                          ("chain K=4", "sampled, with replacement"): 2.25}
    bars = shown[0].axes[0].patches
    assert [b.get_height() for b in bars] == [1.5, 2.25] and bars[0].get_facecolor() != bars[1].get_facecolor()
    assert capsys.readouterr().out.splitlines() == ["chain K=4     deterministic              τ = 1.50",
                                                    "chain K=4     sampled, with replacement  τ = 2.25"]
    et.plt.close(shown[0])


def sweep():
    rows = [
        {"method": "chain draft-kl K=3", "family": "chain draft-kl", "tau": 2.0, "speedup": 1.0, "r": 1.5, "c": 0.1,
         "k": 3, "spread": {"speedup": spread(1.0, 0.9, 1.1)}},
        {"method": "chain draft-kl K=5", "family": "chain draft-kl", "tau": 2.2, "speedup": 0.8, "r": 1.6, "c": 0.1,
         "k": 5, "spread": {"speedup": spread(0.8, 0.7, 0.9)}},
        {"method": "EAGLE chain K=3", "family": "EAGLE chain", "tau": 3.0, "speedup": 1.4, "r": 1.5, "c": 0.2, "k": 3,
         "spread": {"speedup": spread(1.4, 1.3, 1.5)}},
        {"method": "EAGLE tree 2-1", "family": "EAGLE tree", "tau": 4.0, "speedup": 0.5, "r": 2.0,
         "draft_cost_per_round": 2.5, "spread": {"speedup": spread(0.5, 0.4, 0.6)}},
        {"method": "prompt lookup k=4", "family": "prompt lookup", "tau": 2.5, "speedup": 1.6, "r": 1.5,
         "draft_cost_per_round": 0.05, "spread": {"speedup": spread(1.6, 1.2, 1.7)}},
        {"method": "plain", "family": "plain", "tau": 1.0, "speedup": 1.0, "r": 1.0,
         "spread": {"speedup": spread(1.0, 1.0, 1.0)}},
    ]
    best = {"chain draft-kl": "chain draft-kl K=3", "EAGLE chain": "EAGLE chain K=3", "EAGLE tree": "EAGLE tree 2-1",
            "EAGLE-2 dynamic": "EAGLE tree 2-1", "EAGLE-3 chain": "EAGLE chain K=3", "EAGLE-3 tree": "EAGLE tree 2-1"}
    return {"rows": rows, "best_of_family": best}


def test_race_split_divides_each_eagle_best_by_the_separate_drafts_best_chain(capsys):
    report = sweep()
    assert et.round_cost(report["rows"][0]) == pytest.approx(3 * 0.1 + 1.5)
    split = et.race_split(report)
    assert list(split) == ["EAGLE chain K=3", "EAGLE tree 2-1"]  # families sharing a best row: one entry
    assert split["EAGLE chain K=3"] == pytest.approx((3.0 / 2.0, (0.6 + 1.5) / 1.8, 1.4))
    assert split["EAGLE tree 2-1"] == pytest.approx((2.0, 4.5 / 1.8, 0.5))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "against chain draft-kl K=3 (τ 2.00, round cost 1.80, speedup 1.00×):"
    assert len(out) == 2 + len(et.RACE_FAMILIES)  # a row per family, as the notebook printed them
    assert out[2].split() == ["EAGLE", "chain", "K=3", "1.50", "1.17", "1.29", "1.40"]


def test_print_profile_converts_to_ms_and_counts_draft_steps(capsys):
    et.print_profile({"warm_seconds": {"draft-kl step (1 token)": 1e-4, "EAGLE head (1 node)": 2e-4},
                      "in_loop_seconds": {"draft-kl step (1 token)": 2e-4, "EAGLE head (1 node)": 5e-4}})
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["draft-kl step (1 token):", "    warm 0.100 ms, in the decoding loop 0.200 ms"]
    assert out[4:] == ["in the loop one EAGLE head call costs 2.5 draft-kl steps", ""]


def test_summarise_draft_free_takes_the_lookup_alpha_where_a_row_has_none():
    runs = [{"tau": t, "lookup_alpha": a, "speedup": s} for t, a, s in
            [(1.0, 0.1, 0.5), (2.0, 0.2, 0.6), (3.0, 0.3, 0.7), (4.0, 0.4, 0.8), (5.0, 0.5, 0.9)]]
    kept = [dict(r, alpha=0.9) for r in runs]
    out = et.summarise_draft_free({"plain": [], "lookup": runs, "kept": kept}, ["lookup", "kept"])
    assert set(out) == {"lookup", "kept"}
    assert out["lookup"]["alpha"]["median"] == pytest.approx(0.3) and out["kept"]["alpha"]["median"] == 0.9
    assert out["lookup"]["tau"]["q25"] == pytest.approx(2.0)


def test_print_against_record_places_this_run_against_the_record(monkeypatch, capsys):
    threads = et.torch.get_num_threads()
    record_rows = [{"source": "tree", "method": "a", "temperature": 0.0, "threads": threads, "prompts": 5,
                    "new_tokens": 128, "repeats": 3, "speedup": spread(1.0, 0.9, 1.1)}]
    monkeypatch.setattr(et.record, "load", lambda: record_rows)
    draft_free = {"a": {"tau": spread(2.0, 1.5, 2.5), "speedup": spread(1.5, 1.2, 1.6)},
                  "b": {"speedup": spread(1.0, 0.5, 2.0)}}
    et.print_against_record(draft_free, prompts=5, new_tokens=64, repeats=2)
    out = capsys.readouterr().out.splitlines()
    assert out[1:5] == ["a", "    τ                    2.00 [1.50, 2.50], n = 5",
                        "    speedup              1.50× [1.20, 1.60], n = 5",
                        "    table of record      1.00× [0.90, 1.10]: this run's speedup above it"]
    assert out[6:8] == ["b", "    speedup              1.00× [0.50, 2.00], n = 5"]
    assert out[8] == "    table of record      no row for this method: python -m lessonlib.bench tree writes it"
    assert out[10:12] == ["table of record: python -m lessonlib.bench tree, 5 prompts, 128 new tokens, fastest of 3 "
                         "runs each", "this cell: 5 prompts, 64 new tokens, fastest of 2 runs each"]


@pytest.mark.parametrize("backed, word", [((2.0, 1.9, 2.1), "above"), ((0.5, 0.4, 0.6), "below"),
                                          ((1.0, 0.5, 1.5), "overlaps")])
def test_backed_line_says_the_order_word(backed, word):
    line = et.backed_line(Interval(*backed, "×"), Interval(1.0, 0.9, 1.1, "×"))
    shown = f"{backed[0]:.2f}× [{backed[1]:.2f}, {backed[2]:.2f}]"
    assert line.split(": ", 1)[1] == f"{shown} {word} 1.00× [0.90, 1.10] in this run"


def test_c_interval_measured_or_the_round_over_its_steps():
    measured = {"shape": "chain", "c": 0.2, "spread": {"c": spread(0.2, 0.1, 0.3)}}
    assert et.c_interval(measured) == Interval(0.2, 0.1, 0.3)
    per_round = {"shape": "chain", "c_per_step": 0.25, "draft_cost_per_round": 0.75,
                 "spread": {"draft_cost_per_round": spread(0.75, 0.6, 0.9)}}  # K = 3
    c = et.c_interval(per_round)
    assert (c.median, c.low, c.high) == pytest.approx((0.25, 0.2, 0.3))


@pytest.fixture(scope="module")
def kinds_report():
    return json.loads((BENCH / "kinds.json").read_text())


def test_kinds_intervals_pick_the_rows_the_claims_compare(kinds_report):
    iv = et.kinds_intervals(kinds_report)
    rows = kinds_report["rows"]
    at0 = [r for r in rows if r["temperature"] == 0 and r["kind"] != "plain"]
    assert list(iv.cold) == [r["method"] for r in at0] and "plain" not in iv.speed1
    assert set(iv.chains) == {r["method"] for r in at0 if r["shape"] == "chain"}
    assert iv.chains[iv.medusa]["kind"] == "Medusa" and iv.chains[iv.separate]["kind"] == "draft model (draft-kl)"
    assert sorted(iv.chains[m]["kind"] for m in iv.one_block) == ["EAGLE", "EAGLE-3", "MTP (self-speculation)"]
    eagle = next(r for r in at0 if r["method"] == "EAGLE chain K=3")
    assert iv.speed0["EAGLE chain K=3"].median == eagle["spread"]["speedup"]["median"]
    assert iv.c_of["EAGLE chain K=3"].median == pytest.approx(eagle["draft_cost_per_round"] / 3)
    assert iv.first_guess["EAGLE chain K=3"] == eagle["acceptance_by_depth"][0]
    hot = next(r for r in rows if r["temperature"] == 1 and r["method"] == "EAGLE chain K=3")
    assert iv.speed1["EAGLE chain K=3"].high == hot["spread"]["speedup"]["q75"]
    assert iv.c_of[iv.cheapest].median == min(c.median for c in iv.c_of.values())
    assert iv.speed0[iv.top].median == max(r["spread"]["speedup"]["median"] for r in at0)
    assert iv.separate not in iv.rest and len(iv.rest) == len(iv.speed1) - 1


def test_kinds_table_has_a_row_per_setting_with_its_t0_and_t1_speedups(kinds_report, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(et.plt, "show", lambda: shown.append(et.plt.gcf()))
    et.show_kinds(kinds_report)
    out = capsys.readouterr().out.splitlines()
    rows = kinds_report["rows"]
    at0 = [r for kind in kinds_report["training"] for r in rows if r["kind"] == kind and r["temperature"] == 0]
    assert out[0].startswith("draft kind") and out[-3] == "" and out[-2].startswith("MTP's two modules add")
    assert out[-1] == "" and len(shown) == 1  # the figure, then a blank line before the claims
    assert len(out) == 1 + len(at0) + 3
    for line, row in zip(out[1:], at0):
        hot = next(r for r in rows if r["method"] == row["method"] and r["temperature"] == 1)
        assert row["method"] in line and line.endswith(f"{row['speedup']:5.2f}× {hot['speedup']:5.2f}×")
        first_of_kind = row is next(r for r in at0 if r["kind"] == row["kind"])
        assert line.startswith(row["kind"]) if first_of_kind else line.startswith(" " * 22)
    et.plt.close(shown[0])


def test_print_top_against_lists_above_and_overlapping(capsys):
    speed0 = {"a": Interval(2.0, 1.9, 2.1), "b": Interval(1.0, 0.9, 1.1), "c": Interval(1.95, 1.8, 2.0)}
    et.print_top_against("a", speed0)
    et.print_top_against("b", {"b": speed0["b"]})
    assert capsys.readouterr().out.splitlines() == ["    at T = 0 its interval lies wholly above: b",
                                                    "    and overlaps: c",
                                                    "    at T = 0 its interval lies wholly above: none",
                                                    "    and overlaps: none"]


def test_sweep_fastest_rows_pairs_and_lines(capsys):
    report = sweep()
    fastest = et.fastest_by_family(report)
    assert list(fastest) == ["chain draft-kl", "EAGLE chain", "EAGLE tree"]  # FAMILIES order, only those run
    assert fastest["chain draft-kl"]["method"] == "chain draft-kl K=3"
    speed = {r["method"]: Interval.of(r["spread"]["speedup"], "×") for r in report["rows"]}
    et.print_fastest(fastest)
    assert capsys.readouterr().out.splitlines()[-1] == ""
    kl, eagle = fastest["chain draft-kl"], fastest["EAGLE chain"]
    with pytest.raises(KeyError):  # PAIRS names families this sweep did not run
        et.chains_and_trees(fastest)
    full = dict(fastest, **{f: eagle for f in ("tree draft-kl", "EAGLE-2 dynamic", "EAGLE-3 chain", "EAGLE-3 tree",
                                               "MTP chain", "MTP tree")})
    pairs = et.chains_and_trees(full)
    assert pairs["draft-kl"] == (kl, eagle) and pairs["EAGLE"] == (eagle, eagle)
    line = et.against_distilled_line(speed["EAGLE chain K=3"], speed["chain draft-kl K=3"],
                                     Interval(1.0, 0.5, 1.5), Interval(1.0, 0.9, 1.1))
    assert line.endswith("its interval: above in the sweep, overlaps in the kinds run")


def test_sweep_functions_on_the_committed_tree_report():
    report = json.loads((BENCH / "tree.json").read_text())
    fastest = et.fastest_by_family(report)
    for family, row in fastest.items():
        assert row["speedup"] == max(r["speedup"] for r in report["rows"] if r["family"] == family)
    chain, tree = et.chains_and_trees(fastest)["EAGLE"]
    assert chain["family"] == "EAGLE chain" and tree["family"] in ("EAGLE tree", "EAGLE-2 dynamic")
    families = {r["family"] for r in report["rows"]}
    assert set(et.TRAINED) <= families and not any(f.startswith("prompt lookup") for f in et.TRAINED)
