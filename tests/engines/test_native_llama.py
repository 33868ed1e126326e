"""The real LLM's native engine (``engines.llama.NativeLlama``, ``native_llama.c``) against the
readable float32 Llama: f32 weights within ``ATOL``, f16 weights within ``F16_ATOL`` and the same
greedy tokens; tree mask and explicit positions, cache rollback and ``keep``, both sides of
``MAX_T``, bounds checked before the C call, and batch invariance -- a token's logits bitwise the
same alone, in a pass of 5, as a tree's node and on 1 or 2 threads (PyTorch's readable model is
not: the negative control). The models are loaded once per module (about 2 s each from the cache).
"""
import pathlib

import numpy as np
import pytest
import torch

from lessonlib import engines
from lessonlib.core.tree_structure import tree_attention_mask, tree_position_ids
from lessonlib.engines import llama as native_llama
from lessonlib.engines.llama import MAX_T, load_llm

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "data" / "smollm2_reference.npz"
ATOL = 2e-4  # f32 weights vs the readable model: summation order only (measured <= 1e-4 on logits ~10-30)
F16_ATOL = 0.15  # f16 weights: the weights' rounding, through 30 blocks (measured ~0.03-0.06 on these prompts)
BLOCK = 160


@pytest.fixture(scope="module")
def readable():
    return load_llm("readable", block_size=BLOCK)


@pytest.fixture(scope="module")
def models():
    if native_llama.unavailable() is not None:
        pytest.skip(native_llama.status())
    return {"f16": load_llm("native", "f16", BLOCK), "f32": load_llm("native", "f32", BLOCK)}


@pytest.fixture(scope="module")
def prompts():
    data = np.load(REFERENCE)
    return [data[f"p{i}_ids"][: int(data[f"p{i}_n_prompt"])].tolist() for i in range(6)]


def feed(model, cache, tokens, **kw):
    with torch.inference_mode():
        return model(torch.tensor([list(tokens)]), cache=cache, **kw)[0]


def test_load_llm_names_its_engine(models, readable):
    assert engines.engine_of(models["f16"]) == "native" and engines.engine_of(readable) == "readable"
    assert models["f16"].native.f16 == 1 and models["f32"].native.f16 == 0
    # f16 reads half the bytes: the weights a step reads, counted once
    assert models["f16"].native.nbytes * 2 == pytest.approx(models["f32"].native.nbytes, rel=1e-3)
    with pytest.raises(ValueError, match="engine must be one of"):
        load_llm("fast")
    with pytest.raises(ValueError, match="precision must be one of"):
        load_llm("native", "bf16")


@pytest.mark.parametrize("precision, atol", [("f32", ATOL), ("f16", F16_ATOL)])
def test_logits_match_the_readable_model(models, readable, prompts, precision, atol):
    """A prefill (native: under MAX_T tokens) and cached steps equal the readable model's logits
    within the precision's tolerance, and its cache."""
    model = models[precision]
    for prompt in prompts[:3]:
        caches = model.new_cache(), readable.new_cache()
        got = [feed(model, caches[0], prompt[:-3]), feed(model, caches[0], prompt[-3:])]
        want = [feed(readable, caches[1], prompt[:-3]), feed(readable, caches[1], prompt[-3:])]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=atol, rtol=0)
        n = len(prompt)
        torch.testing.assert_close(caches[0].kv[..., :n, :], caches[1].kv[..., :n, :], atol=atol, rtol=0)


def greedy(model, prompt, steps):
    cache, out = model.new_cache(), []
    logits = feed(model, cache, prompt)[-1]
    for _ in range(steps):
        out.append(int(logits.argmax()))
        logits = feed(model, cache, [out[-1]])[-1]
    return out


@pytest.mark.parametrize("precision", ["f16", "f32"])
def test_greedy_tokens_equal_the_readable_model_over_32_steps(models, readable, prompts, precision):
    """32 native greedy steps on every stored reference prompt; the readable model, teacher-forced
    on prompt + those tokens in one forward, picks every one of them (greedy = teacher-forced
    greedy, by induction)."""
    for prompt in prompts if precision == "f16" else prompts[3:5]:  # f32 is checked logit by logit above
        tokens = greedy(models[precision], prompt, 32)
        with torch.inference_mode():
            logits = readable(torch.tensor([prompt + tokens]))[0]
        assert logits[len(prompt) - 1: -1].argmax(-1).tolist() == tokens


def test_tree_pass_equals_the_sequential_branches_bitwise(models, prompts):
    """A tree verified in one pass (mask + positions) gives every node the logits and key/values of
    its branch fed token by token -- bitwise, batch invariance at work -- and ``keep`` of a
    branch leaves the cache a fresh prefill of it."""
    model, prompt = models["f16"], prompts[3]
    parents = np.array([-1, 0, 0, 1, 1, 2, 4], dtype=np.int64)
    nodes = [11, 22, 33, 44, 55, 66, 77]
    cache = model.new_cache()
    feed(model, cache, prompt)
    n = cache.length
    tree = feed(model, cache, nodes, positions=torch.as_tensor(tree_position_ids(parents, n)),
                mask=torch.as_tensor(tree_attention_mask(parents)))
    for leaf in (5, 6, 3):
        branch = [leaf]
        while parents[branch[-1]] >= 0:
            branch.append(int(parents[branch[-1]]))
        branch.reverse()
        fresh = model.new_cache()
        feed(model, fresh, prompt)
        for i in branch:  # one token per call
            step = feed(model, fresh, [nodes[i]])[-1]
            assert torch.equal(step, tree[i])
    cache.keep(n, [0, 1, 4, 6])  # the branch 0 -> 1 -> 4 -> 6
    fresh = model.new_cache()
    feed(model, fresh, prompt + [nodes[i] for i in (0, 1, 4, 6)])
    assert cache.length == fresh.length and torch.equal(cache.kv[..., : cache.length, :],
                                                        fresh.kv[..., : fresh.length, :])


@pytest.mark.parametrize("precision", ["f16", "f32"])
def test_a_tokens_logits_are_bitwise_the_same_in_a_pass_of_1_or_5_and_on_1_or_2_threads(models, prompts,
                                                                                       precision):
    model, prompt = models[precision], prompts[4]
    draft = [9, 99, 999, 9999, 19999]
    cache = model.new_cache()
    feed(model, cache, prompt)
    n = cache.length
    five = feed(model, cache, draft)  # (5, V)
    for i, token in enumerate(draft):
        cache.truncate(n + i)
        assert torch.equal(feed(model, cache, [token])[0], five[i])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cache.truncate(n)
        assert torch.equal(feed(model, cache, draft), five)
    finally:
        torch.set_num_threads(before)


def test_negative_control_the_readable_model_is_not_bitwise_equal(models, readable, prompts):
    """The bitwise checks above can fail: the readable model's logits for the same tokens (right
    within ATOL of f32's) are not bitwise the native ones."""
    prompt = prompts[4]
    got, want = (feed(m, m.new_cache(), prompt) for m in (models["f32"], readable))
    assert not torch.equal(got, want)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_cache_rollback_and_max_t_boundary(models, readable, prompts):
    """truncate then refeed = a fresh feed (bitwise); a call of MAX_T tokens runs the C code and
    one of MAX_T + 1 the readable forward, both within f32's tolerance of the readable model."""
    model = models["f32"]
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 49152, MAX_T + 1).tolist()
    cache = model.new_cache()
    feed(model, cache, tokens[:10])
    first = feed(model, cache, tokens[10:13])
    feed(model, cache, [5, 6, 7, 8])
    cache.truncate(10)
    assert torch.equal(feed(model, cache, tokens[10:13]), first)
    calls = []
    real = model.native.run
    model.native.run = lambda *a, **k: calls.append(len(a[0])) or real(*a, **k)
    try:
        for n in (MAX_T, MAX_T + 1):
            got = feed(model, model.new_cache(), tokens[:n])
            torch.testing.assert_close(got, feed(readable, readable.new_cache(), tokens[:n]), atol=ATOL, rtol=0)
    finally:
        del model.native.run
    assert calls == [MAX_T]  # the longer call never reached the C code


def test_bounds_are_checked_before_the_c_call(models):
    """A token id >= V or < 0, a cache without room and positions past the RoPE table are refused
    by name before ``native_llama.c`` runs (it would read past the embedding or write past the cache)."""
    model = models["f16"]
    calls = []
    real = model.native.run
    model.native.run = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        cache = model.new_cache()
        for bad in ([1, 49152], [-1]):
            with pytest.raises(ValueError, match="idx"):
                feed(model, cache, bad)
        cache.length = BLOCK - 2
        with pytest.raises(ValueError, match="cache holds"):
            feed(model, cache, [1, 2, 3])
        assert cache.length == BLOCK - 2
        with pytest.raises(ValueError, match="positions must hold"):
            feed(model, model.new_cache(), [1, 2], positions=torch.tensor([0, BLOCK]))
    finally:
        del model.native.run
    assert calls == []


def test_return_hidden_matches_the_readable_model(models, readable, prompts):
    """Blocks' outputs by index, in block order whatever the tuple's order, as the readable model."""
    prompt = prompts[5]
    with torch.inference_mode():
        _, a = models["f32"](torch.tensor([prompt]), cache=models["f32"].new_cache(), return_hidden=(20, 1, 7))
        _, b = readable(torch.tensor([prompt]), cache=readable.new_cache(), return_hidden=(20, 1, 7))
    torch.testing.assert_close(a, b, atol=ATOL, rtol=2e-5)  # block outputs reach ~3000: relative
    assert a.shape[-1] == 3 * 576


def test_the_portable_c_path_agrees_and_is_batch_invariant(models, prompts):
    """The path of CPUs without AVX2/F16C (ARM): ``-DLESSONLIB_PORTABLE`` builds it here."""
    lib = native_llama.library(("-DLESSONLIB_PORTABLE",))
    if lib is None:
        pytest.skip(native_llama.status())
    assert lib.llama_simd() == 0
    model = models["f16"]
    simd = model.native
    portable = native_llama.Prepared(lib, model, "f16")
    prompt, draft = prompts[3], [5, 50, 500]
    try:
        cache = model.new_cache()
        feed(model, cache, prompt)
        model.native = portable
        three = feed(model, cache, draft)
        cache.truncate(len(prompt) + 2)
        assert torch.equal(feed(model, cache, draft[2:])[0], three[2])
    finally:
        model.native = simd
    cache.truncate(len(prompt))
    torch.testing.assert_close(three, feed(model, cache, draft), atol=ATOL, rtol=0)


def test_the_avx2_and_avx512_kernels_give_bitwise_the_same_logits(models, prompts):
    """A committed number must not depend on the laptop's vector width: where this CPU has
    AVX-512 its kernel (a panel row per register, up to 12 tokens a group) and the AVX2 one
    (``-DLESSONLIB_NO_AVX512``: 8 lanes, up to 6 tokens a group) give bitwise the same logits for
    passes of 1 to 13 tokens (groups split 7 + 6 and 5 + 4 + 4). Where the CPU has no AVX-512
    both builds are the AVX2 kernel, and the test still checks the second build agrees."""
    avx2 = native_llama.library(("-DLESSONLIB_NO_AVX512",))
    if avx2 is None or avx2.llama_simd() == 0:
        pytest.skip("no AVX2 build here: " + native_llama.status())
    assert avx2.llama_simd() == 1
    model = models["f16"]
    default = model.native
    other = native_llama.Prepared(avx2, model, "f16")
    prompt = prompts[2]
    cache = model.new_cache()
    feed(model, cache, prompt)
    try:
        for n in (1, 2, 3, 5, 8, 13):
            draft = [(7 * i + 11) % 49152 for i in range(n)]
            model.native = default
            a = feed(model, cache, draft)
            cache.truncate(len(prompt))
            model.native = other
            b = feed(model, cache, draft)
            cache.truncate(len(prompt))
            assert torch.equal(a, b), n
    finally:
        model.native = default
