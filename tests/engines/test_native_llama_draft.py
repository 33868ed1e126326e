"""The real LLM's distilled draft model in C (``engines.llama_heads.NativeDraftModel``, ``draft_forward``)
against the readable model (``models.llm_draft.LlamaDraftModel``) beside the tiny random native Llama
of ``test_native_llama_head`` (a draft of width 32, 2 blocks, 2 query / 1 key-value heads of 16, a
64-id draft vocabulary): logits within ``ATOL`` at float32 weights and ``F16_ATOL`` at float16 for a
prompt's commit longer than the target's ``MAX_T``, chain steps and a tree level under a mask, the
caches alike after each; speculative decoding through ``LlamaDraftDrafter`` gives plain greedy
decoding's tokens with the drafts from C; bounds refused before the C call, the cache kept.
"""
import copy
import functools

import numpy as np
import pytest
import torch

from lessonlib.core import tree
from lessonlib.engines import llama as native_llama
from lessonlib.engines.llama_heads import NativeDraftModel, accelerate_head
from lessonlib.models.llama import Llama
from lessonlib.models.llm_draft import LlamaDraftModel
from tests.engines.test_native_llama_head import ATOL, F16_ATOL, TINY, close, tiny_pair

SHAPE = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_kv_head": 1, "n_hidden": 32}


def draft_pair(precision: str):
    target, _, _ = tiny_pair(precision)
    torch.manual_seed(2)
    model = LlamaDraftModel(target, np.random.default_rng(2).choice(TINY.vocab_size, 64, replace=False), SHAPE)
    with torch.no_grad():  # outputs of a visible size
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.eval().requires_grad_(False)
    twin = LlamaDraftModel(target, np.sort(model.draft_ids.numpy()), SHAPE)  # the same target object, not a copy
    twin.load_state_dict(model.state_dict())
    return target, model, accelerate_head(twin.eval().requires_grad_(False), target)


def counted(fast):
    calls = []
    run = fast.native.run
    fast.native.run = lambda *a: calls.append(len(a[0])) or run(*a)
    return calls


@pytest.mark.parametrize("precision", ["f32", "f16"])
@torch.inference_mode()
def test_every_kind_of_draft_call_matches_the_readable_model(precision):
    target, slow, fast = draft_pair(precision)
    atol = ATOL if precision == "f32" else F16_ATOL
    assert isinstance(fast, NativeDraftModel) and fast.native is not None
    calls = counted(fast)
    n = native_llama.MAX_T + 16  # a prompt's commit: past the target's MAX_T, still one C call
    prompt = torch.randint(TINY.vocab_size, (1, n), generator=torch.Generator().manual_seed(3))
    a, b = slow.new_cache(), fast.new_cache()
    for last in (False, True):
        ca, cb = copy.deepcopy(a), copy.deepcopy(b)
        want, got = slow(prompt, cache=ca, last=last), fast(prompt, cache=cb, last=last)
        assert got.shape == want.shape == (1, 1 if last else n, TINY.vocab_size)
        close(got, want, atol)
        assert ca.length == cb.length == n
    slow(prompt, cache=a, last=True), fast(prompt, cache=b, last=True)
    for token in (5, 250, 17):  # chain steps
        x = torch.tensor([[token]])
        close(fast(x, cache=b), slow(x, cache=a), atol)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)  # a tree level: [p, q] and [r]
    level, positions = torch.tensor([[9, 41, 8]]), torch.tensor([n + 3, n + 4, n + 3])
    close(fast(level, positions, mask, b), slow(level, positions, mask, a), atol)
    assert a.length == b.length == n + 6
    assert calls == [n, n, n, 1, 1, 1, 3]
    assert torch.allclose(a.kv[:, :, :, : n + 6], b.kv[:, :, :, : n + 6], atol=atol)


def test_speculative_decoding_with_the_native_draft_model_is_plain_greedy_decoding():
    from lessonlib.decoding.decode import generate
    from lessonlib.decoding.llm_drafter import LlamaDraftDrafter
    from lessonlib.decoding.tree_decode import tree_generate

    target, _, fast = draft_pair("f16")
    calls = counted(fast)
    for prompt in ([3, 17, 250, 9], [41, 8, 120, 77, 5, 5, 5]):
        plain, _ = generate(target, prompt, 20)
        for rule in (functools.partial(tree.draft_topk, branching=(1, 1, 1)),
                     functools.partial(tree.draft_topk, branching=(2, 2, 1))):
            spec, _ = tree_generate(target, LlamaDraftDrafter(fast, target), prompt, 20, rule=rule)
            assert spec == plain
    assert calls


def test_bounds_are_refused_before_the_c_call_and_the_cache_is_kept():
    target, _, fast = draft_pair("f32")
    calls = counted(fast)
    cache = fast.new_cache()
    for idx, positions, match in ((torch.tensor([[TINY.vocab_size]]), None, "idx"),
                                  (torch.tensor([[-1]]), None, "idx"),
                                  (torch.tensor([[1, 2]]), torch.tensor([0, TINY.block_size]), "positions"),
                                  (torch.tensor([[1, 2]]), torch.tensor([0]), "positions")):
        with pytest.raises(ValueError, match=match):
            fast(idx, positions, cache=cache)
        assert cache.length == 0
    cache.length = cache.capacity  # full: one more token would be written past the buffer
    with pytest.raises(ValueError, match="cache holds"):
        fast(torch.tensor([[1]]), cache=cache)
    assert cache.length == cache.capacity and not calls


def test_a_draft_model_of_another_target_stays_readable():
    """The C call reads token rows from the target's packed head: a draft bound to another model
    object (the readable twin) is not put on this target's engine."""
    target, slow, _ = draft_pair("f32")
    twin = LlamaDraftModel(Llama(TINY), np.sort(slow.draft_ids.numpy()), SHAPE)
    assert type(accelerate_head(twin, target)) is LlamaDraftModel


@torch.inference_mode()
def test_the_portable_c_path_runs_the_draft_model_too():
    """The path of CPUs without AVX2/F16C (ARM), ``-DLESSONLIB_PORTABLE``: the draft model's call
    matches the readable model there as well (the same blocks and products, scalar C)."""
    from lessonlib.engines.llama_heads import PreparedDraft

    lib = native_llama.library(("-DLESSONLIB_PORTABLE",))
    if lib is None:
        pytest.skip(native_llama.status())
    assert lib.llama_simd() == 0
    target, slow, fast = draft_pair("f32")
    default, own = target.native, fast.native
    prompt = torch.tensor([[3, 17, 250, 9, 41, 41, 8, 120]])
    try:
        target.native = native_llama.Prepared(lib, target, "f32")
        fast.native = PreparedDraft(fast, target.native)
        calls = counted(fast)
        close(fast(prompt, cache=fast.new_cache()), slow(prompt, cache=slow.new_cache()), ATOL)
        assert calls == [prompt.shape[1]]
    finally:
        target.native, fast.native = default, own
