"""The one definition of every measured number (decoding.measures); the one clock is tested in
test_timing.py, the CPU thread policy in tests/test_threads.py."""
import dataclasses

import numpy as np
import pytest

from lessonlib.decoding import measures
from lessonlib.decoding.stats import DecodeStats

# one prompt's stats as the loops report them (seconds chosen so every ratio is exact)
PLAIN = DecodeStats("plain", 0.0, 250, rounds=250, emitted=250, seconds=1.0, phase_seconds={"target": 0.996},
                    phase_calls={"target": 249})  # 0.004 s per token and per one-token step
CHAIN = DecodeStats("chain", 0.0, 250, k=3, rounds=100, emitted=250, accepted=150, judged=250, seconds=0.5,
                    phase_seconds={"draft": 0.15, "verify": 0.5}, phase_calls={"draft": 300, "verify": 100})
TREE = DecodeStats("tree", 0.0, 300, rounds=100, emitted=300, seconds=0.75, phase_seconds={"draft": 0.2, "verify": 0.6},
                   phase_calls={"draft": 200, "verify": 100})


def _with(stats, **fields):
    return dataclasses.replace(stats, **fields)


def test_tau_alpha_and_their_bad_input():
    assert measures.tau(10, 4) == 2.5
    assert measures.alpha(3, 4) == 0.75
    assert np.isnan(measures.alpha(0, 0))
    with pytest.raises(ValueError, match="target_forwards"):
        measures.tau(3, 0)
    with pytest.raises(ValueError, match="accepted"):
        measures.alpha(5, 4)


def test_compare_prices_draft_and_verify_in_one_token_target_steps():
    out = measures.compare(CHAIN, PLAIN)
    assert out["c"] == pytest.approx(0.125)  # draft step / plain's one-token step
    assert out["r"] == pytest.approx(1.25)  # verify forward / one-token step
    assert out["speedup"] == pytest.approx(2.0)
    assert out["forward_bound"] == pytest.approx(2.5 / (3 * 0.125 + 1.25))
    # negative control: the old definition (draft step / verify pass) gives a different c
    assert CHAIN.draft_step_seconds / CHAIN.verify_forward_seconds != pytest.approx(out["c"])
    with pytest.raises(ValueError, match="plain"):  # c and r are priced in plain decoding's step
        measures.compare(CHAIN, TREE)


def test_compare_on_a_tree_round_uses_the_whole_draft_of_a_round():
    out = measures.compare(TREE, PLAIN)
    assert "c" not in out
    assert out["draft_cost_per_round"] == pytest.approx(0.5)
    assert out["forward_bound"] == pytest.approx(3.0 / (0.5 + 1.5))


def test_summary_is_median_and_quartiles():
    s = measures.summary([5.0, 1.0, 4.0, 2.0, 3.0])
    assert s == {"median": 3.0, "q25": 2.0, "q75": 4.0, "n": 5}
    assert measures.fmt_spread(s, 1, "×") == "3.0× [2.0, 4.0], n = 5"
    assert measures.fmt_spread(s, 1, "×", count=False) == "3.0× [2.0, 4.0]"
    for bad in ([], [[1.0, 2.0]], [1.0, float("nan")], [1.0] * 4 + [float("nan")], [1.0, 2.0],
                [1.0] * 4 + [float("inf")], ["a"] * 5):
        with pytest.raises(ValueError, match="values"):
            measures.summary(bad)
    with pytest.raises(ValueError, match="level"):
        measures.summary([1.0] * 5, level=0)
    assert measures.summary([2.0, 4.0], min_count=2)["median"] == 3.0  # fewer only when asked for


def test_against_plain_pairs_each_prompt_with_its_own_plain_run():
    slow = _with(PLAIN, seconds=2.0, phase_seconds={"target": 1.992})
    rows = measures.against_plain([CHAIN, CHAIN], [PLAIN, slow])
    assert [r["speedup"] for r in rows] == pytest.approx([2.0, 4.0])
    assert [r["c"] for r in rows] == pytest.approx([0.125, 0.0625])
    assert rows[0]["tau"] == 2.5  # the loop's own stats are kept
    with pytest.raises(ValueError, match="one plain run per method run"):
        measures.against_plain([CHAIN], [PLAIN, PLAIN])


def test_summarise_skips_what_a_method_does_not_measure_and_undefined_alphas():
    rows = measures.against_plain([CHAIN, _with(CHAIN, accepted=0, judged=0)] + [CHAIN] * 3, [PLAIN] * 5)
    spread = measures.summarise(rows)
    assert spread["speedup"]["n"] == 5 and spread["alpha"]["n"] == 4  # the NaN prompt judged nothing
    assert "draft_cost_per_round" not in spread  # a chain has no tree rounds
    assert "c" not in measures.summarise(measures.against_plain([TREE] * 5, [PLAIN] * 5))
    for few in ([], rows[:4]):
        with pytest.raises(ValueError, match="runs must hold at least 5"):
            measures.summarise(few)


def test_summarise_reads_rows_and_the_loops_stats_alike():
    from_stats, from_rows = measures.summarise([PLAIN] * 5), measures.summarise([PLAIN.as_dict()] * 5)
    assert from_stats == from_rows and from_stats["target_forward_seconds"]["median"] == pytest.approx(0.004)
