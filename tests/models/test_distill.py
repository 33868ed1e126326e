"""lessonlib.models.distill: alpha measured on teacher-forced text, baselines, and the cost helpers."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lessonlib.core import toy
from lessonlib.models import GPT, GPTConfig, data, distill, train

V = 7


Markov = toy.markov  # order-1 toy model with a known next-token table (``core.toy``)


def random_table(rng, sharp=1.0):
    return rng.dirichlet(np.full(V, sharp), size=V)


@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    table = random_table(rng, 0.5)  # the draft is a noisy copy: it agrees with the target on some rows only
    return Markov(table), Markov(0.5 * table + 0.5 * random_table(rng, 0.5)), rng.integers(0, V, 300)


def tempered(table, temperature):
    t = table ** (1 / temperature)
    return t / t.sum(-1, keepdims=True)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_alpha_is_one_minus_tv_per_position(pair, temperature):
    target, draft, tokens = pair
    p, q = tempered(target.table, temperature)[tokens[:-1]], tempered(draft.table, temperature)[tokens[:-1]]
    tv = 0.5 * np.abs(p - q).sum(-1)
    mean, alpha = distill.measure_alpha(target, draft, tokens, temperature, window=50)
    assert alpha.shape == (len(tokens) - 1,)
    np.testing.assert_allclose(alpha, 1 - tv, atol=1e-12)
    assert mean == pytest.approx((1 - tv).mean(), abs=1e-12)
    # negative controls: both plausible mistakes are far from the truth on the same data
    wrong_half = 1 - np.abs(p - q).sum(-1)  # TV without the 1/2
    wrong_argmax = (p.argmax(-1) == q.argmax(-1)).astype(float)  # "alpha" as argmax agreement at T > 0
    assert np.abs(wrong_half - alpha).max() > 0.1
    assert np.abs(wrong_argmax - alpha).max() > 0.1


def test_greedy_alpha_is_argmax_agreement(pair):
    target, draft, tokens = pair
    mean, alpha = distill.measure_alpha(target, draft, tokens, 0.0)
    agree = target.table[tokens[:-1]].argmax(-1) == draft.table[tokens[:-1]].argmax(-1)
    np.testing.assert_array_equal(alpha, agree.astype(float))
    assert 0 < mean < 1  # the toy pair agrees sometimes, not always: the assertion above has power


def test_self_vs_self_is_one():
    torch.manual_seed(0)
    model = GPT(train.MINI_CONFIG).eval()
    tokens = np.random.default_rng(1).integers(0, train.MINI_CONFIG.vocab_size, 150)
    for temperature in (0.0, 0.7, 1.0):
        mean, alpha = distill.measure_alpha(model, model, tokens, temperature, window=64)
        np.testing.assert_allclose(alpha, 1.0, atol=1e-12)
    other = GPT(train.MINI_CONFIG).eval()  # a different random init is not a perfect draft
    assert distill.measure_alpha(model, other, tokens, 1.0, window=64)[0] < 0.999


def test_sequence_logits_windows_match_plain_forwards():
    torch.manual_seed(0)
    model = GPT(train.MINI_CONFIG).eval()
    tokens = np.random.default_rng(2).integers(0, 2048, 150)
    rows = distill.sequence_logits(model, tokens, window=64)
    assert rows.shape == (149, 2048)
    for i in (0, 62, 63, 64, 127, 128, 148):  # around every window boundary
        start = i // 64 * 64
        np.testing.assert_allclose(rows[i], model.logits(tokens[start : i + 1])[-1], atol=1e-4)
    with pytest.raises(ValueError, match="window"):
        distill.sequence_logits(model, tokens, window=100)  # longer than the model's context


def test_one_minus_tvd_loss_is_mean_alpha():
    """The lead's tvd loss and this module's alpha are the same quantity: alpha = 1 - TV."""
    gen = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(40, V, generator=gen) * 2, torch.randn(40, V, generator=gen) * 2
    for temperature in (0.5, 1.0, 2.0):
        tvd = train.distillation_loss(student, teacher, "tvd", temperature=temperature).item()
        alpha = distill.alpha_from_logits(teacher.double().numpy(), student.double().numpy(), temperature)
        assert 1 - tvd == pytest.approx(alpha.mean(), abs=1e-6)


def test_ngram_baselines_are_proper_distributions():
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50, 5000)
    tokens[1::2] = (tokens[::2] + 1) % 50  # a strong bigram pattern for the bigram to learn
    for order in (1, 2):
        model = distill.NgramDraft.fit(tokens, order, vocab_size=64)
        q = np.exp(model.logits(np.arange(64)).astype(np.float64))
        assert q.shape == (64, 64)
        np.testing.assert_allclose(q.sum(-1), 1.0, atol=1e-5)
        assert (q > 0).all()  # smoothing: every token possible, so alpha is never 0 by construction
    unigram = np.exp(distill.NgramDraft.fit(tokens, 1, vocab_size=64).log_probs)
    np.testing.assert_allclose(unigram, (np.bincount(tokens, minlength=64) + 1) / (5000 + 64), rtol=1e-6)
    bigram = distill.NgramDraft.fit(tokens, 2, vocab_size=64, smoothing=3.0)
    counts = np.zeros((64, 64))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    expected = (counts[10] + 3.0 * unigram) / (counts[10].sum() + 3.0)
    np.testing.assert_allclose(np.exp(bigram.logits(np.array([10])))[0], expected, rtol=1e-5)
    assert expected.argmax() == 11
    with pytest.raises(ValueError, match="order"):
        distill.NgramDraft(bigram.log_probs, 3)
    with pytest.raises(ValueError, match="vocab_size"):
        distill.NgramDraft.fit(tokens, 2, vocab_size=10)


def test_bigram_beats_unigram_on_heldout_code():
    """The baselines go through the same measurement as the GPTs and rank as expected."""
    tokens = distill.heldout_tokens("code", 2000)
    uni, bi = (distill.NgramDraft.from_corpora(order) for order in (1, 2))
    bpb = [distill.bits_per_byte_from_logits(distill.sequence_logits(m, tokens), tokens) for m in (uni, bi)]
    assert bpb[1] < bpb[0] - 0.3
    # alpha of the unigram against the bigram is a real overlap, strictly inside (0, 1)
    assert 0.05 < distill.measure_alpha(bi, uni, tokens, 1.0)[0] < 0.95


def test_bits_per_byte_matches_cross_entropy():
    rng = np.random.default_rng(4)
    tokens = distill.heldout_tokens("prose", 300)
    logits = rng.normal(size=(299, data.VOCAB_SIZE)) * 3
    nll = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(tokens[1:]), reduction="sum").item()
    expected = nll / np.log(2) / len(data.to_text(tokens[1:]).encode())
    assert distill.bits_per_byte_from_logits(logits, tokens) == pytest.approx(expected, rel=1e-10)


def test_heldout_rows_match_measure_alpha():
    torch.manual_seed(0)
    config = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=64)
    target, draft = GPT(config).eval(), GPT(config).eval()
    with torch.no_grad():
        target.wte.weight.mul_(30)  # a peaked target, so greedy agreement is informative
    bench = distill.Heldout(target, n_tokens=200, window=64)
    rows = bench.compare({"gpt": draft, "unigram": distill.NgramDraft.from_corpora(1)})
    assert [(r["corpus"], r["draft"]) for r in rows] == [
        ("code", "target (itself)"), ("prose", "target (itself)"), ("code", "gpt"), ("prose", "gpt"),
        ("code", "unigram"), ("prose", "unigram")]
    tokens = distill.heldout_tokens("prose", 200)
    for temperature, key in ((1.0, "alpha_T1"), (0.0, "greedy_T0")):
        mean, alpha = distill.measure_alpha(target, draft, tokens, temperature, window=64)
        assert rows[3][key] == pytest.approx(mean, abs=1e-12)
    np.testing.assert_allclose(rows[3]["alpha_positions"], distill.measure_alpha(target, draft, tokens, 1.0, 64)[1])
    assert 0 < rows[3]["greedy_T0"] < 1 and 0 < rows[5]["alpha_T1"] < 1
    table = distill.table_markdown(rows)
    assert table.count("\n") == 4 and "| unigram |" in table


def test_alpha_strip_html():
    tokens = np.array(data.to_tokens("if a < b:\n    return x"))
    alpha = np.linspace(0, 1, len(tokens) - 1)
    page = distill.alpha_strip_html(tokens, alpha)
    assert page.count("<span style=\"background:#") == len(tokens) - 1 + 5  # tokens + legend
    assert "&lt;" in page and "< b" not in page  # text is escaped
    with pytest.raises(ValueError, match="alpha"):
        distill.alpha_strip_html(tokens, alpha[:-1])


def test_token_bytes_are_exact_even_inside_a_multibyte_character():
    """Joining the tokens' bytes gives the text's UTF-8 bytes exactly, also where a token holds
    part of a character. Negative control: decoding each token alone, the old way, loses those
    bytes (the tokenizer prints U+FFFD for an incomplete character)."""
    text = "naïve café — 日本語 😀 «ok»\n" + data.text("prose", "heldout")[:2000]
    tokens = data.to_tokens(text)
    assert b"".join(data.token_bytes()[t] for t in tokens) == text.encode()
    one_by_one = b"".join(data.to_text([t]).encode() for t in tokens)
    assert one_by_one != text.encode()


def test_token_classes():
    assert [distill.token_class(t) for t in ("    ", " return", " foo_bar", "42", "):", " 3rd")] == [
        "whitespace", "keyword", "identifier", "number", "punctuation", "other"]
    tokens = np.array(data.to_tokens("def f(x):\n    return x"))
    stats = distill.alpha_by_token_class(tokens, np.ones(len(tokens) - 1))
    assert sum(n for n, _ in stats.values()) == len(tokens) - 1
    assert stats["keyword"][1] == 1.0


def test_storage_and_topk_mass():
    assert distill.storage_bytes(1000, 2048) == 1000 * 2048 * 2
    assert distill.storage_bytes(1000, 2048, top_k=32) == 1000 * 32 * 4
    assert distill.storage_bytes(10, 100_000, top_k=8, value_bytes=4) == 10 * 8 * 8  # 4-byte indices
    p = np.random.default_rng(5).dirichlet(np.ones(20), size=6)
    masses = [distill.topk_mass(p, k) for k in (1, 5, 20)]
    np.testing.assert_allclose(masses[0], p.max(-1))
    np.testing.assert_allclose(masses[2], 1.0)
    assert (masses[1] > masses[0]).all()
    with pytest.raises(ValueError, match="top_k"):
        distill.storage_bytes(10, 20, top_k=21)


def test_param_count_and_scale_up():
    for config in (train.TARGET_CONFIG, train.DRAFT_CONFIG, distill.GPT2_TARGET, distill.GPT2_DRAFT):
        with torch.device("meta"):
            assert distill.num_params(config) == GPT(config).num_params()
    assert 120e6 < distill.num_params(distill.GPT2_TARGET) < 130e6
    assert 25e6 < distill.num_params(distill.GPT2_DRAFT) < 35e6
    small = train.DRAFT_CONFIG
    assert distill.flops_per_token(small, True) == 3 * distill.flops_per_token(small, False)
    # the same pair on the same machine takes tokens / (tokens per second)
    seconds = distill.scale_up_seconds(1000.0, small, train.TARGET_CONFIG, small, train.TARGET_CONFIG, 5000)
    assert seconds == pytest.approx(5.0)
    bigger = distill.scale_up_seconds(1000.0, small, train.TARGET_CONFIG)
    assert bigger > 1e5 / 1000 * 10  # GPT-2 scale costs far more FLOPs per token than the tiny pair


def test_bad_input():
    target, draft = Markov(np.full((V, V), 1 / V)), Markov(np.full((V, V), 1 / V))
    with pytest.raises(ValueError, match="tokens_or_text"):
        distill.measure_alpha(target, draft, [3], 1.0)
    with pytest.raises(ValueError, match="temperature"):
        distill.measure_alpha(target, draft, [1, 2, 3], -1.0)
    with pytest.raises(ValueError, match="same shape"):
        distill.alpha_from_logits(np.zeros((3, 4)), np.zeros((3, 5)), 1.0)
    with pytest.raises(ValueError, match="n_tokens"):
        distill.heldout_tokens("code", 10**9)


# ----------------------------------------------------------------------------- exercise-3 checks


# The exercise 3 checks, their catalogue of wrong answers and their negative controls are
# tested in tests/course/test_checks.py.


def test_check_stub_falls_back_and_question_is_checked(capsys):
    from lessonlib.course import checks

    def stub(*args, **kwargs):
        raise NotImplementedError("exercise 3b: measure alpha")

    assert checks.exercise_3b(stub) is distill.measure_alpha
    assert "not implemented yet" in capsys.readouterr().out
    assert checks.exercise_3d(lambda: "tvd")() == "tvd"
    for wrong in ("fkl", "ce"):
        with pytest.raises(checks.CheckFailed, match="expected: tvd"):
            checks.exercise_3d(lambda: wrong)
