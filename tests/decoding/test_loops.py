"""The KV-cached decoding loops on models whose next token depends on the context.

* Greedy equality: every drafter (chain, tree ``ModelDrafter``, ``EagleDrafter`` with the EAGLE
  and EAGLE-3 heads, ``MTPDrafter``, ``MedusaDrafter``) must reproduce plain greedy decoding token
  for token, on the shipped checkpoints and on a tiny GPT whose next token depends on more than the last token (a loop
  that feeds a model the wrong context or keeps the wrong cache rows gives other tokens there;
  on a model that repeats its last token it would not).
* Hand-counted statistics: tau, alpha, accepted / judged / drafted, target and draft calls,
  and c, r, speedup and the forward bound under a clock that counts model forwards.
"""
import copy
import functools
import time

import numpy as np
import pytest
import torch
from loop_support import Cycle, context_gpt, noisy_copy

from lessonlib import models
from lessonlib.core import tree
from lessonlib.decoding import decode, fallback, measures
from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter, ModelDrafter
from lessonlib.decoding.mtp_draft import MTPDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import data
from lessonlib.models.heads import EagleHead, MedusaHeads, load_head
from lessonlib.models.mtp import load_mtp

RULES = {
    "topk": functools.partial(tree.draft_topk, branching=(3, 2, 2)),
    "dynamic": functools.partial(tree.draft_dynamic, depth=4, top_k=3, total=12),
    "top_p": functools.partial(tree.draft_top_p, top_p=0.6, depth=3, max_children=3),
    "chain": functools.partial(tree.draft_topk, branching=(1, 1, 1, 1)),
    "two deep": functools.partial(tree.draft_topk, branching=(3, 2)),  # all two MTP modules can draft
}


@pytest.fixture(scope="module")
def shipped(shipped_target):
    target = shipped_target
    return {"target": target, "draft": models.load("draft-kl", "cpu"),
            "eagle": load_head("eagle", target), "eagle3": load_head("eagle3", target),
            "medusa": load_head("medusa", target),
            "mtp": load_mtp("target-mtp", target), "prompts": data.heldout_prompts("code", 2, 32)}


def shipped_drafter(name, m):
    return {"model": lambda: ModelDrafter(m["draft"]), "eagle": lambda: EagleDrafter(m["eagle"], m["target"]),
            "eagle3": lambda: EagleDrafter(m["eagle3"], m["target"]), "mtp": lambda: MTPDrafter(m["mtp"], m["target"]),
            "medusa": lambda: MedusaDrafter(m["medusa"], m["target"])}[name]()


# ----------------------------------------------------------------------------- greedy equality: shipped models

def test_shipped_greedy_output_is_not_a_repeat_loop(shipped):
    """The witness that the tests below have teeth: real text, many distinct tokens."""
    for prompt in shipped["prompts"]:
        plain, _ = decode.generate(shipped["target"], prompt, 40)
        assert len(set(plain)) >= 6, plain


@pytest.mark.parametrize("k", [1, 3, 5])
def test_shipped_chain_greedy_equals_plain(shipped, k):
    for prompt in shipped["prompts"]:
        plain, _ = decode.generate(shipped["target"], prompt, 40)
        spec, stats = decode.speculative_generate(shipped["target"], shipped["draft"], prompt, k, 40)
        assert spec == plain
        assert 0.3 < stats.alpha < 1 and stats.tau > 1.3  # drafts were accepted and rejected


@pytest.mark.parametrize("drafter,rule", [("model", "topk"), ("model", "dynamic"), ("eagle", "topk"),
                                          ("eagle", "dynamic"), ("eagle3", "topk"), ("eagle3", "dynamic"),
                                          ("mtp", "two deep"), ("medusa", "topk")])
def test_shipped_tree_greedy_equals_plain(shipped, drafter, rule):
    """Every shipped drafter; tau above 1 shows drafts were accepted (Medusa's weak heads: 1.33
    here, the rest above 1.5)."""
    for prompt in shipped["prompts"]:
        plain, _ = decode.generate(shipped["target"], prompt, 40)
        out, stats = tree_generate(shipped["target"], shipped_drafter(drafter, shipped), prompt, 40, rule=RULES[rule])
        assert out == plain, (drafter, rule)
        assert stats.tau > (1.2 if drafter == "medusa" else 1.5)  # Medusa: 1.33 on these prompts


def test_shipped_self_draft_accepts_every_draft(shipped):
    """The target drafting for itself accepts everything, greedy or sampled, if and only if the
    draft always sees the right context -- also after a round that accepted all its drafts
    (feeding it only the bonus token then keeps the output exact but lowers alpha)."""
    target, prompt = shipped["target"], shipped["prompts"][0]
    for temperature in (0.0, 0.7):
        _, stats = decode.speculative_generate(target, target, prompt, 3, 24, temperature, np.random.default_rng(0))
        assert stats.alpha == 1.0 and stats.tau == 4.0 and stats.target_calls == 6


# ----------------------------------------------------------------------------- greedy equality: a tiny context model

PROMPTS = [[1, 5, 9, 13, 2], [7, 7, 3, 0, 11, 4]]


def test_the_tiny_model_depends_on_more_than_the_last_token():
    target = context_gpt(0)
    out, _ = decode.generate(target, PROMPTS[0], 60)
    changed, _ = decode.generate(target, [0] + PROMPTS[0][1:], 60)  # only the first prompt token differs
    assert sum(a != b for a, b in zip(out, changed)) > 10
    seq = PROMPTS[0] + out
    after = {}
    for a, b in zip(seq[:-1], seq[1:]):
        after.setdefault(a, set()).add(b)
    assert max(len(s) for s in after.values()) >= 3  # one token is followed by three different ones


@pytest.mark.parametrize("k", [1, 2, 4])
def test_tiny_chain_greedy_equals_plain(k):
    target = context_gpt(0)
    for draft in (noisy_copy(target, 1), target):
        for prompt in PROMPTS:
            plain, _ = decode.generate(target, prompt, 60)
            spec, stats = decode.speculative_generate(target, draft, prompt, k, 60)
            assert spec == plain
            assert stats.alpha == 1.0 if draft is target else 0 < stats.alpha < 1


def tiny_drafters(target):
    torch.manual_seed(8)
    eagle = EagleHead(target.config).to(torch.float64).eval()
    medusa = MedusaHeads(target.config, n_heads=4).to(torch.float64).eval()
    return {"self": lambda: ModelDrafter(target), "noisy": lambda: ModelDrafter(noisy_copy(target, 1)),
            "eagle": lambda: EagleDrafter(eagle, target), "medusa": lambda: MedusaDrafter(medusa, target)}


@pytest.mark.parametrize("rule", RULES)
def test_tiny_tree_greedy_equals_plain(rule):
    target = context_gpt(0)
    for prompt in PROMPTS:
        plain, _ = decode.generate(target, prompt, 50)
        for name, make in tiny_drafters(target).items():
            out, stats = tree_generate(target, make(), prompt, 50, rule=RULES[rule])
            assert out == plain, (rule, name)
            if name == "self" and rule in ("topk", "chain"):
                # the target's own greedy path is in a static tree at full depth, every round
                assert stats.tau == (5.0 if rule == "chain" else 4.0)
                assert set(stats.acceptance_by_depth) == {1.0}
            elif name == "self":
                assert stats.tau > 2.5


def test_fallback_stream_mixing_plain_steps_and_rounds_equals_plain():
    target = context_gpt(0)
    draft = noisy_copy(target, 1)
    plain, _ = decode.generate(target, PROMPTS[1], 80)
    stream = fallback.ModelStream(target, draft, PROMPTS[1], k=3, temperature=0.0)
    trace = fallback.drive(Cycle(["speculate", "plain", "plain", "probe", "speculate"]), stream.speculate, stream.plain,
                           80)
    assert stream.new_tokens[:80] == plain
    assert set(trace["action"]) == {"speculate", "plain", "probe"}


# ----------------------------------------------------------------------------- hand-counted statistics

def anti_draft(model):
    """The target with its final LayerNorm negated: every logit negated, so its greedy token
    is the target's least likely one and a greedy round never accepts a draft."""
    draft = copy.deepcopy(model)
    with torch.no_grad():
        draft.ln_f.weight.neg_()
        draft.ln_f.bias.neg_()
    return draft


def test_chain_counts_when_every_draft_is_accepted_or_none_is():
    target = context_gpt(0)
    _, stats = decode.speculative_generate(target, copy.deepcopy(target), PROMPTS[0], 4, 30)
    # 6 rounds of 4 accepted drafts + 1 bonus token = 30 tokens
    assert ((stats.target_calls, stats.draft_calls, stats.accepted, stats.judged, stats.drafted)
            == (6, 24, 24, 24, 24))
    assert stats.tau == 5.0 and stats.alpha == 1.0 and stats.accepted_fraction == 1.0
    _, stats = decode.speculative_generate(target, anti_draft(target), PROMPTS[0], 4, 30)
    # 30 rounds, each judging (and rejecting) its first draft and emitting the target's token
    assert ((stats.target_calls, stats.draft_calls, stats.accepted, stats.judged, stats.drafted)
            == (30, 120, 0, 30, 120))
    assert stats.tau == 1.0 and stats.alpha == 0.0
    _, stats = decode.speculative_generate(target, copy.deepcopy(target), PROMPTS[0], 4, 32)
    assert stats.target_calls == 7 and stats.tau == 35 / 7  # the last round's surplus counts in tau


def test_tree_counts_when_every_draft_is_accepted_or_none_is():
    target = context_gpt(0)
    _, stats = tree_generate(target, ModelDrafter(copy.deepcopy(target)), PROMPTS[0], 30, rule=RULES["chain"])
    assert stats.rounds == stats.target_calls == 6 and stats.tau == 5.0
    assert stats.acceptance_by_depth == [1.0] * 4 and stats.accepted_lengths == [0, 0, 0, 0, 6]
    assert stats.mean_nodes == 4 and stats.mean_accepted == 4
    _, stats = tree_generate(target, ModelDrafter(anti_draft(target)), PROMPTS[0], 30, rule=RULES["chain"])
    assert stats.rounds == 30 and stats.tau == 1.0 and stats.mean_accepted == 0
    assert stats.acceptance_by_depth == [0.0, None, None, None] and stats.accepted_lengths == [30]


class ForwardClock:
    """A clock that only moves when a model runs a forward: ``cost`` seconds per call plus
    ``per_token`` for every token after the first. Installed as ``time.perf_counter``, it makes
    every time of a loop a hand-countable number."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(time, "perf_counter", lambda: self.now)

    def charge(self, model, cost, per_token=0.0):
        forward = model.forward

        def timed(idx, *args, **kwargs):
            self.now += cost + per_token * (idx.shape[1] - 1)
            return forward(idx, *args, **kwargs)

        model.forward = timed  # an instance attribute: nn.Module.__call__ finds it first
        return model


def test_c_r_and_speedup_from_a_clock_that_counts_forwards(monkeypatch):
    """A target forward costs 10 s + 1 s per extra token, a draft forward 1 s, everything else
    nothing. Plain decoding of 30 tokens takes 29 one-token steps after the prefill (290 s). A
    self-draft with k = 4 takes 6 rounds of 4 draft steps (4 s) and a 5-token verify (14 s):
    108 s. So c = 1 / 10, r = 14 / 10, speedup = 290 / 108, forward bound = tau / (k c + r) =
    5 / 1.8, and the loop's own overhead is 0."""
    clock = ForwardClock(monkeypatch)
    target = context_gpt(0)
    draft = clock.charge(copy.deepcopy(target), 1.0)  # copy first: a copy would share the charged forward
    target = clock.charge(target, 10.0, per_token=1.0)
    plain_tokens, plain = decode.generate(target, PROMPTS[0], 30)
    spec_tokens, spec = decode.speculative_generate(target, draft, PROMPTS[0], 4, 30)
    assert spec_tokens == plain_tokens
    assert plain.target_calls == 30 and plain.seconds == 290.0 and plain.target_forward_seconds == 10.0
    assert spec.seconds == 108.0 and spec.draft_seconds == 24.0 and spec.verify_seconds == 84.0
    assert (spec.overhead_seconds == 0.0 and spec.draft_step_seconds == 1.0
            and spec.verify_forward_seconds == 14.0)
    got = measures.compare(spec, plain)
    assert got == pytest.approx({"c": 0.1, "r": 1.4, "speedup": 290 / 108, "forward_bound": 5 / 1.8}, rel=1e-12)
    # the tree loop: per round 3 draft feeds while drafting a 4-deep chain + 1 at the commit
    _, tree_stats = tree_generate(target, ModelDrafter(draft), PROMPTS[0], 30, rule=RULES["chain"])
    assert tree_stats.draft_seconds_per_round == 4.0 and tree_stats.verify_forward_seconds == 14.0
    assert tree_stats.seconds == 6 * 18.0 and tree_stats.overhead_seconds == 0.0
    tree_vs_plain = measures.compare(tree_stats, plain)
    assert tree_vs_plain["forward_bound"] == pytest.approx(5 / (0.4 + 1.4), rel=1e-12)
    assert tree_vs_plain["speedup"] == pytest.approx(290 / 108, rel=1e-12) and tree_vs_plain["r"] == pytest.approx(1.4)
