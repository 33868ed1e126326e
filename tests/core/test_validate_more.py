"""The validators added when the inline checks of core and the GPT moved into
``core.validate``: each rejects bad input naming the argument, and passes good input through
(as the value the caller goes on to use)."""
import re

import numpy as np
import pytest
import torch

from lessonlib.core import sampling, stats, theory, toy, tree, validate

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("interval,good,bad", [
    ("(0, 1]", [1e-9, 0.5, 1, np.float64(1.0)], [0, 0.0, 1.0000001, np.nan, -1, True, "0.5", None]),
    ("(0, 1)", [0.001, 0.999], [0.0, 1.0, np.nan]),
    ("[0, 1]", [0, 0.0, 1, 0.3], [-1e-12, 1.5, np.inf, np.nan, False]),
])
def test_check_interval(interval, good, bad):
    for x in good:
        assert validate.check_interval(x, "x", interval) == float(x)
        assert type(validate.check_interval(x, "x", interval)) is float
    for x in bad:
        with pytest.raises(ValueError, match=f"^x must lie in {re.escape(interval)}, got "):
            validate.check_interval(x, "x", interval)


def test_check_positive_number_and_check_positive():
    assert validate.check_positive_number(2, "r") == 2.0
    for bad in (0, -1.0, np.nan, np.inf, True, "1", None, [1.0]):
        with pytest.raises(ValueError, match="^r must be a finite number > 0"):
            validate.check_positive_number(bad, "r")
    with pytest.raises(ValueError, match=r"^r must be a cost > 0, got 0"):
        validate.check_positive_number(0, "r", "a cost > 0")
    np.testing.assert_array_equal(validate.check_positive([1, 2.5], "s"), [1.0, 2.5])
    for bad in (0.0, [1.0, -1.0], [np.nan], np.inf):
        with pytest.raises(ValueError, match="^s must be a finite number > 0"):
            validate.check_positive(bad, "s")


def test_check_same_shape():
    validate.check_same_shape(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"^p and q must have the same shape, got \(2, 3\) and \(3,\)"):
        validate.check_same_shape(np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError, match="^a and b must have the same shape"):
        validate.check_same_shape(np.zeros(2), np.zeros(3), "a", "b")


def test_check_token_sequence():
    t = validate.check_token_sequence([0, 2.0, 3], 4)
    assert t.dtype == np.int64 and t.tolist() == [0, 2, 3]
    for bad, message in (([], "non-empty 1-D"), ([[0, 1]], "non-empty 1-D"), ([4], r"in \[0, 4\)"),
                         ([-1], r"in \[0, 4\)"), ([1.5], "integer token ids")):
        with pytest.raises(ValueError, match=f"^ids must be .*{message}"):
            validate.check_token_sequence(bad, 4, "ids")


def test_check_token_tensor():
    validate.check_token_tensor(torch.tensor([[0, 15]]), 16, "idx")
    validate.check_token_tensor(torch.zeros(1, 0, dtype=torch.float32), 16, "idx")  # nothing to look up
    for dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
        validate.check_token_tensor(torch.tensor([1, 2], dtype=dtype), 16)
    with pytest.raises(ValueError, match=r"^idx must be integer token ids, got dtype torch.float32"):
        validate.check_token_tensor(torch.tensor([1.0]), 16, "idx")
    with pytest.raises(ValueError, match=r"^idx must be integer token ids, got dtype torch.bool"):
        validate.check_token_tensor(torch.tensor([True]), 16, "idx")
    with pytest.raises(ValueError, match=r"^idx must be token ids in \[0, 16\) \(the vocabulary size\), got 16"):
        validate.check_token_tensor(torch.tensor([3, 16]), 16, "idx")
    with pytest.raises(ValueError, match=r"got -2$"):
        validate.check_token_tensor(torch.tensor([-2, 99]), 16, "idx")  # the low end is reported first


# ----------------------------------------------------------------------------- the call sites

CALLS = {
    "top_k_filter k = 0": (lambda: sampling.top_k_filter([0.5, 0.5], 0), "^k must be an integer >= 1 and <= 2"),
    "top_k_filter k = True": (lambda: sampling.top_k_filter([0.5, 0.5], True), "^k must be an integer"),
    "top_p_filter NaN": (lambda: sampling.top_p_filter([0.5, 0.5], np.nan), r"^top_p must lie in \(0, 1\]"),
    "draft_top_p top_p": (lambda: tree.draft_top_p(None, 1.5, 2), r"^top_p must lie in \(0, 1\]"),
    "draft_top_p depth": (lambda: tree.draft_top_p(None, 0.5, 0), "^depth must be an integer >= 1"),
    "draft_top_p max_children": (lambda: tree.draft_top_p(None, 0.5, 2, 0), "^max_children must be an integer >= 1"),
    "draft_dynamic top_k": (lambda: tree.draft_dynamic(None, 2, 0, 4), "^top_k must be an integer >= 1"),
    "draft_dynamic total": (lambda: tree.draft_dynamic(None, 2, 2, 2.5), "^total must be an integer"),
    "choices_from_branching 0": (lambda: tree.choices_from_branching((3, 0)), "^branching must be an integer >= 1"),
    "choices_from_branching 2.5": (lambda: tree.choices_from_branching((2.5,)), "^branching must be an integer"),
    "choices_from_branching empty": (lambda: tree.choices_from_branching(()), "^branching must be a non-empty"),
    "tree_position_ids 1.5": (lambda: tree.tree_position_ids([-1], 1.5), "^prefix_len must be an integer"),
    "tv_noise_floor n = 2.5": (lambda: stats.tv_noise_floor([0.5, 0.5], 2.5), "^n must be an integer"),
    "tv_null_quantile level = 0": (lambda: stats.tv_null_quantile([0.5, 0.5], 10, RNG, level=0.0),
                                   r"^level must lie in \(0, 1\)"),
    "simulate_tokens_per_verify rng": (lambda: theory.simulate_tokens_per_verify(0.5, 2, 10, 0),
                                       "^rng must be a numpy.random.Generator"),
    "simulate_tokens_per_verify n_rounds": (lambda: theory.simulate_tokens_per_verify(0.5, 2, True, RNG),
                                            "^n_rounds must be an integer"),
    "random_ngram concentration": (lambda: toy.random_ngram(3, 1, RNG, concentration=np.inf),
                                   "^concentration must be a finite number > 0"),
    "mix weight": (lambda: toy.mix(toy.random_ngram(3, 1, RNG), toy.random_ngram(3, 1, RNG), -0.1),
                   r"^weight must lie in \[0, 1\]"),
}


@pytest.mark.parametrize("name", CALLS)
def test_call_sites_use_the_validators(name):
    call, message = CALLS[name]
    with pytest.raises(ValueError, match=message):
        call()


def test_integer_valued_floats_pass_where_counts_are_checked():
    """The validators' rule for counts (2.0 is 2): the values reach the maths as ints."""
    assert sampling.top_k_filter([0.2, 0.5, 0.3], 2.0).tolist() == sampling.top_k_filter([0.2, 0.5, 0.3], 2).tolist()
    assert tree.tree_position_ids([-1, 0], 3.0).tolist() == [3, 4]
    assert stats.tv_noise_floor([0.5, 0.5], 10.0) == stats.tv_noise_floor([0.5, 0.5], 10)
    assert len(theory.simulate_tokens_per_verify(0.5, 2, 7.0, np.random.default_rng(1))) == 7
