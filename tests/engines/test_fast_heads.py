"""The one-block heads' fast path (``engines.fast.head_block``) against the readable block: the
same features and the same cache after a prefill, a tree-masked step and a one-token step, on
the native forward (``engines.native``) and on the PyTorch fast path."""
import contextlib

import pytest
import torch

from lessonlib.engines import load, load_head, native
from lessonlib.engines.fast import fast_one_block, head_block
from lessonlib.models import heads
from lessonlib.models.gpt import one_block


@pytest.fixture(scope="module")
def target():
    return load("target")


def _steps(run, C):
    """Prefill 6, a 3-node tree (two children of node 0 and a grandchild) masked, then one token."""
    gen = torch.Generator().manual_seed(0)
    x1, x2, x3 = (torch.randn(1, n, C, generator=gen) for n in (6, 3, 1))
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    return [run(x1, None), run(x2, tree), run(x3, None)]


@pytest.mark.parametrize("path", ["native", "torch"])
@pytest.mark.parametrize("name", ["eagle", "eagle3"])
@torch.no_grad()
def test_fast_head_block_equals_the_readable_block(target, name, path):
    if path == "native" and native.library() is None:
        pytest.skip(native.status())
    head = load_head(name, target)
    C = target.config.n_embd
    caches = [head.new_cache(), head.new_cache()]
    with native.turned_off() if path == "torch" else contextlib.nullcontext():
        fast = _steps(lambda x, m: head_block(head.block, x, m, caches[0]), C)
    assert (head.block._native is None) == (path == "torch")
    slow = _steps(lambda x, m: one_block(head.block, x, m, caches[1]), C)
    for a, b in zip(fast, slow):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
    assert caches[0].length == caches[1].length == 10
    assert torch.allclose(caches[0].kv[0][:, :, :10], caches[1].kv[0][:, :, :10], atol=1e-5)
    # negative control: the fast path reads the tree mask (node 2 does not see node 1; causal it would)
    x1, x2, _ = _steps(lambda x, m: x, C)
    causal = head.new_cache()
    head_block(head.block, x1, None, causal)
    assert not torch.allclose(fast[1], head_block(head.block, x2, None, causal), atol=1e-3)


@torch.no_grad()
def test_fast_block_gathers_again_after_the_weights_change(target):
    head = heads.load_head("eagle", target)  # unpacked: a packed linear keeps its own copy of the weight
    C = target.config.n_embd
    x = torch.randn(1, 2, C, generator=torch.Generator().manual_seed(1))
    before = fast_one_block(head.block, x, None, head.new_cache())
    head.block.qkv.weight = torch.nn.Parameter(head.block.qkv.weight * 1.5, requires_grad=False)
    after = fast_one_block(head.block, x, None, head.new_cache())
    assert torch.allclose(after, one_block(head.block, x, None, head.new_cache()), atol=1e-4)
    assert not torch.allclose(before, after, atol=1e-3)


def test_training_and_batches_take_the_readable_block(target):
    head = load_head("eagle", target)
    x = torch.randn(2, 3, target.config.n_embd)
    with torch.no_grad():  # a batch of 2: the fast path holds batch 1 only
        assert torch.allclose(head_block(head.block, x), one_block(head.block, x), atol=1e-6)
    cache = head.new_cache()
    with pytest.raises(ValueError, match="positions"):
        with torch.no_grad():
            fast_one_block(head.block, torch.zeros(1, cache.capacity + 1, target.config.n_embd), None, cache)


def test_fast_linear_equals_the_module_and_follows_a_new_weight(target):
    """``fast.linear`` (the heads' input maps at inference) equals the module, packed or not,
    over 1-, 2- and 3-D input; a replaced weight is used, not a stale copy; under grad it is the module."""
    from lessonlib.engines.fast import linear
    from lessonlib.engines.packing import PackedLinear

    gen = torch.Generator().manual_seed(3)
    plain = torch.nn.Linear(480, 160)
    for layer in (plain, PackedLinear(plain.weight.detach(), plain.bias.detach())):
        for shape in ((480,), (4, 480), (1, 3, 480)):
            x = torch.randn(*shape, generator=gen)
            with torch.no_grad():
                torch.testing.assert_close(linear(layer, x), layer(x), atol=1e-5, rtol=0)
    with torch.no_grad():
        x = torch.randn(2, 480, generator=gen)
        before = linear(plain, x)
        plain.weight = torch.nn.Parameter(plain.weight * 2)
        torch.testing.assert_close(linear(plain, x), plain(x), atol=1e-5, rtol=0)
        assert not torch.allclose(before, linear(plain, x), atol=1e-3)
    y = linear(plain, x)  # grad on: the module itself, so training still gets gradients
    assert y.requires_grad
