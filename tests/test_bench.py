"""The benchmarks: one way to time methods against plain decoding, one table of record, and
the load check's verdicts. Nothing here asserts on time: the properties are the pairing,
the definitions and the bookkeeping (timing goals live in the benchmarks' own JSON)."""
import json
import os

import numpy as np
import pytest

from lessonlib import paths
from lessonlib.bench import common, kinds, load, record, tree
from lessonlib.bench import decode as bench_decode
from lessonlib.decoding import measures
from lessonlib.models import load as load_model


def fake_run(seconds, tokens=(1, 2, 3)):
    """A decoding loop stand-in: (tokens, stats) whose plain step / draft step are fixed."""
    def run(prompt, i):
        s = seconds[i] if isinstance(seconds, list) else seconds
        return list(tokens), {"seconds": s, "seconds_per_token": s / 3, "target_forward_seconds": s / 3,
                              "tau": 2.0, "k": 2, "alpha": 0.5, "draft_forward_seconds": s / 30,
                              "verify_forward_seconds": s / 2}
    return run


def test_against_plain_compares_each_prompt_with_its_own_plain_run():
    plain = fake_run([0.3, 0.6])
    spec = fake_run([0.15, 0.15])
    runs = common.against_plain(plain, {"spec": spec}, [[1], [2]], repeats=2)
    assert [r["speedup"] for r in runs["spec"]] == pytest.approx([2.0, 4.0])
    # c = draft step / plain's one-token step of the same prompt
    assert [r["c"] for r in runs["spec"]] == pytest.approx([0.005 / 0.1, 0.005 / 0.2])


def test_against_plain_rejects_a_lossy_greedy_method():
    with pytest.raises(AssertionError, match="differs from plain greedy"):
        common.against_plain(fake_run(0.3), {"lossy": fake_run(0.1, tokens=(1, 2, 4))}, [[1]], 1, same_tokens=True)
    common.against_plain(fake_run(0.3), {"same": fake_run(0.1)}, [[1]], 1, same_tokens=True)  # control


def test_cell_shows_median_and_quartiles():
    spread = {"speedup": measures.summary([1.0, 2.0, 3.0, 4.0, 5.0])}
    assert common.cell(spread, "speedup", unit="×") == "3.00× [2.00, 4.00]"
    assert common.cell(spread, "alpha") == "–"


def _reports(folder):
    """A decode.json and a tree.json as the benchmarks write them (two drafts x two K, three tree rows)."""
    spread = lambda x: {k: measures.summary([x, x + 0.1, x + 0.2, x + 0.3, x + 0.4]) for k in record.QUANTITIES}
    rows = [{"corpus": "code", "temperature": 0.0, "threads": t, "draft": d, "k": k, "method": f"chain {d} K={k}",
             "prompts": 5, "spread": spread(k / 10 + (d == "draft-kl"))} for t in (1, 2) for d in ("draft-ce", "draft-kl")
            for k in (2, 3)]
    plain = [{"corpus": "code", "temperature": 0.0, "threads": t, "prompts": 5, "spread": spread(250.0 * t)} for t in (1, 2)]
    (folder / "decode.json").write_text(json.dumps({"settings": {"new_tokens": 128, "prompt_len": 64, "repeats": 3},
                                                    "machine": {"platform": "test"}, "rows": rows, "plain": plain}))
    tree_rows = [{"method": "plain", "family": "plain", "spread": spread(1.0), "prompts": 5}] + [
        {"method": m, "family": "EAGLE tree", "spread": spread(1.0), "prompts": 5} for m in ("EAGLE tree 2-1", "EAGLE tree 3-2")] + [
        {"method": "prompt lookup K=4", "family": "prompt lookup", "spread": spread(0.9), "prompts": 5}]
    (folder / "tree.json").write_text(json.dumps({"setup": {"threads": 1, "prompts": 5, "new_tokens": 128,
                                                            "prompt_tokens": 64, "repeats": 3},
                                                  "machine": {"platform": "test"}, "rows": tree_rows}))


def test_record_picks_up_every_method_row(tmp_path):
    _reports(tmp_path)
    rows = record.collect(tmp_path)
    assert len(rows) == 2 + 8 + 3  # plain and every chain K at both thread counts, every tree row but plain
    assert [r["tokens_per_second"]["median"] for r in record.find(rows, method="plain")] == pytest.approx([250.2, 500.2])
    assert {r["method"] for r in rows if r["source"] == "tree"} == {"EAGLE tree 2-1", "EAGLE tree 3-2", "prompt lookup K=4"}
    assert all(r["prompts"] == 5 and r["speedup"]["n"] == 5 for r in rows)
    shown = record.shown(rows)  # the Markdown: each chain draft at its best K per setting, all tree rows
    assert sorted((r["family"], r["threads"], r["k"]) for r in shown if r["source"] == "decode" and r["k"]) == [
        ("chain draft-ce", 1, 3), ("chain draft-ce", 2, 3), ("chain draft-kl", 1, 3), ("chain draft-kl", 2, 3)]
    assert len(shown) == 2 + 4 + 3
    out = record.write(tmp_path)
    md = (out / "record.md").read_text()
    assert "prompt lookup K=4" in md and "chain draft-kl K=2" not in md
    assert len(json.loads((out / "record.json").read_text())["rows"]) == 13


def test_record_of_an_empty_folder_is_empty(tmp_path):
    assert record.collect(tmp_path) == []
    assert record.find([{"family": "a", "threads": 1}, {"family": "a", "threads": 2}], family="a", threads=2) == [
        {"family": "a", "threads": 2}]


def test_tree_methods_are_named_runs():
    table = tree.methods(quick=True)
    assert len(table) == len(set(table)) and all(callable(run) for _, run in table.values())
    assert {family for family, _ in table.values()} >= {"chain draft-kl", "tree draft-kl", "Medusa", "EAGLE chain"}


def test_decode_and_tree_benchmarks_share_the_definition_of_c():
    """Same prompts, same settings: both benchmarks compute a prompt's c as its draft step over
    plain decoding's one-token step of that prompt (the numbers differ run to run, the formula not)."""
    target, draft = load_model("target", "cpu", pack=True), load_model("draft-kl", "cpu")
    settings = {"prompts": 5, "prompt_len": 16, "new_tokens": 8, "repeats": 1}
    rows, plain = bench_decode.config_rows(target, {"draft-kl": draft}, (3,), "code", 0.0, 1, settings, seed=0)
    row = rows[0]
    assert row["spread"]["c"]["n"] == 5 and row["prompts"] == 5
    m = tree.Models(target, draft, 8)
    runs = common.against_plain(lambda p, i: bench_decode.generate(target, p, 8), {"chain": lambda p, i: tree.chain(3)(m, p)},
                                common.prompts("code", 5, 16), 1)
    for stats, base in zip(runs["chain"], runs["plain"]):
        assert stats["c"] == pytest.approx(stats["draft_forward_seconds"] / base["target_forward_seconds"])
        assert stats["r"] == pytest.approx(stats["verify_forward_seconds"] / base["target_forward_seconds"])


def test_benchmarks_refuse_fewer_than_five_prompts():
    for main in (bench_decode.main, tree.main, kinds.main, load.main):
        with pytest.raises(SystemExit):
            main(["--prompts", "4"])


def _condition(condition, threads, vs_one, speedup):
    return {"condition": condition, "threads": threads,
            "pass_table": {"vs_one": vs_one, "monotone": bool(np.all(np.diff(vs_one) >= -0.1 * np.array(vs_one[:-1])))},
            "chain": {"chain draft-kl K=3, T=0": {"speedup": measures.summary([speedup] * 5)}}}


def test_load_verdicts():
    results = {"idle, 1 thread(s)": _condition("idle", 1, [1, 1.1, 1.2], 1.8),
               "busy, 1 thread(s)": _condition("busy", 1, [1, 1.05, 1.3], 1.6),
               "idle, 2 thread(s)": _condition("idle", 2, [1, 1.1, 1.2], 1.6),
               "busy, 2 thread(s)": _condition("busy", 2, [1, 0.4, 1.3], 0.9)}
    verdict = load.checks(results)
    assert verdict["1 thread(s)"]["passed"]  # 1.6 / 1.8 is within 25 %
    two = verdict["2 thread(s)"]
    assert not two["passed"] and not two["pass_table_monotone"]["busy"] and not two["speedups_within_25_percent"]
    results["busy, 1 thread(s)"]["chain"] = {"skipped": "too slow"}
    assert not load.checks(results)["1 thread(s)"]["passed"]  # unmeasurable counts as failed


def test_busy_process_is_started_and_killed():
    with load.busy_process() as busy:
        pid = busy["pid"]
        assert os.sched_getaffinity(pid) == {busy["core"]}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with load.busy_process(False) as none:
        assert none is None


def test_benchmarks_write_under_the_outputs_folder_of_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    assert paths.benchmarks() == tmp_path / "benchmarks"
    common.write_report("x", {"a": np.float64(1.5), "b": np.arange(2)}, "md\n")
    assert json.loads((tmp_path / "benchmarks" / "x.json").read_text()) == {"a": 1.5, "b": [0, 1]}


def test_best_rows_pick_the_best_k_per_setting_and_the_table_shows_spreads():
    spread = lambda x: {k: measures.summary([x - 0.1, x, x + 0.1]) for k in ("tau", "alpha", "c", "r", "speedup")}
    row = lambda threads, draft, k, speedup: {"threads": threads, "corpus": "code", "temperature": 1.0, "draft": draft,
                                              "k": k, "speedup": speedup, "predicted_speedup": 1.5,
                                              "measured_over_predicted": speedup / 1.5, "forward_bound_speedup": 1.6,
                                              "prompts": 3, "spread": spread(speedup)}
    rows = [row(1, "draft-ce", 1, 1.1), row(1, "draft-ce", 2, 0.9), row(1, "draft-kl", 1, 1.0), row(1, "draft-kl", 2, 1.2),
            row(2, "draft-kl", 1, 1.3), row(2, "draft-kl", 2, 1.0)]
    assert [(r["threads"], r["draft"], r["k"]) for r in bench_decode.best_rows(rows)] == [
        (1, "draft-ce", 1), (1, "draft-kl", 2), (2, "draft-kl", 1)]
    plain = [{"threads": 1, "corpus": "code", "temperature": 1.0, "spread": {"tokens_per_second": measures.summary([250.0])}}]
    md = bench_decode.markdown(rows, plain)
    assert "1.20× [1.15, 1.25]" in md and "250 [250, 250]" in md


def test_profile_alpha_for_a_speedup_prices_the_measured_verify():
    """The profile's 'alpha for 1.6x' is the one inverse of E (theory.alpha_for_speedup) at the
    measured r: at that alpha E(alpha, K) / (K c + r) is 1.6, a little less falls short."""
    from lessonlib.core.theory import alpha_for_speedup, expected_tokens_per_verify

    k, c, r = 3, 0.13, 1.24
    alpha = float(alpha_for_speedup(1.6, k, c, r))
    assert expected_tokens_per_verify(alpha, k) / (k * c + r) == pytest.approx(1.6, abs=1e-9)
    assert expected_tokens_per_verify(alpha - 0.01, k) / (k * c + r) < 1.6
    assert alpha_for_speedup(1.6, k, c, 1.0) < alpha  # negative control: r = 1 asks for less
    assert float(alpha_for_speedup((k + 1) / (k * c + r) + 0.01, k, c, r)) == float("inf")


def test_record_prices_a_chains_drafting_at_k_times_c(tmp_path):
    c = measures.summary([0.08, 0.09, 0.10, 0.11, 0.12])
    row = {"corpus": "code", "temperature": 0.0, "threads": 1, "draft": "draft-kl", "k": 3, "method": "chain draft-kl K=3",
           "prompts": 5, "spread": {"c": c, "speedup": c}}
    (tmp_path / "decode.json").write_text(json.dumps({"settings": {}, "rows": [row], "plain": []}))
    [got] = record.collect(tmp_path)
    assert got["draft_cost_per_round"]["median"] == pytest.approx(3 * c["median"])
    assert got["draft_cost_per_round"]["q25"] == pytest.approx(3 * c["q25"]) and got["draft_cost_per_round"]["n"] == 5
    measured = dict(row, spread={"c": c, "draft_cost_per_round": c})  # a measured cost is kept as it is
    (tmp_path / "decode.json").write_text(json.dumps({"settings": {}, "rows": [measured], "plain": []}))
    assert record.collect(tmp_path)[0]["draft_cost_per_round"] == c
