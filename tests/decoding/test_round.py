"""The one speculative round (decoding.round) and the one result (decoding.stats.DecodeStats).

Exactness of every loop is tested in test_sampled_loops and test_loops; here: the round's four
steps on hand-made proposals, the rng rule, the counts a DecodeStats makes (hand-counted), and
that no loop writes the round's steps again.
"""
import functools
import pathlib
import re

import numpy as np
import pytest
import torch
from loop_support import context_gpt, noisy_copy

from lessonlib.core import tree
from lessonlib.core.sampling import softmax
from lessonlib.decoding import decode, fallback, lookahead, prompt_lookup, reference, tree_decode
from lessonlib.decoding import round as round_
from lessonlib.decoding.decode import ChainDrafter
from lessonlib.decoding.drafters import ModelDrafter, NoDraft
from lessonlib.decoding.round import Proposal, RoundResult, Sampling
from lessonlib.decoding.stats import DecodeStats

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture(scope="module")
def pair():
    target = context_gpt(0, vocab=97, block_size=64)
    return target, noisy_copy(target, 1)


# ----------------------------------------------------------------------------- the rng rule

def _sampled_calls(target, draft, rng):
    rule = functools.partial(tree.draft_topk, branching=(2, 1))
    return {
        "generate": lambda: decode.generate(target, PROMPT, 6, 0.8, rng),
        "speculative_generate": lambda: decode.speculative_generate(target, draft, PROMPT, 2, 6, 0.8, rng),
        "tree_generate": lambda: tree_decode.tree_generate(target, ModelDrafter(draft), PROMPT, 6, rule, 0.8, rng),
        "lookup_generate": lambda: prompt_lookup.lookup_generate(target, PROMPT, 6, k=3, temperature=0.8, rng=rng),
        "lookahead_generate": lambda: lookahead.lookahead_generate(target, PROMPT, 6, temperature=0.8, rng=rng),
        "ModelStream": lambda: fallback.ModelStream(target, draft, PROMPT, 2, 0.8, rng=rng).speculate(0),
        "ModelStream (a temperature that changes)":
            lambda: fallback.ModelStream(target, draft, PROMPT, 2, lambda position: 0.8, rng=rng).plain(0),
        "reference.speculative_decode": lambda: reference.speculative_decode(target, draft, PROMPT, 2, 0.8, 6, rng),
        "reference.autoregressive_decode": lambda: reference.autoregressive_decode(target, PROMPT, 6, 0.8, rng),
    }


def test_every_sampling_loop_needs_an_explicit_generator(pair):
    """No seeded default: two calls without a generator would get identical 'independent' samples."""
    for _name, call in _sampled_calls(*pair, rng=None).items():
        with pytest.raises(ValueError, match="rng .*explicit numpy.random.Generator"):
            call()
    for _name, call in _sampled_calls(*pair, rng=np.random.default_rng(0)).items():
        call()  # the same calls with a generator run


def test_independent_generators_give_independent_samples_and_greedy_needs_none(pair):
    target, draft = pair
    a = decode.speculative_generate(target, draft, PROMPT, 3, 24, 1.0, np.random.default_rng(1))[0]
    b = decode.speculative_generate(target, draft, PROMPT, 3, 24, 1.0, np.random.default_rng(2))[0]
    again = decode.speculative_generate(target, draft, PROMPT, 3, 24, 1.0, np.random.default_rng(1))[0]
    assert a == again and a != b  # seeded: reproducible; another seed: another sample
    assert decode.speculative_generate(target, draft, PROMPT, 3, 8)[0] == decode.generate(target, PROMPT, 8)[0]
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        decode.generate(target, PROMPT, 4, 0.0, rng=5)  # a wrong rng is refused even when unused


# ----------------------------------------------------------------------------- proposals and steps

def test_proposal_shapes():
    chain = Proposal.chain([5, 6, 7])
    assert chain.parents.tolist() == [-1, 0, 1] and chain.is_chain and chain.depth == 3
    empty = Proposal.chain([])
    assert empty.is_chain and empty.depth == 0 and len(empty.tokens) == 0
    branchy = Proposal(np.array([-1, -1, 0, 2]), np.array([1, 2, 3, 4]))
    assert not branchy.is_chain and branchy.depth == 3
    not_chain = Proposal(np.array([-1, 0, 0]), np.array([1, 2, 3]))  # two children of node 0
    assert not not_chain.is_chain and not_chain.depth == 2


@torch.inference_mode()
def test_a_chain_verified_causally_equals_its_tree_mask_forward(pair):
    """The round feeds a chain without a mask: the same logits as the tree forward of that chain."""
    target, _ = pair
    tokens = [7, 8, 9, 10]
    out = {}
    for path in ("causal", "tree"):
        cache = target.new_cache()
        target(torch.tensor([PROMPT[:-1]]), cache=cache)
        if path == "causal":
            out[path] = round_.verify(target, cache, PROMPT[-1], Proposal.chain(tokens))[0]
        else:
            logits, _ = round_.tree_forward(target, cache, PROMPT[-1], np.arange(-1, 3), np.array(tokens), False)
            out[path] = logits.double().numpy()
        assert cache.length == len(PROMPT) + len(tokens)
    np.testing.assert_allclose(out["causal"], out["tree"], atol=1e-5, rtol=0)


def test_accept_rules_and_their_refusal():
    rng = np.random.default_rng(0)
    logits = np.log(np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]]))
    greedy = Sampling(0.0)
    assert round_.accept(Proposal.chain([1, 0]), logits, greedy, rng) == ([0, 1], [1, 0, 2])
    assert round_.accept(Proposal.chain([1, 2]), logits, greedy, rng) == ([0], [1, 0])
    tree_ = Proposal(np.array([-1, -1]), np.array([2, 1]))  # two siblings: the second is the argmax
    assert round_.accept(tree_, logits, greedy, rng) == ([1], [1, 2])  # row 2 is after node 1
    # a sampled tree goes to the recursive rule: siblings drawn from q = p are accepted first time
    q = np.exp(logits[[0, 0]])
    for replacement in (True, False):
        sampled = Proposal(np.array([-1, -1]), np.array([0, 1]), q, replacement)
        path, emitted = round_.accept(sampled, logits, Sampling(1.0), rng)
        assert path == [0] and emitted[0] == 0 and len(emitted) == 2


@torch.inference_mode()  # the loops' mode: feed and the drafters run inside it
def test_a_plain_step_is_a_round_with_an_empty_proposal(pair):
    """NoDraft: the one-token forward, then the target's own sampling -- the same token, from the
    same generator, as plain decoding's next_token (its control: another seed differs)."""
    target, _ = pair
    for temperature in (0.0, 0.7, 1.3):
        seq, cache = list(PROMPT), target.new_cache()
        decode.feed(target, cache, seq[:-1])
        logits = decode.feed(target, target.new_cache(), seq)[-1]
        tokens = []
        rng = np.random.default_rng(5)
        for _ in range(6):
            result = round_.speculative_round(target, cache, NoDraft(), None, seq, Sampling(temperature), rng)
            tokens += result.emitted
            assert result.path == [] and len(result.emitted) == 1 and cache.length == len(seq) - 1
        want, seq2, rng2 = [], list(PROMPT), np.random.default_rng(5)
        for _ in range(6):
            logits = decode.feed(target, target.new_cache(), seq2)[-1]
            want.append(decode.next_token(logits, temperature, rng2))
            seq2.append(want[-1])
        assert tokens == want


@torch.inference_mode()
def test_the_round_commits_the_target_cache_and_the_drafter(pair):
    target, draft = pair
    drafter, cache, seq = ChainDrafter(draft, 3), target.new_cache(), list(PROMPT)
    decode.feed(target, cache, seq[:-1])
    drafter.commit(seq)
    assert drafter.cache.length == len(seq) - 1 and drafter.pending == [seq[-1]]
    rng = np.random.default_rng(0)
    for _ in range(5):
        before = len(seq)
        result = round_.speculative_round(target, cache, drafter, None, seq, Sampling(0.9), rng)
        assert isinstance(result, RoundResult) and result.proposal.q.shape == (3, target.config.vocab_size)
        assert len(seq) == before + len(result.emitted) == before + len(result.path) + 1
        assert cache.length == len(seq) - 1 and drafter.cache.length <= len(seq) - 1
        assert drafter.pending == seq[drafter.cache.length :]
    with pytest.raises(ValueError, match="rule must be None for a ChainDrafter"):
        drafter.propose(tree_decode.DEFAULT_RULE, Sampling(0.0), None)
    with pytest.raises(ValueError, match="rule must be a drafting rule"):
        ModelDrafter(draft).propose(None, Sampling(0.0), None)


# ----------------------------------------------------------------------------- DecodeStats, hand-counted

def test_decode_stats_counts_by_hand():
    s = DecodeStats("chain", 0.5, 10, k=3)
    s.record_round(3, 3, False, 3)  # all three accepted: 4 tokens, 3 judged
    s.record_round(3, 1, True, 3)  # one accepted, the second rejected: 2 tokens, 2 judged
    s.record_round(3, 0, True, 3)  # the first rejected: 1 token, 1 judged
    s.record_round(3, 3, False, 3)
    assert (s.rounds, s.emitted, s.drafted, s.accepted, s.judged) == (4, 11, 12, 7, 9)
    assert s.tau == 11 / 4 and s.alpha == 7 / 9 and s.accepted_fraction == 7 / 12
    assert s.accepted_lengths == [1, 1, 0, 2] and s.acceptance_by_depth == [3 / 4, 2 / 3, 1.0]
    s.finish(2.0, type("C", (), {"seconds": {"draft": 0.6, "verify": 1.0}, "calls": {"draft": 12, "verify": 4}})())
    per = (s.draft_step_seconds, s.draft_seconds_per_round, s.verify_forward_seconds)
    assert per == pytest.approx((0.05, 0.15, 0.25))
    assert s.overhead_seconds == pytest.approx(0.4) and s.seconds_per_token == 0.2 and s.tokens_per_second == 5.0
    row = s.as_dict()
    assert row["draft_forward_seconds"] == pytest.approx(0.05) and row["tau"] == 11 / 4 and row["k"] == 3
    with pytest.raises(ValueError, match="loop must be one of"):
        DecodeStats("batched", 0.0, 1)


def test_judged_counts_one_more_only_under_a_drafted_child():
    parents = np.array([-1, -1, 0, 2])  # node 0 has child 2, which has child 3; node 1 is a leaf
    proposal = Proposal(parents, np.array([1, 2, 3, 4]))

    def judged(path):
        return RoundResult(proposal, path, [0] * (len(path) + 1), np.zeros((5, 2))).judged_one_more

    assert judged([]) and judged([0]) and judged([0, 2])  # a child of the root / node 0 / node 2 was rejected
    assert not judged([1]) and not judged([0, 2, 3])  # leaves: nothing below was judged
    assert not RoundResult(Proposal.chain([]), [], [5], np.zeros((1, 2))).judged_one_more


# ----------------------------------------------------------------------------- one round, written once

LOOP_MODULES = ("decode", "tree_decode", "prompt_lookup", "lookup_trie", "lookahead", "fallback", "model_stream",
                "mtp_draft", "drafters")
STEPS = (r"verify_chain\(|verify_tree\(|verify_tree_greedy\(|verify_greedy\(|\.keep\("
         r"|tree_attention_mask\(tree\.with_root")


def _round_steps_outside_the_round(sources):
    return {name: re.findall(STEPS, text) for name, text in sources.items() if re.findall(STEPS, text)}


def test_only_the_round_writes_its_steps():
    here = pathlib.Path(round_.__file__).parent
    sources = {name: (here / f"{name}.py").read_text() for name in LOOP_MODULES}
    assert _round_steps_outside_the_round(sources) == {}
    # the check sees a loop that verifies on its own (negative control)
    assert _round_steps_outside_the_round({"copy": "path, emitted = tree.verify_tree(p, t, rows, rng)"}) != {}


@torch.inference_mode()
def test_a_proposal_that_exactly_fills_the_context_is_verified_and_one_more_node_is_refused(pair):
    target, _ = pair
    capacity = target.config.block_size
    for shape in ("chain", "tree"):
        for extra, fits in ((0, True), (1, False)):
            cache = target.new_cache()
            target(torch.tensor([PROMPT[:-1]]), cache=cache)
            n = capacity - cache.length - 1 + extra  # the root and n nodes after the cached prefix
            tokens = np.arange(n) % 7
            parents = np.arange(-1, n - 1) if shape == "chain" else np.r_[-1, -1, np.arange(n - 2)]
            proposal = Proposal(parents, tokens)
            assert proposal.is_chain == (shape == "chain")
            if fits:
                logits, _ = round_.verify(target, cache, PROMPT[-1], proposal)
                assert logits.shape == (n + 1, target.config.vocab_size) and cache.length == capacity
            else:
                with pytest.raises(ValueError, match="does not fit the context"):
                    round_.verify(target, cache, PROMPT[-1], proposal)


def test_a_tree_runs_json_row_counts_the_last_rounds_surplus():
    s = DecodeStats("tree", 1.0, 5, depth=3, seconds=1.0)
    s.record_round(4, 2, True, 3)  # 3 tokens
    s.record_round(4, 3, False, 3)  # 4 tokens: 7 emitted for 5 requested
    row = s.as_dict()
    assert row["tau"] == s.tau == 3.5 and row["alpha"] == s.alpha == 5 / 6  # 2 + 1 judged, then 3
    assert row["accepted_lengths"] == [0, 0, 1, 1] and row["mean_nodes"] == 4.0 and row["rounds"] == 2
    assert row["acceptance_by_depth"] == [1.0, 1.0, 0.5] and "k" not in row


@torch.inference_mode()
def test_the_chain_drafter_samples_at_the_draft_temperature(pair):
    """q rows are the law each draft was sampled from: softmax(z / T_draft), one-hot for a greedy draft."""
    target, draft = pair
    for draft_t in (0.0, 0.6, 2.0):
        drafter, seq = ChainDrafter(draft, 1), list(PROMPT)
        drafter.commit(seq)
        z = decode.feed(draft, draft.new_cache(), seq)[-1]
        proposal = drafter.propose(None, Sampling(1.0, draft_temperature=draft_t), np.random.default_rng(0))
        want = np.eye(len(z))[np.argmax(z)] if draft_t == 0.0 else softmax(z, draft_t)
        np.testing.assert_allclose(proposal.q[0], want, atol=1e-6)


def test_a_sampling_draft_needs_a_generator_even_under_a_greedy_target(pair):
    target, draft = pair
    assert round_.check_sampling_rng(Sampling(0.0), None) is None  # greedy everywhere: none needed
    with pytest.raises(ValueError, match="explicit numpy.random.Generator"):
        round_.check_sampling_rng(Sampling(0.0, draft_temperature=0.7), None)
    with pytest.raises(ValueError, match="explicit numpy.random.Generator"):
        fallback.ModelStream(target, draft, PROMPT, 2, 0.0, draft_temperature=0.7)


@torch.inference_mode()
def test_the_tree_forward_names_a_drafted_token_outside_the_vocabulary(pair):
    target, _ = pair
    cache = target.new_cache()
    target(torch.tensor([PROMPT[:-1]]), cache=cache)
    with pytest.raises(ValueError, match=r"tokens \(the drafted tree\) must be token ids"):
        round_.tree_forward(target, cache, PROMPT[-1], np.array([-1, -1]), np.array([1, 97]))


@torch.inference_mode()
def test_a_plain_step_of_the_stream_commits_the_draft_too(pair):
    """After plain steps the draft's pending tokens are exactly what its cache lacks of the
    committed sequence (a stale draft would still be exact, only slower: this is what sees it)."""
    target, draft = pair
    stream = fallback.ModelStream(target, draft, PROMPT, 3, 0.0)
    for position in range(3):
        stream.plain(position)
        drafter = stream.drafter
        assert drafter.pending == stream.seq[drafter.cache.length :] and drafter.pending[-1] == stream.seq[-1]
    accepted, drafted = stream.speculate(3)
    assert drafted == 3 and stream.drafter.pending == stream.seq[stream.drafter.cache.length :]


def test_rounds_shrink_their_draft_to_the_context_left():
    """A 21-node tree, and prompt lookup's k = 10, on an exact fit (prompt + new tokens = the
    context): the last rounds verify what fits instead of failing, greedy output = plain's,
    and a sampled tree runs to the end too. Control: the cut is what makes it fit."""
    target = context_gpt(0, block_size=40)
    draft = noisy_copy(target, 1)
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 16, 25)]
    plain = decode.generate(target, prompt, 15)[0]
    rule = functools.partial(tree.draft_topk, branching=(3, 2, 2))
    assert tree_decode.tree_generate(target, ModelDrafter(draft), prompt, 15, rule)[0] == plain
    looped = prompt[:5] * 5
    assert prompt_lookup.lookup_generate(target, looped, 15, k=10)[0] == decode.generate(target, looped, 15)[0]
    from lessonlib.core.tree_sampled import SampledRule
    out, stats = tree_decode.tree_generate(target, ModelDrafter(draft), prompt, 15, SampledRule((3, 2, 2)), 1.0,
                                           np.random.default_rng(0))
    assert len(out) == 15 and stats.emitted >= 15
    full = Proposal(np.arange(-1, 20), np.zeros(21, dtype=np.int64), np.full((21, 16), 1 / 16))
    cut = round_.fit_to_room(full, 4)
    assert len(cut.parents) == 4 and cut.q.shape == (4, 16) and round_.fit_to_room(full, 21) is full
    with pytest.raises(ValueError, match="does not fit the context"):  # without the cut
        cache = target.new_cache()
        target(torch.tensor([prompt + plain[:-1]]), cache=cache)
        round_.verify(target, cache, plain[-1], Proposal(np.full(3, -1), np.zeros(3, dtype=np.int64)))


def test_non_finite_weights_and_a_head_for_another_width_are_refused():
    """A NaN in the weights would decode token 0 forever (argmax of NaN): every loop refuses it at
    the first forward; a head built for another width is refused by its drafter, naming both."""
    from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter
    from lessonlib.models.gpt import GPTConfig
    from lessonlib.models.heads import EagleHead, MedusaHeads

    target = context_gpt(0, block_size=40)
    broken = noisy_copy(target, 1)
    with torch.no_grad():
        broken.blocks[0].fc.weight[0, 0] = float("nan")
    for run in (lambda m: decode.generate(m, [1, 2, 3], 4),
                lambda m: decode.speculative_generate(target, m, [1, 2, 3], 2, 4),
                lambda m: tree_decode.tree_generate(m, ModelDrafter(target), [1, 2, 3], 4)):
        run(target)  # the control: the same call on finite weights
        with pytest.raises(ValueError, match="NaN or inf"):
            run(broken)
    other = GPTConfig(vocab_size=16, block_size=40, n_layer=1, n_head=2, n_embd=48)
    for make in (lambda: EagleDrafter(EagleHead(other), target), lambda: MedusaDrafter(MedusaHeads(other, 2), target)):
        with pytest.raises(ValueError, match="width 48.*width 32"):
            make()


def test_chain_rule_swaps_the_judge_of_sampled_chains_and_checks_what_it_emits():
    """``round.chain_rule(f)``: inside the block a sampled chain round calls f(p, q, drafts, rng)
    (exercise 1b's contract) and keeps what it emits; an emission that is not an accepted prefix
    and one token is refused by name; after the block the course's own rule judges again."""
    from lessonlib.decoding.chain_rule import chain_rule
    from lessonlib.decoding.round import Proposal, Sampling, accept

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6))
    q = np.full((2, 6), 1 / 6)
    proposal = Proposal.chain([4, 1], q)
    seen = []

    def mine(p_rows, q_rows, draft_tokens, r):
        seen.append((p_rows.shape, q_rows is q, list(draft_tokens)))
        return [4, 5]  # the first draft accepted, then a correction

    with chain_rule(mine):
        assert accept(proposal, logits, Sampling.of(1.0), rng) == ([0], [4, 5])
        with pytest.raises(ValueError, match="accepted prefix of the drafts"):
            with chain_rule(lambda p, q_, t, r: [1, 5]):  # the first draft was 4, not 1
                accept(proposal, logits, Sampling.of(1.0), rng)
    assert seen == [((3, 6), True, [4, 1])]
    with chain_rule(mine):  # nested blocks unwind: the outer rule again after the inner one raised
        accept(proposal, logits, Sampling.of(1.0), rng)
    assert len(seen) == 2
    path, emitted = accept(proposal, logits, Sampling.of(1.0), np.random.default_rng(1))  # the course's own rule
    assert len(emitted) == len(path) + 1 and len(seen) == 2
    with pytest.raises(ValueError, match="rule must be a function"):
        with chain_rule("verify_chain"):
            pass
