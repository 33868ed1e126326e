"""The native forward (``engines.native``, ``native.c``): it builds here, runs where it says it
does, keeps half-precision weights only when they are exact, agrees with the readable GPT on
both sides of ``MAX_T``, and a failed build or ``LESSONLIB_NATIVE=0`` leaves the PyTorch path
(equal results). test_fast.py and test_fast_heads.py run every other check on both paths."""
import json

import numpy as np
import pytest
import torch
from loop_support import context_gpt

from lessonlib import engines
from lessonlib.core import tree
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import EagleDrafter
from lessonlib.engines import FastGPT, build, heads, load_head, native
from lessonlib.engines.fast import head_block
from lessonlib.models.gpt import one_block

ATOL = 1e-4


@pytest.fixture(scope="module")
def target():
    if native.library() is None:
        pytest.skip(native.status())
    return engines.load("target", "cpu")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process state where the library has not been looked for, building into ``tmp_path``."""
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setattr(build, "_told", False)
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    return tmp_path


def _readable_logits(model, tokens, cut):
    cache = model.new_cache()
    first = model(tokens[:, :cut], cache=cache)
    return first, model(tokens[:, cut:], cache=cache)


@torch.inference_mode()
@pytest.mark.parametrize("n_new", [1, native.MAX_T, native.MAX_T + 1])
def test_native_and_pytorch_sides_of_max_t_match_the_readable_model(target, n_new):
    """A call of MAX_T new tokens runs native.c, one more runs PyTorch's path: both equal the
    readable model, and native.c really ran for the first (its counter of calls moved)."""
    readable = engines.load("target", "cpu", engine="packed")
    tokens = torch.as_tensor(np.random.default_rng(n_new).integers(0, 2048, (1, 40 + n_new)))
    calls = []
    real = target.native.run
    target.native.run = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        got = _readable_logits(target, tokens, 40)
    finally:
        del target.native.run
    want = _readable_logits(readable, tokens, 40)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert len(calls) == 1 + (n_new <= native.MAX_T)  # the 40-token prefill and the new tokens


def test_half_precision_weights_only_when_exact(target):
    """The shipped weights are stored as float16, so native.c reads them in half precision; a
    model whose weights are not exact in float16 keeps float32 and still equals its readable self."""
    assert target.native.f16 == native.library().lessonlib_has_f16()
    model = context_gpt(0, vocab=64, n_layer=2, block_size=64).float()  # trained float64 -> float32: inexact
    fast = FastGPT.from_gpt(model)
    assert fast.native is not None and fast.native.f16 == 0
    prompt = [1, 5, 9, 13, 2]
    with torch.inference_mode():
        torch.testing.assert_close(fast(torch.tensor([prompt]), cache=fast.new_cache()), model(torch.tensor([prompt])),
                                   atol=ATOL, rtol=0)
    assert decode.generate(fast, prompt, 30)[0] == decode.generate(model, prompt, 30)[0]
    # control: the same weights rounded to float16 are another model, which native.c would read as such
    rounded = {k: v.half().float() for k, v in model.state_dict().items()}
    assert any(not torch.equal(rounded[k], v) for k, v in model.state_dict().items())


@torch.inference_mode()
@pytest.mark.parametrize("n_embd, vocab", [(32, 64), (24, 20)])
def test_both_layouts_match_the_readable_model_at_every_token_count(n_embd, vocab):
    """native.c packs the matrices in panels of 16 outputs when every output width is a multiple
    of 16 (the shipped models) and reads them row-major otherwise (24 wide: qkv 72; vocabulary
    20). Either way every count of new tokens -- one, the token groups of 2 to 6, groups split
    evenly past 6 -- and a tree mask give the readable model's logits and cache."""
    model = context_gpt(3, vocab=vocab, n_layer=2, n_embd=n_embd, n_head=n_embd // 8).float()
    fast = FastGPT.from_gpt(model)
    if fast.native is None:
        pytest.skip(native.status())
    assert fast.native.panel == (n_embd % 16 == 0 and vocab % 16 == 0 and native.library().lessonlib_has_f16())
    rng = np.random.default_rng(n_embd)
    for n_new in (1, 2, 3, 4, 5, 6, 7, 13):
        tokens = torch.as_tensor(rng.integers(0, vocab, (1, 9 + n_new)))
        for a, b in zip(_readable_logits(fast, tokens, 9), _readable_logits(model, tokens, 9)):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    parents = tree.with_root(np.array([-1, 0, 0, 1, 1, 2, 4], dtype=np.int64))  # a tree of 7 nodes after a root
    mask = torch.from_numpy(tree.tree_attention_mask(parents))
    positions = torch.as_tensor(tree.tree_position_ids(parents, 9))
    tokens = torch.as_tensor(rng.integers(0, vocab, (1, 9 + len(parents))))
    caches, outs = [fast.new_cache(), model.new_cache()], []
    for m, cache in zip((fast, model), caches):
        m(tokens[:, :9], cache=cache)
        outs.append(m(tokens[:, 9:], positions=positions, mask=mask, cache=cache))
    torch.testing.assert_close(outs[0], outs[1], atol=ATOL, rtol=0)
    torch.testing.assert_close(caches[0].kv[..., :caches[0].length, :], caches[1].kv[..., :caches[1].length, :],
                               atol=ATOL, rtol=0)


def test_the_shipped_models_read_panels(target):
    """Every output width of the shipped target (160, 480, 640, 2048) is a multiple of 16."""
    assert target.native.panel == native.library().lessonlib_has_f16()
    assert native.to_panels(torch.arange(32.0).reshape(16, 2))[0, 1, 3] == 7.0  # output 3, input 1


@torch.no_grad()
def test_head_block_runs_native_and_equals_the_readable_block(target):
    head = load_head("eagle3", target)
    x = torch.randn(1, 5, target.config.n_embd, generator=torch.Generator().manual_seed(2))
    caches = head.new_cache(), head.new_cache()
    got = head_block(head.block, x, None, caches[0])
    assert head.block._native is not None  # prepared for native.c on the first call
    torch.testing.assert_close(got, one_block(head.block, x, None, caches[1]), atol=ATOL, rtol=0)
    torch.testing.assert_close(caches[0].kv[:, :, :, :5], caches[1].kv[:, :, :, :5], atol=ATOL, rtol=0)


@torch.inference_mode()
@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_the_native_eagle_step_equals_the_head_it_fuses(target, kind):
    """A chain's draft step and a round's commit run the head's fuse (EAGLE-3), fc and block and
    the target's tied head in one native call (``native.EagleStep``): the same tokens,
    log-probability rows, features g and head cache as the head's PyTorch path, module by module."""
    head = load_head(kind, target)
    assert heads.native_step(head, target) is not None
    assert heads.native_step(head, target) is heads.native_step(head, target)  # kept on the head
    drafters = [EagleDrafter(head, target), EagleDrafter(load_head(kind, target), target)]
    prompt = np.random.default_rng(5).integers(0, 2048, 30).tolist()
    cache = target.new_cache()
    _, feats = target(torch.tensor([prompt]), cache=cache, return_hidden=drafters[0].feature_layers or True)
    drafters[0].commit(prompt, feats[0, :-1])
    got = drafters[0].chain(5, None, None)
    with native.turned_off():
        assert heads.native_step(drafters[1].head, target) is None
        drafters[1].commit(prompt, feats[0, :-1])
        want = drafters[1].chain(5, None, None)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(drafters[0].logq, drafters[1].logq, atol=1e-4, rtol=0)
    torch.testing.assert_close(drafters[0].g, drafters[1].g, atol=ATOL, rtol=0)
    n = drafters[1].cache.length
    assert drafters[0].cache.length == n == 30 - 1 + 4  # the committed features, then 4 fed chain nodes
    torch.testing.assert_close(drafters[0].cache.kv[..., :n, :], drafters[1].cache.kv[..., :n, :], atol=ATOL, rtol=0)


def test_turned_off_and_bad_settings(monkeypatch):
    with native.turned_off():
        assert not native.enabled() and native.status().startswith("off")
        assert engines.load("draft-kl", "cpu").native is None
    monkeypatch.setenv(native.ENV, "yes")
    with pytest.raises(ValueError, match="LESSONLIB_NATIVE must be 0 or 1"):
        native.enabled()
    monkeypatch.setenv(native.ENV, "1")
    monkeypatch.setenv(native.CACHE_ENV, " ")
    with pytest.raises(ValueError, match="LESSONLIB_CACHE is empty"):
        native.cache_dir()


def test_a_failed_build_leaves_the_pytorch_path(fresh, monkeypatch, capfd):
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    assert native.library() is None
    assert "did not build" in native.status() and "false failed" in native.status()
    from lessonlib.engines import llama
    assert llama.library() is None  # a second fallback in the same process prints nothing more
    told = capfd.readouterr().err.strip().splitlines()
    assert len(told) == 1 and "PyTorch path runs instead" in told[0] and "false failed" in told[0]
    assert list(fresh.iterdir()) == []  # no half-written library left behind
    model = context_gpt(0, vocab=64, n_layer=2, block_size=64).float()
    fast = FastGPT.from_gpt(model)
    assert fast.native is None
    assert decode.generate(fast, [3, 1, 4], 20)[0] == decode.generate(model, [3, 1, 4], 20)[0]


def test_the_build_is_cached_by_content(fresh):
    if native.library() is None:
        pytest.skip(native.status())
    built = sorted(fresh.iterdir())
    assert [p.name for p in built[1:]] == [built[0].name + ".json"]  # the library and its record, nothing else
    built = built[:1]
    assert built[0].suffix == ".so"  # the temporary file was renamed into place
    stamp = built[0].stat().st_mtime_ns
    assert native._build("cc") == built[0] and built[0].stat().st_mtime_ns == stamp  # found, not rebuilt


def test_a_cached_library_cut_in_half_is_rebuilt_not_mapped(fresh):
    """A cached .so whose bytes differ from its record (cut in half: mapping it killed the process
    with SIGBUS) or that has no record is rebuilt before it is loaded; the record is size + sha256."""
    compiler = build.compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    path = native._build(compiler)
    record = json.loads(build.record_of(path).read_text())
    assert record["size"] == path.stat().st_size and record["sha256"] == build.sha256(path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # never mapped in this process
    assert not build.verified(path)
    assert native._build(compiler) == path and path.stat().st_size > len(whole) // 2  # rebuilt in place
    assert build.verified(path) and native.library() is not None
    build.record_of(path).unlink()  # a library without its record is not trusted either
    assert not build.verified(path)
    assert native._build(compiler) == path and build.verified(path)


@torch.inference_mode()
def test_fused_features_come_in_block_order_like_the_readable_model(target):
    """EAGLE-3 asks for blocks by index; an unsorted tuple still gives them in block order, as
    ``GPT.forward`` concatenates them (a repeated index once)."""
    readable = engines.load("target", "cpu", engine="packed")
    tokens = torch.as_tensor(np.random.default_rng(7).integers(0, 2048, (1, 12)))
    outs = []
    for model in (target, readable):
        cache = model.new_cache()
        model(tokens[:, :8], cache=cache)
        outs.append(model(tokens[:, 8:], cache=cache, return_hidden=(23, 5, 11))[1])
    torch.testing.assert_close(outs[0], outs[1], atol=ATOL, rtol=0)
    assert outs[0].shape[-1] == 3 * target.config.n_embd
