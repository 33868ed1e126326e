"""The bad input the audit found giving a silent wrong result or an unreadable error: each now
raises ValueError naming the argument and what was expected (the cache's own cases are in
models/test_gpt_kv_cache; the skill's in course/test_skill). Each case also shows the good input next to it
passing where that is not obvious, so a check that rejects everything would fail here."""
import functools
import json

import numpy as np
import pytest
import torch
from loop_support import context_gpt
from scipy import stats as scipy_stats

from lessonlib import models
from lessonlib.core import chain, sampling, stats, theory, tree, validate
from lessonlib.core.batched import simulate_rounds
from lessonlib.decoding import decode, fallback, reference
from lessonlib.decoding.drafters import ModelDrafter, RuleDrafter
from lessonlib.decoding.round import Sampling
from lessonlib.decoding.tree_decode import tree_generate

RNG = np.random.default_rng(0)
P2 = np.array([[0.5, 0.5], [0.3, 0.7]])
Q1 = np.array([[0.6, 0.4]])


def _gpt(vocab=16):
    return context_gpt(0, vocab=vocab, block_size=32)


# ----------------------------------------------------------------------------- core

CORE = {
    "verify_tree token -1": (lambda: tree.verify_tree([-1], [-1], np.full((2, 3), 1 / 3), RNG),
                             "tokens must be token ids in \\[0, 3\\)"),
    "verify_tree token = V": (lambda: tree.verify_tree([-1], [3], np.full((2, 3), 1 / 3), RNG),
                              "tokens must be token ids"),
    "tree law token -1": (lambda: tree.tree_output_distribution([-1, 0], [1, -1], np.full((3, 3), 1 / 3)),
                          "tokens must be"),
    "greedy tree token -1": (lambda: tree.verify_tree_greedy([-1], [-1], [0, 1]),
                             "tokens must be integer token ids >= 0"),
    "tree float tokens": (lambda: tree.verify_tree([-1], [0.5], np.full((2, 3), 1 / 3), RNG), "tokens must be"),
    "verify_tree rng None": (lambda: tree.verify_tree([-1], [0], np.full((2, 3), 1 / 3), None),
                             "rng must be a numpy.random.Generator"),
    "sample rng None": (lambda: sampling.sample([0.5, 0.5], None), "rng must be a numpy.random.Generator"),
    "sample rng int": (lambda: sampling.sample([0.5, 0.5], 3), "rng must be a numpy.random.Generator"),
    "verify_chain rng None": (lambda: chain.verify_chain(P2, Q1, [0], None), "rng must be"),
    "draft_with_alpha rng int": (lambda: chain.draft_with_alpha([0.5, 0.5], 0.8, 7), "rng must be"),
    "tv_null_quantile rng None": (lambda: stats.tv_null_quantile([0.5, 0.5], 10, None), "rng must be"),
    "simulate_rounds rng int": (lambda: simulate_rounds(P2, Q1, 10, 1, "numpy"), "rng must be"),
    "rows off by +0.1 and -0.1": (lambda: validate.check_probs([[0.6, 0.5], [0.4, 0.5]]), "rows must sum to 1"),
    "one row off by 2e-6": (lambda: validate.check_probs([[0.5, 0.5], [0.5, 0.500002]]), "off by 2e-06"),
    "expected_speedup c = inf": (lambda: theory.expected_speedup(0.5, 2, np.inf), "c must be a finite"),
    "wall_time_per_token c = inf": (lambda: theory.wall_time_per_token(0.5, 2, np.inf), "c must be a finite"),
    "optimal_k c = inf": (lambda: theory.optimal_k(0.5, np.inf), "c must be a finite"),
    "breakeven_alpha c = nan": (lambda: theory.breakeven_alpha(2, np.nan), "c must be a finite"),
    "alpha_for_speedup c = inf": (lambda: theory.alpha_for_speedup(1.0, 2, np.inf), "c must be a finite"),
    "check_int above the maximum": (lambda: validate.check_int(4, "n", 0, 3),
                                    "n must be an integer >= 0 and <= 3, got 4"),
}


@pytest.mark.parametrize("name", CORE)
def test_core_bad_input_raises_naming_the_argument(name):
    call, message = CORE[name]
    with pytest.raises(ValueError, match=message):
        call()


def test_good_input_next_to_the_bad_passes():
    assert tree.verify_tree([-1], [2], np.full((2, 3), 1 / 3), np.random.default_rng(0))[1][0] in range(3)
    assert sum(tree.tree_output_distribution([-1, 0], [1, 2], np.full((3, 3), 1 / 3)).values()) == pytest.approx(1.0)
    validate.check_probs([[0.5, 0.5], [0.5, 0.5000009]])  # within 1e-6
    assert validate.check_int(3, "n", 0, 3) == 3 and theory.expected_speedup(0.5, 2, 1e300) < 1e-299


def test_chi_square_on_nearly_normalised_and_sparse_probabilities():
    """Probabilities summing to 1 - 5e-7 (inside the tolerance) are rescaled, not passed to
    scipy as they are; a sparse tail is pooled into one bin. Both give finite p-values, and a
    clear misfit is still rejected."""
    p = np.full(10, 0.1)
    p[-1] -= 5e-7
    assert stats.chi_square(np.full(10, 100), p)[1] > 0.99
    tail = np.r_[np.full(5, 0.2 - 1e-4), np.full(50, 1e-5)]
    counts = np.r_[np.full(5, 200), np.zeros(50)]
    assert stats.chi_square(counts, tail / tail.sum())[1] > 0.5
    assert stats.chi_square(np.r_[[600, 100, 100, 100, 100], np.zeros(50)], tail / tail.sum())[1] < 1e-6


def test_a_sparse_remainder_joins_the_last_group():
    """11 equally likely bins and 12 draws: expected 12/11 each, pooled 5 + 5 and the one left
    over joins the second group, so the test compares (6, 6) with (60/11, 72/11)."""
    counts = np.array([2] + [1] * 10)
    statistic, p_value = stats.chi_square(counts, np.full(11, 1 / 11))
    expected = np.array([60 / 11, 72 / 11])
    assert statistic == pytest.approx((((np.array([6, 6]) - expected) ** 2) / expected).sum(), rel=1e-12)
    assert p_value == pytest.approx(float(scipy_stats.chi2.sf(statistic, 1)), rel=1e-12)


# ----------------------------------------------------------------------------- models

@torch.inference_mode()
def test_token_ids_are_checked_where_they_enter_a_model():
    model = _gpt(16)
    with pytest.raises(ValueError, match=r"idx must be token ids in \[0, 16\) \(the vocabulary size\), got -1"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(ValueError, match=r"idx must be token ids in \[0, 16\) \(the vocabulary size\), got 16"):
        model(torch.tensor([[1, 16]]), cache=model.new_cache())
    with pytest.raises(ValueError, match=r"tokens must be token ids in \[0, 16\)"):
        model.logits([3, 99])
    with pytest.raises(ValueError, match="tokens must be integer token ids"):
        model.logits([1.5, 2.0])
    with pytest.raises(ValueError, match="tokens must be a non-empty"):
        model.logits([])
    with pytest.raises(ValueError, match="idx must be integer token ids"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"positions must hold 2 position ids in \[0, block_size=32\)"):
        model(torch.tensor([[1, 2]]), positions=torch.tensor([0, -1]))
    assert model.logits([0, 15]).shape == (2, 16)


@pytest.fixture
def saved(tmp_path):
    model = _gpt(16)
    models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    return tmp_path


def test_checkpoint_with_a_nan_or_inf_weight_says_how_to_rebuild(saved):
    from safetensors.torch import load_file, save_file

    path = saved / "tiny.safetensors"
    good = load_file(str(path))
    models.load("tiny", "cpu", saved)  # the control: the untouched file loads
    for bad_value in (float("nan"), float("inf")):
        state = dict(good)
        state["blocks.0.fc.weight"] = state["blocks.0.fc.weight"].clone()
        state["blocks.0.fc.weight"][3, 5] = bad_value
        save_file(state, str(path))
        with pytest.raises(ValueError,
                           match=r"NaN or inf weights \(in blocks.0.fc.weight\); rebuild it with: python -m"):
            models.load("tiny", "cpu", saved)


@pytest.mark.parametrize("text,what", [
    ('{"config": {"vocab_size": 16, "block_', "corrupt"),  # truncated: JSONDecodeError before
    ("[1, 2]", "must be a JSON object"),
    ("{}", "must hold a config"),  # incomplete: KeyError before
    ('{"config": {"vocab_size": 16}}', "must hold a config"),  # missing fields: TypeError before
    ('{"config": {"vocab_size": 16, "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 32, "bias": 1}}',
     "must hold a config"),
    ('{"config": {"vocab_size": "16", "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 32}}',
     "must hold a config"),
])
def test_bad_checkpoint_metadata_says_how_to_rebuild(saved, text, what):
    (saved / "tiny.json").write_text(text)
    with pytest.raises(ValueError, match=what) as err:
        models.load("tiny", "cpu", saved)
    assert "rebuild it with: python -m lessonlib.models.train tiny" in str(err.value)


# ----------------------------------------------------------------------------- decoding loops

def _negative_temperature_calls():
    target = _gpt()
    draft = context_gpt(1, block_size=32)
    prompt = [1, 2, 3]
    stream = fallback.ModelStream(target, draft, prompt, 2, lambda position: -0.5)
    return {
        "generate": lambda: decode.generate(target, prompt, 4, temperature=-0.5),
        "speculative_generate": lambda: decode.speculative_generate(target, draft, prompt, 2, 4, temperature=-0.5),
        "speculative_round": lambda: Sampling(-0.5),  # every round's sampling
        "speculative_round draft": lambda: Sampling(0.5, draft_temperature=-1.0),
        "next_token": lambda: decode.next_token(np.zeros(4), -0.5, RNG),
        "tree_generate": lambda: tree_generate(target, ModelDrafter(draft), prompt, 4, temperature=-0.5),
        "stream (number)": lambda: fallback.ModelStream(target, draft, prompt, 2, -0.5),
        "stream round (function)": lambda: stream.speculate(0),
        "stream plain step (function)": lambda: stream.plain(0),
        "reference": lambda: reference.speculative_decode(target, draft, prompt, 2, -0.5, 4, RNG),
        "generate NaN": lambda: decode.generate(target, prompt, 4, temperature=float("nan")),
    }


@pytest.mark.parametrize("loop", list(_negative_temperature_calls()))
def test_a_negative_temperature_raises_in_every_loop(loop):
    """It used to mean greedy (T <= 1e-5) in the decoding loops and the fallback stream."""
    name = "draft_temperature" if loop == "speculative_round draft" else "temperature"
    with pytest.raises(ValueError, match=f"{name} must be a finite number >= 0"):
        _negative_temperature_calls()[loop]()


def test_loop_arguments_are_checked():
    target, other = _gpt(16), context_gpt(1, vocab=24, block_size=32)
    cases = [
        (lambda: decode.generate(target, [1, 16], 3), r"prompt_tokens must be token ids in \[0, 16\)"),
        (lambda: decode.generate(target, [-1], 3), "prompt_tokens must be token ids"),
        (lambda: decode.generate(target, [1], 2.5), "max_new_tokens must be an integer"),
        (lambda: decode.generate(target, [1], 0), "max_new_tokens must be an integer >= 1"),
        (lambda: decode.speculative_generate(target, target, [1], 2.0, 3), "k must be an integer >= 1"),
        (lambda: decode.speculative_generate(target, target, [1], 0, 3), "k must be an integer >= 1"),
        (lambda: decode.speculative_generate(target, other, [1], 2, 3), "share a vocabulary, got sizes 24 and 16"),
        (lambda: tree_generate(target, ModelDrafter(other), [1, 2], 3), "share a vocabulary, got sizes 24 and 16"),
        (lambda: reference.autoregressive_decode(target, [1, 2.5], 3, 0.0), "prompt token must be an integer"),
        (lambda: reference.autoregressive_decode(target, [-1], 3, 0.0), "prompt token must be an integer >= 0"),
        (lambda: reference.autoregressive_decode(target, [1], 3, 1.0, rng=5), "rng .*must be a numpy.random.Generator"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


class OutOfVocabulary(RuleDrafter):
    """A drafter proposing a token the target does not have (no ``model`` to check up front)."""

    def _commit(self, seq, features):
        pass

    def expand(self, parents, tokens, nodes):
        rows = np.full((len(nodes), 32), -np.inf)
        rows[:, 20] = 0.0  # token 20 of a 32-token vocabulary; the target has 16
        return rows


def test_a_drafted_token_outside_the_vocabulary_raises():
    for branching in ((1,), (2, 1)):  # a chain (the causal forward) and a tree (the tree mask)
        with pytest.raises(ValueError, match=r"tokens \(the drafted tree\) must be token ids in \[0, 16\)"):
            tree_generate(_gpt(16), OutOfVocabulary(), [1, 2], 3, rule=functools.partial(tree.draft_topk,
                                                                                         branching=branching))


@pytest.mark.parametrize("result,message", [
    ((-1, 3), r"accepted \(returned by speculate\) must be an integer >= 0 and <= 3"),  # used to loop forever
    ((4, 3), r"accepted \(returned by speculate\) must be an integer >= 0 and <= 3, got 4"),  # used to be counted
    ((1.5, 3), "accepted .* must be an integer"),
    ((0, 0), r"drafted \(returned by speculate\) must be an integer >= 1"),
    ((1,), r"speculate must return \(accepted, drafted\)"),
    (None, r"speculate must return \(accepted, drafted\)"),
])
def test_drive_rejects_a_callback_reporting_impossible_counts(result, message):
    for run in (lambda s: fallback.drive(fallback.AlwaysSpeculate(), s, lambda position: None, 10),
                lambda s: fallback.drive_interleaved({"x": (fallback.AlwaysSpeculate(), s, lambda position: None)},
                                                     10)):
        with pytest.raises(ValueError, match=message):
            run(lambda position: result)
    trace = fallback.drive(fallback.AlwaysSpeculate(), lambda position: (3, 3), lambda position: None, 10)
    assert trace["tokens"].tolist() == [4, 4, 4]  # the control: a valid report is counted as it says
    assert json.dumps(trace["tokens"].tolist())  # plain ints
