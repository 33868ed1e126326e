"""The real LLM's benchmark (``bench.llm``) without running the model: its methods are the registry's
and the draft-free ones, a report renders every row it holds (the EAGLE-3 rows' draft cost and r,
the transformers peer table when present, nothing of it when absent), and ``peer_rows`` says None
where transformers is not installed."""
import importlib.util

from lessonlib.bench import llm
from lessonlib.course import llm_demo
from lessonlib.decoding import measures


def spread(median, low=None, high=None):
    low = median if low is None else low
    high = median if high is None else high
    return {"median": median, "q25": low, "q75": high, "min": low, "max": high, "n": 5}


def report(peers):
    methods = {kind: {"plain": {"spread": {}, "prompts": 5},
                      "prompt lookup k=3": {"spread": {"tau": spread(2.2), "alpha": spread(0.74),
                                                       "draft_cost_per_round": spread(0.001), "r": spread(1.3),
                                                       "speedup": spread(1.56, 1.31, 1.80)}, "prompts": 5},
                      "EAGLE-3 chain K=2": {"spread": {"tau": spread(1.41), "alpha": spread(0.32),
                                                       "draft_cost_per_round": spread(0.222, 0.21, 0.28),
                                                       "r": spread(1.24), "speedup": spread(0.97, 0.81, 1.10)},
                                            "prompts": 5},
                      "Medusa 2-1": {"spread": {"tau": spread(1.3), "alpha": spread(0.25),
                                                "draft_cost_per_round": spread(0.08), "r": spread(1.3),
                                                "speedup": spread(1.02, 0.95, 1.08)}, "prompts": 5}}
               for kind in ("edit", "chat")}
    return {"target": llm.TARGET, "prompts": 5, "new_tokens": 128, "repeats": 2, "load_average": [0.1, 0.2, 0.3],
            "load_average_after": [0.4, 0.5, 0.6],
            "by_threads": {"1": {"plain": {"native f16": spread(60.2) | {"greedy_equals_readable": True}},
                                 "baseline_engine": "native f16", "methods": methods, "peers": peers}}}


def test_the_methods_are_the_registrys_and_the_draft_free_ones():
    names = list(llm.methods(8, heads={kind: object() for kind in llm.HEAD_KINDS}))
    assert names[:4] == ["prompt lookup k=3", "prompt lookup k=5", "prompt lookup k=8", "lookahead W4 N3 G4"]
    assert names[4:] == list(llm.head_shapes()) + list(llm.head_shapes("smollm2-medusa"))
    assert "EAGLE-3 tree 2-1" in names and "Medusa 2-1" in names and "Medusa chain K=2" in names
    assert list(llm.methods(8)) == names[:4]  # no head, no head rows
    assert list(llm.methods(8, heads={"smollm2-medusa": object()}))[4:] == list(llm.head_shapes("smollm2-medusa"))


def test_a_report_renders_every_row_and_the_peer_table_only_when_measured():
    peers = {"lessonlib plain": {"tokens_per_second": spread(52.0), "over_lessonlib_plain": spread(1.0),
                                 "over_hf_plain": spread(5.9), "tokens_equal_lessonlib": True},
             "HF plain generate": {"tokens_per_second": spread(8.8), "over_lessonlib_plain": spread(0.17),
                                   "over_hf_plain": spread(1.0), "tokens_equal_lessonlib": False}}
    text = llm.markdown(report(peers))
    assert "| edit | EAGLE-3 chain K=2 | 1.41 [1.41, 1.41] | 0.32 [0.32, 0.32] | 0.22 [0.21, 0.28] |" in text
    assert "0.97× [0.81, 1.10]" in text and "| chat | prompt lookup k=3 |" in text
    assert "| HF plain generate | 8.8 [8.8, 8.8] | 0.17× [0.17, 0.17] | 1.00× [1.00, 1.00] | no |" in text
    bare = llm.markdown(report(None))
    assert "transformers" not in bare and "EAGLE-3 chain K=2" in bare


def test_the_notebooks_reader_finds_exactly_one_heads_rows():
    rep = report(None)
    rep["by_threads"]["1"]["methods"]["chat · T = 1"] = {"EAGLE-3 chain K=2 · sampled (T = 1)": {
        "spread": {"alpha": spread(0.3)}, "prompts": 5}}
    rows = llm_demo.head_rows(rep)
    assert set(rows) == {("edit", "EAGLE-3 chain K=2"), ("chat", "EAGLE-3 chain K=2")}
    assert set(llm_demo.head_rows(rep, "smollm2-medusa")) == {("edit", "Medusa 2-1"), ("chat", "Medusa 2-1")}
    assert set(llm_demo.head_rows(rep, sampled=True)) == {("chat · T = 1", "EAGLE-3 chain K=2 · sampled (T = 1)")}
    assert llm_demo.head_rows(report(None), threads="2") == {}
    assert measures.fmt_spread(rows[("chat", "EAGLE-3 chain K=2")]["speedup"], 2, "×", count=False) == \
        "0.97× [0.81, 1.10]"


def test_peer_rows_is_none_without_transformers(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    assert llm.peer_rows(None, None, [[1, 2]], 4, 1) is None
