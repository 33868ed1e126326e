"""EAGLE-3's draft step in C (``engines.llama_heads.NativeEagle3Head``, ``eagle3_forward``) against the
readable head (``models.llm_heads.LlamaEagle3Head.step``) beside a tiny random native Llama
(8 layers, width 64, 4 query / 2 key-value heads of 16, vocabulary 304; a draft vocabulary of 64
ids): g and the draft logits within ``ATOL`` at float32 weights and ``F16_ATOL`` at float16, for
a commit of fused features, chain steps on g, a tree level under a mask (positions off the mask),
the head's cache after each; speculative decoding with it gives plain greedy decoding's tokens;
bounds are refused before the C call, with the cache kept.
"""
import copy
import functools

import numpy as np
import pytest
import torch

from lessonlib.core import tree
from lessonlib.engines import llama as native_llama
from lessonlib.engines.llama import NativeLlama
from lessonlib.engines.llama_heads import NativeEagle3Head, accelerate_head
from lessonlib.models.llama import Llama, LlamaConfig
from lessonlib.models.llm_heads import LlamaEagle3Head

ATOL = 1e-4  # float32 weights: summation order only (measured ~1e-6 on logits of size ~1)
F16_ATOL = 5e-2  # float16 weights: their rounding (measured ~5e-3)
TINY = LlamaConfig(vocab_size=304, block_size=128, n_layer=8, n_head=4, n_kv_head=2, n_embd=64, n_hidden=64)


def tiny_pair(precision: str):
    if native_llama.unavailable() is not None:
        pytest.skip(native_llama.status())
    torch.manual_seed(0)
    target = Llama(TINY).eval().requires_grad_(False)
    ids = np.random.default_rng(0).choice(TINY.vocab_size, 64, replace=False)
    head = LlamaEagle3Head(TINY, ids).eval().requires_grad_(False)
    with torch.no_grad():  # outputs of a visible size: the random init's o/down are tiny
        for p in [*target.parameters(), *head.parameters()]:
            p.add_(0.05 * torch.randn_like(p))
    target.__class__ = NativeLlama
    target.prepare(precision)
    fast = accelerate_head(copy.deepcopy(head), target)
    return target, head, fast


@pytest.fixture(scope="module", params=["f32", "f16"])
def pair(request):
    return (request.param, *tiny_pair(request.param))


def close(a, b, atol):
    finite = torch.isfinite(b)
    assert torch.equal(finite, torch.isfinite(a))  # -inf at the same ids: outside the draft vocabulary
    assert (a[finite] - b[finite]).abs().max().item() <= atol


@torch.inference_mode()
def test_every_kind_of_draft_step_matches_the_readable_head(pair):
    precision, target, head, fast = pair
    atol = ATOL if precision == "f32" else F16_ATOL
    assert isinstance(fast, NativeEagle3Head) and fast.native is not None
    prompt = torch.tensor([[3, 17, 250, 9, 41, 41, 8, 120, 77, 5]])
    cache = target.new_cache()
    logits, fused = target(prompt, cache=cache, return_hidden=head.layers)
    tokens = np.array([*prompt[0, 1:].tolist(), int(logits[0, -1].argmax())])
    slow_cache, fast_cache = head.new_cache(), fast.new_cache()
    for last in (False, True):  # a commit of T = 10 pairs of fused features: every row, then the last
        a = copy.deepcopy(slow_cache), copy.deepcopy(fast_cache)
        g_slow, l_slow = head.step(target, tokens, fused[0], a[0], last=last)
        g_fast, l_fast = fast.step(target, tokens, fused[0], a[1], last=last)
        assert l_fast.shape == l_slow.shape == ((1 if last else len(tokens)), TINY.vocab_size)
        close(g_fast, g_slow, atol)
        close(l_fast, l_slow, atol)
    head.step(target, tokens, fused[0], slow_cache, last=True)
    g, _ = fast.step(target, tokens, fused[0], fast_cache, last=True)
    for _ in range(3):  # chain steps: the head's own g (width C) skips fuse
        token = np.array([int(torch.randint(TINY.vocab_size, ()))])
        g_slow, l_slow = head.step(target, token, g[-1:], slow_cache, last=True)
        g, l_fast = fast.step(target, token, g[-1:], fast_cache, last=True)
        close(g, g_slow, atol)
        close(l_fast, l_slow, atol)
        assert slow_cache.length == fast_cache.length
        close(fast_cache.kv[:, :, :, : fast_cache.length], slow_cache.kv[:, :, :, : slow_cache.length], atol)
    # a tree: 2 nodes at depth 1, then 3 under them, each at (last committed + depth) from its mask row
    for tokens, mask in ((np.array([7, 8]), np.eye(2, dtype=bool)),
                         (np.array([4, 99, 4]), np.array([[1, 0, 1, 0, 0], [1, 0, 0, 1, 0], [0, 1, 0, 0, 1]], bool))):
        feats = g[-1:].repeat(len(tokens), 1)
        g_slow, l_slow = head.step(target, tokens, feats, slow_cache, mask=mask)
        g_fast, l_fast = fast.step(target, tokens, feats, fast_cache, mask=mask)
        close(g_fast, g_slow, atol)
        close(l_fast, l_slow, atol)
    assert not torch.allclose(g_fast[0], g_fast[2])  # same token, same feature, other ancestors: the mask matters


@torch.inference_mode()
def test_a_commit_longer_than_the_targets_max_t_runs_in_c_too():
    """A whole prompt's pairs in one call (the first commit): past the target's ``MAX_T``, below
    the head's ``HEAD_MAX_T``, the C step still runs and matches the readable head."""
    target, head, fast = tiny_pair("f32")
    n = native_llama.MAX_T + 16
    prompt = torch.randint(TINY.vocab_size, (1, n + 1), generator=torch.Generator().manual_seed(1))
    _, fused = target(prompt, cache=target.new_cache(), return_hidden=head.layers)  # the readable prefill
    calls = []
    run = fast.native.run
    fast.native.run = lambda *a: calls.append(len(a[0])) or run(*a)
    g_slow, l_slow = head.step(target, prompt[0, 1:].numpy(), fused[0, :n], head.new_cache(), last=True)
    g_fast, l_fast = fast.step(target, prompt[0, 1:].numpy(), fused[0, :n], fast.new_cache(), last=True)
    assert calls == [n]
    close(g_fast, g_slow, ATOL)
    close(l_fast, l_slow, ATOL)


@pytest.mark.parametrize("kind", ["eagle3", "medusa"])
def test_speculative_decoding_with_a_native_head_is_plain_greedy_decoding(kind):
    """EAGLE-3's step and Medusa's heads in C, each through its drafter: a chain and a tree give
    plain greedy decoding's tokens, and the drafts really come from the C call."""
    from lessonlib.decoding.decode import generate
    from lessonlib.decoding.drafters import MedusaDrafter
    from lessonlib.decoding.llm_drafter import LlamaHeadDrafter
    from lessonlib.decoding.tree_decode import tree_generate

    target, _, fast = tiny_pair("f16") if kind == "eagle3" else medusa_pair("f16")
    drafter = LlamaHeadDrafter if kind == "eagle3" else MedusaDrafter
    calls = []
    run = fast.native.run
    fast.native.run = lambda *a: calls.append(1) or run(*a)
    for prompt in ([3, 17, 250, 9], [41, 8, 120, 77, 5, 5, 5]):
        plain, _ = generate(target, prompt, 20)
        for rule in (functools.partial(tree.draft_topk, branching=(1, 1, 1)),
                     functools.partial(tree.draft_topk, branching=(2, 2, 1))):
            spec, _ = tree_generate(target, drafter(fast, target), prompt, 20, rule=rule)
            assert spec == plain
    assert calls


def test_bounds_are_refused_before_the_c_call_and_the_cache_is_kept():
    target, _, fast = tiny_pair("f32")
    cache = fast.new_cache()
    feats = torch.zeros(1, 3 * TINY.n_embd)
    for tokens, features, match in (([TINY.vocab_size], feats, "tokens must be"),
                                    ([-1], feats, "tokens must be"),
                                    ([1], torch.zeros(1, 2 * TINY.n_embd), "features must be"),
                                    ([1, 2], feats, "features must be")):
        with pytest.raises(ValueError, match=match):
            fast.step(target, np.array(tokens), features, cache)
        assert cache.length == 0
    cache.length = cache.capacity  # full: one more token would be written past the buffer
    with pytest.raises(ValueError, match="head's cache holds"):
        fast.step(target, np.array([1]), feats, cache)
    assert cache.length == cache.capacity


def medusa_pair(precision: str, n_heads: int = 3):
    """The tiny native target with random Medusa heads over a 64-id draft vocabulary, readable and on
    the engine (``llama_heads.NativeMedusaHeads``)."""
    from lessonlib.models.llm_medusa import LlamaMedusaHeads

    target, _, _ = tiny_pair(precision)
    torch.manual_seed(1)
    heads = LlamaMedusaHeads(TINY, np.random.default_rng(1).choice(TINY.vocab_size, 64, replace=False), n_heads)
    with torch.no_grad():  # the zero start is the target's own head at every depth: give each head its own
        for p in heads.parameters():
            p.add_(0.3 * torch.randn_like(p))
    heads.eval().requires_grad_(False)
    return target, heads, accelerate_head(copy.deepcopy(heads), target)


@pytest.mark.parametrize("precision", ["f32", "f16"])
@torch.inference_mode()
def test_medusas_heads_in_c_match_the_readable_heads(precision):
    """Every head's draft-vocabulary logits at one position (the round's call), at the precision's
    tolerance; the heads differ from one another (each one's own block, bias and SiLU are applied)."""
    from lessonlib.engines.llama_heads import NativeMedusaHeads

    target, heads, fast = medusa_pair(precision)
    assert isinstance(fast, NativeMedusaHeads) and fast.native is not None
    calls = []
    run = fast.native.run
    fast.native.run = lambda h: calls.append(1) or run(h)
    _, hidden = target(torch.tensor([[3, 17, 250, 9, 41]]), cache=target.new_cache(), return_hidden=True)
    for h in (hidden[0, -1], hidden[0, 2], 3 * torch.randn(TINY.n_embd)):
        slow, quick = heads.draft_logits(target, h), fast.draft_logits(target, h)
        assert quick.shape == slow.shape == (3, 64)
        close(quick, slow, ATOL if precision == "f32" else F16_ATOL)
        assert not torch.allclose(slow[0], slow[1], atol=0.1)
        close(fast(target, h), heads(target, h), ATOL if precision == "f32" else F16_ATOL)  # -inf outside, alike
    assert len(calls) == 6
    batch = hidden[0, :3]  # more than one position (training's shape): the readable code, not C
    close(fast.draft_logits(target, batch), heads.draft_logits(target, batch), 1e-6)
    assert len(calls) == 6
    with pytest.raises(ValueError, match="hidden must be"):
        fast.draft_logits(target, torch.zeros(TINY.n_embd + 16))
