"""The checks, second pass: any numeric dtype is read and judged at the tolerance the ✓ line
prints, a wrong kind of answer is a ✗ (never a traceback), a function's randomness must be its rng's,
and the instructor notes' catalogue is generated. Each property has a negative control."""
import numpy as np
import pytest
import torch

from lessonlib.core import chain, sampling, theory, tree
from lessonlib.course import checks, notes
from lessonlib.course.checks import framework, numeric, wrong
from lessonlib.course.checks.cases import seeded
from lessonlib.decoding import fallback
from tests.course.test_check_robustness import fails, passes  # the one pair of helpers

# ----------------------------------------------------------------------------- dtypes

def tokens_as(dtype):
    def expected_tokens_per_verify(alpha, k):
        return torch.as_tensor(theory.expected_tokens_per_verify(alpha, k), dtype=torch.float64).to(dtype)
    return expected_tokens_per_verify


@pytest.mark.parametrize("dtype, shown", [(torch.bfloat16, "0.01 relative (the precision of your bfloat16 values)"),
                                          (torch.float16, "0.002 relative (the precision of your float16 values)"),
                                          (torch.float32, "1e-05 relative (the precision of your float32 values)"),
                                          (torch.float64, "to 1e-06 relative,")])
def test_a_tensor_answer_of_any_precision_passes_and_the_tick_prints_the_tolerance_applied(dtype, shown, capsys):
    out = passes("2a", tokens_as(dtype), capsys)  # the crash of issue 48: a bfloat16 tensor
    assert shown in out


def test_a_low_precision_answer_is_still_judged_at_its_precision():
    def one_percent_off(alpha, k):  # within bfloat16's rounding, not float16's 2e-3
        return np.float16(theory.expected_tokens_per_verify(alpha, k) * 1.01)
    fails("2a", one_percent_off, "wrong value")
    fails("1a", wrong.ex1.residual_bfloat16_unnormalised, "max(p - q, 0) / sum(max(p - q, 0))")


@pytest.mark.parametrize("part, fn", [
    ("1a", lambda p, q: list(torch.tensor(sampling.residual(p, q), dtype=torch.float32))),  # a list of tensors
    ("1a", lambda p, q: torch.tensor(sampling.residual(p, q), dtype=torch.bfloat16)),
    ("2b", lambda a, k, c: np.float32(theory.wall_time_per_token(a, k, c))),
    ("5c", lambda trace, b: [float(x) for x in fallback.throughput_by_phase(trace, b)]),
    ("4a", lambda parents: torch.tensor(tree.tree_attention_mask(parents))),
    ("2d", lambda a, c, k_max=32: torch.tensor(theory.optimal_k(a, c, k_max))),
], ids=["1a-list-of-float32-tensors", "1a-bfloat16", "2b-numpy-float32", "5c-list", "4a-bool-tensor",
        "2d-0d-int-tensor"])
def test_answers_in_other_types_pass(part, fn, capsys):
    passes(part, fn, capsys)


@pytest.mark.parametrize("part, fn, expected", [
    ("2a", lambda a, k: "3.36", "expected a single number, got str"),
    ("2a", lambda a, k: {"E": 3.36}, "expected a single number"),
    ("1a", lambda p, q: "residual", "expected numbers, got str"),
    ("1a", lambda p, q: [[0.5], [0.25, 0.25]], "a ragged list"),
    ("1a", lambda p, q: torch.zeros(len(p), dtype=torch.complex64), "complex"),
    ("5c", lambda trace, b: {"phase": 1.0}, "expected numbers, got dict"),
    ("1c", lambda p_rows, draft: [float("nan")], "expected a list of token ids"),
    ("4c", lambda parents, tokens, argmax: (["a"], [0]), "expected path as a list of integers"),
    ("4a", lambda parents: "mask", "expected numbers, got str"),
])
def test_an_answer_of_the_wrong_kind_is_a_cross_naming_what_was_expected(part, fn, expected):
    fails(part, fn, expected)


def test_the_tolerance_record_is_the_students_not_the_controls():
    numeric.reset()
    assert numeric.phrase("1e-06 relative") == "1e-06 relative"
    framework.expect_close("case", torch.tensor([1.0], dtype=torch.float16), [1.0])
    assert numeric.phrase("1e-06 relative") == "0.002 relative (the precision of your float16 values)"
    with pytest.raises(RuntimeError):  # a control that is not caught breaks the check; the record is kept either way
        framework.rejects(lambda fn: [], "a control", None)
    framework.rejects(lambda fn: framework.expect_close("c", np.float32(2.0), 1.0), "a control", None)
    assert numeric.APPLIED["dtype"] == "float16"


# ----------------------------------------------------------------------------- whose randomness

def test_the_seed_check_has_teeth():
    def uses_rng(rng):
        return [float(rng.random()) for _ in range(3)]

    assert "same seed reproduces" in seeded("case", uses_rng)
    with pytest.raises(checks.CheckFailed, match="same seed gave different"):
        seeded("case", lambda rng: [float(np.random.default_rng().random())])
    with pytest.raises(checks.CheckFailed, match="different seeds gave the same"):
        seeded("case", lambda rng: [float(np.random.default_rng(0).random())])



# ----------------------------------------------------------------------------- the detector check (1d)

def test_the_unseen_samplers_are_exact_or_buggy_as_labelled():
    """The reference detector's verdict on each unseen sampler agrees with its label on several seeds."""
    from lessonlib.course import gallery, gallery_detect

    for step, bug, _kind in checks.ex1_detect.UNSEEN:
        sampler = gallery.Sampler("unseen", step, "", "", bug=bug)
        verdicts = {gallery_detect.detect(sampler, np.random.default_rng(seed)).detected for seed in (7, 8)}
        assert verdicts == {bug}


def test_the_exact_unseen_sampler_draws_the_round_law_of_the_exact_rule():
    from lessonlib.core import stats
    from lessonlib.course import gallery

    case = gallery.CASES[2]
    rng = np.random.default_rng(9)
    rounds = [checks.ex1_detect._enumerated(case.target_logits, case.draft_logits, case.temperature, case.top_k,
                                            rng)[0] for _ in range(4000)]
    first = np.bincount([r[0] for r in rounds], minlength=6)
    assert stats.chi_square(first, chain.exact_output_distribution(case.p[0], case.q[0])[0])[1] > 1e-3
    lengths = np.bincount([len(r) - 1 for r in rounds], minlength=3)
    accepted, _stop = chain.exact_round_distribution(case.p[0], case.q[0])
    alpha = accepted.sum(-1)
    assert stats.chi_square(lengths, [1 - alpha[0], alpha[0] * (1 - alpha[1]), alpha[0] * alpha[1]])[1] > 1e-3


# ----------------------------------------------------------------------------- the instructor notes

def test_the_catalogue_in_the_notes_is_regenerated_not_typed():
    stale = "before\n<!-- BEGIN CATALOGUE -->\n**Score: 3 of 3 wrong implementations**\n<!-- END CATALOGUE -->\nafter"
    fresh = notes.catalogue(stale)
    assert fresh.startswith("before\n<!-- BEGIN CATALOGUE -->\n" + wrong.score_line()) and fresh.endswith("after")
    assert notes.catalogue(fresh) == fresh
    with pytest.raises(ValueError, match="catalogue once"):
        notes.catalogue("no markers here")


def test_a_zero_dimensional_answer_prints_as_one_number():
    """A 0-d array is shown like the number it holds ("2", not numpy's "2.", whose trailing dot a
    right-to-left line moves to the other side of the value)."""
    from lessonlib.course.checks.framework import _fmt

    assert _fmt(np.array(2.0)) == "2" and _fmt(np.array(3)) == "3" and _fmt(np.array(1.88889)) == "1.88889"
    assert _fmt(np.array([1.0, 2.0])) == "[1. 2.]"  # an array keeps numpy's layout
