"""When speculation stops paying: a fallback policy and the loop it runs in.

The numpy side -- alpha(T) measured teacher-forced (``acceptance_by_temperature``), the
break-even temperature, alpha's estimate from a window of rounds -- is in
``lessonlib.core.temperature`` and re-exported here.

* ``FallbackPolicy`` -- decides, verification by verification, whether to speculate. It keeps a
  sliding-window estimate of alpha, turns speculation off when the predicted speedup drops
  below ``off_below``, probes now and then while off, and turns it back on when the probes
  predict at least ``on_above`` (two thresholds = hysteresis, so noise does not make it flap).
* ``drive`` -- the one decoding loop the policy sits in. It only sees two callables (one
  speculative round, one plain step) and a clock, so the same loop runs a synthetic stream
  (``simulate_stream``, unit-testable without models) or real models (``ModelStream``, in
  ``model_stream``, importable from here).
"""
from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from lessonlib.core.temperature import acceptance_by_temperature, alpha_mle, breakeven_temperature, tau_by_position  # noqa: F401
from lessonlib.core.theory import alpha_for_speedup, expected_tokens_per_verify  # re-exported: the one inverse of S
from lessonlib.core.validate import check_c, check_int, check_k, check_round_counts
from lessonlib.decoding.model_stream import ModelStream  # noqa: F401  (moved there; importable from here as before)

ACTIONS = ("speculate", "probe", "plain")

# one decoding step: (output position, tokens emitted, seconds, action)
Step = tuple[int, int, float, str]
# speculate(position) -> (accepted, drafted); plain(position) -> None
Speculate = Callable[[int], tuple[int, int]]
Plain = Callable[[int], object]


class Policy(Protocol):
    """What ``drive`` asks of a policy (``FallbackPolicy``, ``AlwaysSpeculate``, ``NeverSpeculate``)."""

    def action(self) -> str: ...

    def record(self, accepted: int, drafted: int) -> None: ...

    def record_plain(self, n: int = 1) -> None: ...


class FallbackPolicy:
    """Speculate while the windowed alpha predicts a speedup; fall back to plain decoding when not.

    On:  after each round, alpha_hat = MLE over the last ``window`` rounds (at least
         ``min_rounds`` since switching on); switch off if E(alpha_hat, k)/(k c + r) < off_below
         (r = 1 is the textbook formula; a measured r also counts the verify's extra cost).
    Off: decode plainly; after every ``probe_every`` plain tokens run one speculative round
         (a probe, costing k c extra), and another one right away while probes accept drafts;
         switch on if the last ``probe_window`` probes predict a speedup >= on_above.
    on_above > off_below is the hysteresis band; ``min_rounds`` (default: the whole window) is
    the least evidence for switching off again. A probe at low alpha wastes about k c
    target-steps, so probing costs ~k c / probe_every. A threshold that no alpha can reach on
    this machine (on_above > (k+1)/(k c + r)) is kept on purpose: alpha_on is then inf and the
    policy, once off, stays off -- speculation cannot pay that much here.
    """

    def __init__(self, k: int, c: float, window: int = 32, min_rounds: int | None = None, off_below: float = 1.0,
                 on_above: float = 1.2, probe_every: int = 16, probe_window: int = 8, r: float = 1.0) -> None:
        k = check_k(k)
        check_c(c)
        min_rounds = window if min_rounds is None else min_rounds
        window, min_rounds, probe_every, probe_window = (
            check_int(value, name, minimum=1) for name, value in (("window", window), ("min_rounds", min_rounds),
                                                                  ("probe_every", probe_every),
                                                                  ("probe_window", probe_window)))
        if min_rounds > window or probe_window > window:
            raise ValueError(f"min_rounds ({min_rounds}) and probe_window ({probe_window}) "
                             f"must be <= window ({window})")
        # the ignores: numpy's stub for isscalar (a TypeIs) narrows a float to "generic | complex | str |
        # bytes | memoryview", so mypy rejects the comparisons and float() of r, off_below and on_above
        if not np.isscalar(r) or not np.isfinite(r) or r <= 0:  # type: ignore[operator]
            raise ValueError(f"r must be a finite number > 0 (verify cost in plain steps), got {r!r}")
        if not (np.isscalar(off_below) and np.isscalar(on_above) and 0 < off_below < on_above < math.inf):  # type: ignore[operator]
            raise ValueError(f"need 0 < off_below < on_above < inf, got off_below={off_below!r}, on_above={on_above!r}")
        self.k, self.c, self.r = int(k), float(c), float(r)  # type: ignore[arg-type]
        self.min_rounds, self.probe_every, self.probe_window = min_rounds, probe_every, probe_window
        self.off_below, self.on_above = float(off_below), float(on_above)  # type: ignore[arg-type]
        # S rises with alpha, so comparing alpha_hat with these is comparing S with the thresholds
        self.alpha_off = float(alpha_for_speedup(self.off_below, self.k, self.c, self.r))
        self.alpha_on = float(alpha_for_speedup(self.on_above, self.k, self.c, self.r))
        self.rounds: deque[tuple[int, int]] = deque(maxlen=window)  # (accepted, rejected) per verification
        self.speculating = True
        self.tokens = 0  # tokens emitted so far
        self.switches: list[tuple[int, str]] = []  # (tokens at the switch, "off" | "on")
        self._plain_since_probe = 0

    def _alpha(self, last: int | None = None) -> float:
        rounds = list(self.rounds)[-last:] if last else self.rounds
        return alpha_mle([a for a, _ in rounds], [r for _, r in rounds])

    @property
    def alpha_hat(self) -> float:
        """Windowed per-token acceptance estimate (nan before any round)."""
        return self._alpha()

    @property
    def predicted_speedup(self) -> float:
        """E(alpha_hat, k) / (k c + r) (nan before any round)."""
        alpha = self._alpha()
        return (float("nan") if np.isnan(alpha)
                else float(expected_tokens_per_verify(alpha, self.k) / (self.k * self.c + self.r)))

    def action(self) -> str:
        """What the decoder should do next: 'speculate', 'probe' or 'plain'."""
        if self.speculating:
            return "speculate"
        return "probe" if self._plain_since_probe >= self.probe_every else "plain"

    def record(self, accepted: int, drafted: int) -> None:
        """After a speculative round (or probe) that drafted ``drafted`` tokens and accepted ``accepted``."""
        drafted = check_int(drafted, "drafted", minimum=1, maximum=self.k)
        accepted = check_int(accepted, "accepted", minimum=0, maximum=drafted)
        self.rounds.append((accepted, int(accepted < drafted)))
        self.tokens += int(accepted) + 1
        if self.speculating:
            if len(self.rounds) >= self.min_rounds and self._alpha() < self.alpha_off:
                self._switch("off")
        else:
            # a probe that accepted something may mean alpha recovered: probe again at once, so a
            # recovery is confirmed within a few rounds instead of a few probe intervals
            self._plain_since_probe = self.probe_every if accepted > 0 else 0
            if len(self.rounds) >= self.probe_window and self._alpha(self.probe_window) >= self.alpha_on:
                self._switch("on")

    def record_plain(self, n: int = 1) -> None:
        """After ``n`` tokens decoded without speculation."""
        self.tokens += check_int(n, "n", minimum=1)
        self._plain_since_probe += int(n)

    def _switch(self, to: str) -> None:
        self.switches.append((self.tokens, to))
        self.speculating = to == "on"
        if self.speculating:  # the probes that justified switching on are fresh evidence: keep them
            kept = list(self.rounds)[-self.probe_window :]
            self.rounds.clear()
            self.rounds.extend(kept)
        else:  # the probes must judge the new regime alone
            self.rounds.clear()
        self._plain_since_probe = 0


class AlwaysSpeculate:
    """Baseline policy: speculate every round."""

    switches: list[tuple[int, str]]  # never any
    speculating, switches = True, []

    def action(self) -> str:
        return "speculate"

    def record(self, accepted: int, drafted: int) -> None:
        pass

    def record_plain(self, n: int = 1) -> None:
        pass


class NeverSpeculate(AlwaysSpeculate):
    """Baseline policy: plain decoding only."""

    speculating = False

    def action(self) -> str:
        return "plain"


def _steps(policy: Policy, speculate: Speculate, plain: Plain, n_tokens: int,
           clock: Callable[[], float]) -> Iterator[Step]:
    """Generator behind ``drive``: one (position, tokens, seconds, action) per decoding step."""
    n_tokens = check_int(n_tokens, "n_tokens", minimum=1)
    position = 0
    while position < n_tokens:
        act = policy.action()
        start = clock()
        if act == "plain":
            plain(position)
            emitted = 1
            policy.record_plain(1)
        else:
            accepted, drafted = check_round_counts(speculate(position), "speculate")  # -1 would loop forever
            emitted = accepted + 1
            policy.record(accepted, drafted)
        yield position, emitted, clock() - start, act
        position += emitted


def _trace(steps: Sequence[Step], policy: Policy) -> dict[str, Any]:
    pos, tok, sec, act = zip(*steps)
    return {"position": np.array(pos), "tokens": np.array(tok), "seconds": np.array(sec),
            "action": np.array(act), "switches": list(getattr(policy, "switches", []))}


def drive(policy: Policy, speculate: Speculate, plain: Plain, n_tokens: int,
          clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Decode ``n_tokens`` letting ``policy`` choose each step; return a per-step trace.

    speculate(position) -> (accepted, drafted): one speculative round starting at output
        ``position`` (it emits accepted + 1 tokens);
    plain(position) -> None: one plain decoding step (emits 1 token);
    clock() -> seconds (wall clock, CPU time, or a simulated one).
    Trace: (n_steps,) arrays ``position`` (first output position of each step), ``tokens``
    (emitted), ``seconds`` (spent), ``action``, plus the policy's ``switches``.
    """
    return _trace(list(_steps(policy, speculate, plain, n_tokens, clock)), policy)


def drive_interleaved(runs: Mapping[str, tuple[Policy, Speculate, Plain]], n_tokens: int,
                      clock: Callable[[], float] = time.perf_counter) -> dict[str, dict[str, Any]]:
    """Like ``drive`` for several {name: (policy, speculate, plain)} at once, one step of each in
    turn, so that a machine whose speed drifts (other programs, frequency scaling) slows them
    all alike and their tokens/s stay comparable. Returns {name: trace}."""
    gens = {name: _steps(policy, speculate, plain, n_tokens, clock)
            for name, (policy, speculate, plain) in runs.items()}
    steps: dict[str, list[Step]] = {name: [] for name in runs}
    while gens:
        for name in list(gens):
            try:
                steps[name].append(next(gens[name]))
            except StopIteration:
                del gens[name]
    return {name: _trace(steps[name], runs[name][0]) for name in runs}


def simulate_stream(alphas: npt.ArrayLike, policy: Policy, k: int, c: float,
                    rng: np.random.Generator) -> dict[str, Any]:
    """Run ``drive`` on a synthetic stream: alphas[i] is the acceptance rate at output position i.

    A speculative round at position i accepts each of its k drafts with probability alphas[i]
    until the first rejection and costs k c + 1 target-steps; a plain step costs 1. The clock
    counts target-steps, so tokens / seconds is throughput relative to one target forward.
    """
    alphas = np.asarray(alphas, dtype=float)  # (n_tokens,)
    if alphas.ndim != 1 or len(alphas) < 1 or np.any(~np.isfinite(alphas)) or np.any((alphas < 0) | (alphas > 1)):
        raise ValueError("alphas must be a non-empty 1-D array of acceptance rates in [0, 1]")
    k = check_k(k)
    check_c(c)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    now = [0.0]

    def speculate(position: int) -> tuple[int, int]:
        ok = rng.random(k) < alphas[position]  # (k,)
        now[0] += k * c + 1
        return int(np.argmin(ok)) if not ok.all() else k, k  # accepted = leading successes

    def plain(position: int) -> None:
        now[0] += 1.0

    return drive(policy, speculate, plain, len(alphas), clock=lambda: now[0])


def throughput_by_phase(trace: Mapping[str, Any], boundaries: npt.ArrayLike) -> np.ndarray:
    """Tokens per second in each phase [b_i, b_{i+1}); a step belongs to the phase it starts in.

    ``boundaries`` are output positions, increasing, starting at 0 and ending at the stream length
    ((n_phases + 1,)); returns (n_phases,) tokens per second.
    """
    b = np.asarray(boundaries)
    if b.ndim != 1 or len(b) < 2 or b[0] != 0 or np.any(np.diff(b) <= 0):
        raise ValueError(f"boundaries must be increasing output positions starting at 0, got {boundaries!r}")
    phase = np.searchsorted(b, trace["position"], side="right") - 1
    tokens = np.bincount(phase, weights=trace["tokens"], minlength=len(b) - 1)[: len(b) - 1]
    seconds = np.bincount(phase, weights=trace["seconds"], minlength=len(b) - 1)[: len(b) - 1]
    return tokens / seconds
