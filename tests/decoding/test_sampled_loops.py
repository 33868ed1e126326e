"""Every sampled loop emits the target's own sampling law at temperatures other than 1.

Plain ``generate``, chain ``speculative_generate``, ``tree_generate``, the fallback
``ModelStream`` (its draft sampling at another temperature than the target) and the generic
reference loops each decode 400 to 2,400 tokens at T = 0.5 and T = 1.7 on a model whose next-token
law is known exactly given its last token(s) (``loop_support.markov_gpt``, and an order-2
``core.toy`` model for the reference loops). A chi-square test of the (context, next token)
counts at false-alarm rate 1e-3 must pass; the same test must reject a plausible wrong
version of the same loop (the negative control), so a pass is evidence.

The controls are the bugs the issue found surviving: a loop that ignores the temperature, a
draft whose q is recorded at T = 1 while its tokens are sampled at T, the target judged at the
draft's temperature, sampled tree verification at T = 1 (and, for a greedy draft, every draft
accepted). Measured p-values at these seeds: every correct loop above 0.05, every control
below 1e-4.
"""
import functools

import numpy as np
import pytest
from loop_support import LEVEL, Cycle, context_p_value, markov_gpt

from lessonlib.core import toy, tree
from lessonlib.core.sampling import softmax
from lessonlib.decoding import chain_rule as chain_rule_
from lessonlib.decoding import decode, fallback, reference
from lessonlib.decoding import round as round_
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.tree_decode import tree_generate

TEMPERATURES = [0.5, 1.7]
PROMPTS = [[1], [4]]
# target and draft per temperature (sharper at 1.7, where tempering flattens them): alpha 0.8
# to 0.9. At T = 1.7 a (5, 10) pair let the q-at-T = 1 control pass 1 seed in 8.
MODELS = {t: (markov_gpt(0, sharpen=st), markov_gpt(1, sharpen=sd))
          for t, st, sd in ((0.5, 5.0, 10.0), (1.7, 10.0, 10.0))}
# tokens per prompt: the chain's control (q recorded at T = 1) is the weakest, it gets the most
N_NEW = {"plain": 200, "chain": 400, "tree": 200, "stream": 200, "stream, greedy draft": 200}
DRAFT_T = 0.8  # the stream's draft samples at its own temperature


def _stream(target, draft, prompt, n, temperature, rng, draft_temperature=DRAFT_T):
    stream = fallback.ModelStream(target, draft, prompt, 3, temperature, draft_temperature=draft_temperature, rng=rng)
    fallback.drive(Cycle(["speculate", "speculate", "plain"]), stream.speculate, stream.plain, n)
    return stream.new_tokens[:n]


def _tree(target, draft, prompt, n, temperature, rng):
    rule = functools.partial(tree.draft_topk, branching=(2, 2, 1))
    return tree_generate(target, ModelDrafter(draft), prompt, n, rule=rule, temperature=temperature, rng=rng)[0]


LOOPS = {
    "plain": lambda target, draft, prompt, n, t, rng: decode.generate(target, prompt, n, t, rng)[0],
    "chain": lambda target, draft, prompt, n, t, rng: decode.speculative_generate(target, draft, prompt, 3, n, t,
                                                                                  rng)[0],
    "tree": _tree,
    "stream": _stream,
    # a greedy draft at a sampled target: its q is one-hot, so its token x is accepted with p_T(x)
    "stream, greedy draft": functools.partial(_stream, draft_temperature=0.0),
}


def _runs(loop, temperature, seed=0):
    rng = np.random.default_rng(seed)
    target, draft = MODELS[temperature]
    return [(prompt, LOOPS[loop](target, draft, prompt, N_NEW[loop], temperature, rng)) for prompt in PROMPTS]


def _retempered(rows, power):
    """rows ** power, renormalised: softmax(z / T) ** T is softmax(z), so power = T turns a
    row recorded at T into the same row at T = 1."""
    r = rows ** power
    return r / r.sum(-1, keepdims=True)


def _control(loop, temperature, monkeypatch):
    """Install the plausible wrong version of ``loop`` (see the module docstring)."""
    right = chain_rule_.verify_chain
    if loop == "plain":  # generate ignoring the temperature
        monkeypatch.setattr(round_, "process", lambda z, t, *truncation: softmax(z, 1.0))
    elif loop == "chain":  # drafts sampled at T, but their q recorded at T = 1
        monkeypatch.setattr(chain_rule_, "verify_chain", lambda p, q, d, rng, validate=True:
                            right(p, _retempered(q, temperature), d, rng, validate))
    elif loop == "tree":  # sampled tree verification at T = 1
        monkeypatch.setattr(round_, "process", lambda z, t, *truncation: softmax(z, 1.0))
    elif loop == "stream":  # the stream's target judged at the draft's temperature
        monkeypatch.setattr(chain_rule_, "verify_chain", lambda p, q, d, rng, validate=True:
                            right(_retempered(p, temperature / DRAFT_T), q, d, rng, validate))
    else:  # a greedy draft's tokens taken as certain: every draft accepted
        monkeypatch.setattr(chain_rule_, "verify_chain", lambda p, q, d, rng, validate=True:
                            list(d) + [int(rng.choice(p.shape[1], p=p[-1]))])


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("loop", LOOPS)
def test_sampled_loop_follows_the_target_and_its_wrong_version_does_not(loop, temperature, monkeypatch):
    target = MODELS[temperature][0]
    assert context_p_value(target.logits, _runs(loop, temperature), temperature) > LEVEL
    _control(loop, temperature, monkeypatch)
    assert context_p_value(target.logits, _runs(loop, temperature), temperature) < LEVEL


def test_the_markov_gpt_is_markov():
    """The exactness the chi-square above relies on: a row depends on the last token only."""
    target = MODELS[0.5][0]
    rows = target.logits([3, 1, 4, 1, 5, 2, 0])
    np.testing.assert_allclose(rows, target.logits([0, 3, 1, 4, 1, 5, 2, 0])[1:], atol=1e-12, rtol=0)
    np.testing.assert_allclose(rows[1], rows[3], atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- the generic reference loops

def _order_2_pair(seed=1, V=4):
    """An order-2 toy target (next token: the last two) and a draft near it: softmax of random
    logits, so q at T = 1 and at T differ by as much as a GPT's would (Dirichlet tables give a
    control too weak to test at 2,400 tokens)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(V, V, V))
    return toy.NgramLM(softmax(2 * z)), toy.NgramLM(softmax(2 * (z + 0.3 * rng.normal(size=z.shape))))


REF_TARGET, REF_DRAFT = _order_2_pair()
REF_PROMPTS = [[a, b] for a in range(4) for b in (0, 2)]


def _reference_runs(kind, temperature, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "speculative":
        return [(p, reference.speculative_decode(REF_TARGET, REF_DRAFT, p, 3, temperature, 300, rng)[0])
                for p in REF_PROMPTS]
    return [(p, reference.autoregressive_decode(REF_TARGET, p, 300, temperature, rng)) for p in REF_PROMPTS]


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("kind", ["speculative", "autoregressive"])
def test_reference_loops_follow_an_order_2_target(kind, temperature, monkeypatch):
    """2,400 tokens, counts by (last two tokens, next token): 64 cells, exact for this model."""
    assert context_p_value(REF_TARGET.logits, _reference_runs(kind, temperature), temperature, order=2) > LEVEL
    if kind == "speculative":  # control: q recorded at T = 1
        right = reference.verify_chain
        monkeypatch.setattr(reference, "verify_chain",
                            lambda p, q, d, rng: right(p, _retempered(q, temperature), d, rng))
    else:  # control: the temperature ignored
        monkeypatch.setattr(reference, "softmax", lambda z, t=1.0: softmax(z, 1.0))
    assert context_p_value(REF_TARGET.logits, _reference_runs(kind, temperature), temperature, order=2) < LEVEL
