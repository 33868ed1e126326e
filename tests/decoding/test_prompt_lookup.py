"""Draft-free speculation: n-gram prompt lookup (lessonlib.decoding.prompt_lookup), lookahead
decoding (lessonlib.decoding.lookahead) and the combined drafter (the exact conversion to
Hugging Face's GPT-2 used by the peer benchmark is in tests/bench/test_peers.py)."""
import functools

import numpy as np
import pytest
import torch
from loop_support import LEVEL, context_gpt, context_p_value, markov_gpt, noisy_copy

from lessonlib import engines, models
from lessonlib.core import tree
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.lookahead import NgramPool, Window, lookahead_generate, lookahead_tree
from lessonlib.decoding.prompt_lookup import (
    CombinedDrafter,
    PromptLookupDrafter,
    draft_support,
    lookup_generate,
    trie_arrays,
)
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import data


def lookup_rule(k):
    return functools.partial(draft_support, depth=k)


def brute_continuations(seq, k, max_ngram, min_ngram, matches, prefer):
    """The definition, spelled out slowly: for n from longest to shortest, every earlier
    occurrence of the last n tokens (not the suffix itself), its next k tokens, copying the
    proposal itself where the sequence runs out; distinct, best first."""
    out = []
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        starts = [i + n for i in range(len(seq) - n) if seq[i : i + n] == seq[-n:]]
        for start in (starts[::-1] if prefer == "recent" else starts):
            ext = list(seq)
            for i in range(k):
                ext.append(ext[start + i])
            cont = ext[len(seq) :]
            if cont not in out:
                out.append(cont)
    return out[:matches]


# ----------------------------------------------------------------------------- the lookup itself

def test_continuations_match_the_definition():
    """Random sequences over 3 tokens (many matches), every option, grown one token at a time
    (the incremental index) and rebuilt from scratch (a sequence that is not an extension)."""
    rng = np.random.default_rng(0)
    for trial in range(40):
        opts = dict(k=int(rng.integers(1, 6)), max_ngram=int(rng.integers(1, 4)), matches=int(rng.integers(1, 4)),
                    prefer=["recent", "first"][trial % 2])
        opts["min_ngram"] = int(rng.integers(1, opts["max_ngram"] + 1))
        d = PromptLookupDrafter(3, **opts)
        seq = rng.integers(0, 3, 30).tolist()
        for end in range(1, 31):
            assert d.continuations(seq[:end]) == brute_continuations(seq[:end], **opts), (opts, seq[:end])
        other = rng.integers(0, 3, 12).tolist()
        assert d.continuations(other) == brute_continuations(other, **opts)


def test_lookup_prefers_the_longest_ngram_and_copies_a_repeating_pattern():
    seq = [5, 1, 2, 7, 9, 3, 2, 8, 1, 2]  # "1 2" occurred once (-> 7), "2" twice (-> 7 and -> 8)
    assert PromptLookupDrafter(10, k=3, max_ngram=2).continuations(seq) == [[7, 9, 3]]
    assert PromptLookupDrafter(10, k=3, max_ngram=1).continuations(seq) == [[8, 1, 2]]  # the most recent "2"
    assert PromptLookupDrafter(10, k=3, max_ngram=1, prefer="first").continuations(seq) == [[7, 9, 3]]
    assert PromptLookupDrafter(10, k=3, max_ngram=2, matches=3).continuations(seq) == [[7, 9, 3], [8, 1, 2]]
    # a period-2 pattern: the latest match is one period back, and the proposal keeps copying it
    assert PromptLookupDrafter(10, k=5, max_ngram=2).continuations([4, 6, 4, 6]) == [[4, 6, 4, 6, 4]]
    assert PromptLookupDrafter(10, k=5).continuations([1, 2, 3]) == []


def test_draft_support_reproduces_the_trie_and_drafts_nothing_without_a_match():
    d = PromptLookupDrafter(10, k=4, max_ngram=1, matches=3)
    seq = [2, 5, 6, 2, 5, 7, 2, 8, 1, 2]
    d.commit(seq)
    parents, tokens, _ = draft_support(d.expand, 4)
    want_parents, want_tokens = trie_arrays(brute_continuations(seq, 4, 1, 1, 3, "recent"))
    np.testing.assert_array_equal(parents, want_parents)
    np.testing.assert_array_equal(tokens, want_tokens)
    assert tokens[parents == -1].tolist() == [8, 5]  # siblings: newest match first, shared prefix merged
    fast = d.proposal()  # the lookup's own rule: the same tree, scores and all
    for got, want in zip(fast, draft_support(d.expand, 4)):
        np.testing.assert_allclose(got, want)
    d.commit([1, 2, 3])
    assert len(draft_support(d.expand, 4)[0]) == 0 and len(d.proposal()[0]) == 0 and not d.matched


@torch.inference_mode()
def test_combined_proposal_is_lookup_or_the_models_greedy_chain():
    target = context_gpt(5)
    combined = CombinedDrafter(PromptLookupDrafter(16, k=5), ModelDrafter(target), k_model=3)
    for seq in ([3, 4, 5, 3, 4], [1, 2, 3, 4, 5, 6]):  # a match, then none
        combined.commit(seq)
        fast, slow = combined.proposal(), draft_support(combined.expand, 5)
        for got, want in zip(fast, slow):
            np.testing.assert_allclose(got, want)
        if combined.use_lookup:
            assert fast[1].tolist() == [5, 3, 4, 5, 3]
        else:  # the model's greedy chain of 3: each token the argmax after the one before
            greedy, _ = decode.generate(target, seq, 3)
            assert fast[1].tolist() == greedy and fast[0].tolist() == [-1, 0, 1]


def test_draft_support_with_max_children_is_the_static_topk_tree():
    """On dense rows (a model's) draft_support(max_children=m) must give core.tree's top-k tree."""
    rng = np.random.default_rng(1)
    table = np.log(rng.dirichlet(np.ones(12), size=64))

    def expand(parents, tokens, nodes):  # rows depend on the node's token and depth: a fixed toy model
        depth = tree.tree_depth(parents) if len(parents) else np.zeros(0, np.int64)
        key = [0 if n < 0 else 1 + tokens[n] + 12 * depth[n] for n in nodes]
        return table[np.asarray(key) % 64]

    for m, depth in ((1, 4), (2, 3), (3, 2)):
        got = draft_support(expand, depth, max_children=m)
        want = tree.draft_topk(expand, (m,) * depth)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[2], want[2])


def test_alpha_counts_accepted_and_rejected_drafts():
    d = PromptLookupDrafter(10, k=4, max_ngram=2)
    seq = [1, 2, 3, 1, 2]  # "1 2" -> 3 1 2 3
    d.commit(seq)
    draft_support(d.expand, 4)
    seq += [3, 1, 5]  # 3, 1 accepted, 2 rejected (5 is the target's token)
    d.commit(seq)
    assert (d.counts["accepted"], d.counts["judged"]) == (2, 3) and not d.matched  # nothing follows "1 5" or "5"
    draft_support(d.expand, 4)
    seq += [4]
    d.commit(seq)  # a round with nothing drafted judges nothing
    assert (d.counts["accepted"], d.counts["judged"]) == (2, 3)
    seq = [4, 6, 4, 6]  # another caller's sequence: the drafter starts afresh, proposes 4 6 4 6
    d.commit(seq)
    draft_support(d.expand, 4)
    d.commit(seq + [4, 6, 4, 6, 0])  # all 4 accepted, then the bonus token: no rejection
    assert (d.counts["accepted"], d.counts["judged"]) == (6, 7)
    assert d.stats()["alpha"] == pytest.approx(6 / 7) and d.stats()["matched_rounds"] == 2


# ----------------------------------------------------------------------------- exact at T = 0

LOOKUPS = {
    "chain of 6": dict(k=6),
    "tree of 3 matches": dict(k=4, matches=3),
    "hf-like": dict(k=10, max_ngram=2, prefer="first"),
}


@pytest.mark.parametrize("opts", LOOKUPS)
def test_prompt_lookup_greedy_equals_greedy_on_a_context_dependent_gpt(opts):
    target = context_gpt(0)
    total_tau = 0.0
    for seed in range(3):
        prompt = np.random.default_rng(seed).integers(0, 16, 24).tolist()
        expected, _ = decode.generate(target, prompt, 60)
        d = PromptLookupDrafter(16, **LOOKUPS[opts])
        out, stats = tree_generate(target, d, prompt, 60, rule=lookup_rule(LOOKUPS[opts]["k"]))
        assert out == expected, (opts, seed)
        # rounds with a tree, and empty ones (a plain step)
        assert 0 < d.stats()["matched_rounds"] < d.stats()["rounds"]
        total_tau += stats.tau
    assert total_tau / 3 > 1.2  # drafts were accepted: the multi-token path ran


def test_combined_and_lookahead_greedy_equal_greedy_on_a_context_dependent_gpt():
    target = context_gpt(1)
    draft = noisy_copy(target, 2)
    for seed in range(3):
        prompt = np.random.default_rng(10 + seed).integers(0, 16, 20).tolist()
        expected, _ = decode.generate(target, prompt, 60)
        combined = CombinedDrafter(PromptLookupDrafter(16, k=5), ModelDrafter(draft), k_model=3)
        out, _ = tree_generate(target, combined, prompt, 60, rule=lookup_rule(5))
        assert out == expected, ("combined", seed)
        assert 0 < combined.model_rounds < combined.lookup.counts["rounds"]  # both halves ran
        for window, ngram, guesses in ((3, 3, 3), (4, 4, 2), (2, 2, 1), (3, 3, 0)):
            out, stats = lookahead_generate(target, prompt, 60, window, ngram, guesses, seed=seed)
            assert out == expected, ("lookahead", window, ngram, guesses, seed)
            assert stats.tau >= 1.0


@pytest.mark.parametrize("method", ["lookup", "combined", "lookahead"])
def test_shipped_models_are_lossless_at_t0(method):
    target = engines.load("target")
    prompt = data.heldout_prompts("code", 5, 64)[2]
    expected, _ = decode.generate(target, prompt, 96)
    if method == "lookahead":
        out, stats = lookahead_generate(target, prompt, 96, window=4, ngram=3, guesses=4)
        assert stats.extra["pool_rounds"] > 0  # the pool's n-grams were accepted
    else:  # lookup_generate: the drafters' own fast rule (``proposal``), as the benchmarks run it
        draft = models.load("draft-kl") if method == "combined" else None
        out, stats = lookup_generate(target, prompt, 96, k=8, draft=draft)
        assert stats.extra["match_rate"] > 0.3 and (draft is None or stats.extra["model_rounds"] > 0)
    assert out == expected
    assert stats.tau > 1.3


# ----------------------------------------------------------------------------- exact at T > 0

def _no_zeroing_verify(parents, tokens, p_rows, rng):
    """The plausible wrong rule for a deterministic draft: try each child with p(child), but
    sample from the untouched p after a rejection (the rejected child can come back)."""
    children = [np.flatnonzero(parents == n) for n in range(-1, len(parents))]
    node, path = -1, []
    while True:
        p = p_rows[node + 1]
        for c in children[node + 1]:
            if rng.random() < p[tokens[c]]:
                path.append(int(c))
                break
        else:
            return path, tokens[path].tolist() + [int(rng.choice(len(p), p=p))]
        node = path[-1]


def _sampled_runs(method, target, temperature, n_runs=12, length=150):
    """(prompt, new tokens) runs of one sampled loop; every run draws from one seeded stream."""
    rng, runs = np.random.default_rng(int(temperature * 100)), []
    for i in range(n_runs):
        prompt = [i % 6, (i + 1) % 6, (2 * i) % 6, 1, 4, 1, 4]
        if method == "lookup":
            out, _ = tree_generate(target, PromptLookupDrafter(6, k=4, matches=2), prompt, length, rule=lookup_rule(4),
                                   temperature=temperature, rng=rng)
        else:
            out, _ = lookahead_generate(target, prompt, length, window=3, ngram=3, guesses=3, temperature=temperature,
                                        rng=rng)
        runs.append((prompt, out))
    return runs


@pytest.mark.parametrize("temperature", [0.5, 1.7])
@pytest.mark.parametrize("method", ["lookup", "lookahead"])
def test_sampled_draft_free_loops_follow_the_target(method, temperature, monkeypatch):
    """A Markov GPT (next token depends on the last only) gives the exact law of every
    (previous, next) pair: 1,800 sampled tokens, chi-square at false-alarm rate 1e-3. The same
    test must reject the loop when the sibling rule forgets to zero a rejected candidate
    (measured p-values of that control: 1e-9 to 1e-47 at these settings)."""
    target = markov_gpt(3, sharpen=5.0)  # at sharpen 3 and T = 1.7 the control's p-value was only 4e-3
    runs = _sampled_runs(method, target, temperature)
    assert context_p_value(target.logits, runs, temperature) > LEVEL
    monkeypatch.setattr(tree, "verify_tree", _no_zeroing_verify)
    bad = _sampled_runs(method, target, temperature)
    assert context_p_value(target.logits, bad, temperature) < LEVEL


# ----------------------------------------------------------------------------- lookahead's parts

def test_lookahead_tree_mask_is_the_lookahead_mask():
    """Level i, column j sits at depth i + j and sees exactly: level 0 up to column j, its own
    column above it (and the root); the candidates' trie comes first, apart from the window."""
    levels = np.arange(100, 112).reshape(3, 4)
    parents, tokens, index = lookahead_tree([[7, 8], [7, 9], [5, 6]], levels)
    assert tokens[:5].tolist() == [7, 5, 8, 9, 6] and parents[:5].tolist() == [-1, -1, 0, 0, 1]  # depth by depth
    mask, depth = tree.tree_attention_mask(parents), tree.tree_depth(parents)
    for i in range(3):
        for j in range(4):
            node = index[i, j]
            seen = {int(index[0, c]) for c in range(j + 1)} | {int(index[r, j]) for r in range(i + 1)}
            assert set(np.flatnonzero(mask[node]).tolist()) == seen, (i, j)
            assert depth[node] == i + j and tokens[node] == levels[i, j]


def test_window_update_collects_one_ngram_per_column():
    pool = NgramPool(2)
    win = Window(2, 3, [1, 2])
    win.update([3, 4], pool)  # warming up: a second level, no n-gram yet
    assert len(pool) == 0 and np.stack(win.levels).tolist() == [[1, 2], [3, 4]]
    win.update([5, 6], pool)  # full: columns (1, 3, 5) and (2, 4, 6); the oldest level leaves
    assert pool.get(1, 5) == [[3, 5]] and pool.get(2, 5) == [[4, 6]]
    assert np.stack(win.levels).tolist() == [[3, 4], [5, 6]]
    pool.add(1, (7, 7))
    pool.add(1, (8, 8))  # size 2: the oldest goes
    assert pool.get(1, 5) == [[8, 8], [7, 7]]


# ----------------------------------------------------------------------------- bad input

def test_bad_arguments_name_the_argument():
    for kwargs, word in ((dict(vocab_size=1), "vocab_size"), (dict(vocab_size=8, k=0), "k"),
                         (dict(vocab_size=8, min_ngram=3, max_ngram=2), "min_ngram"),
                         (dict(vocab_size=8, prefer="last"), "prefer"), (dict(vocab_size=8, matches=1.5), "matches")):
        with pytest.raises(ValueError, match=word):
            PromptLookupDrafter(**kwargs)
    with pytest.raises(ValueError, match="depth"):
        draft_support(lambda *a: np.zeros((1, 4)), 0)
    with pytest.raises(ValueError, match="commit"):
        PromptLookupDrafter(8).expand([], [], [-1])
    target = context_gpt(0)
    for kwargs, word in ((dict(window=0), "window"), (dict(ngram=1), "ngram"), (dict(guesses=-1), "guesses"),
                         (dict(temperature=-0.5), "temperature")):
        with pytest.raises(ValueError, match=word):
            lookahead_generate(target, [1, 2, 3], 5, **kwargs)
    with pytest.raises(ValueError, match="fit the context"):
        lookahead_generate(target, list(range(16)) * 9, 10, window=8, ngram=4, guesses=8)
