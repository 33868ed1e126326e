"""bench.sampled's method table and headline, and bench.calibration's measures, on
constructed inputs whose answers are known (the benchmarks' runs themselves are timed, so the
tests pin what they compute from them, not their numbers)."""
import numpy as np
import pytest

from lessonlib.bench import calibration, sampled
from lessonlib.core.tree_sampled import SampledRule
from lessonlib.models import CHECKPOINTS


def test_every_kind_gets_each_rule_once():
    table = sampled.methods(("draft", "eagle", "eagle3", "medusa", "mtp"))
    for label in ("draft-kl", "EAGLE", "EAGLE-3", "Medusa", "MTP"):
        rules = {(shape, rule) for (lab, shape, rule, _) in table.values() if lab == label}
        shapes = {shape for shape, _ in rules}
        for shape in shapes - {"dynamic"}:
            want = {"deterministic", "sampled"} if shape.startswith("chain") else {"deterministic", "with", "without"}
            got = {rule for s, rule in rules if s == shape}
            assert want <= got, (label, shape, got)
    assert {rule for (lab, shape, rule, _) in table.values() if shape == "dynamic"} == {"deterministic", "without"}
    assert not sampled.methods(("eagle",)).keys() & {n for n in table if n.startswith("MTP")}
    for label in ("draft-kl", "EAGLE", "EAGLE-3", "Medusa", "MTP"):  # a short chain beside each kind's long one
        assert (label, "chain K=2", "sampled") in {row[:3] for row in table.values()}, label
    for k in sampled.DECODE_LOOP_KS:  # each decode-loop row runs the K its name says
        label, shape, rule, fn = table[f"draft-kl chain K={k} (decode loop)"]
        assert shape == f"chain K={k}" and fn.__defaults__ == (k,)


def _row(kind, shape, rule, tau, speedup, setting="T = 1"):
    return {"method": f"{kind} {shape} · {rule}", "kind": kind, "shape": shape, "rule": rule, "tau": tau,
            "speedup": speedup, "setting": setting}


def test_headline_reads_the_best_rows_and_the_tau_ratio():
    rows = [_row("EAGLE", "2-2-1-1", "deterministic", 1.5, 0.8), _row("EAGLE", "2-2-1-1", "with", 2.7, 1.9),
            _row("EAGLE", "2-2-1-1", "without", 3.0, 1.7), _row("EAGLE-3", "chain K=4", "deterministic", 1.2, 0.9),
            _row("EAGLE-3", "chain K=4", "sampled", 2.4, 1.3), _row("draft-kl", "chain K=3", "sampled", 2.0, 1.6),
            _row("EAGLE", "2-2-1-1", "with", 9.0, 9.0, setting="T = 0.7"),  # another setting: not read
            {"method": "plain", "kind": "plain", "shape": "", "rule": "", "tau": 1.0, "speedup": 1.0,
             "setting": "T = 1"}]
    head = sampled.headline(rows)
    assert head["best_eagle_t1"] == {"method": "EAGLE 2-2-1-1 · with", "speedup": 1.9}
    assert head["best_draft_chain_t1"]["speedup"] == 1.6
    assert head["sampled_over_deterministic_tau_t1"] == {"EAGLE 2-2-1-1": 2.0, "EAGLE-3 chain K=4": 2.0}


def test_sampled_rules_in_the_table_are_what_their_names_say():
    table = sampled.methods(("eagle",))
    fn = table["EAGLE 2-2-1-1 · without"][3]
    rule = fn.__closure__ and [c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, SampledRule)]
    assert rule == [SampledRule((2, 2, 1, 1), replacement=False)]


def test_calibration_of_a_perfect_and_a_biased_draft():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(400, 8)) * 2
    same = calibration.measure(logits, logits)
    assert all(a == pytest.approx(1.0) for a in same["alpha"].values()) and same["calibration_error"] < 1e-12
    over = calibration.measure(logits, 3 * logits)  # over-confident: q(top) above p(top)
    assert over["calibration_error"] > 0.1 and over["alpha"]["1"] < 1
    assert all(b["mean_p"] <= b["mean_q"] + 1e-12 for b in over["reliability"])
    assert sum(b["count"] for b in over["reliability"]) == 400
    assert same["overconfidence"] == pytest.approx(0.0, abs=1e-12) and over["overconfidence"] > 0.1
    under = calibration.measure(logits, logits / 3)  # under-confident: the sign turns
    assert under["overconfidence"] < -0.1 and under["calibration_error"] == pytest.approx(-under["overconfidence"])


def test_calibration_pairs_its_controls_only_when_asked(tmp_path):
    """The controls (top-1 trained twins) join the report, never notebook 05's head list; a
    missing control checkpoint is skipped, not an error."""
    assert all(name not in calibration.pairs(n_windows=1) for name in calibration.CONTROLS.values())
    with_controls = calibration.pairs(n_windows=1, controls=True)
    assert set(calibration.CONTROLS.values()) <= set(with_controls)
    alpha0 = {name: calibration.measure(*pq)["alpha"]["0"] for name, pq in with_controls.items()}
    # every pair predicts the same next token: a draft read one position off agrees far less than its sibling
    assert abs(alpha0[calibration.CONTROLS["draft-ce"]] - alpha0["draft-kl"]) < 0.1
    assert abs(alpha0[calibration.CONTROLS["eagle-top1"]] - alpha0["EAGLE"]) < 0.1
    p, q = with_controls[calibration.CONTROLS["eagle-top1"]]
    assert p.shape == q.shape and not np.array_equal(q, with_controls["EAGLE"][1])
    for f in CHECKPOINTS.iterdir():  # the shipped set without the EAGLE control
        if not f.name.startswith("eagle-top1"):
            (tmp_path / f.name).symlink_to(f)
    without = calibration.pairs(tmp_path, n_windows=1, controls=True)
    assert calibration.CONTROLS["eagle-top1"] not in without and calibration.CONTROLS["draft-ce"] in without


def test_the_skill_gate_turns_off_a_kind_under_its_threshold():
    from lessonlib.course.skill import kinds_gate

    def rec(method, median):
        return {"source": "sampled", "method": method, "speedup": {"median": median, "q25": median, "q75": median},
                "tau": {"median": 2.0, "q25": 2.0, "q75": 2.0}, "prompts": 5}

    rows = [rec("EAGLE-3 2-2-1-1 · with (T = 1)", 1.9), rec("EAGLE-3 chain K=4 · sampled (T = 1)", 1.4),
            rec("EAGLE 2-2-1-1 · with (T = 1)", 1.6), rec("Medusa 2-1-1 · with (T = 1)", 1.05),
            rec("Medusa 2-1-1 · with (T = 0.7)", 1.5), rec("Medusa 2-1-1 · with (T = 1, top-p 0.95)", 1.3)]
    g = kinds_gate.gate(rows)
    assert g["EAGLE-3"] == {"method": "EAGLE-3 2-2-1-1 · with (T = 1)", "speedup": 1.9, "on": True}
    assert g["EAGLE"]["on"] and not g["Medusa"]["on"] and g["Medusa"]["speedup"] == 1.05  # T = 0.7, top-p not read
    assert set(g) == {"EAGLE-3", "EAGLE", "Medusa"}
    text = "\n".join(kinds_gate.lines(rows))
    assert "**off**" in text and text.count("speculate") == 2
    assert "none recorded yet" in "\n".join(kinds_gate.lines([]))
