"""Independent oracles (issue 54, item 7): the truncation laws, the draft's q and the counted
statistics checked against hand-computed rows and a second, deliberately simple implementation
that shares no code with ``core.sampling`` -- so a wrong ``process`` cannot agree with itself.
Each mutant named in the issue is shown to fail here by its own hand case."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lessonlib.core import sampling
from lessonlib.decoding.round import Sampling
from lessonlib.decoding.stats import DecodeStats, acceptance_by_depth


def simple_process(logits, temperature, top_k=None, top_p=None, min_p=None):
    """One row, plain Python lists: softmax(z / T); keep the top_k largest (ties: lower index);
    renormalise; keep, in descending order (ties: lower index), each entry while the mass before
    it is below top_p; renormalise; keep entries >= min_p x the largest; renormalise."""
    z = [float(x) / temperature for x in logits]
    top = max(z)
    e = [math.exp(x - top) for x in z]
    p = [x / sum(e) for x in e]

    def renorm(keep):
        total = sum(p[i] for i in keep)
        return [p[i] / total if i in keep else 0.0 for i in range(len(p))]

    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    if top_k is not None:
        p = renorm(set(order[:top_k]))
    if top_p is not None:
        order, keep, before = sorted(range(len(p)), key=lambda i: (-p[i], i)), set(), 0.0
        for i in order:
            if before < top_p and p[i] > 0:
                keep.add(i)
            before += p[i]
        p = renorm(keep)
    if min_p is not None:
        p = renorm({i for i in range(len(p)) if p[i] >= min_p * max(p)})
    return p


P = [0.4, 0.3, 0.2, 0.1]
LOGITS = np.log(P)


def test_hand_cases_for_each_law_and_their_order():
    cases = [  # (top_k, top_p, min_p) -> the law, worked by hand
        ((2, None, None), [4 / 7, 3 / 7, 0, 0]),
        ((None, 0.65, None), [4 / 7, 3 / 7, 0, 0]),  # 0.4 < 0.65, 0.7 >= 0.65: two kept
        # top-k first: [4/9, 3/9, 2/9] has 7/9 >= 0.72 after two; top-p first would keep three
        ((3, 0.72, None), [4 / 7, 3 / 7, 0, 0]),
        # min-p relative to the largest (0.3 x 0.4 = 0.12 keeps 0.2), not absolute (which would drop it)
        ((None, None, 0.3), [4 / 9, 3 / 9, 2 / 9, 0]),
        ((3, None, 0.6), [4 / 7, 3 / 7, 0, 0]),  # min-p on the renormalised top-k row: 0.6 x 4/9 > 2/9
    ]
    for (k, top_p, min_p), law in cases:
        got = sampling.process(LOGITS, 1.0, top_k=k, top_p=top_p, min_p=min_p)
        assert got == pytest.approx(law, abs=1e-12), (k, top_p, min_p)
        assert simple_process(LOGITS, 1.0, k, top_p, min_p) == pytest.approx(law, abs=1e-12)
    # negative controls: the mutants' laws differ from the hand ones
    assert simple_process(LOGITS, 1.0, None, 0.72, None) != pytest.approx([4 / 7, 3 / 7, 0, 0])  # p before k
    absolute = [x if x >= 0.3 else 0 for x in P]
    assert [x / sum(absolute) for x in absolute] != pytest.approx([4 / 9, 3 / 9, 2 / 9, 0])
    unnormalised = [x if x >= 0.12 else 0 for x in P]
    assert sum(unnormalised) == pytest.approx(0.9)  # skipping the renormalisation leaves mass 0.9


def test_temperature_is_applied_before_truncation():
    # T = 2 flattens [0.4, 0.3, 0.2, 0.1] to sqrt-proportional weights, by hand
    w = [math.sqrt(x) for x in P]
    law = [x / sum(w[:2]) for x in w[:2]] + [0, 0]
    assert sampling.process(LOGITS, 2.0, top_k=2) == pytest.approx(law, abs=1e-12)


def test_random_rows_agree_with_the_simple_implementation():
    rng = np.random.default_rng(54)
    for _ in range(300):
        v = int(rng.integers(2, 12))
        logits = rng.normal(0, 2, v)
        t = float(rng.choice([0.5, 1.0, 1.7]))
        k = None if rng.random() < 0.3 else int(rng.integers(1, v + 1))
        top_p = None if rng.random() < 0.3 else float(rng.uniform(0.05, 1.0))
        min_p = None if rng.random() < 0.3 else float(rng.uniform(0.0, 0.9))
        got = sampling.process(logits, t, k, top_p, min_p)
        assert got == pytest.approx(simple_process(logits, t, k, top_p, min_p), abs=1e-9), (logits, t, k, top_p, min_p)


@pytest.mark.parametrize("draft_t", [None, 0.5])
def test_the_drafts_q_is_the_processed_q_at_the_draft_temperature(draft_t):
    s = Sampling(1.0, draft_temperature=draft_t, top_k=3, top_p=0.9, min_p=0.05)
    logits = np.array([[2.0, 1.0, 0.5, 0.0, -1.0], [0.0, 0.1, 3.0, -2.0, 1.0]])
    q = s.draft_probs(logits)
    for row, got in zip(logits, q):
        want = simple_process(row, draft_t or 1.0, 3, 0.9, 0.05)
        assert got == pytest.approx(want, abs=1e-12)
        assert (got == 0).sum() >= 2  # truncated: a q from before truncation (transformers #47932) fails here


def test_depth_and_acceptance_by_depth_keep_every_round():
    stats = DecodeStats("chain", 1.0, 6)
    for drafted, accepted, depth in ((5, 5, 5), (2, 1, 2), (3, 0, 3)):  # the deepest round comes first
        stats.record_round(drafted, accepted, accepted < drafted, depth)
    assert stats.depth == 5  # the deepest, not the last round's 3
    # by hand, accepted lengths [5, 1, 0]: depth 0 reached by 3 rounds, passed by 2; depth 1: reached by 2, passed
    # by 1; depths 2..4: reached and passed by the first round alone (lost if depth were the last round's 3)
    assert stats.acceptance_by_depth == pytest.approx([2 / 3, 1 / 2, 1.0, 1.0, 1.0])
    assert acceptance_by_depth([0, 2], 3) == pytest.approx([1 / 2, 1.0, 0.0])


def test_the_bonus_token_is_emitted_but_never_counted_as_an_accepted_draft():
    stats = DecodeStats("chain", 1.0, 6)
    stats.record_round(3, 3, False, 3)  # all three accepted, plus the bonus token
    stats.record_round(3, 1, True, 3)  # one accepted, the second rejected, plus the resampled token
    assert (stats.emitted, stats.accepted, stats.judged, stats.drafted) == (6, 4, 5, 6)
    assert stats.alpha == pytest.approx(4 / 5) and stats.tau == pytest.approx(6 / 2)
