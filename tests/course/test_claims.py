"""Claims that check themselves (lessonlib.course.claims): a claim that must fail does, a
comparison word is never printed as holding while the intervals overlap, bad input is refused."""
import itertools

import numpy as np
import pytest

from lessonlib.course import claims
from lessonlib.course.claims import Interval, claim, highest, order
from lessonlib.decoding import measures


def test_a_claim_that_holds_prints_this_runs_numbers_and_says_so(capsys):
    c = claim("draft-kl's α ({kl:.3f}) is above draft-ce's ({ce:.3f})", 0.577 > 0.551, kl=0.577, ce=0.551)
    assert capsys.readouterr().out == "draft-kl's α (0.577) is above draft-ce's (0.551) — holds here\n"
    assert c and c.holds and c.values == {"kl": 0.577, "ce": 0.551}
    assert c.sentence == "draft-kl's α ({kl:.3f}) is above draft-ce's ({ce:.3f})"  # one source string


def test_a_claim_that_must_fail_does_and_prints_what_was_measured(capsys):
    kl, ce = 0.531, 0.551
    c = claim("draft-kl's α ({kl:.3f}) is above draft-ce's ({ce:.3f})", kl > ce, kl=kl, ce=ce)
    out = capsys.readouterr().out
    assert not c and not c.holds
    assert "holds here" not in out and "does not hold here: measured kl = 0.531, ce = 0.551" in out
    assert str(c) + "\n" == out


def test_a_failing_claim_lists_the_measured_numbers_not_the_labels():
    c = claim("{name} at T = {t:g}: speedup {s:.2f} above 1", False, show=False, name="draft-kl", t=0.0, s=0.91)
    assert c.text.endswith("does not hold here: measured t = 0, s = 0.91"), c.text
    only_labels = claim("{name} is {kind}", False, show=False, name="a", kind="b")
    assert only_labels.text.endswith("measured name = a, kind = b")


def test_show_false_builds_the_line_without_printing(capsys):
    c = claim("{n} of {total} agree", True, show=False, n=30, total=30)
    assert capsys.readouterr().out == "" and c.text == "30 of 30 agree — holds here"


def test_numpy_bools_are_conditions():
    a = np.array([0.2, 0.3])
    assert claim("all below {x}", bool((a < 0.5).all()), show=False, x=0.5)
    assert not claim("all below {x}", np.all(a < 0.25), show=False, x=0.25)


def test_interval_order_is_strict_over_the_whole_interval():
    a, b = Interval(1.6, 1.5, 1.7), Interval(1.3, 1.2, 1.4)
    assert a > b and b < a and not (a < b) and not (b > a)
    touching = Interval(1.45, 1.4, 1.5)  # shares the point 1.4 with b
    assert not touching > b and not b < touching and touching.overlaps(b)
    assert order(a, b) == "above" and order(b, a) == "below" and order(touching, b) == "overlaps"
    assert Interval(1.2, 1.05, 1.3) > 1.0 and not Interval(1.2, 0.95, 1.3) > 1.0 and Interval(0.8, 0.7, 0.9) < 1.0


def test_overlapping_intervals_never_print_a_comparison_word_as_holding():
    """Every pair of overlapping intervals on a grid, both ways round: the 'faster' claim fails."""
    ends = [1.0, 1.2, 1.4, 1.6]
    intervals = [Interval((lo + hi) / 2, lo, hi, "×") for lo, hi in itertools.combinations(ends, 2)]
    checked = 0
    for a, b in itertools.permutations(intervals, 2):
        if not a.overlaps(b):
            continue
        for sentence, holds in (("A ({a}) is faster than B ({b})", a > b), ("A ({a}) is slower than B ({b})", a < b)):
            c = claim(sentence, holds, show=False, a=a, b=b)
            assert not c and "holds here" not in c.text.replace("does not hold here", ""), c.text
            checked += 1
        assert order(a, b) == "overlaps"
    assert checked >= 40  # the grid really has overlapping pairs


def test_interval_from_a_measured_summary_and_its_format():
    s = measures.summary([1.2, 1.5, 1.6, 1.7, 2.0])
    iv = Interval.of(s, "×")
    assert (iv.median, iv.low, iv.high) == (s["median"], s["q25"], s["q75"])
    assert f"{iv:.2f}" == measures.fmt_spread(s, 2, "×", count=False) == "1.60× [1.50, 1.70]"
    assert claim("speedup {s:.2f}", iv > 1.0, show=False, s=iv).text == "speedup 1.60× [1.50, 1.70] — holds here"


@pytest.mark.parametrize("sentence, holds, values, word", [
    ("", True, {}, "sentence"),
    (None, True, {}, "sentence"),
    ("alpha {a}", True, {}, "values does not give"),  # a placeholder with no value
    ("alpha {0}", True, {"a": 1}, "plain names"),  # positional placeholder
    ("alpha {a.real}", True, {"a": 1}, "plain names"),
    ("alpha {a!r}", True, {"a": 1}, "plain names"),
    ("alpha {a", True, {"a": 1}, "template"),
    ("alpha {a}", 1, {"a": 1}, "holds must be a bool"),  # a number is not a condition
    ("alpha {a}", "yes", {"a": 1}, "holds must be a bool"),
    ("alpha {a}", None, {"a": 1}, "holds must be a bool"),
    ("alpha {a}", np.array([True, False]), {"a": 1}, "holds must be a bool"),
    ("alpha {a}", True, {"a": float("nan")}, "value a must be finite"),
])
def test_bad_claims_are_refused(sentence, holds, values, word):
    with pytest.raises(ValueError, match=word):
        claim(sentence, holds, show=False, **values)


@pytest.mark.parametrize("args, word", [
    ((1.0, 1.2, 1.4), "low <= median <= high"),
    ((1.0, float("nan"), 1.4), "low must be a finite"),
    ((1.0, 0.9, float("inf")), "high must be a finite"),
    (("1", 0.9, 1.1), "median must be a finite"),
    ((True, 0.0, 1.0), "median must be a finite"),
])
def test_bad_intervals_are_refused(args, word):
    with pytest.raises(ValueError, match=word):
        Interval(*args)


def test_bad_comparisons_are_refused():
    a = Interval(1.0, 0.9, 1.1)
    with pytest.raises(ValueError, match="summary must be a mapping"):
        Interval.of({"median": 1.0})
    with pytest.raises(ValueError, match="compares with an Interval or a finite number"):
        a > "1"  # noqa: B015
    with pytest.raises(ValueError, match="finite number"):
        a < float("nan")  # noqa: B015
    with pytest.raises(TypeError, match="not >= or <="):
        a >= a  # noqa: B015
    with pytest.raises(ValueError, match="two Intervals"):
        order(a, 1.0)


def test_the_printed_words_are_the_modules():
    assert claims.HOLDS == "holds here" and claims.FAILS == "does not hold here"


def test_a_failing_claim_without_values_prints_the_verdict_alone():
    """Nothing measured to list: no dangling "measured" (the Persian build matches the verdict as a template)."""
    c = claim("the best speedup stays under 1/(1 − α)", False, show=False)
    assert c.text == "the best speedup stays under 1/(1 − α) — does not hold here"
    assert claim("x is {x}", False, show=False, x=2).text == "x is 2 — does not hold here: measured x = 2"


# ----------------------------------------------------------------------------- the sweep across spreads

def test_two_intervals_apart_survive_every_end_and_print_no_warning():
    fast, slow = Interval(1.5, 1.45, 1.55), Interval(1.0, 0.95, 1.05)
    c = claim("{a} lies above {b}", lambda a, b, **_: a > b, show=False, a=fast, b=slow)
    assert c.holds and c.flips == () and "fragile" not in c.text


def test_a_median_against_a_threshold_inside_its_spread_is_fragile():
    # the median passes 1.1, but the quantity could as well sit at the low end of its spread, which does not
    speed = Interval(1.12, 1.02, 1.30)
    c = claim("the speedup {s} passes 1.1", lambda s, **_: s.median > 1.1, show=False, s=speed)
    assert c.holds and c.flips == ("s at its low end",)
    assert c.text.endswith("(fragile: the verdict flips within the measured spread, at s at its low end)")
    # the same claim on a tight interval is not (negative control for the one above)
    tight = Interval(1.12, 1.11, 1.13)
    assert claim("{s}", lambda s, **_: s.median > 1.1, show=False, s=tight).flips == ()


def test_medians_of_overlapping_intervals_flip_and_a_claim_failing_on_overlap_too():
    a, b = Interval(1.20, 1.10, 1.30), Interval(1.05, 1.00, 1.15)  # they overlap: 1.10 to 1.15
    assert claim("{a} above {b}", lambda a, b, **_: a > b, show=False, a=Interval(1.3, 1.2, 1.4), b=b).flips == ()
    c = claim("{a}'s median above {b}'s", lambda a, b, **_: a.median > b.median, show=False, a=a, b=b)
    assert c.holds and c.flips == ("a at its low end, b at its high end",)  # only the two ends together
    # a claim that fails because the intervals overlap would hold at some ends: fragile as well
    d = claim("{a} above {b}", lambda a, b, **_: a > b, show=False, a=a, b=b)
    assert not d.holds and set(d.flips) == {"a at its high end", "b at its low end"}


def test_the_sweep_keeps_labels_and_plain_numbers_fixed_and_refuses_a_bool():
    seen = []

    def holds(s, name, k, **_):
        seen.append((name, k))
        return s > 1.0
    claims.sweep(holds, {"s": Interval(1.2, 1.1, 1.3), "name": "EAGLE", "k": 3})
    assert set(seen) == {("EAGLE", 3)} and len(seen) == 1 + 2  # the measured values, then each shift
    with pytest.raises(ValueError, match="holds must be a function"):
        claims.sweep(True, {})


def test_beyond_the_limit_intervals_are_swept_one_and_two_at_a_time():
    values = {f"v{i}": Interval(1.0, 0.9, 1.1) for i in range(claims.SWEEP_LIMIT + 1)}
    calls = []
    claims.sweep(lambda **v: calls.append(1) or True, values)
    n = len(values)
    assert len(calls) == 1 + 2 * n + 4 * n * (n - 1) // 2  # not 3 ** 7


def test_intervals_inside_a_dict_or_list_are_swept_and_the_containers_left_alone():
    speeds = {"chain": Interval(1.30, 1.20, 1.40), "tree": Interval(1.02, 0.98, 1.10),
              "lookup": Interval(2.1, 2.0, 2.2)}
    before = dict(speeds)
    c = claim("every median passes 1", lambda speeds, **_: all(s.median > 1 for s in speeds.values()), show=False,
              speeds=speeds)
    assert c.holds and c.flips == ("speeds[tree] at its low end",) and speeds == before
    # a list, and a pair that flips only when both move towards each other
    ranked = [Interval(1.30, 1.15, 1.40), Interval(1.10, 1.05, 1.20)]
    c = claim("first median above second", lambda r, **_: r[0].median > r[1].median, show=False, r=ranked)
    assert c.holds and c.flips == ("r[0] at its low end, r[1] at its high end",)
    assert isinstance(ranked, list) and ranked[0].median == 1.30


def test_highest_picks_by_median_and_a_swept_claim_re_picks_it():
    speeds = {"chain": Interval(1.20, 1.00, 1.30), "tree": Interval(1.15, 1.10, 1.40)}
    assert highest(speeds) == "chain"
    c = claim("the chain is fastest", lambda s, **_: highest(s) == "chain", show=False, s=speeds)
    assert c.holds and c.flips  # the tree's median shifted to its high end (1.40) passes the chain's
    with pytest.raises(ValueError, match="intervals must be"):
        claims.highest({})
