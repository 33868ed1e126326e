"""Check 1d: a detector for the gallery of real bugs, run on samplers it has never seen.

The student's ``detect(sampler, rng) -> (detected, test, samples)`` is judged in three passes:

1. **the gallery**, every sampler without its name, label or thread;
2. **samplers it has never seen**: two exact ones whose internals differ from the gallery's (one
   draws a whole round from the round's enumerated law with one uniform, one ignores the draft and
   samples every position from p), and five bugs without tell-tale attributes (``law`` is None),
   each visible to one of the four tests only. A verdict on a sampler without a law must come
   from running it: a detector that never calls ``sampler.step`` fails;
3. **its false-alarm rate**: ``FALSE_ALARM_RUNS`` runs on the two unseen exact samplers, each with
   its own seed. The stated level is 10⁻³ per run; the check allows ``MAX_ALARMS`` flag, which a
   detector at 10⁻³ exceeds with probability ~6·10⁻⁴, while one at 0.14 per run (each of its
   chi-square tests at 0.05) stays within it with probability ~0.03 (and it must also pass the
   four exact samplers of passes 1 and 2). About 0.1 s a run: the whole check takes a few seconds.
   The same pass checks whose randomness the sampler gets: a run repeated with an equal seed must see
   the same rounds, a run with another seed other rounds (a detector that hands the sampler a global
   or new generator fails).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from lessonlib.core import chain, sampling
from lessonlib.course import gallery, gallery_detect
from lessonlib.course.checks import wrong
from lessonlib.course.checks.framework import call, fail, rejects, run_check
from lessonlib.course.messages import N_, _, say, translated

FALSE_ALARM_RUNS, MAX_ALARMS, LEVEL = 36, 1, 1e-3
FALSE_ALARM_SEED = 1000
MISSED = {"greedy": N_("run every sampler at T = 0 and compare each emitted token with the target's argmax at its "
                       "position (the batch and the near-tie case of gallery.CASES)"),
          "inputs": N_("pass copies of the logits (case.target_logits.copy()) and compare them with the case's "
                       "after the call: a sampler that writes into its inputs is a bug"),
          "sampled": N_("at T ≠ 1 compare the first and the second emitted token with their exact laws "
                        "(gallery_detect.expected_laws) by chi-square on enough rounds (thousands: power)")}
FLAGGED = N_("a correct sampler was flagged: test the output law (first and second token), not the acceptance or the "
             "number of tokens per round, against its noise, at a level that keeps the false-alarm rate at 10⁻³ "
             "(divide it among your tests)")
NEVER_RAN = N_("a verdict must come from running the sampler (sampler.step on the cases): its name, label and other "
               "attributes say nothing about its output")
OWN_RNG = N_("hand the sampler the rng your detector was given (sampler.step(..., rng)), or generators drawn from "
             "it: not np.random's global generator or a new np.random.default_rng()")

# ----------------------------------------------------------------------------- samplers the detector has not seen


def _rows(tl, dl, temperature, top_k):
    return gallery.dists(tl, temperature, top_k), gallery.dists(dl, temperature, top_k)


def _round_law(p, q) -> tuple[list[list[int]], np.ndarray]:
    """Every emitted sequence of one exact round and its cumulative probability (enumeration)."""
    accepted, stop = chain.exact_round_distribution(p, q)
    K, V = q.shape
    sequences, probs = [], []
    for m in range(K + 1):  # m accepted drafts, then the correction (or the bonus when m = K)
        for prefix in itertools.product(range(V), repeat=m):
            reach = math.prod(accepted[j, x] for j, x in enumerate(prefix))
            for y in np.flatnonzero(stop[m] * reach > 0):
                sequences.append([*prefix, int(y)])
                probs.append(reach * stop[m, y])
    return sequences, np.cumsum(probs)


_LAWS: dict = {}  # the enumerated law of each row, by its logits
_ROWS: dict = {}  # each row's cumulative p, by its logits


def _enumerated(tl, dl, temperature, top_k, rng):
    """Exact, by another road: each row's round drawn whole from its enumerated law (one uniform)."""
    key = (tl.tobytes(), dl.tobytes(), temperature, top_k)
    laws = _LAWS.get(key)
    if laws is None:
        p, q = _rows(tl, dl, temperature, top_k)
        laws = _LAWS.setdefault(key, [[chain.verify_greedy(pb, qb.argmax(-1), validate=False)]
                                      if temperature <= sampling.GREEDY_TEMPERATURE else _round_law(pb, qb)
                                      for pb, qb in zip(p, q)])
    if temperature <= sampling.GREEDY_TEMPERATURE:
        return [list(law[0]) for law in laws]
    return [sequences[min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(sequences) - 1)]
            for sequences, cdf in laws]


def _plain(tl, dl, temperature, top_k, rng):
    """Exact, and accepts nothing: ignores the draft and samples all K + 1 positions from p."""
    key = (tl.tobytes(), temperature, top_k)
    p = _ROWS.get(key)
    if p is None:
        p = _ROWS.setdefault(key, np.cumsum(gallery.dists(tl, temperature, top_k), axis=-1))
    if temperature <= sampling.GREEDY_TEMPERATURE:
        return [row.argmax(-1).tolist() for row in p]  # the first index where the cdf reaches 1
    u = rng.random(p.shape[:-1])[..., None]  # (B, K+1, 1): one uniform per position
    return np.minimum((p <= u * p[..., -1:]).sum(-1), p.shape[-1] - 1).tolist()  # inverse cdf


def _rule(p, q, temperature, rng, correction=None):
    """The exact round on rows p, q (greedy at T = 0); ``correction(p, q, j)`` replaces the residual."""
    x = sampling.inverse_cdf(q, rng.random(len(q))) if temperature > sampling.GREEDY_TEMPERATURE else q.argmax(-1)
    if temperature <= sampling.GREEDY_TEMPERATURE:
        return chain.verify_greedy(p, x, validate=False)
    for j, token in enumerate(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            if not rng.random() < p[j, token] / q[j, token]:
                fix = sampling.residual_rows(p[j], q[j]) if correction is None else correction(p, q, j)
                return [int(t) for t in x[:j]] + [gallery.draw(fix, rng)]
    return [int(t) for t in x] + [gallery.draw(p[-1], rng)]


def _correction_from_p(tl, dl, temperature, top_k, rng):
    p, q = _rows(tl, dl, temperature, top_k)
    return _rule(p, q, temperature, rng, correction=lambda p, q, j: p[j])  # BUG: p, not the residual


def _second_row_is_first(tl, dl, temperature, top_k, rng):
    p, q = _rows(tl, dl, temperature, top_k)
    if temperature > sampling.GREEDY_TEMPERATURE:
        p = p.copy()
        p[1] = p[0]  # BUG: position 1 judged and corrected with the first position's row
    return _rule(p, q, temperature, rng)


def _normalises_draft_in_place(tl, dl, temperature, top_k, rng):
    dl -= np.where(np.isfinite(dl), dl, 0).max(axis=-1, keepdims=True)  # BUG: the caller's array; same output
    return _rule(*_rows(tl, dl, temperature, top_k), temperature, rng)


def _greedy_fix_from_next_row(tl, dl, temperature, top_k, rng):
    p, q = _rows(tl, dl, temperature, top_k)
    if temperature > sampling.GREEDY_TEMPERATURE:
        return _rule(p, q, temperature, rng)
    best, x = p.argmax(-1), q.argmax(-1)
    n = int(np.cumprod(best[: len(x)] == x).sum())
    return x[:n].tolist() + [int(best[min(n + 1, len(x))])]  # BUG: the correction from the next row


def _target_at_t1(tl, dl, temperature, top_k, rng):
    p, q = _rows(tl, dl, temperature, top_k)
    if temperature > sampling.GREEDY_TEMPERATURE:
        p = gallery.dists(tl, 1.0, top_k)  # BUG: the target's rows at T = 1 whatever the request
    return _rule(p, q, temperature, rng)


def _each(one):
    """A batched step from a one-row round ``one(tl, dl, temperature, top_k, rng)``."""
    def step(target_logits, draft_logits, temperature, top_k, rng):
        return [one(tl, dl, temperature, top_k, rng) for tl, dl in zip(target_logits, draft_logits)]
    return step


# (step, a bug?, the test that shows it); law is None for every one of them
UNSEEN = [(_enumerated, False, ""), (_plain, False, ""), (_each(_correction_from_p), True, "sampled"),
          (_each(_second_row_is_first), True, "sampled"), (_each(_normalises_draft_in_place), True, "inputs"),
          (_each(_greedy_fix_from_next_row), True, "greedy"), (_each(_target_at_t1), True, "sampled")]
EXACT_UNSEEN = [step for step, bug, _kind in UNSEEN if not bug]


# ----------------------------------------------------------------------------- running the student's detector


class _Watched:
    """A sampler's step as the detector sees it: counts the rounds run and remembers what they emitted."""

    def __init__(self, step, record: bool = False):
        self.step, self.calls, self.emitted, self.record = step, 0, [], record

    def __call__(self, target_logits, draft_logits, temperature, top_k, rng):
        self.calls += 1
        out = self.step(target_logits, draft_logits, temperature, top_k, rng)
        if self.record:  # only where seeds are compared: it costs a third of a run
            self.emitted.append(tuple(tuple(int(t) for t in row) for row in out))
        return out


def _disguised(sampler: gallery.Sampler | None, step, i: int, law=None, record: bool = False):
    """The sampler as the student's detector sees it: no name, label, thread or symptom to read."""
    watched = _Watched(step, record)
    base = sampler or gallery.GALLERY[0]
    return dataclasses.replace(base, name=f"sampler {i}", step=watched, source="", symptom="", bug=True,
                               law=law), watched


def _verdict(case: str, out) -> tuple[bool, str, int]:
    try:
        detected, test, samples = out
    except (TypeError, ValueError):
        fail(case, _("expected (detected, test, samples)"), got=out, hint=_("return a tuple: a bool, a str, an int"))
    try:
        whole = int(samples) == samples and samples >= 0
    except (TypeError, ValueError):
        whole = False
    if not isinstance(detected, (bool, np.bool_)) or not isinstance(test, str) or not whole:
        fail(case, _("expected (detected: bool, test: str, samples: int >= 0)"), got=out)
    return bool(detected), test, int(samples)


def _judge(detect, case: str, sampler, watched, rng, bug: bool, kind) -> tuple[bool, str, int]:
    """The detector's verdict on one sampler, or a ✗; ``kind()`` names the test a missed bug needs."""
    detected, test, samples = _verdict(case, call(detect, case, sampler, rng))
    if watched.calls == 0 and sampler.law is None:
        fail(case, _("your detector returned a verdict without running the sampler (0 rounds)"), hint=NEVER_RAN)
    if detected != bug:
        fail(case, _("flagged, though its output follows the target") if detected else _("not detected"),
             hint=FLAGGED if detected else MISSED[kind()])
    return detected, test, samples


def _kind(sampler) -> str:
    """Which family of test a gallery bug needs (from the reference detector's verdict)."""
    test = gallery_detect.detect(sampler, np.random.default_rng(0)).test
    return "greedy" if test.startswith("greedy") else "inputs" if test.startswith("inputs") else "sampled"


def _line(name: str, verdict: tuple[bool, str, int], rounds: int) -> str:
    shown = dict(name=name, test=verdict[1] or "—", samples=verdict[2], rounds=rounds)
    return (say("{name:<36} detected  {test} (samples: {samples}; rounds run: {rounds})", **shown) if verdict[0] else
            say("{name:<36} passed    {test} (samples: {samples}; rounds run: {rounds})", **shown))


def _seen_and_unseen(detect) -> list[str]:
    rng, lines = np.random.default_rng(0), []
    for i, sampler in enumerate(gallery.GALLERY):
        name = translated(sampler.name)
        case = say("{name} (a bug)", name=name) if sampler.bug else say("{name} (exact)", name=name)
        disguised, watched = _disguised(sampler, sampler.step, i, sampler.law)
        verdict = _judge(detect, case, disguised, watched, rng, sampler.bug, lambda: _kind(sampler))
        lines.append(_line(name, verdict, watched.calls))
    for j, (step, bug, kind) in enumerate(UNSEEN):
        name = say("unseen sampler {i}", i=j + 1)
        case = say("{name} (a bug)", name=name) if bug else say("{name} (exact)", name=name)
        disguised, watched = _disguised(None, step, len(gallery.GALLERY) + j)
        lines.append(_line(name, _judge(detect, case, disguised, watched, rng, bug, lambda: kind), watched.calls))
    return lines


def _run_exact(detect, i: int, seed: int, record: bool = False) -> tuple[bool, tuple]:
    """One run of the detector on an unseen exact sampler: (flagged, the rounds the sampler emitted if
    ``record``)."""
    case = say("false-alarm run {i} (an exact sampler, seed {seed})", i=i, seed=seed)
    sampler, watched = _disguised(None, EXACT_UNSEEN[seed % len(EXACT_UNSEEN)], 100 + seed % len(EXACT_UNSEEN),
                                  record=record)
    detected = _verdict(case, call(detect, case, sampler, np.random.default_rng(seed)))[0]
    if watched.calls == 0:
        fail(case, _("your detector returned a verdict without running the sampler (0 rounds)"), hint=NEVER_RAN)
    return detected, tuple(watched.emitted)


def _same_randomness(detect, first: tuple, other: tuple) -> None:
    """Run 1's seed again must give run 1's rounds; run 3 (the same sampler, another seed) other rounds."""
    case = say("false-alarm run {i} (an exact sampler, seed {seed})", i=1, seed=FALSE_ALARM_SEED)
    if _run_exact(detect, 1, FALSE_ALARM_SEED, record=True)[1] != first:
        fail(case, _("the same seed gave other rounds: the sampler did not get its randomness from the rng you "
                     "were given"), hint=OWN_RNG)
    if first == other:
        fail(case, _("another seed gave the same rounds: the sampler's randomness does not come from the rng you "
                     "were given"), hint=OWN_RNG)


def _false_alarms(detect) -> int:
    """Flags over ``FALSE_ALARM_RUNS`` runs on the unseen exact samplers, each with its own seed; fails past
    ``MAX_ALARMS``, and when an equal seed does not give equal rounds or another seed gives the same."""
    alarms, emitted = 0, []
    for i in range(FALSE_ALARM_RUNS):
        detected, rounds = _run_exact(detect, i + 1, FALSE_ALARM_SEED + i, record=i in (0, len(EXACT_UNSEEN)))
        emitted.append(rounds)
        if i == len(EXACT_UNSEEN):  # early, so a detector with its own generator fails in a second
            _same_randomness(detect, emitted[0], emitted[i])
        alarms += detected
        if alarms > MAX_ALARMS:
            fail(say("false-alarm run {i} (an exact sampler, seed {seed})", i=i + 1, seed=FALSE_ALARM_SEED + i),
                 say("{alarms} false alarms in {runs} runs on exact samplers (at most {most} allowed for the "
                     "stated level 10⁻³ per run)", alarms=alarms, runs=i + 1, most=MAX_ALARMS), hint=FLAGGED)
    return alarms


def _verify_detector(detect) -> list[str]:
    lines = _seen_and_unseen(detect)
    alarms = _false_alarms(detect)
    exceed = 1 - sum(math.comb(FALSE_ALARM_RUNS, k) * LEVEL ** k * (1 - LEVEL) ** (FALSE_ALARM_RUNS - k)
                     for k in range(MAX_ALARMS + 1))
    return lines + [say("false alarms on the unseen exact samplers: {alarms} of {runs} runs with their own seeds "
                        "(at most {most} allowed: a detector at the stated 10⁻³ per run has more with probability "
                        "{exceed:.1g})", alarms=alarms, runs=FALSE_ALARM_RUNS,
                        most=MAX_ALARMS, exceed=exceed),
                    _("the sampler's randomness comes from the rng given: an equal seed gave the same rounds, "
                      "another seed other rounds")]


def _verify_detector_fn(detect):
    controls = [rejects(_verify_detector, name, fn) for name, fn in wrong.controls("1d").items()]
    lines = _verify_detector(detect)
    return ([say("every gallery bug and {bugs} unseen bugs flagged, {exact} exact samplers passed; each sampler "
                 "seen without its name, the unseen ones without a law:", bugs=sum(b for _s, b, _k in UNSEEN),
                 exact=2 + len(EXACT_UNSEEN))] + lines
            + [say("negative controls, same check: {caught}", caught="; ".join(controls))])


def exercise_1d(detect):
    """Check ``detect(sampler, rng) -> (detected, test, samples)`` over ``gallery.GALLERY`` and unseen samplers."""
    return run_check("1d", detect, gallery_detect.detect, _verify_detector_fn)
