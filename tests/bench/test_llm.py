"""The real LLM's benchmark (``bench.llm``) without running the model: its methods are the registry's
and the draft-free ones, a report renders every row it holds (the EAGLE-3 rows' draft cost and r,
the peer table when present, nothing of it when absent), ``peer_rows`` compares each row with its own
plain and lessonlib's fastest with llama.cpp's fastest float16 row, and says None where no peer is
installed; the T = 1 rows pair each drawn shape with its deterministic twin."""
import importlib.util

import numpy as np
import pytest

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
    assert names[4:] == list(llm.head_shapes()) + list(llm.head_shapes("smollm2-medusa")) + \
        list(llm.head_shapes("smollm2-draft"))
    assert "EAGLE-3 tree 2-1" in names and "Medusa 2-1" in names and "Medusa chain K=2" in names
    assert list(llm.methods(8)) == names[:4]  # no head, no head rows
    assert list(llm.methods(8, heads={"smollm2-medusa": object()}))[4:] == list(llm.head_shapes("smollm2-medusa"))


def test_a_report_renders_every_row_and_the_peer_table_only_when_measured():
    peers = {"rows": {"lessonlib plain": {"tokens_per_second": spread(52.0), "over_lessonlib_plain": spread(1.0),
                                          "over_own_plain": spread(1.0), "tokens_equal_lessonlib": True},
                      "HF plain generate": {"tokens_per_second": spread(8.8), "over_lessonlib_plain": spread(0.17),
                                            "over_own_plain": spread(1.0), "tokens_equal_lessonlib": False}},
             "best_over_llama_cpp": {"lessonlib": "lessonlib prompt lookup k=3", "llama.cpp": "llama.cpp plain (f16)",
                                     "ratio": spread(1.61, 1.4, 1.7)}}
    text = llm.markdown(report(peers))
    assert "| edit | EAGLE-3 chain K=2 | 1.41 [1.41, 1.41] | 0.32 [0.32, 0.32] | 0.22 [0.21, 0.28] |" in text
    assert "0.97× [0.81, 1.10]" in text and "| chat | prompt lookup k=3 |" in text
    assert "| HF plain generate | 8.8 [8.8, 8.8] | 0.17× [0.17, 0.17] | 1.00× [1.00, 1.00] | no |" in text
    assert "(lessonlib prompt lookup k=3) over llama.cpp's fastest at the same precision (llama.cpp plain (f16)): " \
           "1.61× [1.40, 1.70]" in text
    bare = llm.markdown(report(None))
    assert "transformers" not in bare and "EAGLE-3 chain K=2" in bare


def test_peer_rows_compare_each_row_with_its_own_plain_and_the_fastest_at_the_same_precision(monkeypatch):
    """The duel is lessonlib's fastest row against llama.cpp's fastest *float16* row: the Q4_1 row,
    faster still, reads a quarter of the bytes and is left out; ratios are per prompt."""
    seconds = {"lessonlib plain": [0.02, 0.03, 0.02, 0.03, 0.02], "lessonlib prompt lookup k=3": [0.01] * 5,
               "llama.cpp plain (f16)": [0.025, 0.03, 0.025, 0.03, 0.025],
               "llama.cpp prompt lookup (num_pred_tokens = 3, f16)": [0.02, 0.06, 0.02, 0.06, 0.06],
               "llama.cpp plain (Q4_1 as shipped)": [0.005] * 5}
    runs = {name: (lambda i, s=s: ([1, 2, i], {"seconds_per_token": s[i]})) for name, s in seconds.items()}
    monkeypatch.setattr(llm, "peer_runs", lambda *a: runs)
    out = llm.peer_rows(None, None, [[i] for i in range(5)], 4, 1)
    rows, duel = out["rows"], out["best_over_llama_cpp"]
    assert rows["lessonlib prompt lookup k=3"]["over_lessonlib_plain"]["median"] == pytest.approx(2.0)
    assert rows["llama.cpp prompt lookup (num_pred_tokens = 3, f16)"]["over_own_plain"]["median"] == \
        pytest.approx(0.5)  # 1.25, 0.5, 1.25, 0.5, 5/12
    assert rows["llama.cpp plain (Q4_1 as shipped)"]["over_own_plain"]["median"] == pytest.approx(5.0)
    assert (duel["lessonlib"], duel["llama.cpp"]) == ("lessonlib prompt lookup k=3", "llama.cpp plain (f16)")
    assert duel["ratio"]["median"] == pytest.approx(2.5)  # 2.5, 3, 2.5, 3, 2.5
    assert all(row["tokens_equal_lessonlib"] for row in rows.values())
    del runs["llama.cpp plain (f16)"], runs["llama.cpp prompt lookup (num_pred_tokens = 3, f16)"]
    del runs["llama.cpp plain (Q4_1 as shipped)"]
    runs["HF plain generate"] = lambda i: ([9], {"seconds_per_token": 0.1})  # other tokens
    out = llm.peer_rows(None, None, [[i] for i in range(5)], 4, 1)
    assert out["best_over_llama_cpp"] is None and not out["rows"]["HF plain generate"]["tokens_equal_lessonlib"]


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


def test_peer_rows_is_none_without_any_peer(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("transformers", "llama_cpp") else real(name, *a))
    assert llm.peer_rows(None, None, [[1, 2]], 4, 1) is None


def test_the_t1_rows_pair_each_drawn_shape_with_its_deterministic_twin(monkeypatch):
    """At T = 1 EAGLE-3's chain of two runs drawn from q and deterministic, its 2-1 tree
    deterministic and drawn with and without replacement; every method of one prompt gets a
    generator seeded by that prompt (the same draws), at SAMPLED_T."""
    import functools

    from lessonlib.core import tree
    from lessonlib.core.tree_sampled import SampledRule
    from lessonlib.decoding import llm_drafter

    calls = {}
    monkeypatch.setattr(llm_drafter, "LlamaHeadDrafter", lambda head, m: ("drafter", head))
    monkeypatch.setattr(llm, "tree_generate", lambda m, drafter, p, n, rule, temperature, rng, stop:
                        calls.setdefault(len(calls), (rule, temperature, rng.random(), n, stop)))
    table = llm.sampled_methods(16, "head", stop=7)
    assert list(table) == ["EAGLE-3 chain K=2 · sampled (T = 1)", "EAGLE-3 chain K=2 · deterministic (T = 1)",
                           "EAGLE-3 tree 2-1 · deterministic (T = 1)", "EAGLE-3 tree 2-1 · with (T = 1)",
                           "EAGLE-3 tree 2-1 · without (T = 1)"]
    for fn in table.values():
        fn("target", [1, 2], 3)
    rules = [c[0] for c in calls.values()]
    assert rules[0] == SampledRule((1, 1)) and rules[3] == SampledRule((2, 1), replacement=True)
    assert rules[4] == SampledRule((2, 1), replacement=False)
    for rule, shape in ((rules[1], (1, 1)), (rules[2], (2, 1))):
        assert isinstance(rule, functools.partial) and rule.func is tree.draft_topk
        assert rule.keywords == {"branching": shape}
    assert {c[1:] for c in calls.values()} == {(llm.SAMPLED_T, np.random.default_rng(3).random(), 16, 7)}


def test_the_weights_a_draft_step_reads_are_counted_from_the_shipped_weights():
    """``llm_demo.step_weights`` (from metadata) against the shipped tensors themselves: EAGLE-3 reads
    every weight of its layer and C-wide draft rows; the draft model reads its blocks, proj_in and
    the draft rows folded with proj_out to its width d (proj_out itself is never read at inference)."""
    from safetensors.torch import load_file

    from lessonlib.models import llm_store

    for kind, name in (("smollm2-eagle3", "smollm2-eagle3"), ("smollm2-draft", "smollm2-draft")):
        path, _ = llm_store.paths(name)
        if not path.exists():
            pytest.skip(f"{name} is not built yet")
        state = load_file(str(path))
        floats = {k: v for k, v in state.items() if v.is_floating_point()}
        n, rows = len(state["d2t"]), state["t2d"].numel()
        if kind == "smollm2-eagle3":
            want = sum(v.numel() for v in floats.values()) + n * 576
        else:
            d = floats["proj_in.weight"].shape[0]
            want = sum(v.numel() for k, v in floats.items() if k != "proj_out.weight") + n * d
        assert rows == 49152 and llm_demo.step_weights(kind) == want
    assert "parameters stored" in llm_demo.trained("smollm2-eagle3")
    with pytest.raises(ValueError, match="kind must be"):
        llm_demo.step_weights("smollm2-medusa")


def test_the_trained_line_reads_the_metadata_and_its_calibration(monkeypatch):
    from lessonlib.models import llm_store

    meta = {"params": 1234567, "train_seconds": 5400.0, "tokens_seen": 4200000,
            "heldout": {"alpha_by_depth": [0.41], "self": {"alpha_by_depth": [0.47]}}}
    monkeypatch.setattr(llm_store, "read_head_meta", lambda name: meta)
    line = llm_demo.trained("smollm2-draft")
    assert line.startswith("draft model (SmolLM2): 1,234,567 parameters stored, trained 1.5 h") and "\n" not in line
    assert "4,200,000 tokens" in line and line.endswith("0.41 on the corpora")
    meta["calibration"] = {"self": {"0": 0.47, "0.7": 0.52, "1": 0.55}, "heldout": {"0": 0.4, "0.7": 0.1, "1": 0.2},
                           "chat replies": {"0": 0.25, "0.7": 0.26, "1": 0.275}}
    lines = llm_demo.trained("smollm2-draft").split("\n")
    assert len(lines) == 4 and "at T = 0 / 0.7 / 1" in lines[1]  # the texts measured, in CALIBRATION_TEXTS' order
    assert lines[2].startswith("  the target's own replies, every position") and lines[2].endswith("0.47 / 0.52 / 0.55")
    assert "chat prompts" in lines[3] and lines[3].endswith("0.25 / 0.26 / 0.28")  # 0.275 to two places


def test_alpha_against_text_pairs_each_sets_chain_of_one_with_its_calibration(monkeypatch):
    from lessonlib.models import llm_store

    meta = {"calibration": {"edit replies": {"0": 0.31}, "chat replies": {"0": 0.22}}}
    monkeypatch.setattr(llm_store, "read_head_meta", lambda name: meta)
    spread = {"median": 0.3, "q25": 0.25, "q75": 0.4}
    rows = {("edit", "draft model chain K=1"): {"alpha": spread}, ("edit", "draft model chain K=2"): {"alpha": spread},
            ("chat", "draft model chain K=1"): {"alpha": {"median": 0.2, "q25": 0.1, "q75": 0.21}},
            ("edit · T = 1", "draft model chain K=1"): {"alpha": spread}}
    lines = llm_demo.alpha_against_text(rows, "smollm2-draft")
    assert lines == ["edit prompts: α while decoding (draft model chain K=1) 0.30 [0.25, 0.40]; teacher-forced on the "
                     "target's replies to them 0.31",
                     "chat prompts: α while decoding (draft model chain K=1) 0.20 [0.10, 0.21]; teacher-forced on the "
                     "target's replies to them 0.22"]
