"""Real decoding loops: exact at T = 0 token for token, exact in distribution at T > 0."""
import itertools

import numpy as np
import pytest
import torch

from lessonlib.decoding import decode
from lessonlib import models
from lessonlib.models import GPT, GPTConfig
from lessonlib.core.stats import chi_square
from lessonlib.decoding.reference import speculative_decode


def tiny(seed, vocab=97, n_layer=2, scale=1.0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=64, n_layer=n_layer, n_head=2, n_embd=32)).eval()
    with torch.no_grad():  # sharper, more different distributions than the 0.02 init gives
        model.wte.weight.mul_(scale)
    return model


PROMPT = [5, 17, 3, 42, 8]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculative_equals_greedy_plain(k):
    target, draft = tiny(0, scale=40), tiny(1, n_layer=1, scale=40)
    plain, _ = decode.generate(target, PROMPT, 40)
    spec, stats = decode.speculative_generate(target, draft, PROMPT, k, 40)
    assert spec == plain
    assert stats["target_calls"] < 40 or stats["alpha"] == 0


def test_greedy_cached_path_equals_generic_path():
    target, draft = tiny(0, scale=40), tiny(1, n_layer=1, scale=40)
    fast, _ = decode.speculative_generate(target, draft, PROMPT, 3, 20)
    generic, _ = speculative_decode(target, draft, PROMPT, 3, temperature=0.0, max_new_tokens=20,
                                    rng=np.random.default_rng(0))
    assert fast == list(generic)[:20]


def test_self_draft_accepts_everything():
    target = tiny(0, scale=40)
    _, stats = decode.speculative_generate(target, target, PROMPT, 4, 30, temperature=1.0, rng=np.random.default_rng(0))
    assert stats["alpha"] == 1.0 and stats["tau"] == 5.0


@pytest.mark.parametrize("name,pack", [("draft-ce", False), ("draft-kl", False), ("draft-kl", True)])
def test_shipped_drafts_are_lossless_at_t0(name, pack):
    # pack=True: the target as the benchmarks run it (weights packed for the CPU)
    target, draft = models.load("target", "cpu", pack=pack), models.load(name, "cpu")
    from lessonlib.models.data import to_tokens, text

    prompt = to_tokens(text("code", "heldout")[:400])[:48]
    plain, _ = decode.generate(target, prompt, 48)
    for k in (2, 5):
        spec, stats = decode.speculative_generate(target, draft, prompt, k, 48)
        assert spec == plain
        assert stats["tau"] > 1.0


def exact_continuations(target, prompt, length, temperature):
    """p(x1..xL | prompt) for every continuation, from the logits protocol."""
    V = target.config.vocab_size
    seqs = list(itertools.product(range(V), repeat=length))
    probs = []
    for s in seqs:
        rows = target.logits(prompt + list(s[:-1]))[len(prompt) - 1 :] / temperature
        rows = np.exp(rows - rows.max(1, keepdims=True))
        rows /= rows.sum(1, keepdims=True)
        probs.append(np.prod(rows[np.arange(length), s]))
    return seqs, np.array(probs)


def continuation_counts(target, draft, n, seed, length=2, k=2):
    rng = np.random.default_rng(seed)
    V = target.config.vocab_size
    counts = np.zeros(V**length)
    for _ in range(n):
        toks, _ = decode.speculative_generate(target, draft, [1, 2, 3], k, length, temperature=1.0, rng=rng)
        counts[np.ravel_multi_index(toks, (V,) * length)] += 1
    return counts


def test_sampled_continuations_match_the_target(monkeypatch):
    """Chi-square at a 1e-3 false-alarm rate, 2,000 two-token samples over 36 continuations;
    the negative control (a loop that accepts every draft) must be rejected by the same test."""
    target, draft = tiny(0, vocab=6, scale=3), tiny(1, vocab=6, n_layer=1, scale=3)  # TV(p, q) = 0.18 over pairs
    _, expected = exact_continuations(target, [1, 2, 3], 2, 1.0)
    _, p_value = chi_square(continuation_counts(target, draft, 2000, seed=0), expected)
    assert p_value > 1e-3

    monkeypatch.setattr(decode, "verify_chain", lambda p_rows, q_rows, drafts, rng, validate=True: list(drafts) + [
        int(rng.choice(len(p_rows[-1]), p=p_rows[-1]))])
    _, p_bad = chi_square(continuation_counts(target, draft, 2000, seed=0), expected)
    assert p_bad < 1e-3


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


def test_benchmark_table_reports_best_k_and_alpha_per_draft():
    from lessonlib.bench import decode as common

    row = lambda draft, k, alpha, speedup: {"corpus": "code", "temperature": 1.0, "draft": draft, "k": k, "alpha": alpha,
                                            "speedup": speedup, "tau": 2.0, "c": 0.1, "verify_cost": 1.2,
                                            "predicted_speedup": 1.5, "measured_over_predicted": speedup / 1.5}
    rows = [row("draft-ce", 1, 0.5, 1.1), row("draft-ce", 2, 0.7, 0.9), row("draft-kl", 1, 0.6, 1.0), row("draft-kl", 2, 0.8, 1.2)]
    assert [(r["draft"], r["k"]) for r in common.best_rows(rows)] == [("draft-ce", 1), ("draft-kl", 2)]
    assert common.mean_alpha(rows) == {("code", 1.0): pytest.approx({"draft-ce": 0.6, "draft-kl": 0.7})}
    assert "code T=1: draft-ce 0.600, draft-kl 0.700" in common.markdown(rows, [])
    # the speedup if a round cost only its forwards: the measured verify cost, not Thm 3.8's one step
    assert common.forward_bound(rows[3]) == pytest.approx(2.0 / (2 * 0.1 + 1.2))


def test_alpha_needed_inverts_the_forward_bound():
    """The profile's 'alpha for 1.6x': at that alpha E(alpha, K) / (K c + verify cost) equals
    the speedup; a little less alpha falls short; beyond (K + 1) / cost it is unreachable."""
    from lessonlib.bench.profile import alpha_needed
    from lessonlib.core.theory import expected_tokens_per_verify

    k, c, verify = 3, 0.13, 1.24
    alpha = alpha_needed(1.6, k, c, verify)
    assert expected_tokens_per_verify(alpha, k) / (k * c + verify) == pytest.approx(1.6, abs=1e-9)
    assert expected_tokens_per_verify(alpha - 0.01, k) / (k * c + verify) < 1.6
    assert alpha_needed((k + 1) / (k * c + verify) + 0.01, k, c, verify) == float("inf")
    assert alpha_needed(1.0 / (k * c + verify), k, c, verify) == pytest.approx(0.0, abs=1e-9)
