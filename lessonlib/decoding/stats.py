"""``DecodeStats``: what every decoding loop returns, with the course's vocabulary fixed here.

* ``tau`` -- tokens emitted per target forward of the loop (``measures.tau``; the last round's
  surplus beyond the requested length counts, as the theory's E(alpha, K) counts it).
* ``alpha`` -- accepted / judged drafts, counted while decoding (``measures.alpha``). A round
  judges its accepted drafts plus one more when the deepest accepted node has drafted children
  (one of them was judged and rejected); for a chain that is "plus one unless all K passed".
* ``draft_seconds_per_round`` -- the one definition of a draft's cost: the seconds a round
  spends drafting (a chain: its K draft forwards; a tree: its drafting rule and the drafter's
  commit). ``draft_step_seconds`` divides the same seconds by the draft calls: for a chain that
  is one draft step, the numerator of c.
* ``verify_forward_seconds`` -- one target forward over a round's tokens (the numerator of r);
  ``target_forward_seconds`` -- one one-token target step of plain decoding (the denominator of
  c and r).

Seconds come from the loop's ``timing.Clock`` (phases "prefill", "target", "draft", "verify"),
``seconds`` is the loop's wall time after the prefill; ``overhead_seconds`` is everything that is
neither drafting nor verifying (sampling, the accept/reject rule, bookkeeping). ``as_dict()``
gives the JSON the benchmarks write.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from lessonlib.decoding import measures

if TYPE_CHECKING:
    from lessonlib.decoding.timing import Clock

LOOPS = ("plain", "chain", "tree")


def acceptance_by_depth(accepted_lengths: npt.ArrayLike, max_depth: int) -> list[float | None]:
    """alpha_d = P(node at depth d accepted | depth d - 1 accepted), d = 0..max_depth-1
    (None where no round reached depth d). ``accepted_lengths``: (rounds,) accepted drafts per round."""
    lengths = np.asarray(accepted_lengths)
    reached = np.array([(lengths >= d).sum() for d in range(max_depth)])
    passed = np.array([(lengths > d).sum() for d in range(max_depth)])
    return [float(p / r) if r else None for p, r in zip(passed, reached)]


@dataclass
class DecodeStats:
    """One decoding run, counted round by round (``record_round``) and timed by its clock."""

    loop: str  # "plain" | "chain" (a draft model's K-token chain) | "tree" (a drafting rule's tree)
    temperature: float  # the target's sampling temperature (<= 1e-5: greedy)
    new_tokens: int  # tokens requested (max_new_tokens)
    k: int | None = None  # a chain's draft length (None for plain decoding and trees)
    rounds: int = 0  # target forwards that produced tokens (plain: one per token, the prefill's included)
    emitted: int = 0  # tokens the rounds emitted, the last round's surplus included
    drafted: int = 0  # draft tokens proposed (tree nodes)
    accepted: int = 0  # draft tokens accepted
    judged: int = 0  # draft tokens judged: the accepted plus each round's rejected one, if any
    lengths: list[int] = field(default_factory=list)  # accepted drafts per round
    nodes: list[int] = field(default_factory=list)  # drafted nodes per round
    depth: int = 0  # the deepest proposal's depth (a chain of K: K)
    seconds: float = 0.0  # wall time of the loop, prefill excluded
    phase_seconds: dict[str, float] = field(default_factory=dict)  # the clock's seconds per phase
    phase_calls: dict[str, int] = field(default_factory=dict)  # the clock's calls per phase
    extra: dict[str, Any] = field(default_factory=dict)  # loop-specific counts (lookup, lookahead)

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"loop must be one of {LOOPS}, got {self.loop!r}")

    # ------------------------------------------------------------------ counting
    def record_round(self, n_drafted: int, n_accepted: int, judged_one_more: bool, depth: int) -> None:
        """One round: ``n_drafted`` nodes proposed, ``n_accepted`` accepted (so n_accepted + 1
        tokens emitted), ``judged_one_more``: a drafted child of the deepest accepted node was
        rejected; ``depth``: the proposal's depth."""
        self.rounds += 1
        self.emitted += n_accepted + 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        self.judged += n_accepted + bool(judged_one_more)
        self.lengths.append(n_accepted)
        self.nodes.append(n_drafted)
        self.depth = max(self.depth, depth)

    def finish(self, seconds: float, clock: Clock) -> DecodeStats:
        """Close the run: its wall time and the clock's phases."""
        self.seconds = float(seconds)
        self.phase_seconds, self.phase_calls = dict(clock.seconds), dict(clock.calls)
        return self

    # ------------------------------------------------------------------ the measured quantities
    def _phase(self, name: str) -> float:
        return self.phase_seconds.get(name, 0.0)

    def _per_call(self, name: str) -> float:
        return self._phase(name) / max(1, self.phase_calls.get(name, 0))

    @property
    def tau(self) -> float:
        return measures.tau(self.emitted, self.rounds)

    @property
    def alpha(self) -> float:
        return measures.alpha(self.accepted, self.judged)

    @property
    def target_calls(self) -> int:
        """Target forwards that produced tokens (plain decoding's first is the prefill's)."""
        return self.rounds

    @property
    def accepted_fraction(self) -> float:
        """accepted / drafted (a tree drafts nodes that no path can accept: not alpha)."""
        return self.accepted / max(1, self.drafted)

    @property
    def draft_calls(self) -> int:
        return self.phase_calls.get("draft", 0)

    @property
    def draft_seconds(self) -> float:
        return self._phase("draft")

    @property
    def verify_seconds(self) -> float:
        return self._phase("verify")

    @property
    def overhead_seconds(self) -> float:
        return self.seconds - self.draft_seconds - self.verify_seconds

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / self.new_tokens

    @property
    def target_forward_seconds(self) -> float:
        """One one-token target step in the loop (plain decoding)."""
        return self._per_call("target")

    @property
    def verify_forward_seconds(self) -> float:
        """One verification forward over a round's tokens."""
        return self._per_call("verify")

    @property
    def draft_step_seconds(self) -> float:
        """One timed draft call: a chain's draft step (c's numerator)."""
        return self._per_call("draft")

    @property
    def draft_seconds_per_round(self) -> float:
        """A round's drafting: K draft steps for a chain, the rule and the commit for a tree."""
        return self.draft_seconds / max(1, self.rounds)

    @property
    def mean_nodes(self) -> float:
        return float(np.mean(self.nodes)) if self.nodes else 0.0

    @property
    def mean_accepted(self) -> float:
        return float(np.mean(self.lengths)) if self.lengths else 0.0

    @property
    def acceptance_by_depth(self) -> list[float | None]:
        return acceptance_by_depth(self.lengths, self.depth)

    @property
    def accepted_lengths(self) -> list[int]:
        """Histogram: entry n counts the rounds that accepted n drafts."""
        return np.bincount(np.asarray(self.lengths, dtype=np.int64), minlength=1).tolist()

    # ------------------------------------------------------------------ JSON
    def as_dict(self) -> dict[str, Any]:
        """The benchmarks' JSON for this run: the timing split for every loop, the counts a
        speculative loop makes, and the loop's own extras."""
        out: dict[str, Any] = {}
        if self.loop == "plain":
            out |= {"target_calls": self.target_calls, "target_forward_seconds": self.target_forward_seconds}
        if self.loop == "chain":
            out |= {"k": self.k, "temperature": float(self.temperature), "tau": self.tau, "alpha": self.alpha,
                    "accepted": self.accepted, "judged": self.judged, "drafted": self.drafted,
                    "accepted_fraction": self.accepted_fraction, "target_calls": self.target_calls,
                    "draft_calls": self.draft_calls, "draft_forward_seconds": self.draft_step_seconds}
        if self.loop == "tree":
            out |= {"temperature": float(self.temperature), "tau": self.tau, "rounds": self.rounds,
                    "target_calls": self.target_calls, "mean_nodes": self.mean_nodes,
                    "mean_accepted": self.mean_accepted, "acceptance_by_depth": self.acceptance_by_depth,
                    "accepted_lengths": self.accepted_lengths, "alpha": self.alpha, "accepted": self.accepted,
                    "judged": self.judged, "drafted": self.drafted,
                    "draft_seconds_per_round": self.draft_seconds_per_round}
        if self.loop != "plain":
            out["verify_forward_seconds"] = self.verify_forward_seconds
        out |= {"draft_seconds": self.draft_seconds, "verify_seconds": self.verify_seconds,
                "overhead_seconds": self.overhead_seconds, "seconds": self.seconds,
                "tokens_per_second": self.tokens_per_second, "seconds_per_token": self.seconds_per_token}
        return out | self.extra
