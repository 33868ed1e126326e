"""The fast decode path (``engines.fast.FastGPT``) equals the readable GPT: logits within float32
rounding over every kind of cached call (steps, verify blocks, tree masks and positions, fused
features), the same greedy tokens through the plain, chain and tree loops on the shipped
models, the KV-cache tests of test_gpt_kv_cache.py re-run on it, and the readable model's
errors for bad input, with the cache untouched. Every test runs twice: with the native forward
(``engines.native``, the default where it builds) and with the PyTorch fast path."""
import functools

import numpy as np
import pytest
import torch
from loop_support import context_gpt

from lessonlib import engines, models
from lessonlib.core import tree
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.engines import FastGPT, native
from lessonlib.models import GPT
from lessonlib.models.data import heldout_prompts
from tests.models.test_gpt_kv_cache import assert_cache_is_prefill, updates_then_compare

ATOL = {torch.float32: 1e-4, torch.float64: 1e-9}  # the two paths differ by summation order only


@pytest.fixture(scope="module", params=["native", "torch"])
def pair(request):
    """(readable, fast) shipped targets: the readable one packed (the "packed" engine); the fast
    one on the native forward ("native"), or on the PyTorch fast path ("fast")."""
    readable = engines.load("target", "cpu", engine="packed")
    if request.param == "torch":
        fast = engines.load("target", "cpu", engine="fast")
        assert fast.native is None and engines.engine_of(fast) == "fast"
    else:
        if engines.unavailable("native") is not None:
            pytest.skip(native.status())
        fast = engines.load("target", "cpu", engine="native")
        assert fast.native is not None and engines.engine_of(fast) == "native"
    return readable, fast


def test_load_gives_the_engine_asked_for_and_auto_the_fastest_here(pair):
    readable, fast = pair
    assert isinstance(fast, FastGPT) and type(readable) is GPT and engines.engine_of(readable) in ("packed", "readable")
    assert type(models.load("draft-kl", "cpu")) is GPT  # models.load: the readable model, trainable
    assert models.load("draft-kl", "cpu").wte.weight.requires_grad
    assert not fast.wte.weight.requires_grad  # an engine's model is inference only
    assert fast.checkpoint_name == "target" and fast.num_params() == readable.num_params()
    auto = engines.load("draft-kl", "cpu")
    assert auto.engine == engines.engine_of(auto) == ("native" if engines.unavailable("native") is None else "fast")
    assert engines.load("draft-kl", "cpu", engine="readable").engine == "readable"
    with native.turned_off():  # where native.c cannot run, auto falls back and "native" says why in one line
        assert engines.load("draft-kl", "cpu").engine == "fast"
        with pytest.raises(ValueError, match="engine 'native' is not available here"):
            engines.load("draft-kl", "cpu", engine="native")
    for bad in ("turbo", None, 1, "Native"):
        with pytest.raises(ValueError, match="engine must be one of readable, packed, fast, native, auto"):
            engines.load("draft-kl", "cpu", engine=bad)


@torch.inference_mode()
def test_every_kind_of_cached_call_matches_the_readable_model(pair, monkeypatch):
    """Prefill, one-token steps, a 6-token verify block and a 16-node tree (mask and positions),
    with features (top block and fused): logits, features and keys/values within 1e-4."""
    readable, fast = pair
    rng = np.random.default_rng(0)
    tokens = torch.as_tensor(rng.integers(0, 2048, (1, 120)))
    caches = readable.new_cache(), fast.new_cache()
    # the fast model must not fall back to the readable forward on cached batch-1 calls
    real_forward = GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, *a, **k: (pytest.fail("readable forward ran")
                                                               if self is fast else real_forward(self, *a, **k)))
    parents = np.array([-1, -1, -1, 0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9])
    mask = torch.from_numpy(tree.tree_attention_mask(tree.with_root(parents)))  # (16, 16)
    calls = [dict(idx=tokens[:, :100]), dict(idx=tokens[:, 100:101]), dict(idx=tokens[:, 101:102]),
             dict(idx=tokens[:, 102:108], return_hidden=True), dict(idx=tokens[:, 108:124 - 8])]
    for call in calls:
        outs = [model(cache=cache, **call) for model, cache in zip(pair, caches)]
        for got, want in zip(*(o if isinstance(o, tuple) else (o,) for o in outs)):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=ATOL[torch.float32], rtol=0)
    start = caches[0].length
    positions = torch.as_tensor(start + mask.sum(1).numpy() - 1)
    idx = torch.as_tensor(rng.integers(0, 2048, (1, 16)))
    outs = [model(idx, positions=positions, mask=mask, cache=cache, return_hidden=(5, 11, 23))
            for model, cache in zip(pair, caches)]
    for got, want in zip(*outs):
        torch.testing.assert_close(got, want, atol=ATOL[torch.float32], rtol=0)
    assert caches[1].length == caches[0].length == start + 16
    torch.testing.assert_close(caches[1].kv[:, :, :, : start + 16], caches[0].kv[:, :, :, : start + 16],
                               atol=ATOL[torch.float32], rtol=0)
    # negative control: the same tree under a causal mask is another computation
    caches[1].truncate(start)
    chain = fast(idx, positions=positions, cache=caches[1])[0]
    assert (chain - outs[1][0][0]).abs().max() > 1e-2


@torch.inference_mode()
def test_lm_head_matches(pair):
    readable, fast = pair
    hidden = torch.randn(3, 7, readable.config.n_embd, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(fast.lm_head(hidden), readable.lm_head(hidden), atol=ATOL[torch.float32], rtol=0)


def test_greedy_tokens_equal_through_the_loops(pair):
    """Plain, chain (draft-kl, K = 4) and tree (a one-layer draft, top-k tree) decoding give
    the readable model's greedy tokens on held-out prompts."""
    readable, fast = pair
    draft = models.load("draft-kl", "cpu")
    rule = functools.partial(tree.draft_topk, branching=(3, 2, 1))
    for prompt in heldout_prompts("code", 2, 48):
        want = decode.generate(readable, prompt, 24)[0]
        assert decode.generate(fast, prompt, 24)[0] == want
        assert decode.speculative_generate(fast, draft, prompt, 4, 24)[0] == want
        assert tree_generate(fast, ModelDrafter(draft), prompt, 24, rule=rule)[0] == want


def test_every_cache_update_equals_recomputation_on_fast_models(pair):
    """test_gpt_kv_cache.py's check (prefill, steps, a rollback, a tree and its compaction)
    on the fast shipped target and on fast context models (float64, to 1e-9)."""
    updates_then_compare(pair[1], np.random.default_rng(0))
    for seed, model in enumerate([context_gpt(0), context_gpt(3, vocab=64, n_layer=3, block_size=64)]):
        updates_then_compare(FastGPT.from_gpt(model), np.random.default_rng(seed))


@torch.inference_mode()
def test_context_models_decode_alike_and_a_dtype_change_is_followed():
    """On a model whose next token depends on the context the fast loops give the readable
    tokens; after ``.float()`` the fast path uses the new weights, not stale copies."""
    readable = context_gpt(0)
    fast = FastGPT.from_gpt(readable)
    prompt = [1, 5, 9, 13, 2]
    want = decode.generate(readable, prompt, 40)[0]
    assert decode.generate(fast, prompt, 40)[0] == want
    assert len(set(want)) > 3  # the context matters: not one token repeated
    fast32, readable32 = fast.float(), readable.float()
    cache = fast32.new_cache()
    got = fast32(torch.tensor([prompt]), cache=cache)
    torch.testing.assert_close(got, readable32(torch.tensor([prompt])), atol=ATOL[torch.float32], rtol=0)
    assert_cache_is_prefill(fast32, cache, prompt)


BAD_CALLS = {  # (call on a cache holding 5 tokens, message): the readable model's messages
    "token id too large": (lambda m, c: m(torch.tensor([[1, 2048]]), cache=c), r"idx must be token ids in \[0, 2048\)"),
    "negative token id": (lambda m, c: m(torch.tensor([[-1]]), cache=c), r"idx must be token ids in \[0, 2048\)"),
    "float ids": (lambda m, c: m(torch.tensor([[1.0]]), cache=c), "idx must be integer token ids"),
    "position too large": (lambda m, c: m(torch.tensor([[1]]), positions=torch.tensor([256]), cache=c),
                           "positions must hold 1 position ids"),
    "positions of another length": (lambda m, c: m(torch.tensor([[1, 2]]), positions=torch.tensor([5]), cache=c),
                                    "positions must hold 2 position ids"),
    "cache overflow": (lambda m, c: m(torch.zeros(1, 252, dtype=torch.long), cache=c),
                       "cache holds batch 1 and 256 positions"),
    "mask of a wrong shape": (lambda m, c: m(torch.tensor([[1, 2]]), mask=torch.ones(3, 3, dtype=torch.bool),
                                             cache=c), "mask must be bool"),
}


@torch.inference_mode()
@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_input_raises_the_readable_error_and_leaves_the_cache(pair, name):
    call, message = BAD_CALLS[name]
    for model in pair:
        cache = model.new_cache()
        model(torch.tensor([[1, 2, 3, 4, 5]]), cache=cache)
        before = cache.kv.clone()
        with pytest.raises(ValueError, match=message):
            call(model, cache)
        assert cache.length == 5 and torch.equal(cache.kv, before)
