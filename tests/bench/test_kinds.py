"""The draft-kinds comparison (bench.kinds) and the tree benchmark's targets: which settings
are picked, what the training cost adds up to, the record's new rows. No timing is asserted."""
import json

import pytest
import torch

from lessonlib.bench import kinds, record, tree
from lessonlib.decoding import measures
from lessonlib.decoding.stats import DecodeStats
from lessonlib.models import GPT, GPTConfig, train_heads

TINY = GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=16)


def _table():
    """tree.methods(), every drafter kind present."""
    return tree.methods(quick=True)


def test_every_kind_has_a_chain_and_a_tree_in_the_sweep():
    table = _table()
    families = {family for family, _ in table.values()}
    for kind, k in kinds.KINDS.items():
        chains, trees = k.families
        assert families & set(chains) and families & set(trees), kind
    assert set(kinds.FALLBACK.values()) <= set(table)  # every fallback setting is a method of the sweep


def test_pick_takes_the_fastest_measured_setting_per_shape():
    table = _table()
    report = {"rows": [{"method": "EAGLE chain K=3", "speedup": 1.4}, {"method": "EAGLE chain K=4", "speedup": 1.6},
                       {"method": "EAGLE tree 2-2-1-1", "speedup": 1.5},
                       {"method": "EAGLE-2 dynamic d6 k4 N16", "speedup": 1.7},
                       {"method": "not a method", "speedup": 9.0}]}
    picks = kinds.pick(table, report)
    assert picks["EAGLE"] == {"chain": "EAGLE chain K=4", "tree": "EAGLE-2 dynamic d6 k4 N16"}
    assert picks["MTP (self-speculation)"] == {"chain": "MTP chain K=2", "tree": "MTP tree 2-1"}  # unmeasured: fallback
    without = tree.methods(quick=True, kinds=("draft", "eagle", "medusa"))  # no EAGLE-3 head, no MTP modules shipped
    assert set(kinds.pick(without, report)) == {"draft model (draft-kl)", "Medusa", "EAGLE"}


def _meta(directory, name, **fields):
    (directory / f"{name}.json").write_text(json.dumps(fields))


def test_training_cost_adds_up_a_kinds_checkpoints(tmp_path):
    _meta(tmp_path, "draft-base", train_seconds=600.0, tokens_seen=1_000_000, params=10, steps=100, device="cpu")
    _meta(tmp_path, "draft-kl", train_seconds=300.0, tokens_seen=500_000, params=10, steps=50, device="cuda")
    _meta(tmp_path, "eagle", train_seconds=900.0, tokens_seen=2_000_000, params=20, steps=70, device="cpu",
          trained_with=["eagle", "eagle3", "medusa"])
    _meta(tmp_path, "target-mtp", train_seconds=1000.0, tokens_seen=9_000_000, params=30, steps=90,
          history=[{"device": "cpu"}, {"device": "cuda"}])
    draft = kinds.training_cost("draft model (draft-kl)", tmp_path)
    assert (draft["train_seconds"], draft["tokens"], draft["devices"]) == (900.0, 1_500_000, ["cpu", "cuda"])
    eagle = kinds.training_cost("EAGLE", tmp_path)
    assert eagle["trained_with"] == ["eagle", "eagle3", "medusa"] and eagle["train_seconds"] == 900.0
    mtp = kinds.training_cost("MTP (self-speculation)", tmp_path, mtp_fraction=0.12)
    assert (mtp["train_seconds"] == pytest.approx(120.0) and mtp["tokens"] == 9_000_000
            and mtp["devices"] == ["cpu", "cuda"])
    assert kinds.training_cost("MTP (self-speculation)", tmp_path)["train_seconds"] is None  # not measured: no number


def test_mtp_overhead_reports_both_steps():
    out = kinds.mtp_overhead(GPTConfig(vocab_size=2048, block_size=32, n_layer=2, n_head=2, n_embd=16), depth=2,
                             batch_size=2, reps=1)  # the course's vocabulary: the batches are real training text
    assert out["plain_step_seconds"] > 0 and out["mtp_step_seconds"] > 0
    assert out["fraction"] == pytest.approx(out["mtp_step_seconds"] / out["plain_step_seconds"] - 1)


def _row(method, family, speedup, bound, tau=2.0):
    spread = {"speedup": measures.summary([speedup] * 5), "forward_bound": measures.summary([bound] * 5)}
    return {"method": method, "family": family, "speedup": speedup, "tau": tau, "spread": spread}


def _targets(eagle_speedup, mtp_speedup=1.7, share=0.95):
    """check_targets on four rows whose measured / forward bound is ``share``."""
    rows = [_row("chain draft-kl K=3", "chain draft-kl", 2.1, 2.1 / share),
            _row("tree draft-kl 2-1", "tree draft-kl", 1.5, 1.5 / share, 3.0),
            _row("EAGLE-3 tree 2-2-1-1", "EAGLE-3 tree", eagle_speedup, eagle_speedup / share),
            _row("MTP chain K=2", "MTP chain", mtp_speedup, mtp_speedup / share)]
    best = {}
    for r in rows:
        if r["family"] not in best or r["speedup"] > best[r["family"]]["speedup"]:
            best[r["family"]] = r
    return tree.check_targets(rows, best)


def test_tree_targets_follow_issue_17():
    met = _targets(eagle_speedup=2.6)
    assert met["best EAGLE family >= 2.5x and >= 1.15 x best chain"]["met"]
    assert met["MTP self-speculation >= 1.6x"]["met"] and met["chain draft-kl >= 2.0x"]["met"]
    assert met["measured / forward bound >= 0.9 on every row"]["met"]
    assert met["best tree tau >= chain tau + 0.5 (same draft)"]["met"]  # tau 3.0 vs 2.0
    # negative controls: 2.4x misses 2.5x (and 1.15 x the 2.1x chain = 2.415x)
    assert not _targets(eagle_speedup=2.4)["best EAGLE family >= 2.5x and >= 1.15 x best chain"]["met"]
    assert not _targets(eagle_speedup=2.6, mtp_speedup=1.5)["MTP self-speculation >= 1.6x"]["met"]
    low = _targets(2.6, share=0.85)["measured / forward bound >= 0.9 on every row"]
    assert not low["met"] and low["detail"].startswith("lowest 0.85") and "4 of 4 rows below 0.9" in low["detail"]


def test_record_takes_the_kinds_rows_and_table(tmp_path):
    spread = {k: measures.summary([1.0, 1.1, 1.2, 1.3, 1.4]) for k in record.QUANTITIES}
    rows = [{"method": "plain", "kind": "plain", "temperature": t, "spread": spread} for t in (0.0, 1.0)] + [
        {"method": "EAGLE chain K=4", "family": "EAGLE chain", "kind": "EAGLE", "shape": "chain", "temperature": t,
         "spread": spread, "prompts": 5} for t in (0.0, 1.0)]
    (tmp_path / "kinds.json").write_text(json.dumps({"setup": {"threads": 1, "prompts": 5}, "machine": {},
                                                     "rows": rows}))
    (tmp_path / "kinds.md").write_text("# Draft kinds on one target\n\n| a table |\n")
    got = record.collect(tmp_path)
    assert [(r["source"], r["temperature"]) for r in got] == [("kinds", 0.0), ("kinds", 1.0)]
    md = (record.write(tmp_path) / "record.md").read_text()
    assert "## Draft kinds on one target (kinds.md)" in md and "| a table |" in md


def test_heads_all_trains_three_kinds_on_one_forward():
    torch.manual_seed(0)
    target = GPT(TINY).eval()
    model = train_heads.Trainee(TINY, train_heads.KINDS["all"], n_heads=2, ttt_steps=1, eagle3_ttt=2)
    losses = model.losses(target, torch.randint(0, 64, (2, 16)))
    assert {k: len(v[0]) for k, v in losses.items()} == {"eagle": 1, "eagle3": 2, "medusa": 2}
    with pytest.raises(ValueError, match="eagle3_ttt"):
        train_heads.Trainee(TINY, ("eagle3",), eagle3_ttt=1)


def test_kinds_rows_price_a_tree_loop_chain_per_step():
    """rows_of gives a head's chain (run by the tree loop, one draft cost per round) a c per draft step."""
    table = {"EAGLE chain K=4": ("EAGLE chain", None)}
    lengths = [0, 1, 2, 2] + [4] * 6  # accepted per round: 10 rounds of a 4-deep chain
    stats = DecodeStats("tree", 0.0, 39, rounds=10, emitted=39, drafted=40, accepted=29, judged=33, lengths=lengths,
                        nodes=[4] * 10, depth=4, seconds=0.39, phase_seconds={"draft": 0.08, "verify": 0.25},
                        phase_calls={"draft": 20, "verify": 10})  # draft 0.008 s per round, verify 0.025 s
    plain = DecodeStats("plain", 0.0, 10, rounds=10, emitted=10, seconds=0.2, phase_seconds={"target": 0.18},
                        phase_calls={"target": 9})  # 0.02 s per one-token step
    runs = {"plain": [plain.as_dict()] * 5, "EAGLE chain K=4": measures.against_plain([stats] * 5, [plain] * 5)}
    rows = kinds.rows_of(table, {"EAGLE": {"chain": "EAGLE chain K=4"}}, {0.0: runs})
    eagle = next(r for r in rows if r["kind"] == "EAGLE")
    assert eagle["draft_cost_per_round"] == pytest.approx(0.4) and eagle["c_per_step"] == pytest.approx(0.1)
    assert eagle["greedy_identical"] is True


def test_draft_cost_is_per_step_for_a_chain_and_per_round_for_a_tree():
    assert kinds.draft_cost({"shape": "chain", "c": 0.05, "c_per_step": 0.9}) == (0.05, "step")  # measured c first
    assert kinds.draft_cost({"shape": "chain", "c": None, "c_per_step": 0.118}) == (0.118, "step")
    assert kinds.draft_cost({"shape": "tree", "draft_cost_per_round": 0.73, "c": 0.05}) == (0.73, "round")
    assert kinds.draft_cost_text({"shape": "chain", "c": 0.0467}) == "c 0.047"
    assert kinds.draft_cost_text({"shape": "chain", "c": 0.0467}, label="") == "0.047"  # the column says c
    assert kinds.draft_cost_text({"shape": "tree", "draft_cost_per_round": 0.7312}) == "0.73 / round"
    with pytest.raises(ValueError, match="neither c nor c_per_step"):
        kinds.draft_cost({"shape": "chain", "method": "x"})


def test_a_rounds_drafting_cost_is_k_c_for_a_chain_and_measured_for_a_tree():
    assert tree.draft_cost_per_round({"family": "chain draft-kl", "k": 4, "c": 0.05}) == pytest.approx(0.2)
    assert tree.draft_cost_per_round({"family": "EAGLE tree", "draft_cost_per_round": 0.6, "k": 4, "c": 0.05}) == 0.6
    assert tree.draft_cost_per_round({"family": "plain", "method": "plain"}) == 0.0
    with pytest.raises(ValueError, match="neither draft_cost_per_round nor c and k"):
        tree.draft_cost_per_round({"family": "chain draft-kl", "method": "chain", "c": 0.05})
