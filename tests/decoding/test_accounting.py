"""Hand-counted statistics and counters: every number the course reports, on constructed inputs
whose right answer is worked out in the test (a wrong statistic or an off-by-one counter still
gives exact tokens, so only tests like these can see it)."""
import functools

import numpy as np
import pytest
from loop_support import context_gpt

from lessonlib.decoding import measures, timing
from lessonlib.decoding.lookahead import LookaheadDrafter, lookahead_generate
from lessonlib.decoding.prompt_lookup import PromptLookupDrafter, draft_support
from lessonlib.decoding.round import RoundResult
from lessonlib.decoding.stats import DecodeStats


# ---------------------------------------------------------------------------- statistics
def test_summary_is_the_median_and_quartiles_not_the_mean():
    s = measures.summary([100.0, 1.0, 4.0, 2.0, 3.0])  # mean 22, median 3
    assert s == {"median": 3.0, "q25": 2.0, "q75": 4.0, "n": 5}
    s = measures.summary([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # even count: linear interpolation
    assert (s["median"], s["q25"], s["q75"]) == (3.5, 2.25, 4.75)
    full = measures.summary([5.0, 1.0, 9.0, 3.0, 7.0], level=1.0)  # level 1: the whole range
    assert (full["q25"], full["median"], full["q75"]) == (1.0, 5.0, 9.0)


def test_fmt_spread_prints_median_then_quartiles():
    s = {"median": 1.5, "q25": 1.25, "q75": 2.0, "n": 7}
    assert measures.fmt_spread(s, 2, "×") == "1.50× [1.25, 2.00], n = 7"
    assert measures.fmt_spread(s, 1, count=False) == "1.5 [1.2, 2.0]"


def test_fastest_keeps_the_fastest_run():
    times = iter([3.0, 1.0, 2.0])
    run = lambda: (object(), next(times))  # noqa: E731
    assert timing.fastest(run, 3, seconds=float)[1] == 1.0
    times = iter([1.0, 3.0])
    assert timing.fastest(run, 2, seconds=float)[1] == 1.0  # the first run fastest: kept


def test_interleaved_takes_turns_and_keeps_each_methods_fastest():
    calls = []
    table = {("a", 0): [5.0, 2.0, 4.0], ("b", 0): [1.0, 3.0, 2.0], ("a", 1): [7.0, 8.0, 6.0], ("b", 1): [9.0, 9.5, 9.0]}

    def method(name):
        def run(i):
            t = table[name, i].pop(0)
            calls.append((name, i))
            return (name, i, t), t
        return run

    best = timing.interleaved({"a": method("a"), "b": method("b")}, 2, 3, seconds=float)
    assert calls == [("a", 0), ("b", 0)] * 3 + [("a", 1), ("b", 1)] * 3  # turns within each item
    assert [r[1] for r in best["a"]] == [2.0, 6.0] and [r[1] for r in best["b"]] == [1.0, 9.0]
    assert best["b"][1][0] == ("b", 1, 9.0)  # a tie keeps the earlier run


# ---------------------------------------------------------------------------- DecodeStats
def test_decode_stats_counts_by_hand():
    s = DecodeStats("chain", 0.0, 10, k=3)
    s.record_round(3, 3, False, 3)  # all three accepted: 4 tokens, 3 judged
    s.record_round(3, 1, True, 3)  # one accepted, the second rejected: 2 tokens, 2 judged
    s.record_round(3, 0, True, 3)  # the first rejected: 1 token, 1 judged
    assert (s.rounds, s.emitted, s.drafted, s.accepted, s.judged) == (3, 7, 9, 4, 6)
    assert s.tau == 7 / 3 and s.alpha == 4 / 6 and s.accepted_fraction == 4 / 9
    assert s.lengths == [3, 1, 0] and s.nodes == [3, 3, 3] and s.depth == 3
    assert s.accepted_lengths == [1, 1, 0, 1]
    # depth 0: 3 rounds reached it, 2 passed; depth 1: 2 reached, 1 passed; depth 2: 1 reached, 1 passed
    assert s.acceptance_by_depth == [2 / 3, 1 / 2, 1.0]
    assert s.mean_accepted == 4 / 3 and s.mean_nodes == 3.0


def test_decode_stats_times_by_hand():
    s = DecodeStats("tree", 0.0, 8)
    for _ in range(4):
        s.record_round(5, 1, True, 2)
    clock = timing.Clock()
    clock.seconds, clock.calls = {"draft": 2.0, "verify": 3.0}, {"draft": 8, "verify": 4}
    s.finish(8.0, clock)
    assert (s.draft_seconds_per_round, s.draft_step_seconds, s.verify_forward_seconds) == (0.5, 0.25, 0.75)
    assert (s.overhead_seconds, s.seconds_per_token, s.tokens_per_second) == (3.0, 1.0, 1.0)
    plain = DecodeStats("plain", 0.0, 8)
    clock = timing.Clock()
    clock.seconds, clock.calls = {"target": 1.0}, {"target": 4}
    plain.finish(4.0, clock)
    out = measures.compare(s, plain)  # step 0.25 s
    assert out["speedup"] == 0.5 and out["r"] == 3.0 and out["draft_cost_per_round"] == 2.0
    assert out["forward_bound"] == s.tau / (2.0 + 3.0)


def test_tau_and_alpha_definitions():
    assert measures.tau(7, 3) == 7 / 3 and measures.alpha(4, 6) == 4 / 6
    assert np.isnan(measures.alpha(0, 0))
    assert measures.forward_bound(3.0, 2, 0.25, 1.5) == 3.0 / 2.0


# ---------------------------------------------------------------------------- prompt lookup
def _lookup(k=3, **kw):
    """A drafter committed to [1, 2, 3, 1, 2]: the 2-gram (1, 2) continues with 3, 1, 2."""
    d = PromptLookupDrafter(10, k=k, **kw)
    d.commit([1, 2, 3, 1, 2])
    return d


@pytest.mark.parametrize("emitted, accepted, judged", [
    ([3, 1, 2, 9], 3, 3),  # the whole chain accepted, then the bonus token: nothing rejected
    ([3, 9], 1, 2),  # one accepted, the second draft rejected
    ([9], 0, 1),  # the first draft rejected
    ([3, 1], 1, 2),  # the last token is the target's own, even when it equals the draft
])
def test_prompt_lookup_scores_each_round_by_hand(emitted, accepted, judged):
    d = _lookup()
    d.propose(None)
    assert d._trie["arrays"][1].tolist() == [3, 1, 2]
    d.commit([1, 2, 3, 1, 2] + emitted)
    assert (d.counts["accepted"], d.counts["judged"], d.counts["rounds"]) == (accepted, judged, 2)


def test_prompt_lookup_judges_only_the_nodes_a_rule_drafted():
    d = _lookup()
    d.propose(functools.partial(draft_support, depth=1))  # only the root expanded: a chain of one
    d.commit([1, 2, 3, 1, 2, 3, 7])  # 3 accepted; its child (1) was never drafted, so not rejected
    assert (d.counts["accepted"], d.counts["judged"]) == (1, 1)
    d = _lookup()
    d.propose(functools.partial(draft_support, depth=3))  # through expand: every node served
    d.commit([1, 2, 3, 1, 2, 3, 7])
    assert (d.counts["accepted"], d.counts["judged"]) == (1, 2)


def test_prompt_lookup_no_match_judges_nothing():
    d = PromptLookupDrafter(10, k=3)
    d.commit([1, 2, 3])
    assert d.propose(None).parents.size == 0 and not d.matched
    d.commit([1, 2, 3, 4])
    assert (d.counts["accepted"], d.counts["judged"], d.counts["matched_rounds"], d.counts["rounds"]) == (0, 0, 0, 2)
    assert d.stats()["match_rate"] == 0.0 and np.isnan(d.stats()["alpha"])


# ---------------------------------------------------------------------------- lookahead
def _lookahead_round(path):
    """A lookahead drafter with one pool candidate (2 nodes) and a one-level window of 3 (nodes
    2..4); a round whose accepted path is ``path``."""
    d = LookaheadDrafter(window=3, ngram=3, guesses=1, first_level=[5, 6, 7])
    d.pool.add(4, (8, 9))
    d.commit([4])
    proposal = d.propose()
    assert proposal.parents.tolist() == [-1, 0, -1, 2, 3] and d.index.tolist() == [[2, 3, 4]]
    d.after_round(RoundResult(proposal, path, [0] * (len(path) + 1), np.zeros((6, 10))))
    return d


@pytest.mark.parametrize("path, pool, window", [([0, 1], 1, 0), ([0], 1, 0), ([2], 0, 1), ([2, 3], 0, 1), ([], 0, 0)])
def test_lookahead_counts_where_the_accepted_path_started(path, pool, window):
    d = _lookahead_round(path)
    assert (d.from_pool, d.from_window) == (pool, window)


def test_lookahead_context_budget_is_exact():
    target = context_gpt(0, block_size=24)
    window, ngram, guesses = 2, 3, 1  # at most (2 + 1) * 2 = 6 nodes a round
    prompt = [1, 2, 3]
    # the last round starts with at most 3 + room - 1 tokens, the cache holding all but one, and
    # scores its root and 6 nodes: 3 + room - 2 + 7 <= 24 (a chain of k likewise needs k - 1)
    room = 24 - len(prompt) - 6 + 1
    for seed in range(4):  # different first guesses: different trees in the last rounds
        out, stats = lookahead_generate(target, prompt, room, window, ngram, guesses, seed=seed)
        assert len(out) == room and stats.emitted >= room
    with pytest.raises(ValueError, match="must fit the context"):
        lookahead_generate(target, prompt, room + 1, window, ngram, guesses)
    extra = stats.extra
    assert extra["pool_rounds"] + extra["window_rounds"] <= stats.rounds
    assert stats.accepted == sum(stats.lengths) and stats.emitted == stats.accepted + stats.rounds


def test_a_run_records_the_targets_temperature_not_the_drafts():
    """With a draft sampling at its own temperature, the run's stats (and the benchmarks' rows, which
    are ``as_dict``) carry the target's T: the law the output follows is the target's."""
    from lessonlib.core.tree_sampled import SampledRule
    from lessonlib.decoding.decode import speculative_generate
    from lessonlib.decoding.drafters import ModelDrafter
    from lessonlib.decoding.round import Sampling
    from lessonlib.decoding.tree_decode import tree_generate

    target, draft = context_gpt(0, block_size=64), context_gpt(1, block_size=64)
    sampling = Sampling(0.7, draft_temperature=1.3)
    _, chain = speculative_generate(target, draft, [1, 2, 3], 3, 8, sampling, np.random.default_rng(0))
    rule = SampledRule((2, 1))  # a sampled tree: its children drawn from the draft at its own temperature
    _, tree = tree_generate(target, ModelDrafter(draft), [1, 2, 3], 8, rule, sampling, np.random.default_rng(0))
    for stats in (chain, tree):
        assert stats.temperature == 0.7 and stats.as_dict()["temperature"] == 0.7
    _, control = speculative_generate(target, draft, [1, 2, 3], 3, 8, Sampling(1.3), np.random.default_rng(0))
    assert control.as_dict()["temperature"] == 1.3  # the field follows the target's T when it changes
