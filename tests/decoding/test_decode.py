"""Real decoding loops: exact at T = 0 token for token, exact in distribution at T > 0."""

import numpy as np
import pytest
import torch
from loop_support import LEVEL, context_gpt, context_p_value, markov_gpt, noisy_copy

from lessonlib import engines, models
from lessonlib.decoding import chain_rule as chain_rule_
from lessonlib.decoding import decode
from lessonlib.decoding.reference import speculative_decode
from lessonlib.models import GPT, GPTConfig


def tiny(seed, vocab=97, n_layer=2, scale=1.0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=64, n_layer=n_layer, n_head=2, n_embd=32)).eval()
    with torch.no_grad():  # sharper, more different distributions than the 0.02 init gives
        model.wte.weight.mul_(scale)
    return model


PROMPT = [5, 17, 3, 42, 8]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculative_equals_greedy_plain(k):
    # a model whose next token depends on the context (a sharpened random GPT repeats its last
    # token, so a loop feeding the wrong context would pass there)
    target = context_gpt(0, vocab=97, block_size=64)
    draft = noisy_copy(target, 1)
    plain, _ = decode.generate(target, PROMPT, 40)
    spec, stats = decode.speculative_generate(target, draft, PROMPT, k, 40)
    assert spec == plain
    assert len(set(plain)) > 5 and 0 < stats.alpha < 1 and stats.target_calls < 40


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_cached_path_equals_generic_path(temperature):
    """Same seed, same tokens: the KV-cached loop draws its uniforms in the generic loop's order."""
    target = context_gpt(0, vocab=97, block_size=64)
    draft = noisy_copy(target, 1)
    fast, _ = decode.speculative_generate(target, draft, PROMPT, 3, 20, temperature, np.random.default_rng(5))
    generic, _ = speculative_decode(target, draft, PROMPT, 3, temperature=temperature, max_new_tokens=20,
                                    rng=np.random.default_rng(5))
    assert fast == list(generic)[:20]


def test_self_draft_accepts_everything():
    target = context_gpt(0, vocab=97, block_size=64)
    _, stats = decode.speculative_generate(target, target, PROMPT, 4, 30, temperature=1.0, rng=np.random.default_rng(0))
    assert stats.alpha == 1.0 and stats.tau == 5.0


@pytest.mark.parametrize("name,engine", [("draft-ce", "readable"), ("draft-kl", "readable"), ("draft-kl", "auto")])
def test_shipped_drafts_are_lossless_at_t0(name, engine):
    # "auto": the target as the benchmarks run it (the fastest engine here)
    target, draft = engines.load("target", "cpu", engine=engine), models.load(name, "cpu")
    from lessonlib.models.data import text, to_tokens

    prompt = to_tokens(text("code", "heldout")[:400])[:48]
    plain, _ = decode.generate(target, prompt, 48)
    for k in (2, 5):
        spec, stats = decode.speculative_generate(target, draft, prompt, k, 48)
        assert spec == plain
        assert stats.tau > 1.0


def test_sampled_tokens_match_the_target_at_t1(monkeypatch):
    """T = 1 (the other temperatures are in test_sampled_loops): 800 tokens of a Markov GPT,
    chi-square of (previous, next) counts at false-alarm rate 1e-3; the negative control (a
    loop that accepts every draft) must be rejected by the same test."""
    target, draft = markov_gpt(0, sharpen=5.0), markov_gpt(1, sharpen=10.0)

    def runs():
        rng = np.random.default_rng(0)
        return [(p, decode.speculative_generate(target, draft, p, 3, 400, 1.0, rng)[0]) for p in ([1], [4])]

    assert context_p_value(target.logits, runs(), 1.0) > LEVEL
    monkeypatch.setattr(chain_rule_, "verify_chain", lambda p_rows, q_rows, drafts, rng, validate=True: list(drafts) + [
        int(rng.choice(len(p_rows[-1]), p=p_rows[-1]))])
    assert context_p_value(target.logits, runs(), 1.0) < LEVEL


def test_bad_arguments():
    target, draft = tiny(0), tiny(1, vocab=50)
    with pytest.raises(ValueError, match="k"):
        decode.speculative_generate(target, target, PROMPT, 0, 5)
    with pytest.raises(ValueError, match="vocabulary"):
        decode.speculative_generate(target, draft, PROMPT, 2, 5)
    with pytest.raises(ValueError, match="context"):
        decode.generate(target, PROMPT, 100)
    with pytest.raises(ValueError, match="temperature"):
        decode.generate(target, PROMPT, 5, temperature=-1)
