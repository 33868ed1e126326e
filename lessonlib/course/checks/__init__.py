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
negative-control helpers), ``ex1`` … ``ex5`` (one module per notebook), ``wrong`` (the
catalogue of wrong implementations, shared with ``tests/test_checks.py``).
"""
from lessonlib.course.checks import wrong
from lessonlib.course.checks.ex1 import (CHAIN_LEVEL, CHAIN_P, CHAIN_Q, CHAIN_ROUNDS, chain_length_probs,
                                         chain_statistics, exercise_1a, exercise_1b, exercise_1c)
from lessonlib.course.checks.ex2 import LEVIATHAN_TABLE_1, exercise_2a, exercise_2b, exercise_2c, exercise_2d
from lessonlib.course.checks.ex3 import exercise_3a, exercise_3b, exercise_3c, exercise_3d, theory_best_loss
from lessonlib.course.checks.ex4 import exercise_4a, exercise_4b, exercise_4c, exercise_4d, markov_expand
from lessonlib.course.checks.ex5 import exercise_5a, exercise_5b, exercise_5c
from lessonlib.course.checks.framework import (CheckFailed, Wrong, call, chi_square_gate, expect_close, expect_equal,
                                               fail, rejects, run_check, with_controls)
from lessonlib.course.checks.wrong import verify_chain_always_accept, verify_chain_scalar_q
from lessonlib.course.checks.wrong.ex3 import (alpha_argmax_at_any_t, alpha_tv_without_half, loss_swapped_kl,
                                               loss_teacher_untempered, loss_tv_without_half, step_always_ce,
                                               step_no_update)

NEGATIVE_CONTROLS = wrong.controls("1b")  # {"scalar-q residual": ..., "always accept": ...}

# the names tests/test_distill.py used before the split
_loss_swapped_kl, _loss_tv_without_half, _loss_teacher_untempered = (loss_swapped_kl, loss_tv_without_half,
                                                                     loss_teacher_untempered)
_alpha_argmax_at_any_t, _alpha_tv_without_half = alpha_argmax_at_any_t, alpha_tv_without_half
_step_no_update, _step_always_ce, _theory_best_loss = step_no_update, step_always_ce, theory_best_loss

EXERCISES = {name[len("exercise_"):]: check for name, check in sorted(globals().items()) if name.startswith("exercise_")}

__all__ = ["CHAIN_LEVEL", "CHAIN_P", "CHAIN_Q", "CHAIN_ROUNDS", "EXERCISES", "LEVIATHAN_TABLE_1", "NEGATIVE_CONTROLS",
           "CheckFailed", "Wrong", "call", "chain_length_probs", "chain_statistics", "chi_square_gate", "expect_close",
           "expect_equal", "fail", "markov_expand", "rejects", "run_check", "theory_best_loss",
           "verify_chain_always_accept", "verify_chain_scalar_q", "with_controls", "wrong",
           *(f"exercise_{e}" for e in EXERCISES)]
