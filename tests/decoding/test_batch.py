"""Batched decoding (``decoding.batch``, ``engines.batched``): B sequences at once, each at its own length.

* the batched cache against recomputation: rows fed in uneven chunks (counts 0 included), each
  row's logits and keys/values equal a fresh batch-1 prefill of its tokens; rows leaving keep theirs;
* greedy: every row's tokens equal its batch-1 loop's (``decode.generate``), for plain decoding
  and chain speculation, several B and K, prompts of different lengths -- on context-dependent toy
  GPTs and on the shipped target with ``draft-kl``;
* sampled: a chi-square test of the (previous token, next token) counts against the exact law of
  a Markov GPT at T = 1 and T = 1.7, for the batched plain and chain loops; the same test must
  reject the batched loop's own bug, rows mixed up (plain: row b sampled from row b + 1's p;
  chain: row b's drafts judged with row b + 1's q). Measured: the correct loops p = 0.54 to
  0.99 at seed 0; the controls p < 2e-5 at each of seeds 0 to 4 (the weakest: chain at T = 1.7).
"""
import numpy as np
import pytest
import torch
from loop_support import LEVEL, context_gpt, context_p_value, markov_gpt, noisy_copy

from lessonlib import engines
from lessonlib.decoding import batch, decode
from lessonlib.engines.batched import BatchCache, batched_forward
from lessonlib.models import load

PROMPTS = [[5, 17, 3, 42, 8], [9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [60, 61], [33, 7, 7, 2, 90, 14, 1]]


@pytest.fixture(scope="module")
def toys():
    target = context_gpt(0, vocab=97, block_size=64)
    return target, noisy_copy(target, 1)


@torch.inference_mode()
def test_batched_cache_equals_a_fresh_prefill(toys):
    model = toys[0]
    cache = BatchCache(model, 3)
    rows = [[], [], []]
    rng = np.random.default_rng(0)
    for step in range(5):  # uneven chunks per row, a row feeding nothing in some steps
        counts = rng.integers(0, 5, size=3) if step else np.array([4, 1, 3])
        new = rng.integers(0, 97, size=(3, int(counts.max()) or 1))
        logits = batched_forward(model, cache, new, counts)
        for b in range(3):
            rows[b] += new[b, : counts[b]].tolist()
            if counts[b]:
                ref = model(torch.tensor([rows[b]]))[0, -counts[b]:]  # float64: no cast
                np.testing.assert_allclose(logits[b, : counts[b]].numpy(), ref.numpy(), atol=1e-9, rtol=0)
    cache.select([2, 0])  # row 1 leaves; rows 2 and 0 keep their keys/values
    for b, kept in enumerate([2, 0]):
        fresh = model.new_cache()
        model(torch.tensor([rows[kept]]), cache=fresh)
        row = cache.row(b)
        assert row.length == len(rows[kept])
        np.testing.assert_allclose(row.kv[:, :, :, : row.length], fresh.kv[:, :, :, : row.length], atol=1e-9)
    last = batched_forward(model, cache, [[3], [4]], last_only=True)  # (B, V) after each row's last token
    np.testing.assert_allclose(last[1].numpy(), model(torch.tensor([rows[0] + [4]]))[0, -1].numpy(), atol=1e-9)


@pytest.mark.parametrize("k", [None, 1, 4])
def test_greedy_rows_equal_their_batch_1_output(toys, k):
    target, draft = toys
    ref = [decode.generate(target, p, 30)[0] for p in PROMPTS]
    assert len({tuple(r) for r in ref}) == len(ref) and min(len(set(r)) for r in ref) > 4  # context-dependent
    for B in (1, 2, len(PROMPTS)):
        if k is None:
            out, stats = batch.batch_generate(target, PROMPTS[:B], 30)
        else:
            out, stats = batch.batch_speculative_generate(target, draft, PROMPTS[:B], k, 30)
            assert 0 < stats.alpha < 1 and stats.tau > 1
        assert out == ref[:B]
        assert [len(e) for e in stats.extra["emit_seconds"]] == [30] * B
        assert stats.new_tokens == 30 * B and stats.extra["batch"] == B


def test_shipped_target_and_draft_kl_batched_equal_batch_1():
    target, draft = engines.load("target"), load("draft-kl")
    from lessonlib.models.data import heldout_prompts

    prompts = [p[: 20 + 13 * i] for i, p in enumerate(heldout_prompts("code", 3, 50))]  # 20 to 46 tokens
    ref = [decode.generate(target, p, 16)[0] for p in prompts]
    assert batch.batch_generate(target, prompts, 16)[0] == ref
    out, stats = batch.batch_speculative_generate(target, draft, prompts, 3, 16)
    assert out == ref and 0 < stats.alpha < 1
    assert len(set(stats.lengths)) > 1  # the rows accepted different numbers of drafts


TEMPERATURES = [1.0, 1.7]
MARKOV_PROMPTS = [[1], [4], [2, 3], [0, 5, 1], [3], [5, 2], [1, 1, 4, 0], [2]]
MODELS = {1.0: (markov_gpt(0, sharpen=5.0), markov_gpt(1, sharpen=10.0)),
          1.7: (markov_gpt(0, sharpen=10.0), markov_gpt(1, sharpen=10.0))}


def _runs(loop, temperature, seed=0):
    target, draft = MODELS[temperature]
    rng = np.random.default_rng(seed)
    if loop == "plain":
        out, _ = batch.batch_generate(target, MARKOV_PROMPTS, 100, temperature, rng)
    else:
        out, _ = batch.batch_speculative_generate(target, draft, MARKOV_PROMPTS, 3, 150, temperature, rng)
    return list(zip(MARKOV_PROMPTS, out))


def _control(loop, monkeypatch):
    if loop == "plain":  # row b sampled from row b + 1's p: the batched loop's own bug
        draw = batch.inverse_cdf
        monkeypatch.setattr(batch, "inverse_cdf", lambda p, u: draw(np.roll(p, 1, axis=0), u))
    else:  # row b judged with row b + 1's q
        right = batch.verify_rounds
        monkeypatch.setattr(batch, "verify_rounds", lambda p, q, d, ua, uf, validate=True:
                            right(p, np.roll(q, 1, axis=0), d, ua, uf, validate))


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("loop", ["plain", "chain"])
def test_batched_sampled_loop_follows_the_target_and_its_wrong_version_does_not(loop, temperature, monkeypatch):
    target = MODELS[temperature][0]
    assert context_p_value(target.logits, _runs(loop, temperature), temperature) > LEVEL
    _control(loop, monkeypatch)
    assert context_p_value(target.logits, _runs(loop, temperature), temperature) < LEVEL


def test_bad_input_names_the_argument(toys):
    target, draft = toys
    with pytest.raises(ValueError, match="prompts"):
        batch.batch_generate(target, [], 4)
    with pytest.raises(ValueError, match="k must be"):
        batch.batch_speculative_generate(target, draft, PROMPTS, 0, 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        batch.batch_generate(target, PROMPTS, 60)  # 11 + 60 > the context of 64
    with pytest.raises(ValueError, match="rng"):
        batch.batch_generate(target, PROMPTS, 4, 1.0)
    cache = BatchCache(target, 2)
    with pytest.raises(ValueError, match="lengths"):
        cache.truncate([1, 0])
    with pytest.raises(ValueError, match="counts"):
        batched_forward(target, cache, [[1, 2], [3, 4]], [3, 1])


def test_a_greedy_draft_beside_a_sampled_target_keeps_the_targets_law_per_row():
    """Batched rounds against the batch-1 law: a draft that drafts greedily (its q one-hot) under a
    target sampled at T = 1 must leave every row's first two tokens distributed as the target's own
    (chi-square over 600 rows, each its own stream; seeded). Recording the softmax q it did not
    draft from, or reusing a round's first uniform for its last token, moves the law."""
    from loop_support import context_gpt

    from lessonlib.core.sampling import softmax
    from lessonlib.core.stats import chi_square
    from lessonlib.decoding.batch import batch_speculative_generate
    from lessonlib.decoding.round import Sampling

    target, draft = context_gpt(0, block_size=32), context_gpt(3, block_size=32)
    prompt, V = [1, 2, 3], target.config.vocab_size
    rows, _ = batch_speculative_generate(target, draft, [prompt] * 600, 2, 2, Sampling(1.0, draft_temperature=0.0),
                                         np.random.default_rng(7))
    first = np.bincount([r[0] for r in rows], minlength=V)
    _, p_first = chi_square(first, softmax(target.logits(prompt)[-1]))
    pairs = np.array([r[0] * V + r[1] for r in rows])
    law = np.concatenate([softmax(target.logits(prompt)[-1])[x] * softmax(target.logits(prompt + [x])[-1])
                          for x in range(V)])  # P(x0, x1) = p(x0) p(x1 | x0)
    _, p_pair = chi_square(np.bincount(pairs, minlength=V * V), law)
    assert p_first > 1e-3 and p_pair > 1e-3, (p_first, p_pair)
    # negative control: the draft's own greedy chain is not the target's law
    greedy = np.bincount([r[0] for r in batch_speculative_generate(target, draft, [prompt] * 600, 2, 2, 0.0)[0]],
                         minlength=V)
    assert chi_square(greedy, softmax(target.logits(prompt)[-1]))[1] < 1e-6
