"""Issue 54, item 5, second part: range checks in the stats and measures helpers, and named
refusals (ValueError naming the argument) where torch or numpy used to raise their own errors.
Each refusal sits beside a control that the same call with good input passes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lessonlib.core import stats, tree
from lessonlib.decoding import batch, measures, tree_decode
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.models import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=16, block_size=32, n_layer=1, n_head=2, n_embd=16)
P = np.array([0.5, 0.3, 0.2])


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    return GPT(CONFIG).eval(), GPT(CONFIG).eval()


@pytest.mark.parametrize("call,name", [
    (lambda: stats.tv_null_quantile(P, 10, np.random.default_rng(0), 0.9, n_sim=100.5), "n_sim"),
    (lambda: stats.tv_null_quantile(P, 10, np.random.default_rng(0), 0.9, n_sim="100"), "n_sim"),
    (lambda: stats.chi_square(["10", "10", "10"], P), "observed_counts"),
    (lambda: stats.chi_square([True, False, True], P), "observed_counts"),
    (lambda: stats.chi_square([10, 10, 10], P, min_expected=-1), "min_expected"),
    (lambda: stats.chi_square([10, 10, 10], P, min_expected="5"), "min_expected"),
    (lambda: measures.forward_bound(2.0, 2.5, 0.1, 1.0), "k"),
    (lambda: measures.forward_bound(2.0, -1, 0.1, 1.0), "k"),
    (lambda: measures.summary(["1", "2", "3", "4", "5"]), "values"),
    (lambda: measures.summary([True, False, True, True, True]), "values"),
    (lambda: measures.fmt_spread("1.5"), "s must be a summary"),
    (lambda: measures.fmt_spread(measures.summary([1, 2, 3, 4, 5]), digits=-1), "digits"),
])
def test_the_helpers_refuse_counts_and_numbers_of_the_wrong_kind(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_the_helpers_controls():
    rng = np.random.default_rng(0)
    assert 0 < stats.tv_null_quantile(P, 10, rng, 0.9, n_sim=100) < 1
    assert stats.chi_square([10, 10, 10], P, min_expected=5)[1] < 1
    assert measures.forward_bound(2.0, 2, 0.1, 1.0) == pytest.approx(2.0 / 1.2)
    assert measures.fmt_spread(measures.summary([1, 2, 3, 4, 5]), digits=0) == "3 [2, 4], n = 5"


def test_gpt_forward_refuses_a_1d_row_naming_idx(pair):
    target, _ = pair
    assert target(torch.tensor([[1, 2, 3]])).shape == (1, 3, 16)  # control
    for bad in (torch.tensor([1, 2, 3]), [[1, 2, 3]], torch.zeros(1, 1, 3, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"idx must be a \(B, T\) tensor"):
            target(bad)


def test_batched_decoding_refuses_flat_and_generator_prompts_and_a_missing_draft(pair):
    target, draft = pair
    out, _ = batch.batch_speculative_generate(target, draft, [[1, 2, 3], (4, 5)], 2, 3)  # control
    assert [len(o) for o in out] == [3, 3]

    def gen():
        yield [1, 2, 3]

    with pytest.raises(ValueError, match=r"prompts\[0\] must be a list of token ids.*\[\[1, 2, 3\]\] for one"):
        batch.batch_generate(target, [1, 2, 3], 3)
    with pytest.raises(ValueError, match=r"prompts must be a non-empty list.*got generator"):
        batch.batch_generate(target, gen(), 3)
    with pytest.raises(ValueError, match=r"prompts\[0\].*got list_iterator"):
        batch.batch_speculative_generate(target, draft, [iter([1, 2])], 2, 3)
    for k in (1, 2):
        with pytest.raises(ValueError, match=r"draft must be a GPT.*got NoneType"):
            batch.batch_speculative_generate(target, None, [[1, 2, 3]], k, 3)


def test_tree_helpers_refuse_by_name():
    assert tree.tree_from_choices([(0,), (1,), (0, 0)])[0].tolist() == [-1, -1, 0]  # control
    with pytest.raises(ValueError, match="choices' ranks must be an integer"):
        tree.tree_from_choices([(0.5,)])
    with pytest.raises(ValueError, match="choices must be paths of ranks"):
        tree.tree_from_choices([1, 2])
    assert tree.keep_best([-1, 0, -1], [-0.1, -0.3, -0.2], 2).tolist() == [0, 2]  # control
    with pytest.raises(ValueError, match="score must hold one number per node"):
        tree.keep_best([-1, 0], [0.1], 1)
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        tree.keep_best([-1, 0], [0.1, 0.2], -1)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_drafted_token_out_of_the_vocabulary_names_the_tree_not_idx(pair, temperature):
    """A rule whose ids leave the vocabulary (here a chain: the forward without a tree mask)
    is refused naming the drafted tree, for a drafter whose vocabulary was checked."""
    target, draft = pair
    rng = np.random.default_rng(0)

    def rule(tokens):
        return lambda expand: (np.array([-1, 0]), np.array(tokens), np.zeros(2))

    tree_decode.tree_generate(target, ModelDrafter(draft), [1, 2, 3], 3, rule([3, 15]), temperature, rng)  # control
    with pytest.raises(ValueError, match=r"tokens \(the drafted tree\) must be token ids in \[0, 16\)"):
        tree_decode.tree_generate(target, ModelDrafter(draft), [1, 2, 3], 3, rule([3, 16]), temperature, rng)
