"""EAGLE head and Medusa heads (lessonlib.models.heads): the training unroll computes exactly what
drafting computes, training lowers the loss, checkpoints round-trip."""
import numpy as np
import pytest
import torch

from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter
from lessonlib.engines import FastGPT, accelerate
from lessonlib.engines.packing import can_pack, pack_for_cpu
from lessonlib.models import GPT, STORED_DTYPE, GPTConfig, heads, save, train_heads
from lessonlib.models.checkpoints import fingerprint

CONFIG = GPTConfig(vocab_size=64, block_size=48, n_layer=2, n_head=2, n_embd=32)


def models(seed=0):
    torch.manual_seed(seed)
    target = GPT(CONFIG).double().eval()
    with torch.no_grad():
        target.wte.weight.mul_(20.0)
    return target, heads.EagleHead(CONFIG).double().eval(), heads.MedusaHeads(CONFIG, 3).double().eval()


def test_unrolled_block_equals_block():
    """The batched training path and the model's Block agree on a plain causal input."""
    _, eagle, _ = models()
    x = torch.randn(3, 10, CONFIG.n_embd, dtype=torch.float64)
    out, _ = heads._unrolled_block(eagle.block, x, [], heads._ttt_mask(10, 0, "cpu"))
    torch.testing.assert_close(out, eagle.block(x), atol=1e-12, rtol=0)


def test_ttt_mask_matches_tree_ancestry():
    """Step j's query at s sees step-0 keys at <= s - j and step i's key at s - j + i."""
    T, j = 7, 2
    mask = heads._ttt_mask(T, j, "cpu").numpy().reshape(T, j + 1, T)
    for s in range(T):
        for i in range(j + 1):
            expected = [(c <= s - j) if i == 0 else (c == s - j + i) for c in range(T)]
            assert mask[s, i].tolist() == expected


@torch.inference_mode()
def test_eagle_training_unroll_equals_drafting():
    """Depth-d logits of the teacher-forced unroll (training-time test) equal the drafter's
    logits at a depth-d tree node built from the same tokens (float64, 1e-9)."""
    target, eagle, _ = models(1)
    x = torch.randint(0, CONFIG.vocab_size, (1, 20))
    steps = heads.eagle_unroll(eagle, target, x, heads.target_outputs(target, x)[1], steps=3)
    seq, s = x[0].tolist(), 9
    drafter = EagleDrafter(eagle, target)
    features = target(x[:, : s + 1], return_hidden=True)[1][0]  # h_0..h_s
    drafter.commit(seq[: s + 2], features)
    for depth in range(3):
        parents = np.arange(-1, depth - 1)  # a chain x_{s+2}, ..., x_{s+1+depth}
        tokens = np.array(seq[s + 2 : s + 2 + depth])
        row = drafter.expand(parents, tokens, [depth - 1])[0]
        expected = torch.log_softmax(steps[depth][0][0, s + depth], -1).numpy()
        np.testing.assert_allclose(row, expected, atol=1e-9)
    # negative control: the plain (non-unrolled) step-0 logits at that position differ
    assert np.abs(torch.log_softmax(steps[0][0][0, s + 2], -1).numpy() - row).max() > 1e-3


@torch.inference_mode()
def test_medusa_drafter_uses_head_per_depth():
    target, _, medusa = models(2)
    with torch.no_grad():
        for head in medusa.heads:
            torch.nn.init.normal_(head.weight, std=0.5)
    x = torch.randint(0, CONFIG.vocab_size, (1, 12))
    h = target(x, return_hidden=True)[1][0]
    drafter = MedusaDrafter(medusa, target)
    drafter.commit(x[0].tolist(), h)
    rows = drafter.expand(np.array([-1, 0, 1]), np.array([3, 4, 5]), [-1, 0, 1])
    logits = medusa(target, h[-1])
    for r, k in zip(rows, [0, 1, 2]):
        np.testing.assert_allclose(r, torch.log_softmax(logits[k], -1).numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="heads"):
        drafter.expand(np.array([-1, 0, 1]), np.array([3, 4, 5]), [2, 2])


@pytest.mark.parametrize("kinds,ttt", [(("eagle",), 2), (("eagle", "medusa"), 1)])
def test_training_lowers_the_loss(kinds, ttt):
    torch.manual_seed(3)
    target = GPT(CONFIG).eval()
    model = train_heads.Trainee(CONFIG, kinds, n_heads=3, ttt_steps=ttt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, CONFIG.vocab_size, (4, 32))
    before = {k: [v.item() for v in losses] for k, (losses, _) in model.losses(target, x).items()}
    for _ in range(25):
        train_heads._step(model, optimizer, x, None, teacher=target)
    after = {k: [v.item() for v in losses] for k, (losses, _) in model.losses(target, x).items()}
    for kind in kinds:  # every depth of every head improves
        assert len(after[kind]) == (ttt if kind == "eagle" else 3)
        assert all(a < 0.8 * b for a, b in zip(after[kind], before[kind])), (kind, before[kind], after[kind])


def test_checkpoint_round_trip(tmp_path):
    target, eagle, _ = models(4)
    save(eagle, "eagle", {"kind": "eagle", "config": CONFIG.__dict__, "n_heads": None,
                         "target_fingerprint": fingerprint(target)}, tmp_path)
    loaded = heads.load_head("eagle", target, tmp_path)
    for a, b in zip(eagle.state_dict().values(), loaded.state_dict().values()):
        torch.testing.assert_close(a.to(STORED_DTYPE).float(), b, atol=0, rtol=0)
    with pytest.raises(FileNotFoundError, match="rebuild"):
        heads.load_head("medusa", target, tmp_path)
    if can_pack(loaded):  # packed for CPU decoding: the same features, cached and tree-masked
        target = target.float()
        fast = pack_for_cpu(FastGPT.from_gpt(target)).prepare()  # the head on its target's engine
        packed = accelerate(heads.load_head("eagle", target, tmp_path), fast)
        tokens, feats = torch.randint(0, CONFIG.vocab_size, (1, 6)), torch.randn(1, 6, CONFIG.n_embd)
        mask = torch.ones(3, 3, dtype=torch.bool).tril()
        mask[2, 1] = False  # a tree: node 2 is a sibling of node 1
        outputs = []
        with torch.no_grad():
            for head in (loaded, packed):
                cache = head.new_cache()
                outputs.append(torch.cat([head(target, tokens[:, :3], feats[:, :3], cache=cache),
                                          head(target, tokens[:, 3:], feats[:, 3:], mask=mask, cache=cache)], 1))
        torch.testing.assert_close(outputs[1], outputs[0], atol=1e-4, rtol=0)
