"""The table of record (lessonlib.bench.record): every benchmark's method rows, the best K per
setting, and a chain's drafting priced at K c. Nothing here asserts on time."""
import json

import pytest

from lessonlib.bench import record
from lessonlib.decoding import measures


def _reports(folder):
    """A decode.json and a tree.json as the benchmarks write them (two drafts x two K, three tree rows)."""
    def spread(x):
        return {k: measures.summary([x, x + 0.1, x + 0.2, x + 0.3, x + 0.4]) for k in record.QUANTITIES}

    rows = [{"corpus": "code", "temperature": 0.0, "threads": t, "draft": d, "k": k, "method": f"chain {d} K={k}",
             "prompts": 5, "spread": spread(k / 10 + (d == "draft-kl"))}
            for t in (1, 2) for d in ("draft-ce", "draft-kl") for k in (2, 3)]
    plain = [{"corpus": "code", "temperature": 0.0, "threads": t, "prompts": 5, "spread": spread(250.0 * t)}
             for t in (1, 2)]
    (folder / "decode.json").write_text(json.dumps({"settings": {"new_tokens": 128, "prompt_len": 64, "repeats": 3},
                                                    "machine": {"platform": "test"}, "rows": rows, "plain": plain}))
    tree_rows = [{"method": "plain", "family": "plain", "spread": spread(1.0), "prompts": 5}] + [
        {"method": m, "family": "EAGLE tree", "spread": spread(1.0), "prompts": 5}
        for m in ("EAGLE tree 2-1", "EAGLE tree 3-2")] + [
        {"method": "prompt lookup K=4", "family": "prompt lookup", "spread": spread(0.9), "prompts": 5}]
    (folder / "tree.json").write_text(json.dumps({"setup": {"threads": 1, "prompts": 5, "new_tokens": 128,
                                                            "prompt_tokens": 64, "repeats": 3},
                                                  "machine": {"platform": "test"}, "rows": tree_rows}))


def test_record_picks_up_every_method_row(tmp_path):
    _reports(tmp_path)
    rows = record.collect(tmp_path)
    assert len(rows) == 2 + 8 + 3  # plain and every chain K at both thread counts, every tree row but plain
    assert ([r["tokens_per_second"]["median"] for r in record.find(rows, method="plain")]
            == pytest.approx([250.2, 500.2]))
    assert ({r["method"] for r in rows if r["source"] == "tree"}
            == {"EAGLE tree 2-1", "EAGLE tree 3-2", "prompt lookup K=4"})
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


def test_record_prices_a_chains_drafting_at_k_times_c(tmp_path):
    c = measures.summary([0.08, 0.09, 0.10, 0.11, 0.12])
    row = {"corpus": "code", "temperature": 0.0, "threads": 1, "draft": "draft-kl", "k": 3,
           "method": "chain draft-kl K=3", "prompts": 5, "spread": {"c": c, "speedup": c}}
    (tmp_path / "decode.json").write_text(json.dumps({"settings": {}, "rows": [row], "plain": []}))
    [got] = record.collect(tmp_path)
    assert got["draft_cost_per_round"]["median"] == pytest.approx(3 * c["median"])
    assert got["draft_cost_per_round"]["q25"] == pytest.approx(3 * c["q25"]) and got["draft_cost_per_round"]["n"] == 5
    measured = dict(row, spread={"c": c, "draft_cost_per_round": c})  # a measured cost is kept as it is
    (tmp_path / "decode.json").write_text(json.dumps({"settings": {}, "rows": [measured], "plain": []}))
    assert record.collect(tmp_path)[0]["draft_cost_per_round"] == c


def test_record_takes_the_peer_engines_rows_with_their_own_plain_as_baseline(tmp_path):
    """peers.json rows (lessonlib, llama.cpp, transformers on the same weights) join the record, each
    row with the spread it was measured with and the run of the report (issue 27, item 5)."""
    spread = {"median": 1.29, "q25": 1.2, "q75": 1.3, "n": 5}
    rows = [{"method": "llama.cpp f16 plain", "engine": "llama.cpp f16", "threads": 1, "plain": True,
             "tokens_per_second": {"median": 430.0, "q25": 420.0, "q75": 440.0, "n": 5}, "speedup": None},
            {"method": "llama.cpp f16 draft-kl K = 3", "engine": "llama.cpp f16", "threads": 2, "plain": False,
             "tokens_per_second": {"median": 300.0, "q25": 290.0, "q75": 310.0, "n": 5}, "speedup": spread,
             "tau": {"median": 2.1, "q25": 2.0, "q75": 2.2, "n": 5}}]
    (tmp_path / "peers.json").write_text(json.dumps({"setup": {"prompts": 5, "new_tokens": 128, "temperature": 0.0},
                                                     "rows": rows, "run": {"id": "peer-run"}}))
    got = record.collect(tmp_path)
    assert [(r["source"], r["method"], r["threads"], r["run"]) for r in got] == [
        ("peers", "llama.cpp f16 plain", 1, "peer-run"), ("peers", "llama.cpp f16 draft-kl K = 3", 2, "peer-run")]
    assert got[0]["speedup"] is None and got[0]["tokens_per_second"]["median"] == 430.0
    assert got[1]["speedup"] == spread and got[1]["tau"]["median"] == 2.1 and got[1]["prompts"] == 5
    assert "llama.cpp f16 draft-kl K = 3 | peers" in record.markdown(got)


def test_the_real_llms_rows_name_their_target_engine_prompt_set_and_temperature(tmp_path):
    """bench llm's rows enter the record, each naming SmolLM2 and the engine its speedups are
    over; a "<set> · T = 1" group is that prompt set at T = 1; the course GPT's rows keep theirs."""
    from tests.bench.test_llm import report

    rep = report(None)
    rep["by_threads"]["1"]["methods"]["chat · T = 1"] = {"EAGLE-3 tree 2-1 · without (T = 1)": {
        "spread": {"alpha": measures.summary([0.7] * 5), "speedup": measures.summary([1.1] * 5)}, "prompts": 5}}
    rows = [r for r in record.collect(tmp_path, {"llm": rep}) if r["source"] == "llm"]
    assert {r["target"] for r in rows} == {record.SMOLLM2} and {r["path"] for r in rows} == {"native f16"}
    hot = [r for r in rows if r["temperature"] == 1.0]
    assert [(r["method"], r["corpus"], r["threads"]) for r in hot] == [("EAGLE-3 tree 2-1 · without (T = 1)",
                                                                       "chat", 1)]
    assert len(rows) == 1 + 2 * 3 and all(r["method"] != "plain" for r in rows)
    text = record.markdown(rows)
    assert "| SmolLM2-135M | EAGLE-3 tree 2-1 · without (T = 1) | llm | chat | 1 | 1 |" in text
    assert "llm native f16" in text
