"""The native EAGLE step (``native.EagleStep``) refuses what would read or write past its buffers
-- a token past a full head cache, a token id equal to V, features of the wrong width -- by name,
before any memory is touched, and leaves the head's cache as it was."""
import numpy as np
import pytest
import torch

from lessonlib import engines
from lessonlib.engines import heads, native


@pytest.fixture(scope="module")
def step_and_head():
    if native.library() is None:
        pytest.skip(native.status())
    target = engines.load("target", "cpu")
    head = engines.load_head("eagle", target)
    step = heads.native_step(head, target)
    assert step is not None
    return step, head, target


@torch.inference_mode()
def test_a_token_past_a_full_cache_is_refused_and_the_cache_kept(step_and_head):
    step, head, target = step_and_head
    C = target.config.n_embd
    cache = head.new_cache()
    cache.length = cache.capacity - 1  # one slot left
    before = cache.kv.clone()
    g, _ = step(np.array([5]), torch.zeros(1, C), cache)  # the last slot: allowed
    assert cache.length == cache.capacity and g.shape == (1, C)
    with pytest.raises(ValueError, match=f"cache holds {cache.capacity} positions"):
        step(np.array([5]), torch.zeros(1, C), cache)  # one past: refused
    assert cache.length == cache.capacity
    assert torch.equal(cache.kv[..., : cache.capacity - 1, :], before[..., : cache.capacity - 1, :])


@torch.inference_mode()
def test_a_token_id_equal_to_v_and_a_wrong_width_are_refused(step_and_head):
    step, head, target = step_and_head
    V, C = target.config.vocab_size, target.config.n_embd
    cache = head.new_cache()
    for bad in (V, -1):
        with pytest.raises(ValueError, match=rf"tokens must be token ids in \[0, {V}\)"):
            step(np.array([1, bad]), torch.zeros(2, C), cache)
        assert cache.length == 0  # nothing committed
    with pytest.raises(ValueError, match=f"features must be {C} wide"):
        step(np.array([1]), torch.zeros(1, C + 16), cache)
    step(np.array([V - 1]), torch.zeros(1, C), cache)  # control: the last id is a token
    assert cache.length == 1
