"""Wrong implementations for notebook 5: the break-even temperature, the fallback policy, throughput by phase.

``lessonlib.decoding.fallback`` imports torch, so it is imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from lessonlib.core import theory
from lessonlib.course.checks.framework import Wrong

# ----------------------------------------------------------------------------- 5a the break-even temperature


def _crossing(t, a, a_star, below=np.less_equal, bracket=0):
    """First T with ``below(alpha, a_star)``, interpolated between points ``i - 1 + bracket`` and ``i + bracket``."""
    t, a = np.asarray(t, float), np.asarray(a, float)
    hits = np.flatnonzero(below(a, a_star))
    if len(hits) == 0:
        return float("inf")
    i = int(hits[0])
    if i == 0:
        return float(t[0])
    j = min(i + bracket, len(t) - 1)
    lo, hi = j - 1, j
    if a[lo] == a[hi]:
        return float(t[hi])
    return float(t[lo] + (a[lo] - a_star) / (a[lo] - a[hi]) * (t[hi] - t[lo]))


def _validated(fn):
    """``fn(t, a, c, k)`` behind the reference's input checks (the bug is in fn, not in the validation)."""
    def breakeven(t, a, c, k=None):
        from lessonlib.decoding import fallback

        fallback.breakeven_temperature(t, a, c, k)  # raises ValueError on bad input
        return fn(t, a, c, k)
    return breakeven


def _a_star(k, c):
    return float(theory.breakeven_alpha(1 if k is None else k, c))


def breakeven_last_crossing(t, a, c, k=None):
    """The last crossing instead of the first."""
    t, a = np.asarray(t, float), np.asarray(a, float)
    above = np.flatnonzero(a > _a_star(k, c))
    if len(above) == 0:
        return float(t[0])
    i = int(above[-1])
    if i == len(t) - 1:
        return float("inf")
    return float(t[i] + (a[i] - _a_star(k, c)) / (a[i] - a[i + 1]) * (t[i + 1] - t[i]))


def breakeven_nearest(t, a, c, k=None):
    """The first measured temperature at or after the crossing, no interpolation."""
    from lessonlib.decoding import fallback

    exact = fallback.breakeven_temperature(t, a, c, k)
    return exact if np.isinf(exact) else float(min(x for x in t if x >= exact))


def _own_checks(t, a, c, k, nan_ok=False, equal_ok=False, negative_ok=False):
    """The break-even T behind hand-written input checks, each of which can have a hole."""
    t, a = np.asarray(t, float), np.asarray(a, float)
    if t.shape != a.shape:
        raise ValueError("temperatures and alphas must have the same length")
    if np.any(np.diff(t) < 0) or not equal_ok and np.any(np.diff(t) == 0):
        raise ValueError("temperatures must increase")
    if np.any(a > 1) or not negative_ok and np.any(a < 0) or not nan_ok and np.any(np.isnan(a)):
        raise ValueError("alphas must lie in [0, 1]")
    return _crossing(t, a, c if k is None else _a_star(k, c))


def breakeven_sorts_alphas(t, a, c, k=None):
    """Sorts the caller's list to find the crossing: ``alphas.sort(reverse=True)`` changes it."""
    a.sort(reverse=True)
    return _own_checks(t, a, c, k)


# ----------------------------------------------------------------------------- 5b the fallback policy


class Policy:
    """The notebook's FallbackPolicy, its ``record`` written in steps a wrong variant can replace."""

    def __init__(self, k, c, window=32, off_below=1.0, on_above=1.2, probe_every=16, probe_window=8, r=1.0):
        from lessonlib.decoding import fallback

        self.k, self.window, self.probe_every, self.probe_window = k, window, probe_every, probe_window
        self.alpha_off = fallback.alpha_for_speedup(off_below, k, c, r)
        self.alpha_on = fallback.alpha_for_speedup(on_above, k, c, r)
        self.rounds, self.speculating, self.plain_since_probe = [], True, 0

    def action(self):
        if self.speculating:
            return "speculate"
        return "probe" if self.plain_since_probe >= self.probe_every else "plain"

    def record_plain(self, n=1):
        self.plain_since_probe += n

    def record(self, accepted, drafted):
        self.rounds = self.keep(self.rounds + [(accepted, self.rejected(accepted, drafted))])
        if self.speculating:
            if self.full() and self.alpha_hat(self.rounds, drafted) < self.alpha_off:
                self.switch_off()
        else:
            self.plain_since_probe = self.reprobe(accepted)
            recent = self.judged()
            if len(recent) >= self.probe_window and self.alpha_hat(recent, drafted) >= self.alpha_on:
                self.switch_on(recent)

    def rejected(self, accepted, drafted):
        return int(accepted < drafted)

    def keep(self, rounds):
        return rounds[-self.window :]

    def full(self):
        return len(self.rounds) == self.window

    def alpha_hat(self, rounds, drafted):
        accepted, rejected = np.sum(rounds, axis=0)
        return accepted / (accepted + rejected)

    def switch_off(self):
        self.speculating, self.rounds, self.plain_since_probe = False, [], 0

    def reprobe(self, accepted):
        return self.probe_every if accepted > 0 else 0

    def judged(self):
        return self.rounds[-self.probe_window :]

    def switch_on(self, recent):
        self.speculating, self.rounds = True, recent


class RejectedAgainstK(Policy):
    def rejected(self, accepted, drafted):
        return int(accepted < self.k)  # a round that drafted fewer than K and accepted them all counts a rejection


class IgnoresR(Policy):
    def __init__(self, k, c, r=1.0, **kwargs):
        super().__init__(k, c, **kwargs)  # the thresholds with r = 1, whatever the verify pass costs


class NoHysteresis(Policy):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha_on = self.alpha_off  # one threshold for both switches


class OffAtOnThreshold(Policy):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha_off = self.alpha_on  # switches off as soon as α̂ is below the upper threshold


class OneProbeDecides(Policy):
    def judged(self):
        return self.rounds[-1:] * self.probe_window  # the last probe alone


class WholeWindowJudges(Policy):
    def judged(self):
        return self.rounds if len(self.rounds) >= self.probe_window else []


class NeverReprobes(Policy):
    def reprobe(self, accepted):
        return 0


class AlwaysReprobes(Policy):
    def reprobe(self, accepted):
        return self.probe_every


class KeepsWindowAtSwitchOff(Policy):
    def switch_off(self):
        self.speculating, self.plain_since_probe = False, 0


class EmptiesWindowAtSwitchOn(Policy):
    def switch_on(self, recent):
        self.speculating, self.rounds = True, []


class KeepsEveryProbe(Policy):
    def switch_on(self, recent):
        self.speculating = True


class SwitchesOffEarly(Policy):
    def full(self):
        return len(self.rounds) >= self.probe_window


class DraftAcceptanceRate(Policy):
    def alpha_hat(self, rounds, drafted):
        return np.sum(rounds, axis=0)[0] / (drafted * len(rounds))  # accepted / drafted: biased low


class KeepsProbeCount(Policy):
    def switch_off(self):
        self.speculating, self.rounds = False, []  # plain_since_probe left as the last probe set it


class UnboundedWindow(Policy):
    def keep(self, rounds):
        return rounds

    def full(self):
        return len(self.rounds) >= self.window


class Flappy(Policy):
    """Decides on the last 2 rounds, no hysteresis."""

    def __init__(self, k, c, **kwargs):
        super().__init__(k, c, **{**kwargs, "window": 2, "probe_window": 1, "probe_every": 1})
        self.alpha_on = self.alpha_off


# ----------------------------------------------------------------------------- 5c throughput by phase


def _phase(trace, boundaries, start=lambda tr: tr["position"], side="right", weight="tokens"):
    b = np.asarray(boundaries)
    n = len(b) - 1
    phase = np.clip(np.searchsorted(b, start(trace), side=side) - 1, 0, n - 1)
    amount = trace["tokens"] if weight == "tokens" else np.ones(len(trace["tokens"]))
    return (np.bincount(phase, weights=amount, minlength=n)[:n]
            / np.bincount(phase, weights=trace["seconds"], minlength=n)[:n])


def throughput_phase_into_trace(trace, boundaries):
    """Stores each step's phase in the caller's trace."""
    trace["phase"] = np.searchsorted(boundaries, trace["position"], side="right") - 1
    n = len(boundaries) - 1
    return (np.bincount(trace["phase"], weights=trace["tokens"], minlength=n)[:n]
            / np.bincount(trace["phase"], weights=trace["seconds"], minlength=n)[:n])


def throughput_mean_of_rates(trace, boundaries):
    """Averages per-step rates instead of dividing total tokens by total time."""
    b = np.asarray(boundaries)
    phase = np.searchsorted(b, trace["position"], side="right") - 1
    rate = trace["tokens"] / trace["seconds"]
    return np.array([rate[phase == i].mean() for i in range(len(b) - 1)])


INTERPOLATE = "Interpolate α linearly"
AT_BREAKEVEN = "alpha <= the break-even α, not <"
POLICY_ON = "switch speculation back on"
PROBE_WINDOW = "probe_window"
PHASE = "a step belongs to the phase its first token is in"
ENTRIES = [
    Wrong("5a", "fixed K = 4 instead of the best K", _validated(lambda t, a, c, k: _crossing(t, a, _a_star(k or 4, c))),
          INTERPOLATE, "uses K = 4's break-even α when asked for the best K", control=True),
    Wrong("5a", "last crossing", _validated(breakeven_last_crossing), INTERPOLATE,
          "the last time α crosses, not the first", control=True),
    Wrong("5a", "no interpolation", _validated(breakeven_nearest), INTERPOLATE,
          "the first measured T past the crossing", control=True),
    Wrong("5a", "strict <", _validated(lambda t, a, c, k: _crossing(t, a, _a_star(k, c), below=np.less)), AT_BREAKEVEN,
          "α exactly at break-even does not count"),
    Wrong("5a", "α = c even for a given K", _validated(lambda t, a, c, k: _crossing(t, a, c)), INTERPOLATE,
          "ignores k"),
    Wrong("5a", "first T when it never breaks even",
          _validated(lambda t, a, c, k: float(t[0]) if min(a) > _a_star(k, c) else _crossing(t, a, _a_star(k, c))),
          "return float('inf')", "returns temperatures[0] instead of inf"),
    Wrong("5a", "wrong pair of points", _validated(lambda t, a, c, k: _crossing(t, a, _a_star(k, c), bracket=1)),
          INTERPOLATE, "interpolates between the points after the crossing"),
    Wrong("5a", "0 when already below", _validated(lambda t, a, c, k: 0.0 if a[0] <= _a_star(k, c) else
                                                   _crossing(t, a, _a_star(k, c))), "return temperatures[0]",
          "returns 0.0 instead of the first measured temperature"),
    Wrong("5a", "NaN α accepted", lambda t, a, c, k=None: _own_checks(t, a, c, k, nan_ok=True), "NaN is not in [0, 1]",
          "np.any(a < 0) or np.any(a > 1) is False for NaN"),
    Wrong("5a", "equal temperatures accepted", lambda t, a, c, k=None: _own_checks(t, a, c, k, equal_ok=True),
          "strictly increase", "checks np.diff(t) < 0 instead of <= 0"),
    Wrong("5a", "negative α accepted", lambda t, a, c, k=None: _own_checks(t, a, c, k, negative_ok=True),
          "α outside [0, 1]", "checks only α > 1"),
    Wrong("5a", "α = 1 treated as never breaking even",
          _validated(lambda t, a, c, k: _crossing(t, np.where(np.asarray(a) >= 1, 2.0, a), _a_star(k, c))),
          "no special case for α near 1",
          "skips α = 1 (its closed-form E is 0/0), so c = 1's break-even at α = 1 is missed"),
    Wrong("5a", "sorts the caller's alphas", breakeven_sorts_alphas, "modified `a` in place",
          "alphas.sort() changes the caller's list"),
    Wrong("5a", "no input checks", lambda t, a, c, k=None: _crossing(t, a, _a_star(k, c)), "raise ValueError",
          "accepts lists of different lengths, unsorted temperatures, α > 1"),
    Wrong("5b", "rejection counted against K", RejectedAgainstK, "a rejection counted only when accepted < drafted",
          "int(accepted < k): a round that drafted fewer than K and accepted all of them counts as rejected",
          control=True),
    Wrong("5b", "thresholds without r", IgnoresR, "α_off",
          "alpha_for_speedup(..., r=1) whatever r: a costly verify pass is ignored"),
    Wrong("5b", "no hysteresis", NoHysteresis, "hysteresis", "switches on again at α_off", control=True),
    Wrong("5b", "off at the on threshold", OffAtOnThreshold, "hysteresis", "switches off below α_on"),
    Wrong("5b", "one probe decides", OneProbeDecides, PROBE_WINDOW, "switches on after a single good probe",
          control=True),
    Wrong("5b", "the whole window judges", WholeWindowJudges, "last probe_window", "every probe since the switch-off "
          "counts, not the last probe_window"),
    Wrong("5b", "never re-probes", NeverReprobes, "probe again right away", "waits probe_every tokens even after a "
          "probe that accepted"),
    Wrong("5b", "always re-probes", AlwaysReprobes, "wait probe_every plain tokens", "probes again even after a "
          "probe that accepted nothing"),
    Wrong("5b", "window kept at the switch-off", KeepsWindowAtSwitchOff, "empty the window when switching off",
          "old rounds judge the first probes", control=True),
    Wrong("5b", "window emptied at the switch-on", EmptiesWindowAtSwitchOn, "α_off", "needs a whole new window "
          "before it can switch off again"),
    Wrong("5b", "every probe kept at the switch-on", KeepsEveryProbe, "fills up from there",
          "keeps all probes, not the last probe_window"),
    Wrong("5b", "switches off before the window is full", SwitchesOffEarly, "switch off only once it is full",
          "decides on probe_window rounds"),
    Wrong("5b", "accepted / drafted", DraftAcceptanceRate, "not accepted / drafted",
          "the draft acceptance rate, biased low"),
    Wrong("5b", "probe count kept at the switch-off", KeepsProbeCount, "set plain_since_probe = 0",
          "probes at once after switching off"),
    Wrong("5b", "window never slides", UnboundedWindow, "switch speculation off", "averages over all history"),
    Wrong("5b", "no hysteresis, 2-round window", Flappy, "switch off only once it is full",
          "decides on the last 2 rounds"),
    Wrong("5c", "phase stored in the trace", throughput_phase_into_trace, "modified `trace` in place",
          "trace['phase'] = … adds a key to the caller's dict"),
    Wrong("5c", "mean of per-step rates", throughput_mean_of_rates, PHASE, "averages tokens/s of the steps",
          control=True),
    Wrong("5c", "phase of the last token", lambda tr, b: _phase(tr, b, start=lambda x: x["position"] + x["tokens"] - 1),
          PHASE, "assigns a step by the position of its last token"),
    Wrong("5c", "side='left'", lambda tr, b: _phase(tr, b, side="left"), "side='right'",
          "a step starting on a boundary counts in the phase before"),
    Wrong("5c", "steps per second", lambda tr, b: _phase(tr, b, weight="steps"), PHASE, "counts steps, not tokens"),
    Wrong("5c", "seconds per token", lambda tr, b: 1 / _phase(tr, b), PHASE, "time over tokens"),
    Wrong("5c", "one rate for the whole trace",
          lambda tr, b: np.full(len(b) - 1, np.sum(tr["tokens"]) / np.sum(tr["seconds"])), PHASE,
          "ignores the boundaries"),
]
