"""The KV cache equals full recomputation -- on the shipped target and on a tiny GPT whose next
token depends on the context, after every kind of update and inside the decoding loops -- and
its bounds are exact (``KVCache``, ``GPT.forward``, ``GPT.logits``, the loops' budgets)."""
import functools

import numpy as np
import pytest
import torch
from loop_support import context_gpt, noisy_copy

from lessonlib.core import tree
from lessonlib.decoding import decode
from lessonlib.decoding.decode import ChainDrafter
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.round import Sampling, speculative_round
from lessonlib.decoding.tree_decode import tree_generate, verify_tree_forward
from lessonlib.models import KVCache

ATOL = {torch.float32: 1e-4, torch.float64: 1e-9}  # cached and full forwards differ by summation order only


def context_models():
    return [context_gpt(0), context_gpt(3, vocab=64, n_layer=3, block_size=64, dtype=torch.float32)]


@torch.inference_mode()
def fresh_kv(model, tokens):
    """Keys/values of a fresh prefill of ``tokens`` (the reference every cache must equal)."""
    cache = model.new_cache()
    model(torch.tensor([tokens]), cache=cache)
    return cache.kv[:, :, :, : cache.length]


def assert_cache_is_prefill(model, cache, tokens):
    assert cache.length == len(tokens)
    atol = ATOL[cache.kv.dtype]
    torch.testing.assert_close(cache.kv[:, :, :, : cache.length], fresh_kv(model, tokens), atol=atol, rtol=0)


@torch.inference_mode()
def updates_then_compare(model, rng):
    """Prefill, one-token steps, a verify-sized block, a rollback, different tokens, a tree
    forward and its compaction: after each, logits and keys/values equal a fresh prefill."""
    V = model.config.vocab_size
    tokens = rng.integers(0, V, 40).tolist()
    cache, atol = model.new_cache(), ATOL[model.wte.weight.dtype]
    model(torch.tensor([tokens[:12]]), cache=cache)
    for t in tokens[12:15]:
        model(torch.tensor([[t]]), cache=cache)
    assert_cache_is_prefill(model, cache, tokens[:15])
    got = model(torch.tensor([tokens[15:21]]), cache=cache)[0]
    torch.testing.assert_close(got, model(torch.tensor([tokens[:21]]))[0, 15:], atol=atol, rtol=0)
    cache.truncate(17)  # reject the last four
    other = rng.integers(0, V, 5).tolist()
    got = model(torch.tensor([other]), cache=cache)[0]
    seq = tokens[:17] + other
    torch.testing.assert_close(got, model(torch.tensor([seq]))[0, 17:], atol=atol, rtol=0)
    assert_cache_is_prefill(model, cache, seq)
    parents, node_tokens = np.array([-1, -1, 0, 0, 1, 2, 5]), rng.integers(0, V, 7)
    start = cache.length - 1
    cache.truncate(start)  # the last committed token is the tree's root
    verify_tree_forward(model, cache, seq[-1], parents, node_tokens)
    path = [0, 2, 5, 6]  # root -> a -> its first child -> ... (depth 4)
    cache.keep(start, [0] + [a + 1 for a in path])
    assert_cache_is_prefill(model, cache, seq + node_tokens[path].tolist())


def test_every_cache_update_equals_recomputation_on_the_shipped_target(shipped_target):
    updates_then_compare(shipped_target, np.random.default_rng(0))


@pytest.mark.parametrize("model", range(2))
def test_every_cache_update_equals_recomputation_on_context_models(model):
    updates_then_compare(context_models()[model], np.random.default_rng(model))


@torch.inference_mode()
def test_wrong_compaction_is_not_a_prefill(shipped_target):
    """Negative controls for the check above: keeping the nodes off by one, or dropping the
    last accepted node, leaves a cache that a fresh prefill does not produce."""
    model, tokens = shipped_target, [5, 17, 300, 42, 8, 1000]
    parents, node_tokens = np.array([-1, 0, 1, 1]), np.array([7, 70, 700, 9])
    for keep in ([0, 1, 2], [0, 2, 3], [0, 1]):  # right; off by one; the last accepted node dropped
        cache = model.new_cache()
        model(torch.tensor([tokens[:-1]]), cache=cache)
        verify_tree_forward(model, cache, tokens[-1], parents, node_tokens)
        cache.keep(len(tokens) - 1, keep)
        want = fresh_kv(model, tokens + [7, 70])
        if keep == [0, 1, 2]:
            torch.testing.assert_close(cache.kv[:, :, :, : cache.length], want, atol=1e-4, rtol=0)
        elif cache.length == want.shape[3]:
            assert (cache.kv[:, :, :, : cache.length] - want).abs().max() > 1e-2
        else:
            assert cache.length != len(tokens) + 2


# ----------------------------------------------------------------------------- inside the loops

@torch.inference_mode()
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_chain_round_leaves_both_caches_equal_to_a_prefill(temperature):
    """After every round the target cache holds the committed sequence minus its last token
    and the draft cache a prefix of it, each equal to a fresh prefill."""
    target = context_gpt(0)
    draft = noisy_copy(target, 1, noise=0.05)  # alpha ~0.75: full rounds and rejections
    seq, rng = [3, 1, 4, 1, 5], np.random.default_rng(0)
    t_cache, drafter = target.new_cache(), ChainDrafter(draft, 3)
    d_cache = drafter.cache
    decode.feed(target, t_cache, seq[:-1])
    drafter.commit(seq)  # prefills the draft's cache
    lengths = []
    for _ in range(16):
        result = speculative_round(target, t_cache, drafter, None, seq, Sampling(temperature), rng)
        lengths.append(len(result.emitted))
        assert_cache_is_prefill(target, t_cache, seq[:-1])
        assert d_cache.length <= len(seq) - 1
        assert_cache_is_prefill(draft, d_cache, seq[: d_cache.length])
    assert 4 in lengths and min(lengths) < 4  # fully accepted rounds (the draft two tokens behind) and rejections


class CheckingDrafter(ModelDrafter):
    """A ModelDrafter that, at every commit, checks the target's cache and its own against a
    fresh prefill of the committed sequence (the target's keys/values reach the next round),
    and the target features it is handed (what EAGLE and Medusa draft from) against the
    target's hidden states at the committed positions they belong to."""

    needs_features = True  # hand it the target's features, as EAGLE and Medusa get them

    def __init__(self, model, target, caches):
        super().__init__(model)
        self.target, self.caches, self.commits = target, caches, 0

    def _commit(self, seq, features=None):
        if self.caches:  # the target cache of the running loop, recorded by KVCache.keep
            assert_cache_is_prefill(self.target, self.caches[-1], seq[:-1])
        with torch.inference_mode():
            hidden = self.target(torch.tensor([seq[:-1]]), return_hidden=True)[1][0]
        assert 1 <= len(features) <= len(seq) - 1
        torch.testing.assert_close(features, hidden[len(seq) - 1 - len(features) :], atol=1e-9, rtol=0)
        super()._commit(seq, features)
        assert_cache_is_prefill(self.model, self.cache, seq)
        self.commits += 1


@pytest.mark.parametrize("rule", ["topk", "dynamic"])
def test_tree_loop_leaves_every_cache_equal_to_a_prefill(rule, monkeypatch):
    caches, keep = [], KVCache.keep

    def recording_keep(self, start, indices):
        caches.append(self)
        return keep(self, start, indices)

    monkeypatch.setattr(KVCache, "keep", recording_keep)
    target = context_gpt(0)
    rules = {"topk": functools.partial(tree.draft_topk, branching=(3, 2, 2)),
             "dynamic": functools.partial(tree.draft_dynamic, depth=4, top_k=3, total=12)}
    drafter = CheckingDrafter(target, target, caches)  # a self-draft: deep acceptance every round
    _, stats = tree_generate(target, drafter, [1, 5, 9, 13, 2], 40, rule=rules[rule], temperature=0.0)
    assert drafter.commits == stats.rounds + 1 and stats.tau > 2.5


# ----------------------------------------------------------------------------- bounds, both sides

@torch.inference_mode()
def test_truncate_and_keep_bounds():
    model = context_gpt(0)
    cache = model.new_cache()
    model(torch.tensor([[1, 2, 3, 4, 5]]), cache=cache)
    cache.keep(2, [2])  # start + i = 4: the last cached position, allowed
    assert cache.length == 3
    with pytest.raises(ValueError, match="indices must address cached positions"):
        cache.keep(1, [2])  # start + i = 3 = length: one past the end
    cache.truncate(3)  # the whole cache: allowed
    cache.truncate(0)
    assert cache.length == 0
    with pytest.raises(ValueError, match="length"):
        cache.truncate(1)  # longer than what is cached


BAD_CACHE_CALLS = {
    "truncate fractional": (lambda c: c.truncate(2.5), "length must be an integer"),
    "truncate negative": (lambda c: c.truncate(-1), "length must be an integer >= 0"),
    "truncate past the end": (lambda c: c.truncate(6), "length must be an integer >= 0 and <= 5"),
    "truncate bool": (lambda c: c.truncate(True), "length must be an integer"),
    "keep negative index": (lambda c: c.keep(1, [-1, 0]), "indices must address cached positions"),
    "keep duplicate index": (lambda c: c.keep(1, [1, 1]), "indices must be distinct"),
    "keep fractional index": (lambda c: c.keep(1, [0.5, 1]), "indices must be a 1-D sequence of integer"),
    "keep 2-D indices": (lambda c: c.keep(1, [[0, 1]]), "indices must be a 1-D"),
    "keep past the end": (lambda c: c.keep(1, [4]), "indices must address cached positions"),
    "keep negative start": (lambda c: c.keep(-1, [1]), "start must be an integer >= 0"),
    "keep start past the end": (lambda c: c.keep(6, []), "start must be an integer >= 0 and <= 5"),
    "keep fractional start": (lambda c: c.keep(1.5, [0]), "start must be an integer"),
}


@torch.inference_mode()
@pytest.mark.parametrize("name", BAD_CACHE_CALLS)
def test_bad_cache_calls_raise_and_change_nothing(name):
    model = context_gpt(0)
    cache = model.new_cache()
    model(torch.tensor([[1, 2, 3, 4, 5]]), cache=cache)
    before = cache.kv.clone()
    call, message = BAD_CACHE_CALLS[name]
    with pytest.raises(ValueError, match=message):
        call(cache)
    assert cache.length == 5 and torch.equal(cache.kv, before)


@torch.inference_mode()
def test_context_boundary_exact_fit_passes_one_more_raises():
    model = context_gpt(0, block_size=16)
    V = model.config.vocab_size
    assert model.logits([1] * 16).shape == (16, V)  # exactly the context
    with pytest.raises(ValueError, match="tokens must fit the context of block_size=16"):
        model.logits([1] * 17)  # silently dropping the oldest token would give other rows
    cache = model.new_cache()
    model(torch.zeros(1, 15, dtype=torch.long), cache=cache)
    model(torch.zeros(1, 1, dtype=torch.long), cache=cache)  # fills the cache
    with pytest.raises(ValueError, match="cache holds batch 1 and 16 positions"):
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="positions must be"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_loop_budgets_exact_fit_passes_one_more_raises():
    """generate: prompt + new tokens fill the context. Chain: the last round scores k drafts
    past its start, k - 1 positions beyond the output (the draft one fewer)."""
    target = context_gpt(0, block_size=24)
    prompt = [1, 2, 3, 4]
    out, _ = decode.generate(target, prompt, 20)
    assert len(out) == 20
    with pytest.raises(ValueError, match="must fit the context of the model"):
        decode.generate(target, prompt, 21)
    for k in (1, 3):
        n = 24 - len(prompt) - (k - 1)
        spec, _ = decode.speculative_generate(target, target, prompt, k, n)  # self-draft: every round full
        assert spec == decode.generate(target, prompt, n)[0]
        with pytest.raises(ValueError, match="must fit the context of the target"):
            decode.speculative_generate(target, target, prompt, k, n + 1)
    small = context_gpt(1, block_size=20)
    with pytest.raises(ValueError, match="must fit the context of the draft"):
        decode.speculative_generate(target, small, prompt, 3, 16)
