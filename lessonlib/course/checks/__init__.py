"""Instant feedback for the exercise notebooks.

Each ``exercise_XY(fn)`` runs the student's function on cases with known answers and returns
the function the notebook should use from then on::

    residual = checks.exercise_1a(residual)

* right   -> prints "✓ exercise 1a: ..." with what was verified, returns ``fn``;
* wrong   -> raises ``CheckFailed`` (an ``AssertionError``) naming the case, what was
             expected and what came back, with a hint on what to fix;
* a stub  -> (``NotImplementedError``) prints "not implemented yet — using the reference"
             and returns the library's implementation, so every later cell still runs.
             Running the check cell again then hands it that reference: it says "not
             implemented yet" again, never ✓ (a check never awards ✓ to the reference).

Statistical checks state their test, sample count and false-alarm rate. Each check also runs
negative controls: known-wrong implementations from the one catalogue ``wrong.CATALOGUE``
that the same test must reject.

Layout: ``framework`` (CheckFailed, fail, call, expect_*, chi_square_gate, run_check, the
negative-control helpers), ``numeric`` (any numeric answer as float64, the tolerance its precision
allows), ``ex1`` … ``ex5`` (one module per notebook; 1d in ``ex1_detect``), ``wrong`` (the
catalogue of wrong implementations, shared with ``tests/course/test_checks.py``).
"""
from lessonlib.course.checks import wrong

# the exercise_* checks are in __all__ through EXERCISES, which ruff cannot see: hence the noqa
from lessonlib.course.checks.ex1 import (  # noqa: F401
    CHAIN_LEVEL,
    CHAIN_P,
    CHAIN_Q,
    CHAIN_ROUNDS,
    chain_length_probs,
    chain_statistics,
    exercise_1a,
    exercise_1b,
    exercise_1c,
)
from lessonlib.course.checks.ex1_detect import exercise_1d  # noqa: F401
from lessonlib.course.checks.ex2 import LEVIATHAN_TABLE_1, exercise_2a, exercise_2b, exercise_2c, exercise_2d  # noqa: F401
from lessonlib.course.checks.ex3 import exercise_3a, exercise_3b, exercise_3c, exercise_3d, theory_best_loss  # noqa: F401
from lessonlib.course.checks.ex4 import exercise_4a, exercise_4b, exercise_4c, exercise_4d, markov_expand  # noqa: F401
from lessonlib.course.checks.ex5 import exercise_5a, exercise_5b, exercise_5c  # noqa: F401
from lessonlib.course.checks.framework import (
    CheckFailed,
    Wrong,
    call,
    chi_square_gate,
    expect_close,
    expect_equal,
    fail,
    rejects,
    run_check,
    with_controls,
)
from lessonlib.course.checks.wrong import verify_chain_always_accept, verify_chain_scalar_q

NEGATIVE_CONTROLS = wrong.controls("1b")  # {"scalar-q residual": ..., "always accept": ...}

EXERCISES = {name[len("exercise_"):]: check for name, check in sorted(globals().items())
             if name.startswith("exercise_")}

__all__ = ["CHAIN_LEVEL", "CHAIN_P", "CHAIN_Q", "CHAIN_ROUNDS", "EXERCISES", "LEVIATHAN_TABLE_1", "NEGATIVE_CONTROLS",
           "CheckFailed", "Wrong", "call", "chain_length_probs", "chain_statistics", "chi_square_gate", "expect_close",
           "expect_equal", "fail", "markov_expand", "rejects", "run_check", "theory_best_loss",
           "verify_chain_always_accept", "verify_chain_scalar_q", "with_controls", "wrong",
           *(f"exercise_{e}" for e in EXERCISES)]
