"""Self-speculative decoding with multi-token prediction (lessonlib.decoding.mtp_draft): the MTP
drafter's cached rows against recomputation, greedy equality and the sampled law (the
training loss's alignment is in tests/models/test_mtp.py)."""
import functools

import numpy as np
import pytest
import torch

from lessonlib.core import tree
from lessonlib.core.stats import chi_square
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import Drafter
from lessonlib.decoding.mtp_draft import MTPDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import GPT, GPTConfig
from lessonlib.models.mtp import MTPModules, TargetWithMTP, mtp_train_step

CONFIG = GPTConfig(vocab_size=8, block_size=64, n_layer=2, n_head=2, n_embd=16)


def tiny(seed, config=CONFIG, sharpen=1.0):
    torch.manual_seed(seed)
    target = GPT(config).double().eval()
    with torch.no_grad():
        target.wte.weight.mul_(sharpen)  # peakier next-token distributions: context decides more
    mtp = MTPModules(config, depth=2).double().eval()
    return target, mtp


@functools.lru_cache(maxsize=1)
def trained():
    """A tiny target + MTP modules trained jointly on an order-2 Markov source (the next token
    depends on the last two: a model repeating its last token learns nothing here), so the
    modules' drafts are often accepted and every commit path runs."""
    rng = np.random.default_rng(0)
    table = rng.integers(0, 8, (8, 8))  # (a, b) -> the likely next token

    def batch(n, T):
        x = np.zeros((n, T + 1), dtype=np.int64)
        x[:, :2] = rng.integers(0, 8, (n, 2))
        for t in range(2, T + 1):
            likely = table[x[:, t - 2], x[:, t - 1]]
            x[:, t] = np.where(rng.random(n) < 0.9, likely, rng.integers(0, 8, n))
        return torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])

    torch.manual_seed(0)
    model = TargetWithMTP(GPT(CONFIG), depth=2, planned_steps=150)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        mtp_train_step(model, opt, *batch(16, 32))
    return model.gpt.double().eval(), model.mtp.double().eval(), batch(1, 12)[0][0].tolist()


def _recomputed_rows(target, mtp, seq, first_tokens):
    """Root row and depth-0 rows from a full, uncached unroll over seq (+ each first token)."""
    x = torch.tensor([seq])
    h0 = target(x, return_hidden=True)[1]
    root = torch.log_softmax(target.lm_head(mtp.unroll(target, x, h0)[0][0, -1]), -1)
    rows = []
    for a in first_tokens:
        xa = torch.tensor([seq + [a]])
        h2 = mtp.unroll(target, xa, target(xa, return_hidden=True)[1])[1][0, -1]
        rows.append(torch.log_softmax(target.lm_head(h2), -1))
    return root.numpy(), torch.stack(rows).numpy()


@torch.inference_mode()
def test_drafter_rows_equal_recomputation_across_rounds():
    """Cached MTP feeds after rounds that commit 1, 2, 3 ... tokens give the same rows as an
    uncached unroll over the whole committed sequence (float64, 1e-9)."""
    target, mtp = tiny(0)
    drafter = MTPDrafter(mtp, target)
    assert isinstance(drafter, Drafter)
    rng = np.random.default_rng(0)
    seq = rng.integers(0, 8, 5).tolist()
    drafter.commit(seq, target(torch.tensor([seq[:-1]]), return_hidden=True)[1][0])
    for commit in [1, 3, 2, 1, 1, 3]:
        parents, tokens = np.array([-1, -1, 0, 1]), np.array([3, 5, 1, 2])
        rows = drafter.expand(parents, tokens, np.array([-1, 0, 1]))
        root, first = _recomputed_rows(target, mtp, seq, [3, 5])
        np.testing.assert_allclose(rows[0], root, atol=1e-9, rtol=0)
        np.testing.assert_allclose(rows[1:], first, atol=1e-9, rtol=0)
        before = len(seq)
        seq = seq + rng.integers(0, 8, commit).tolist()
        # the target's features at the root (old last token) and the accepted tokens
        h = target(torch.tensor([seq[:-1]]), return_hidden=True)[1][0]
        drafter.commit(seq, h[before - 1 :])


@torch.inference_mode()
def test_stale_feed_is_a_detectable_error():
    """Negative control for the test above: skipping one commit leaves the rows wrong."""
    target, mtp = tiny(0)
    drafter = MTPDrafter(mtp, target)
    seq = [1, 2, 3, 4, 5]
    drafter.commit(seq, target(torch.tensor([seq[:-1]]), return_hidden=True)[1][0])
    seq2 = seq + [6 % 8, 7]
    root, _ = _recomputed_rows(target, mtp, seq2, [0])
    assert np.abs(drafter.expand([], [], [-1])[0] - root).max() > 1e-3


@pytest.mark.parametrize("branching", [(1,), (1, 1), (2, 2), (3, 1)])
def test_greedy_self_speculation_equals_greedy_decoding(branching):
    """On the trained context-dependent model (drafts accepted, so commits of 1, 2 and 3
    tokens all happen) and on a random sharp one (drafts mostly rejected)."""
    trained_target, trained_mtp, source_prompt = trained()
    rule = functools.partial(tree.draft_topk, branching=branching)
    for target, mtp, prompt in [(trained_target, trained_mtp, source_prompt),
                                (*tiny(2, sharpen=20.0), [7, 7, 3, 0, 6])]:
        expected, _ = decode.generate(target, prompt, 30)
        out, stats = tree_generate(target, MTPDrafter(mtp, target), prompt, 30, rule=rule)
        assert out == expected
        assert stats.target_calls == stats.rounds <= 30
    _, stats = tree_generate(trained_target, MTPDrafter(trained_mtp, trained_target), source_prompt, 30, rule=rule)
    assert stats.tau > 1.3 and stats.acceptance_by_depth[0] > 0.5  # acceptance exercised


def test_deeper_trees_are_refused():
    target, mtp = tiny(0)
    with pytest.raises(ValueError, match="depth <= 2"):
        tree_generate(target, MTPDrafter(mtp, target), [1, 2, 3], 5,
                      rule=functools.partial(tree.draft_topk, branching=(1, 1, 1)))


@pytest.mark.parametrize("temperature", [0.5, 1.7])
@torch.inference_mode()
def test_sampled_self_speculation_matches_the_target(temperature):
    """3-token vocabulary: the first two emitted tokens follow the target's two-step law at
    this temperature (chi-square, false alarm 1e-3, 1200 runs); the law at another temperature
    is rejected by the same counts (the test has power)."""
    config = GPTConfig(vocab_size=3, block_size=32, n_layer=1, n_head=1, n_embd=8)
    target, mtp = tiny(3, config, sharpen=6.0)
    prompt = [0, 2, 1]

    def law(t):
        p1 = torch.softmax(target(torch.tensor([prompt]))[0, -1] / t, -1).numpy()
        return np.array([p1[a] * torch.softmax(target(torch.tensor([prompt + [a]]))[0, -1] / t, -1).numpy()
                         for a in range(3)])

    rng = np.random.default_rng(int(10 * temperature))
    counts = np.zeros((3, 3))
    rule = functools.partial(tree.draft_topk, branching=(2, 1))
    for _ in range(1200):
        out, _ = tree_generate(target, MTPDrafter(mtp, target), prompt, 2, rule=rule, temperature=temperature, rng=rng)
        counts[out[0], out[1]] += 1
    assert chi_square(counts, law(temperature).ravel())[1] > 1e-3
    other = 1.0 if temperature < 1 else 0.8
    assert chi_square(counts, law(other).ravel())[1] < 1e-3
