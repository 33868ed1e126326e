"""The skill file's section on the real LLM (``course.skill.real_llm``): per prompt set and
temperature each drafter family at its best one-thread setting, the decision the fastest family at
``MIN_SPEEDUP`` or more, EAGLE-3's best greedy chain length for its vLLM line; synthetic rows of the
table of record, so every outcome is known in advance."""
from lessonlib.course.skill import real_llm
from lessonlib.course.skill.kinds_gate import MIN_SPEEDUP


def row(method, speedup, corpus="chat", t=0.0, threads=1, source="llm"):
    s = {"median": speedup, "q25": speedup - 0.05, "q75": speedup + 0.05}
    return {"source": source, "method": method, "speedup": s, "tau": s, "alpha": s, "corpus": corpus,
            "temperature": t, "threads": threads, "prompts": 5, "path": "native f16"}


ROWS = [
    row("prompt lookup k=3", 1.05), row("prompt lookup k=5", 1.08), row("lookahead W4 N3 G4", 0.5),
    row("EAGLE-3 chain K=1", 1.15), row("EAGLE-3 chain K=2", 1.25), row("EAGLE-3 tree 2-1", 1.2),
    row("Medusa 2-1", 1.3, threads=2), row("Medusa chain K=1", 1.02), row("draft model chain K=2", 1.12),
    row("EAGLE-3 chain K=3", 1.9, threads=2),  # two threads: not the one-thread decision, nor its K
    row("prompt lookup k=3", 2.2, corpus="edit"), row("EAGLE-3 chain K=1", 1.3, corpus="edit"),
    row("EAGLE-3 chain K=2 · sampled (T = 1)", MIN_SPEEDUP, t=1.0),
    row("EAGLE-3 tree 2-1 · deterministic (T = 1)", 1.0, t=1.0),
    row("EAGLE-3 chain K=2 · sampled (T = 1)", MIN_SPEEDUP - 1e-4, corpus="edit", t=1.0),
    row("EAGLE-3 chain K=4", 3.0, source="tree"),  # the tiny target's benchmark: not the real LLM
]


def test_each_family_at_its_best_one_thread_setting():
    found = real_llm.best(ROWS)
    assert set(found) == {("chat", 0.0), ("edit", 0.0), ("chat", 1.0), ("edit", 1.0)}
    chat = found["chat", 0.0]
    assert {f: r["method"] for f, r in chat.items()} == {
        "prompt lookup": "prompt lookup k=5", "lookahead": "lookahead W4 N3 G4",
        "EAGLE-3 (SmolLM2)": "EAGLE-3 chain K=2", "Medusa (SmolLM2)": "Medusa chain K=1",
        "draft model (SmolLM2)": "draft model chain K=2"}
    assert real_llm.family("Medusa 2-1") == "Medusa (SmolLM2)" and real_llm.family("plain") is None
    assert real_llm.family("draft model tree 2-1") == "draft model (SmolLM2)"


def test_the_decision_is_the_fastest_family_when_it_reaches_the_gate():
    decided = real_llm.decide(ROWS)
    assert decided["chat T = 0"] == {"method": "EAGLE-3 chain K=2", "speedup": 1.25, "on": True}
    assert decided["edit T = 0"]["method"] == "prompt lookup k=3" and decided["edit T = 0"]["on"]
    assert decided["chat T = 1"]["on"] and not decided["edit T = 1"]["on"]  # at the gate, and just under it
    text = "\n".join(real_llm.lines(ROWS))
    assert "chat T = 0: **`EAGLE-3 chain K=2`** (1.25×)" in text
    assert "edit T = 1: **off**: plain decoding" in text and "native f16 engine" in text
    assert "`EAGLE-3 chain K=3`" not in text and "`EAGLE-3 chain K=4`" not in text


def test_eagle3s_vllm_chain_length_is_its_fastest_greedy_chain():
    assert real_llm.eagle3_k(ROWS) == 1  # edit K=1 at 1.3x beats chat K=2 at 1.25x; T = 1 and 2 threads ignored
    assert real_llm.eagle3_k([r for r in ROWS if r["corpus"] == "chat"]) == 2
    assert real_llm.eagle3_k([]) is None


def test_without_rows_it_says_which_command_measures_them():
    text = "\n".join(real_llm.lines([row("chain draft-kl K=3", 1.0, source="decode")]))
    assert "None recorded yet" in text and "python -m lessonlib.bench llm" in text
    assert real_llm.decide([]) == {}
