"""Case helpers the exercise checks share: a round's emitted tokens, read with a readable failure,
and random probability rows for generated cases."""
from __future__ import annotations

import numpy as np

from lessonlib.course.checks.framework import fail
from lessonlib.course.messages import _, say


def emitted_tokens(case: str, out, k: int) -> list[int]:
    """A round's emitted tokens as a list of ints, with a readable failure for anything else."""
    try:
        tokens = [int(t) for t in out]
    except TypeError:
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
