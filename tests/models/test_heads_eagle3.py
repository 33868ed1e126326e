"""EAGLE-3: fused low/middle/top features, direct token prediction with the training-time
test, and its drafter in the tree loop (exact at T = 0)."""
import functools

import numpy as np
import pytest
import torch

from lessonlib.core import tree
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import EagleDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import GPT, GPTConfig, heads, save, train_heads
from lessonlib.models.checkpoints import fingerprint

CONFIG = GPTConfig(vocab_size=32, block_size=64, n_layer=8, n_head=2, n_embd=16)


def target_and_head(seed, sharpen=1.0):
    torch.manual_seed(seed)
    target = GPT(CONFIG).double().eval()
    with torch.no_grad():
        target.wte.weight.mul_(sharpen)
    return target, heads.Eagle3Head(CONFIG).double().eval()


def test_fusion_layers_take_low_middle_and_top():
    assert heads.fusion_layers(8) == (1, 3, 7) and heads.fusion_layers(24) == (5, 11, 23)
    assert heads.fusion_layers(2) == (0, 1)  # the top block always comes last


@torch.inference_mode()
def test_fused_features_are_those_blocks_outputs():
    """return_hidden=(i, j, k) concatenates exactly those blocks' outputs (checked with hooks);
    the top block's come last, equal to return_hidden=True."""
    target, head = target_and_head(0)
    x = torch.randint(0, 32, (2, 10))
    seen = {}
    hooks = [target.blocks[i].register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out))
             for i in head.layers]
    logits, fused = target(x, return_hidden=head.layers)
    for h in hooks:
        h.remove()
    torch.testing.assert_close(fused, torch.cat([seen[i] for i in head.layers], -1), atol=0, rtol=0)
    top = target(x, return_hidden=True)[1]
    torch.testing.assert_close(fused[..., -CONFIG.n_embd :], top, atol=0, rtol=0)
    assert not torch.equal(fused[..., : CONFIG.n_embd], top)  # a lower block is not the top one


@torch.inference_mode()
def test_head_reads_fused_features_then_its_own():
    """Width 3C goes through the fusion map; width C (the head's own g) does not."""
    target, head = target_and_head(1)
    x = torch.randint(0, 32, (1, 6))
    fused = target(x, return_hidden=head.layers)[1]
    g_fused = head(target, x, fused)
    g_direct = head(target, x, head.fuse(fused))
    torch.testing.assert_close(g_fused, g_direct, atol=1e-12, rtol=0)
    with pytest.raises(RuntimeError):
        head(target, x, fused[..., :-1])  # neither width: the fusion map refuses it


@pytest.mark.parametrize("branching", [(1, 1, 1), (2, 2, 1)])
def test_greedy_tree_decoding_with_eagle3_equals_greedy_decoding(branching):
    target, head = target_and_head(2, sharpen=20.0)
    rule = functools.partial(tree.draft_topk, branching=branching)
    for prompt in ([1, 5, 9, 13], [30, 2, 2, 7, 19, 4]):
        expected, _ = decode.generate(target, prompt, 30)
        out, _ = tree_generate(target, EagleDrafter(head, target), prompt, 30, rule=rule)
        assert out == expected


@torch.inference_mode()
def test_eagle3_drafter_rows_equal_a_fresh_unroll():
    """After committing a prompt, the drafter's root row is the head's prediction from the
    fused features of the whole prompt (cache equals recomputation)."""
    target, head = target_and_head(3)
    prompt = [3, 1, 4, 1, 5, 9, 2]
    drafter = EagleDrafter(head, target)
    assert drafter.feature_layers == head.layers
    fused = target(torch.tensor([prompt[:-1]]), return_hidden=head.layers)[1][0]
    drafter.commit(prompt, fused)
    g = head(target, torch.tensor([prompt[1:]]), fused[None])[0, -1]
    want = torch.log_softmax(target.lm_head(g), -1).numpy()
    np.testing.assert_allclose(drafter.expand([], [], [-1])[0], want, atol=1e-12, rtol=0)


def test_eagle3_training_lowers_every_unrolled_step():
    torch.manual_seed(4)
    target = GPT(CONFIG).eval()
    model = train_heads.Trainee(CONFIG, ("eagle3",), eagle3_ttt=3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, 32, (4, 24))
    before = [v.item() for v in model.losses(target, x)["eagle3"][0]]
    for _ in range(25):
        train_heads._step(model, optimizer, x, None, teacher=target)
    after = [v.item() for v in model.losses(target, x)["eagle3"][0]]
    assert len(after) == 3 and all(a < 0.8 * b for a, b in zip(after, before)), (before, after)


def test_eagle3_checkpoint_round_trip(tmp_path):
    target, head = target_and_head(5)
    save(head, "eagle3", {"kind": "eagle3", "config": CONFIG.__dict__, "n_heads": None,
                          "target_fingerprint": fingerprint(target.float())}, tmp_path)
    loaded = heads.load_head("eagle3", target.float(), tmp_path)
    assert isinstance(loaded, heads.Eagle3Head) and loaded.layers == head.layers
