"""The gallery of real bugs (issue 32): each bug is a negative control the tests must catch, the
correct round and the sample-match rule must pass, and the reference detector's table says so."""
import inspect

import numpy as np
import pytest
from scipy import stats as scipy_stats

from lessonlib.core import chain, sampling, stats
from lessonlib.course import gallery
from lessonlib.course import gallery_detect as gd

BUGS = [s for s in gallery.GALLERY if s.bug]
EXACT = [s for s in gallery.GALLERY if not s.bug]
GREEDY_BUGS = ["rejection one step late", "first draft unverified", "greedy draft, softmax rule",
               "verify logits in another precision", "batched rows overwrite"]
DENSE = gallery.CASES[2]


@pytest.fixture(scope="module")
def reference_table():
    return gd.table(seed=0)


def test_the_reference_detector_flags_every_bug_and_passes_both_exact_rules(reference_table):
    assert [r["sampler"] for r in reference_table] == [s.name for s in gallery.GALLERY]
    for row in reference_table:
        assert row["detected"] == row["bug"], row
    tests = {r["sampler"]: r["test"] for r in reference_table}
    assert tests["q from before top-k"].startswith("exact law")
    assert tests["residual in place"].startswith("inputs unchanged")
    assert tests["draft samples in bf16"].startswith("chi-square")
    assert all(tests[name].startswith("greedy equality") for name in GREEDY_BUGS)
    assert "✗" not in gd.format_table(reference_table)


def test_every_entry_cites_its_thread_and_keeps_the_interface():
    signature = ["target_logits", "draft_logits", "temperature", "top_k", "rng"]
    for s in gallery.GALLERY:
        assert s.source.startswith(("https://github.com/", "lessonlib.")) and s.symptom and "\n" not in s.symptom
        assert list(inspect.signature(s.step, follow_wrapped=False).parameters) == signature, s.name
    assert len(BUGS) == 9 and [s.name for s in EXACT] == ["correct round", "accept only on a sample match"]


def test_dists_is_softmax_then_top_k():
    rows = DENSE.target_logits[0]
    want = sampling.top_k_filter(sampling.softmax(rows, 0.7), 4)
    assert np.allclose(gallery.dists(rows, 0.7, 4), want, atol=1e-15)
    assert np.array_equal(gallery.dists(rows, 0.0), np.eye(6)[rows.argmax(-1)])


def test_bf16_rounds_to_eight_significant_bits():
    assert gallery.bf16(1 + 2 ** -9)[()] == 1.0 and gallery.bf16(1 + 2 ** -7)[()] == 1 + 2 ** -7
    assert gallery.bf16(38.1)[()] == 38.0 and gallery.bf16(38.2)[()] == 38.25


@pytest.mark.parametrize("name", GREEDY_BUGS)
def test_each_greedy_bug_leaves_the_greedy_baseline_where_the_correct_round_does_not(name):
    rng = np.random.default_rng(5)
    for case in gallery.CASES[:2]:
        assert gd.greedy_ok(case, gd.run(gallery.GALLERY[0], case, rng)[0])
    assert not all(gd.greedy_ok(c, gd.run(gallery.BY_NAME[name], c, rng)[0])
                   for _ in range(gd.GREEDY_REPEATS) for c in gallery.CASES[:2])


def test_the_in_place_bug_changes_its_inputs_and_only_on_the_ngram_path():
    rng = np.random.default_rng(6)
    buggy = gallery.BY_NAME["residual in place"]
    assert gd.run(buggy, gallery.CASES[3], rng)[1] or gd.run(buggy, gallery.CASES[3], rng)[1]
    assert not gd.run(buggy, DENSE, rng)[1]
    assert not any(gd.run(gallery.GALLERY[0], c, rng)[1] for c in gallery.CASES)


def first_token_laws():
    """Exact first-token laws (enumeration) of the correct round and the three sampled bugs on DENSE."""
    p0, q0, d0 = DENSE.p[0, 0], DENSE.q[0, 0], DENSE.draft_logits[0, 0]
    return {"correct round": gallery.first_token_law(q0, q0, p0),
            "q from before top-k": gallery.first_token_law(q0, gallery.dists(d0, 0.7), p0),
            "draft ignores temperature": gallery.first_token_law(np.eye(6)[d0.argmax()], q0, p0),
            "draft samples in bf16": gallery.first_token_law(gallery.dists(gallery.bf16(d0), 0.7, 4), q0, p0)}


def test_enumeration_gives_each_sampled_bug_a_bias_the_detectors_rounds_catch():
    p0 = DENSE.p[0, 0]
    laws = first_token_laws()
    assert np.abs(laws["correct round"] - p0).max() < 1e-15
    level = gd.LEVEL / (2 * len(gd.STAGES) * 2)  # the detector's level per test (2 cases, 2 tests)
    for name in ["q from before top-k", "draft ignores temperature", "draft samples in bf16"]:
        assert stats.tv_distance(laws[name], p0) > 0.02, name
        assert power(laws[name], p0, gd.STAGES[0], level) > 0.999, name  # the detector's first stage
    assert power(laws["draft samples in bf16"], p0, 200, level) < 0.5  # why "chi-square on 200 rounds" is wrong


def power(law, p, n, level):
    """Power of the chi-square test of n samples from ``law`` against p (noncentral chi-square)."""
    keep = p > 0
    df = keep.sum() - 1
    noncentrality = n * ((law[keep] - p[keep]) ** 2 / p[keep]).sum()
    return scipy_stats.ncx2.sf(scipy_stats.chi2.ppf(1 - level, df), df, noncentrality)


@pytest.mark.parametrize("name", ["correct round", "q from before top-k", "draft ignores temperature",
                                  "draft samples in bf16"])
def test_each_sampler_follows_its_enumerated_law(name):
    rng = np.random.default_rng(7)
    first = [gd.run(gallery.BY_NAME[name], DENSE, rng)[0][0][0] for _ in range(3000)]
    law = first_token_laws()[name]
    assert stats.chi_square(np.bincount(first, minlength=6), law)[1] > 1e-3
    if gallery.BY_NAME[name].law is not None:
        assert np.allclose(gallery.BY_NAME[name].law(DENSE), law, atol=1e-12)


def test_negative_control_the_chi_square_stage_rejects_a_bug_and_passes_the_correct_round():
    rng = np.random.default_rng(8)
    assert gd.detect(gallery.BY_NAME["draft ignores temperature"], rng, cases=[DENSE], stages=(1000,)).detected
    assert not gd.detect(gallery.GALLERY[0], rng, cases=[DENSE], stages=(1000,)).detected


def test_the_sample_match_rule_is_exact_but_accepts_less():
    result = gd.two_sided(DENSE, 3000, seed=9)
    exact, match = result["correct round"], result["accept only on a sample match"]
    p0, q0 = DENSE.p[0, 0], DENSE.q[0, 0]
    assert match["alpha exact (position 0)"] == pytest.approx(p0 @ q0)
    assert match["alpha exact (position 0)"] < exact["alpha exact (position 0)"] - 0.2
    assert match["alpha measured (all positions)"] < exact["alpha measured (all positions)"] - 0.1
    assert match["TV(exact law, p)"] < 1e-15 and exact["TV(exact law, p)"] < 1e-15
    assert min(match["chi-square p-value"], exact["chi-square p-value"]) > 1e-3
    law = chain.exact_output_distribution(DENSE.p[0], DENSE.q[0])[0]
    assert np.allclose(gallery.BY_NAME["accept only on a sample match"].law(DENSE), law, atol=1e-15)


def test_the_sample_match_rule_fails_the_tokens_per_round_law_which_is_why_it_is_not_tested():
    rng = np.random.default_rng(10)
    lengths = [len(gd.run(gallery.BY_NAME["accept only on a sample match"], DENSE, rng)[0][0]) for _ in range(2000)]
    counts = np.bincount(np.array(lengths) - 1, minlength=3)
    assert stats.chi_square(counts, gd.expected_laws(DENSE)["tokens per round"])[1] < 1e-6


def test_the_gallery_cases_are_read_only():
    for case in gallery.CASES:
        with pytest.raises(ValueError):
            case.target_logits[0, 0, 0] = 0.0
