"""Case helpers the exercise checks share: a round's emitted tokens, read with a readable failure,
random probability rows for generated cases, and whether a function's randomness is its rng's."""
from __future__ import annotations

import numpy as np

from lessonlib.course.checks.framework import fail
from lessonlib.course.messages import N_, _, say


def emitted_tokens(case: str, out, k: int) -> list[int]:
    """A round's emitted tokens as a list of ints, with a readable failure for anything else."""
    try:
        if isinstance(out, (str, bytes, dict)):
            raise TypeError(out)
        tokens = [int(t) for t in out]
    except (TypeError, ValueError, OverflowError, RuntimeError):
        fail(case, say("expected a list of token ids, got {kind}", kind=type(out).__name__), got=out)
    if any(t != s for t, s in zip(tokens, out)):
        fail(case, _("token ids must be integers"), got=out)
    if not 1 <= len(tokens) <= k + 1:
        fail(case, say("a round emits between 1 and K+1 = {most} tokens, got {n}", most=k + 1, n=len(tokens)),
             got=tokens, hint=_("stop at the first rejection (one correction token); "
                                "the bonus token comes only when all K are accepted"))
    return tokens


def random_rows(rng, shape, zero_fraction=0.0):
    """Random probability rows of ``shape`` (last axis: the vocabulary), some entries zeroed."""
    rows = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    rows[rng.random(rows.shape) < zero_fraction] = 0.0
    rows[..., 0] += rows.sum(-1) == 0  # never an all-zero row
    return rows / rows.sum(-1, keepdims=True)


RNG_ONLY = N_("draw every random number from the rng argument (rng.random(), rng.choice(...)): not np.random.random(), "
              "the random module or a new np.random.default_rng(), so that a seed reproduces a run")


def seeded(case: str, run, seeds=(2024, 2025), hint: str = RNG_ONLY) -> str:
    """``run(rng)`` returns what the student's function produced over a few calls with that generator:
    the same seed twice must give the same, another seed something else (randomness matters there).
    Returns the ✓ line's words."""
    first, again, other = (run(np.random.default_rng(seed)) for seed in (seeds[0], seeds[0], seeds[1]))
    if first != again:
        fail(case, _("two runs with generators of the same seed gave different results: your function draws "
                     "random numbers that do not come from its rng"), hint=hint)
    if first == other:
        fail(case, _("generators of different seeds gave the same results: your function does not draw its "
                     "random numbers from its rng"), hint=hint)
    return _("uses the generator it is given: the same seed reproduces a run, another seed changes it")
