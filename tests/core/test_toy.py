"""The toy language models of ``lessonlib.core.toy`` follow the logits(tokens) protocol, know
their own law exactly, and drive the generic loops; ``import lessonlib.core.toy`` stays numpy-only."""
import subprocess
import sys

import numpy as np
import pytest

from lessonlib.core import toy
from lessonlib.core.sampling import softmax
from lessonlib.decoding import reference


def test_rows_are_the_table_at_the_last_order_tokens():
    rng = np.random.default_rng(0)
    m = toy.random_ngram(5, 3, rng, concentration=0.5)
    tokens = [4, 0, 2, 2, 1, 3]
    rows = m.logits(tokens)
    assert rows.shape == (6, 5) and m.order == 3 and m.vocab_size == 5
    np.testing.assert_array_equal(rows[5], np.log(m.table[2, 1, 3]))
    np.testing.assert_array_equal(rows[2], np.log(m.table[4, 0, 2]))
    np.testing.assert_array_equal(rows[0], np.log(m.table[0, 0, 4]))  # padded with token 0
    np.testing.assert_array_equal(rows[:3], m.logits(tokens[:3]))  # a row sees only its prefix


def test_an_order_2_model_depends_on_more_than_the_last_token():
    m = toy.random_ngram(4, 2, np.random.default_rng(1))
    assert not np.allclose(m.logits([0, 3])[-1], m.logits([1, 3])[-1])
    markov = toy.markov(m.table[0])
    np.testing.assert_array_equal(markov.logits([0, 3])[-1], markov.logits([1, 3])[-1])


def test_continuation_law_is_the_product_of_tempered_rows():
    m = toy.random_ngram(3, 2, np.random.default_rng(2))
    law = toy.continuation_law(m, [1, 2], 3, temperature=0.5)
    assert law.shape == (3, 3, 3) and law.sum() == pytest.approx(1.0)
    rows = lambda ctx: softmax(np.log(m.table[tuple(ctx[-2:])]), 0.5)  # noqa: E731
    a, b, c = 2, 0, 1
    assert law[a, b, c] == pytest.approx(rows([1, 2])[a] * rows([2, a])[b] * rows([a, b])[c], rel=1e-12)


def test_greedy_speculative_equals_greedy_on_an_order_2_model():
    """The generic loops on a model whose next token depends on two tokens: a loop that fed the
    draft or the target the wrong context would diverge (the draft is a noisy copy)."""
    rng = np.random.default_rng(3)
    target = toy.random_ngram(6, 2, rng, concentration=0.3)
    draft = toy.mix(target, toy.random_ngram(6, 2, rng, concentration=0.3), 0.4)
    for prompt in ([0, 1], [5, 2, 4]):
        plain = reference.autoregressive_decode(target, prompt, 40, temperature=0.0)
        assert len(set(plain)) >= 3
        for k in (1, 3):
            spec, stats = reference.speculative_decode(target, draft, prompt, k, 0.0, 40)
            assert spec == plain and stats.draft_calls == k * stats.target_calls


def test_hand_counted_statistics_of_the_reference_loop():
    """Target: next = a + 1 (mod 4), certain. Draft: the same except after 2 it says 0. From
    [0] with k = 3: round 1 drafts 1 2 0, accepts 1 2, the target corrects to 3; rounds 2 and 3
    draft 0 1 2, all accepted, bonus 3. Three target calls, 9 draft calls, alpha = 8 / 9,
    tau = 11 / 3 -- the same at every temperature (one-hot rows stay one-hot)."""
    step = np.roll(np.eye(4), 1, axis=1)  # row a is one-hot at a + 1
    draft_table = step.copy()
    draft_table[2] = np.eye(4)[0]
    for temperature in (0.0, 0.5, 1.7):
        new, stats = reference.speculative_decode(toy.markov(step), toy.markov(draft_table), [0], 3, temperature, 8,
                                                  np.random.default_rng(0))
        assert new == [1, 2, 3, 0, 1, 2, 3, 0]
        assert stats.lengths == [2, 3, 3] and stats.target_calls == 3 and stats.draft_calls == 9
        assert stats.alpha == 8 / 9 and stats.tau == 11 / 3 and stats.drafted == 9


@pytest.mark.parametrize("call,message", [
    (lambda: toy.NgramLM(np.full((3, 4), 0.25)), "table must have shape"),
    (lambda: toy.NgramLM(np.full((3, 3), 0.5)), "table rows must sum to 1"),
    (lambda: toy.NgramLM(np.eye(3), pad=3), "pad must be token ids"),
    (lambda: toy.markov(np.eye(3)).logits([0, 3]), r"tokens must be token ids in \[0, 3\)"),
    (lambda: toy.markov(np.eye(3)).logits([-1]), "tokens must be token ids"),
    (lambda: toy.markov(np.eye(3)).logits([]), "tokens must be a non-empty"),
    (lambda: toy.random_ngram(1, 2, np.random.default_rng(0)), "vocab_size must be an integer >= 2"),
    (lambda: toy.random_ngram(3, 0, np.random.default_rng(0)), "order must be an integer >= 1"),
    (lambda: toy.random_ngram(3, 1, None), "rng must be"),
    (lambda: toy.random_ngram(3, 1, np.random.default_rng(0), concentration=0), "concentration"),
    (lambda: toy.mix(toy.markov(np.eye(3)), toy.markov(np.eye(4)), 0.5), "same table shape"),
    (lambda: toy.mix(toy.markov(np.eye(3)), toy.markov(np.eye(3)), 1.5), "weight must lie in"),
    (lambda: toy.continuation_law(toy.markov(np.eye(3)), [], 2), "prompt must hold"),
    (lambda: toy.continuation_law(toy.markov(np.eye(3)), [0], 0), "length must be an integer >= 1"),
    (lambda: toy.continuation_law(toy.markov(np.eye(3)), [0], 1, -1.0), "temperature"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_importing_toy_does_not_import_torch():
    code = "import sys, lessonlib.core.toy; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
