"""Every loop samples the target's *processed* law (temperature, top-k, top-p, min-p), and
sampled draft trees keep it exact.

The loops decode on ``loop_support.markov_gpt`` (next token depends on the last one only, so a
chi-square test of (previous, next) counts has full power) at T = 0.7, 1.0 and 1.7, each with a
truncation on, against ``Sampling.probs`` -- the law the target samples after processing. Each
sampled-tree rule also meets its negative controls, run through the same loop, which must fail:
the draft's q taken from before truncation while its tokens were drawn after it (transformers
#47932), and without-replacement draws judged as if drawn with replacement (a rejected
candidate's mass reused).
"""
import functools

import numpy as np
import pytest
from loop_support import LEVEL, context_p_value, markov_gpt

from lessonlib.core import tree
from lessonlib.core import tree_sampled as ts
from lessonlib.core.sampling import process
from lessonlib.decoding import decode, lookahead, prompt_lookup
from lessonlib.decoding import round as round_
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.round import Sampling
from lessonlib.decoding.tree_decode import tree_generate

SETTINGS = {  # one truncation per temperature, so each processor is exercised at a T other than 1
    0.7: Sampling(0.7, top_k=3),
    1.0: Sampling(1.0, top_p=0.8),
    1.7: Sampling(1.7, top_k=4, min_p=0.05),
}
TARGET, DRAFT = markov_gpt(0, sharpen=4.0), markov_gpt(1, sharpen=4.0)
# the controls' drafts, chosen so that each wrong rule's bias is large: reusing a rejected candidate's
# mass with the sharp one (p-values 1e-33 to 1e-67 over seeds 0-4 at 4 prompts x 400 tokens), #47932
# with the flat one (a first-token TV of 0.1-0.26 by ``sampled_tree_law``; p-values 1e-11 to 1e-18)
SHARP_DRAFT, FLAT_DRAFT = markov_gpt(1, sharpen=20.0), markov_gpt(1, sharpen=2.0)
PROMPTS = [[1], [4]]
RULES = {
    "sampled chain": ts.SampledRule((1, 1, 1)),
    "with replacement": ts.SampledRule((2, 2)),
    "without replacement": ts.SampledRule((3, 1), replacement=False),
    "dynamic, without": ts.SampledRule(dynamic=(3, 2, 6), replacement=False),
    "deterministic": functools.partial(tree.draft_topk, branching=(2, 1)),
}


def _tree_runs(rule, sampling, n=250, seed=0, draft=DRAFT, prompts=PROMPTS):
    rng = np.random.default_rng(seed)
    return [(p, tree_generate(TARGET, ModelDrafter(draft), p, n, rule, sampling, rng)[0]) for p in prompts]


@pytest.mark.parametrize("temperature", list(SETTINGS))
@pytest.mark.parametrize("rule", list(RULES))
def test_tree_rules_follow_the_processed_target(rule, temperature):
    sampling = SETTINGS[temperature]
    assert context_p_value(TARGET.logits, _tree_runs(RULES[rule], sampling), sampling) > LEVEL


def _draft_before_truncation(monkeypatch, sampling):
    """#47932: the rule is handed the draft's q before truncation, its tokens drawn after it."""
    plain = dict(top_k=None, top_p=None, min_p=None)
    monkeypatch.setattr(round_.Sampling, "draft_probs", lambda self, z: process(z, self.draft_t, **plain))
    draw = ts.draw_children
    truncate = functools.partial(process, temperature=1.0, top_k=sampling.top_k, top_p=sampling.top_p,
                                 min_p=sampling.min_p)
    with np.errstate(divide="ignore"):
        monkeypatch.setattr(ts, "draw_children", lambda q, m, rng, rep: draw(truncate(np.log(q)), m, rng, rep))


@pytest.mark.parametrize("rule", ["sampled chain", "with replacement", "without replacement"])
def test_control_draft_probabilities_from_before_truncation(rule, monkeypatch):
    sampling = SETTINGS[0.7]
    _draft_before_truncation(monkeypatch, sampling)
    with np.errstate(divide="ignore"):
        runs = _tree_runs(RULES[rule], sampling, n=400, draft=FLAT_DRAFT)
    assert context_p_value(TARGET.logits, runs, sampling) < LEVEL


def test_control_reusing_a_rejected_candidates_mass(monkeypatch):
    right = round_.verify_tree_sampled
    monkeypatch.setattr(round_, "verify_tree_sampled",
                        lambda par, tok, p, q, rng, rep, validate=True: right(par, tok, p, q, rng, True, validate))
    sampling = Sampling(1.0)
    rule = ts.SampledRule((3,), replacement=False)
    runs = _tree_runs(rule, sampling, n=400, draft=SHARP_DRAFT, prompts=[[1], [4], [0], [3]])
    assert context_p_value(TARGET.logits, runs, sampling) < LEVEL


LOOPS = {
    "plain": lambda p, n, s, rng: decode.generate(TARGET, p, n, s, rng)[0],
    "chain": lambda p, n, s, rng: decode.speculative_generate(TARGET, DRAFT, p, 3, n, s, rng)[0],
    "lookup": lambda p, n, s, rng: prompt_lookup.lookup_generate(TARGET, p, n, 4, temperature=s, rng=rng)[0],
    "lookahead": lambda p, n, s, rng: lookahead.lookahead_generate(TARGET, p, n, 3, 3, 2, s, rng)[0],
}


@pytest.mark.parametrize("temperature", [0.7, 1.7])
@pytest.mark.parametrize("loop", list(LOOPS))
def test_every_loop_samples_the_processed_law(loop, temperature):
    sampling, rng = SETTINGS[temperature], np.random.default_rng(3)
    runs = [(p, LOOPS[loop](p, 250, sampling, rng)) for p in PROMPTS]
    assert context_p_value(TARGET.logits, runs, sampling) > LEVEL
    # control: the same runs judged against the untruncated law must fail (truncation had power)
    assert context_p_value(TARGET.logits, runs, sampling.temperature) < LEVEL


def test_a_sampled_rule_at_greedy_is_its_deterministic_twin():
    prompt = [2, 3]
    plain = decode.generate(TARGET, prompt, 40)[0]
    for rule in RULES.values():
        assert tree_generate(TARGET, ModelDrafter(DRAFT), prompt, 40, rule)[0] == plain


def test_sampling_refuses_bad_truncation():
    for kwargs, name in [({"top_k": 0}, "top_k"), ({"top_k": True}, "top_k"), ({"top_p": 0.0}, "top_p"),
                         ({"top_p": 1.5}, "top_p"), ({"min_p": 1.0}, "min_p"), ({"min_p": float("nan")}, "min_p")]:
        with pytest.raises(ValueError, match=name):
            Sampling(1.0, **kwargs)
    with pytest.raises(ValueError, match="draft_temperature"):
        Sampling.of(Sampling(1.0), 0.5)


def test_the_fallback_stream_samples_the_processed_law():
    """The stream (plain steps and rounds interleaved) with a Sampling's truncation; control: the
    same tokens judged against the untruncated law."""
    from loop_support import Cycle

    from lessonlib.decoding import fallback

    sampling, rng, runs = SETTINGS[0.7], np.random.default_rng(4), []
    for p in PROMPTS:
        stream = fallback.ModelStream(TARGET, DRAFT, p, 3, sampling, rng=rng)
        fallback.drive(Cycle(["speculate", "speculate", "plain"]), stream.speculate, stream.plain, 250)
        runs.append((p, stream.new_tokens[:250]))
    assert context_p_value(TARGET.logits, runs, sampling) > LEVEL
    assert context_p_value(TARGET.logits, runs, sampling.temperature) < LEVEL


def test_the_reference_loops_sample_the_processed_law():
    """The numpy reference loops take a Sampling too (read by its attributes)."""
    from lessonlib.decoding import reference

    sampling, rng = SETTINGS[1.7], np.random.default_rng(5)
    auto = [(p, reference.autoregressive_decode(TARGET, p, 200, sampling, rng)) for p in PROMPTS]
    spec = [(p, reference.speculative_decode(TARGET, DRAFT, p, 3, sampling, 200, rng)[0]) for p in PROMPTS]
    for runs in (auto, spec):
        assert context_p_value(TARGET.logits, runs, sampling) > LEVEL
        assert context_p_value(TARGET.logits, runs, sampling.temperature) < LEVEL
