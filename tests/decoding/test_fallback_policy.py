"""The fallback policy on scripted streams: the expected action at every step, one script per
rule (switching off, probing at the right token, probing again while probes accept, switching
on with hysteresis, keeping the probes that switched it on, dropping old rounds when switching
off, the predicted speedup with r), and ``ModelStream``'s context room and draft temperature.

With k = 2 and c = 0.5 the predicted speedup is S(alpha) = (1 + alpha + alpha^2) / (1 + r):
at r = 1, S < 1 below alpha = 0.618 (off) and S >= 1.1 from alpha = 0.704 (on)."""
import numpy as np
import pytest
import torch
from loop_support import context_gpt, noisy_copy

from lessonlib.decoding import fallback
from lessonlib.decoding.fallback import FallbackPolicy

ALPHA_OFF, ALPHA_ON = (5 ** 0.5 - 1) / 2, (-1 + 5.8 ** 0.5) / 2  # 1 + a + a^2 = 2 and = 2.2


def policy(**kw):
    args = dict(k=2, c=0.5, window=4, min_rounds=2, off_below=1.0, on_above=1.1, probe_every=3, probe_window=2)
    return FallbackPolicy(**(args | kw))


def play(p, script):
    """Each step: (the action the policy must ask for, (accepted, drafted) to record, or None for
    a plain token)."""
    for i, (want, outcome) in enumerate(script):
        assert p.action() == want, f"step {i}: {p.action()} instead of {want}"
        if outcome is None:
            p.record_plain()
        else:
            p.record(*outcome)


def test_thresholds_are_the_hand_computed_alphas():
    p = policy()
    assert p.alpha_off == pytest.approx(ALPHA_OFF, abs=1e-12) and p.alpha_on == pytest.approx(ALPHA_ON, abs=1e-12)


def test_switch_off_waits_for_min_rounds_then_probes_after_exactly_probe_every_plain_tokens():
    p = policy()
    play(p, [("speculate", (0, 2)), ("speculate", (0, 2)),  # alpha 0 over 2 rounds: off
             ("plain", None), ("plain", None), ("plain", None),  # 3 plain tokens, then a probe
             ("probe", (0, 2)), ("plain", None), ("plain", None), ("plain", None), ("probe", (0, 2))])
    assert p.switches == [(2, "off")] and not p.speculating
    assert p.tokens == 2 + 3 + 1 + 3 + 1


def test_a_probe_that_accepts_is_repeated_at_once_and_two_good_probes_switch_on():
    p = policy()
    play(p, [("speculate", (0, 2)), ("speculate", (0, 2))] + [("plain", None)] * 3
         + [("probe", (2, 2)),  # accepted: probe again right away (one probe is not yet probe_window)
            ("probe", (2, 2)),  # alpha 1 over the last 2 probes: on
            ("speculate", (0, 2))])
    assert p.switches == [(2, "off"), (2 + 3 + 3 + 3, "on")] and p.speculating


def test_hysteresis_probes_between_the_thresholds_do_not_switch_on():
    p = policy()
    play(p, [("speculate", (0, 2)), ("speculate", (0, 2))] + [("plain", None)] * 3
         + [("probe", (1, 2)), ("probe", (1, 2)),  # alpha 2 / 4 = 0.5 over the last two: stays off
            ("probe", (1, 2)), ("probe", (2, 2))])  # the last two: 3 / 4 = 0.75 >= 0.704: on
    assert p.switches[-1][1] == "on"
    p = policy(on_above=1.3)  # alpha_on = 0.860: 0.75, above alpha_off, no longer switches it on
    play(p, [("speculate", (0, 2)), ("speculate", (0, 2))] + [("plain", None)] * 3
         + [("probe", (1, 2)), ("probe", (2, 2)), ("probe", (1, 2)), ("probe", (2, 2)), ("probe", (1, 2)),
            ("probe", (0, 2)), ("plain", None)])
    assert p.switches == [(2, "off")] and p.alpha_off < 0.75 < p.alpha_on


def test_the_probes_that_switched_it_on_stay_as_evidence():
    p = policy()
    play(p, [("speculate", (0, 2)), ("speculate", (0, 2))] + [("plain", None)] * 3
         + [("probe", (2, 2)), ("probe", (2, 2)),
            # window [2/0, 2/0, 0/1, 0/1]: alpha 4 / 6 = 0.67 > 0.618, stays on (without the probes: 0, off)
            ("speculate", (0, 2)), ("speculate", (0, 2)),
            ("speculate", (0, 2))])  # the oldest probe leaves the window of 4: 2 / 5 = 0.4, off
    assert [s for _, s in p.switches] == ["off", "on", "off"]
    assert p.action() == "plain"


def test_old_rounds_are_dropped_when_switching_off():
    p = policy()
    # alpha 1 / 2 over 2 rounds: off; the next single probe of 2 / 2 must not switch on by itself
    # (with the old rounds it would: 3 / 4 = 0.75 >= 0.704 over the last two)
    play(p, [("speculate", (1, 2)), ("speculate", (0, 2))] + [("plain", None)] * 3 + [("probe", (2, 2))])
    assert len(p.rounds) == 1 and not p.speculating
    play(p, [("probe", (2, 2)), ("speculate", (2, 2))])


def test_predicted_speedup_uses_the_measured_verify_cost():
    for r in (1.0, 1.5):
        p = policy(r=r, min_rounds=4)
        p.record(2, 2)
        p.record(1, 2)  # alpha 3 / 4
        assert p.predicted_speedup == pytest.approx((1 + 0.75 + 0.75 ** 2) / (1 + r), rel=1e-12)
    play(policy(r=1.0), [("speculate", (2, 2)), ("speculate", (1, 2)), ("speculate", (2, 2))])  # S(0.75) > 1
    p = policy(r=1.5)  # S(0.75) = 2.3125 / 2.5 < 1: off
    play(p, [("speculate", (2, 2)), ("speculate", (1, 2)), ("plain", None)])
    assert p.alpha_off == pytest.approx((-1 + (1 + 4 * 1.5) ** 0.5) / 2, abs=1e-12)


def test_drive_probes_at_the_right_output_position():
    p = policy()
    outcomes = iter([(0, 2), (0, 2), (1, 2), (0, 2), (0, 2)])
    spec, plain = [], []
    trace = fallback.drive(p, lambda pos: spec.append(pos) or next(outcomes), plain.append, 12, clock=lambda: 0.0)
    # rounds at 0 and 1 (1 token each), plain 2, 3, 4, a probe at 5 (2 tokens), again at 7 (1 token),
    # plain 8, 9, 10, a probe at 11
    assert spec == [0, 1, 5, 7, 11] and plain == [2, 3, 4, 8, 9, 10]
    assert trace["action"].tolist() == ["speculate"] * 2 + ["plain"] * 3 + ["probe"] * 2 + ["plain"] * 3 + ["probe"]
    assert trace["tokens"].tolist() == [1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1]


# ---------------------------------------------------------------------------- ModelStream
@pytest.fixture(scope="module")
def models():
    target = context_gpt(0, block_size=24)
    return target, noisy_copy(target, 1)


def test_model_stream_passes_the_draft_temperature_to_the_draft(models):
    stream = fallback.ModelStream(*models, [1, 2, 3], 3, 1.0, draft_temperature=0.0, rng=np.random.default_rng(0))
    seen = []
    propose = stream.drafter.propose
    stream.drafter.propose = lambda rule, sampling, rng, clock: seen.append(sampling) or propose(rule, sampling, rng,
                                                                                                   clock)
    stream.speculate(0)
    assert seen[0].temperature == 1.0 and seen[0].draft_t == 0.0


@torch.inference_mode()
def test_model_stream_keeps_its_context_until_a_round_no_longer_fits(models):
    k = 3
    stream = fallback.ModelStream(*models, [t % 16 for t in range(12)], k, 0.0)  # a context of 24
    while len(stream.seq) + k < 24:  # plain steps (one token each) until exactly one round of k fits
        stream.plain(0)
    assert len(stream.seq) == 21
    before = list(stream.seq)
    stream.speculate(0)
    assert stream.seq[: len(before)] == before  # it fit: no refill
