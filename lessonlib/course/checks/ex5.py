"""Checks for notebook 5, high temperature: 5a the break-even T, 5b the fallback policy, 5c throughput by phase.

``lessonlib.decoding.fallback`` (which imports torch) is imported inside the checks.
"""
from __future__ import annotations

import numpy as np

from lessonlib.core import theory
from lessonlib.course.checks import numeric, wrong
from lessonlib.course.checks.ex5_hints import _diagnose, _history
from lessonlib.course.checks.framework import (
    CheckFailed,
    as_number,
    call,
    expect_close,
    expect_equal,
    fail,
    quoted,
    run_check,
    with_controls,
)
from lessonlib.course.messages import N_, _, say, translated

# ----------------------------------------------------------------------------- 5a the break-even temperature

INTERPOLATE = N_("with k=None the best K breaks even exactly at α = c (notebook 2, Cor. 3.9); with k given, at "
               "theory.breakeven_alpha(k, c). Interpolate α linearly between the two measured temperatures around "
               "the first crossing")
ALREADY = N_("α(T) is already at or below the break-even α at the first measured temperature: return temperatures[0]")
AT_BREAKEVEN = N_("α equal to the break-even α already stops paying (the speedup is exactly 1): take the first T with "
                "alpha <= the break-even α, not <")

ALPHA_ONE = N_("α = 1 (every draft accepted) and α just below it are measured values like any other: compare them "
               "with the break-even α and interpolate from them; no special case for α near 1 (E(1, K) = K + 1)")


def _breakeven_cases():
    rng = np.random.default_rng(5)
    a4 = float(theory.breakeven_alpha(4, 0.1))
    cases = [(N_("alpha falls through c"), [0.0, 1.0, 2.0], [0.9, 0.5, 0.05], 0.1, None, INTERPOLATE),
             (N_("never breaks even in range"), [0.0, 1.0, 2.0], [0.9, 0.8, 0.7], 0.1, None, INTERPOLATE),
             (N_("already below at the first T"), [0.0, 1.0, 2.0], [0.05, 0.9, 0.9], 0.1, None, INTERPOLATE),
             (N_("already below at the first T = 0.5"), [0.5, 1.0, 2.0], [0.05, 0.02, 0.01], 0.1, None, ALREADY),
             (N_("exactly at break-even (α = c) at the first T = 0.3"), [0.3, 0.7], [0.25, 0.9], 0.25, None,
              ALREADY),
             (N_("non-monotone curve: the first crossing"), [0.0, 1.0, 2.0, 3.0], [0.9, 0.0, 0.9, 0.0], 0.45, None,
              INTERPOLATE),
             (N_("fixed K = 4"), [0.0, 1.0, 2.0], [0.9, 0.5, 0.05], 0.1, 4, INTERPOLATE),
             (N_("free draft (c = 0): alpha reaches 0 at T = 1"), [0.0, 1.0, 2.0], [0.5, 0.0, 0.0], 0.0, None,
              AT_BREAKEVEN),
             (N_("alpha equals c = 0.25 from T = 1.5 on"), [0.5, 1.5, 2.5], [0.75, 0.25, 0.25], 0.25, None,
              AT_BREAKEVEN),
             (N_("K = 4: alpha reaches theory.breakeven_alpha(4, 0.1) at T = 1, then falls"), [0.0, 1.0, 2.0],
              [0.6, a4, a4 - 0.1], 0.1, 4, INTERPOLATE),
             # α's upper end (α = 1 exactly, 0.995, 0.999) and c up to 1, where α* reaches 1
             (N_("alpha = 1 exactly until T = 1, then falls through c = 0.3"), [0.0, 1.0, 2.0], [1.0, 1.0, 0.2], 0.3,
              None, ALPHA_ONE),
             (N_("alpha 0.999 and 0.995, then falls through c = 0.5"), [0.0, 0.5, 1.0], [0.999, 0.995, 0.1], 0.5,
              None, ALPHA_ONE),
             (N_("c = 1 (a draft as costly as the target): the best K breaks even only at α = 1"), [0.2, 0.8, 1.5],
              [1.0, 1.0, 0.5], 1.0, None, ALREADY),
             (N_("c = 1, K = 4: breaks even at α = 1"), [0.2, 0.8, 1.5], [1.0, 1.0, 0.5], 1.0, 4, ALREADY),
             (N_("c = 0.99, K = 3: alpha 0.999 then 0.9"), [0.0, 1.0, 2.0], [0.9999, 0.999, 0.9], 0.99, 3,
              ALPHA_ONE),
             (N_("c = 0.9: alpha stays at 0.95, above c"), [0.0, 1.0], [0.95, 0.95], 0.9, None, INTERPOLATE)]
    for i in range(20):
        t = np.cumsum(rng.uniform(0.1, 0.6, 9)) - 0.1
        a = np.sort(rng.uniform(0, 1, 9))[::-1]
        cases.append((say("random falling curve #{i}", i=i), t.tolist(), a.tolist(), float(rng.uniform(0.02, 1.0)),
                      None if i % 2 else int(rng.integers(1, 8)), INTERPOLATE))
    return cases


BAD_INPUT = [(N_("lengths differ"), ([0.0, 1.0, 2.0], [0.5, 0.4], 0.1)),
             (N_("temperatures not increasing"), ([1.0, 0.0], [0.5, 0.4], 0.1)),
             (N_("two equal temperatures"), ([0.0, 1.0, 1.0], [0.5, 0.4, 0.3], 0.1)),
             (N_("alpha above 1"), ([0.0, 1.0], [0.5, 1.4], 0.1)),
             (N_("alpha below 0"), ([0.0, 1.0], [0.5, -0.2], 0.1)),
             (N_("alpha is NaN"), ([0.0, 1.0, 2.0], [0.5, float("nan"), 0.1], 0.1))]


def _rejects_bad_input(breakeven_temperature):
    for case, args in BAD_INPUT:
        try:
            got = call(breakeven_temperature, case, *args)
        except CheckFailed as err:
            if isinstance(err.student_error, ValueError):
                continue
            if err.student_error is None:  # too slow, or modified its input
                raise
            fail(case, say("raised {error}, expected ValueError naming the argument",
                           error=type(err.student_error).__name__),
                 hint=_("check the inputs first and raise ValueError('temperatures ...') before computing"))
        fail(case, _("accepted bad input; raise ValueError naming the argument and what was expected"), got=got,
             hint=_("the exercise promises a ValueError for lists of different lengths, temperatures that do not "
                    "strictly increase, and α outside [0, 1] (NaN is not in [0, 1]: np.all((a >= 0) & (a <= 1)))"))


def _other_readings(t, a, c, k) -> list[float]:
    """Answers as right as the reference's, from a break-even α a rounding away from it: with k=None
    α* = c exactly (the exercise's words; theory.breakeven_alpha(1, c) can differ in the last bit),
    with k given α* ± 1e-9 (a student's own solver). They differ only where α(T) touches α*."""
    from lessonlib.course.checks.wrong.ex5 import _crossing

    if k is None:
        return [_crossing(t, a, c)]
    a_star = float(theory.breakeven_alpha(k, c))
    return [_crossing(t, a, a_star + d) for d in (-1e-9, 1e-9)]


def _matches(got, want) -> bool:
    return bool(got == want or np.isfinite(want) and np.isfinite(got) and abs(got - want) <= 1e-6)


def _verify_breakeven_temperature(breakeven_temperature):
    from lessonlib.decoding import fallback

    cases = _breakeven_cases()
    for case, t, a, c, k, hint in cases:
        args = (t, a, c) if k is None else (t, a, c, k)
        got = as_number(case, call(breakeven_temperature, case, *args))
        want = fallback.breakeven_temperature(*args)
        if any(_matches(got, other) for other in _other_readings(t, a, c, k)) and not _matches(got, want):
            continue
        if np.isinf(want) or np.isinf(got) or np.isnan(got):
            expect_equal(case, got, want, AT_BREAKEVEN if hint is AT_BREAKEVEN else
                         _("return float('inf') when α(T) stays above the break-even α everywhere") if np.isinf(want)
                         else INTERPOLATE)
        else:
            expect_close(case, got, want, atol=1e-6, hint=hint)
    _rejects_bad_input(breakeven_temperature)
    return [say("matches the definition to {tolerance} on {n} curves (first crossing, interpolated, best K or a "
                "given K, α exactly at break-even, already below at the first T (0 or not), inf when it never breaks "
                "even, α = 1 and just below, c from 0 to 1)", n=len(cases),
                tolerance=numeric.phrase(f"{1e-6:g}")),
            say("raises ValueError on all {n} kinds of bad input the exercise names (lengths differ, "
                "temperatures decreasing or equal, α above 1, below 0 or NaN)", n=len(BAD_INPUT))]


def exercise_5a(breakeven_temperature):
    """Check ``breakeven_temperature(temperatures, alphas, c, k=None)``."""
    from lessonlib.decoding import fallback

    verify = with_controls(_verify_breakeven_temperature, wrong.controls("5a"))
    return run_check("5a", breakeven_temperature, fallback.breakeven_temperature, verify)


# ----------------------------------------------------------------------------- 5b the fallback policy
# The student's policy and the reference run side by side on the same stream; each speculative
# round or probe gets the same outcome for both. The first step where their actions differ is
# reported with the rule that decides it. The scripted streams sit where each rule matters.

POLICY_K, POLICY_C = 4, 0.1  # alpha_off = 0.287 (speedup 1.0), alpha_on = 0.412 (speedup 1.2)
BAD, THIRD, HALF, GOOD = [0], [0, 1], [1], [4]  # accepted counts of successive rounds (of K = 4 drafts)
POLICY_STREAMS = [  # (case, policy settings, phases: (output tokens, accepted-count pattern or a random alpha))
    (N_("α̂ = 1/2 while speculating, above both thresholds"), {}, [(400, HALF)]),
    (N_("α̂ = 1/3 while speculating, between the thresholds"), {}, [(600, THIRD)]),
    (N_("α̂ falls to 0, then probes at α̂ = 1/3, between the thresholds"), {}, [(32, BAD), (800, THIRD)]),
    (N_("α̂ falls to 0, then every probe accepts all K"), {}, [(32, BAD), (400, GOOD)]),
    (N_("20 failed probes, then good ones: only the last probe_window probes count"), {},
     [(32, BAD), (340, BAD), (300, GOOD)]),
    (N_("the window before the switch-off ends well: its rounds must not judge the probes"), {},
     [(24, BAD), (400, HALF)]),
    (N_("on again after 12 failed and 2 good probes, then α̂ falls to 0"), {},
     [(32, BAD), (204, BAD), (26, GOOD), (400, BAD)]),
    (N_("a long good run, then α collapses: the window slides"), {}, [(400, GOOD), (400, BAD)]),
    (N_("random stream, window=8, probe_window=4, probe_every=5, on_above=1.3"),
     {"window": 8, "probe_window": 4, "probe_every": 5, "on_above": 1.3},
     [(150, 0.8), (200, 0.1), (150, 0.35), (200, 0.7), (100, 0.05)]),
    (N_("random stream, default settings"), {}, [(300, 0.6), (300, 0.2), (300, 0.45), (300, 0.3), (300, 0.8)]),
    # rounds that draft fewer than K (the end of the text, a dynamic K): all accepted is no rejection
    (N_("rounds drafting 1 of 4 tokens, all accepted, between rejected ones"), {},
     [(300, [(1, 1), (0, 4), (0, 4)]), (200, [(2, 2), (3, 3)])]),
    (N_("rounds drafting 1 to 3 of 4 tokens after a switch-off"), {}, [(32, BAD), (400, [(1, 1), (2, 3), (3, 3)])]),
    # the regime the course's own measurements sit in: c up to 1, a verify pass well above one step
    (N_("c = 0.5 and r = 1.6 (a costly draft and verify pass), random stream"), {"c": 0.5, "r": 1.6},
     [(200, 0.97), (200, 0.6), (300, 0.99), (200, 0.9)]),
    (N_("c = 1 (a draft as costly as the target): never pays 1.2x, so once off it stays off"), {"c": 1.0},
     [(100, GOOD), (200, [4, 3]), (300, GOOD)]),
    (N_("c = 0.99 and r = 1.05, random stream"), {"c": 0.99, "r": 1.05}, [(200, 1.0), (200, 0.98), (200, 1.0)]),
]


class _Outcomes:
    """Accepted drafts of the next round at an output position: the phase's pattern in turn, or
    leading successes of K coin flips at the phase's alpha."""

    def __init__(self, phases, seed):
        self.ends = np.cumsum([n for n, _ in phases])
        self.kinds = [kind for _, kind in phases]
        self.used = [0] * len(phases)
        self.rng = np.random.default_rng(seed)

    def __call__(self, position) -> tuple[int, int]:
        """(accepted, drafted) of the next round: K drafted unless the pattern says otherwise."""
        i = min(int(np.searchsorted(self.ends, position, side="right")), len(self.ends) - 1)
        kind, self.used[i] = self.kinds[i], self.used[i] + 1
        if isinstance(kind, list):
            step = kind[(self.used[i] - 1) % len(kind)]
            return step if isinstance(step, tuple) else (step, POLICY_K)
        ok = self.rng.random(POLICY_K) < kind
        return (POLICY_K if ok.all() else int(np.argmin(ok))), POLICY_K


def _lockstep(policy_class, case, settings, phases, seed):
    """Drive the student's policy and the reference together; fail at the first different action."""
    from lessonlib.decoding import fallback

    settings = dict(settings)
    c = settings.pop("c", POLICY_C)
    policy = call(policy_class, say("{case}: constructing the policy", case=translated(case)), POLICY_K, c, **settings)
    ref = fallback.FallbackPolicy(POLICY_K, c, **settings)
    outcomes, events, before, just_switched, since_on = _Outcomes(phases, seed), [], [], None, None
    position, step, end = 0, 0, sum(n for n, _ in phases)
    while position < end:
        want, got = ref.action(), call(policy.action, case)
        if got != want:
            fail(case, say("step {step} (output position {position}): expected {want}, got {got}", step=step,
                           position=position, want=repr(want), got=repr(got)),
                 hint=say("{hint}. The steps before: {steps}", steps=_history(events),
                          hint=_diagnose(ref, events, before, want, got, just_switched, since_on)))
        switches = len(ref.switches)
        if want == "plain":
            call(policy.record_plain, case, 1)
            ref.record_plain(1)
            events.append(("plain", None))
            position += 1
        else:
            accepted, drafted = outcomes(position)
            before = (list(ref.rounds) + [(accepted, int(accepted < drafted))])[-ref.rounds.maxlen:]
            call(policy.record, case, accepted, drafted)
            ref.record(accepted, drafted)
            events.append((want, accepted))
            position += accepted + 1
        just_switched = ref.switches[-1][1] if len(ref.switches) > switches else None
        since_on = 0 if just_switched == "on" else None if since_on is None else since_on + 1  # rounds since "on"
        step += 1
    return step, len(ref.switches)


def verify_policy(policy_class):
    steps = switches = 0
    for seed, (case, settings, phases) in enumerate(POLICY_STREAMS):
        try:
            n, s = _lockstep(policy_class, case, settings, phases, seed)
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as err:  # the student's policy object misbehaving outside record/action
            raise CheckFailed(say("case {case}: your policy raised {error}: {message}", case=quoted(case),
                                  error=type(err).__name__, message=str(err))) from err
        steps, switches = steps + n, switches + s
    return [say("decides like the reference at every one of {steps} steps ({switches} switches) on "
                "{streams} streams: α̂ between the thresholds (hysteresis both ways), the probe window, "
                "quick re-probes, the window emptied at a switch-off and restarted from the probes at a switch-on, "
                "a sliding window, rounds drafting fewer than K, other settings, c from 0.1 to 1 and r up to 1.6, "
                "random streams", steps=steps, switches=switches,
                streams=len(POLICY_STREAMS))]


def exercise_5b(policy_class):
    """Check a fallback policy class: ``policy_class(k, c, **settings)`` with ``action()``, ``record(accepted,
    drafted)`` and ``record_plain(n)``, step by step against the reference on scripted streams."""
    from lessonlib.decoding import fallback

    verify = with_controls(verify_policy, wrong.controls("5b"))
    return run_check("5b", policy_class, fallback.FallbackPolicy, verify)


# ----------------------------------------------------------------------------- 5c throughput by phase

PHASE = N_("a step belongs to the phase its first token is in (the step at position 3 emits tokens 3 and 4, both in "
         "phase 0; a step starting exactly at a boundary belongs to the phase that starts there: "
         "np.searchsorted(boundaries, position, side='right') - 1); tokens/s = sum of tokens / sum of seconds of "
         "the steps in the phase")


def _verify_throughput_by_phase(throughput_by_phase):
    from lessonlib.decoding import fallback

    trace = {"position": np.array([0, 3, 5, 6]), "tokens": np.array([3, 2, 1, 4]),
             "seconds": np.array([1.0, 1.0, 1.0, 2.0])}
    case = N_("4 steps: positions 0, 3, 5, 6; boundaries [0, 5, 10]")
    expect_close(case, call(throughput_by_phase, case, trace, [0, 5, 10]), [5 / 2, 5 / 3], atol=1e-12, rtol=1e-6,
                 hint=PHASE)
    case = N_("a step starting exactly on a boundary: positions 0, 2, 4; boundaries [0, 2, 6]")
    trace = {"position": np.array([0, 2, 4]), "tokens": np.array([2, 2, 2]), "seconds": np.array([1.0, 2.0, 4.0])}
    expect_close(case, call(throughput_by_phase, case, trace, [0, 2, 6]), [2.0, 4 / 6], atol=1e-12, rtol=1e-6,
                 hint=PHASE)
    rng = np.random.default_rng(11)
    for i in range(5):
        tokens = rng.integers(1, 6, 60)
        trace = {"position": np.concatenate([[0], np.cumsum(tokens)[:-1]]), "tokens": tokens,
                 "seconds": rng.uniform(0.5, 2.0, 60)}
        end = int(tokens.sum())
        bounds = [0, end // 3, 2 * end // 3, end]
        case = say("random trace #{i}", i=i)
        expect_close(case, call(throughput_by_phase, case, trace, bounds), fallback.throughput_by_phase(trace, bounds),
                     atol=1e-9, rtol=1e-6, hint=PHASE)
    return [_("attributes each step to the phase it starts in, boundaries included"),
            _("matches the reference on 5 random traces")]


def exercise_5c(throughput_by_phase):
    """Check ``throughput_by_phase(trace, boundaries)`` -> tokens per second in each phase."""
    from lessonlib.decoding import fallback

    verify = with_controls(_verify_throughput_by_phase, wrong.controls("5c"))
    return run_check("5c", throughput_by_phase, fallback.throughput_by_phase, verify)
