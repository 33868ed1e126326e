"""Wrong detectors for exercise 1d: each misses a class of bug, or flags exact samplers, or cheats."""
from __future__ import annotations

import dataclasses

import numpy as np

from lessonlib.core import stats
from lessonlib.course import gallery
from lessonlib.course import gallery_detect as gd
from lessonlib.course.checks.framework import Wrong

# ----------------------------------------------------------------------------- 1d detectors


def detect_tv_recipe(sampler, rng, n=1_000):
    """"TV < 0.01": flags the first-token histogram of n rounds when its TV from p exceeds 0.01."""
    case = gallery.CASES[2]
    first = np.bincount([gd.run(sampler, case, rng)[0][0][0] for _ in range(n)], minlength=6)
    tv = float(stats.tv_distance(first / n, case.p[0, 0]))
    return tv > 0.01, "TV < 0.01", n


def detect_counts_tokens(sampler, rng):
    """The reference detector plus a chi-square on the number of tokens per round."""
    case = gallery.CASES[2]
    lengths = np.bincount([len(gd.run(sampler, case, rng)[0][0]) - 1 for _ in range(500)], minlength=3)
    if stats.chi_square(lengths, gd.expected_laws(case)["tokens per round"])[1] < 1e-4:
        return True, "chi-square (tokens per round)", 500
    return tuple(gd.detect(sampler, rng))


def detect_no_law_no_run(sampler, rng):
    """Flags every sampler without an enumerated law and never runs one (every verdict reports 0 samples)."""
    if sampler.law is None:
        return True, "no law", 0
    return any(stats.tv_distance(sampler.law(c), c.p[0, 0]) > 1e-9 for c in gallery.CASES[2:]), "exact law", 0


def detect_own_generator(sampler, rng):
    """The reference detector handing the sampler a generator seeded 0 instead of ``rng``: every run draws the
    same rounds whatever seed it is given."""
    return tuple(gd.detect(sampler, np.random.default_rng(0)))


def detect_target_inputs_only(sampler, rng):
    """Compares only the target's logits after a call: the sampler writes into a copy of the draft's."""
    def step(tl, dl, temperature, top_k, rng):
        return sampler.step(tl, dl.copy(), temperature, top_k, rng)
    return tuple(gd.detect(dataclasses.replace(sampler, step=step), rng))


def detect_first_token_only(sampler, rng):
    """The reference detector's tests, but at T = 0.7 only the first emitted token's chi-square."""
    verdict = gd.detect(sampler, rng, cases=gallery.CASES[:2])
    if verdict.detected:
        return tuple(verdict)
    for case in gallery.CASES[2:]:
        if gd.run(sampler, case, rng)[1]:
            return True, "inputs unchanged", 1
    for n in gd.STAGES:
        for case in gallery.CASES[2:]:
            first = np.bincount([gd.run(sampler, case, rng)[0][0][0] for _ in range(n)], minlength=6)
            if stats.chi_square(first, gd.expected_laws(case)["first token"])[1] < gd.LEVEL / 4:
                return True, "chi-square (first token)", n
    return False, "", 0


def detect_everything_at_five_percent(sampler, rng):
    """The reference detector with each of its 8 chi-square tests at 0.05: it flags an exact sampler ~14% of runs."""
    return tuple(gd.detect(sampler, rng, level=8 * 0.05))


def detect_without_copies_check(sampler, rng):
    """The reference detector without the inputs test (it still hands the sampler copies)."""
    verdict = gd.detect(sampler, rng)
    return (False, "", 0) if verdict.test.startswith("inputs") else tuple(verdict)


ENTRIES = [
    Wrong("1d", "flags everything", lambda sampler, rng: (True, "suspicion", 0), "a correct sampler was flagged",
          "calls every sampler buggy", control=True),
    Wrong("1d", "greedy equality only", lambda sampler, rng: tuple(gd.detect(sampler, rng, cases=gallery.CASES[:2])),
          "enough rounds", "runs only the T = 0 tests: sampled bugs pass", control=True),
    Wrong("1d", "trusts the label", lambda sampler, rng: (sampler.bug, "label", 0), "a correct sampler was flagged",
          "reads sampler.bug instead of testing"),
    Wrong("1d", "TV < 0.01 on 1,000 rounds", detect_tv_recipe, "against its noise",
          "the recipe notebook 01 refutes: the noise floor at n = 1,000 is 0.021"),
    Wrong("1d", "chi-square on 200 rounds", lambda sampler, rng: tuple(gd.detect(sampler, rng, stages=(200,))),
          "thousands: power", "too few rounds: the bf16 draft (caught with probability 0.31 at 200) passes"),
    Wrong("1d", "tests the tokens per round", detect_counts_tokens, "not the acceptance",
          "flags the sample-match rule, which is exact but accepts less"),
    Wrong("1d", "no inputs test", detect_without_copies_check, "compare them with the case's after the call",
          "misses the n-gram path that corrupts the target's logits in place"),
    Wrong("1d", "no law means a bug, never runs a sampler", detect_no_law_no_run, "a verdict must come from running",
          "flags every sampler without sampler.law and reports 0 samples", control=True),
    Wrong("1d", "each chi-square test at 0.05", detect_everything_at_five_percent, "a correct sampler was flagged",
          "false alarms on ~14% of runs on an exact sampler, not 10⁻³"),
    Wrong("1d", "its own generator for the sampler", detect_own_generator, "the rng your detector was given",
          "np.random.default_rng(0) instead of rng: every run sees the same rounds, whatever its seed"),
    Wrong("1d", "inputs test on the target's logits only", detect_target_inputs_only,
          "compare them with the case's after the call", "misses a sampler that writes into the draft's logits"),
    Wrong("1d", "first token only at T > 0", detect_first_token_only, "the first and the second emitted token",
          "misses a bug that shows only in the second token's law"),
]
