"""The one catalogue of realistic wrong implementations, every exercise part.

Each entry (``framework.Wrong``) is a plausible student answer with one mistake, the piece of
the message its check must print (what to fix) and one line for the instructor notes. The
checks take their negative controls from here (``controls``), and
``tests/course/test_checks.py`` runs every entry through its check and asserts it is rejected
with that hint.

    from lessonlib.course.checks import wrong
    wrong.CATALOGUE                 # every entry, exercise by exercise
    wrong.controls("1b")            # {name: fn} the 1b check runs on itself
    print(wrong.markdown())         # the list for the instructor notes
"""
from __future__ import annotations

from lessonlib.course.checks.wrong import ex1, ex1_detect, ex2, ex3, ex4, ex5
from lessonlib.course.checks.wrong.ex1 import (  # noqa: F401
    first_tokens_scalar_q,
    scalar_q_first_token_law,
    verify_chain_always_accept,
    verify_chain_scalar_q,
)

CATALOGUE = ex1.ENTRIES + ex1_detect.ENTRIES + ex2.ENTRIES + ex3.ENTRIES + ex4.ENTRIES + ex5.ENTRIES


def entries(exercise: str) -> list:
    """The entries for one part ("1a") or one whole exercise ("1")."""
    return [w for w in CATALOGUE if w.exercise == exercise or w.exercise[:-1] == exercise]


def controls(exercise: str) -> dict:
    """{name: wrong implementation} of the part's negative controls, in catalogue order."""
    return {w.name: w.fn for w in CATALOGUE if w.exercise == exercise and w.control}


def score_line() -> str:
    """The catalogue's size and score for the instructor notes. The score is not typed: every entry
    must be rejected with its hint or ``tests/course/test_checks.py`` fails, so a green suite means
    all of them."""
    parts = ", ".join(f"{len(entries(n))} in exercise {n}" for n in "12345")
    controls_n = sum(w.control for w in CATALOGUE)
    return (f"**Score: {len(CATALOGUE)} of {len(CATALOGUE)} wrong implementations rejected, each with its hint** "
            f"({parts}; {controls_n} of them are also negative controls a check runs on itself).")


def markdown() -> str:
    """The catalogue for the instructor notes: the score line, then one line per entry
    (exercise, name, what is wrong)."""
    return "\n".join([score_line(), ""] + [f"- **{w.exercise}** {w.name}: {w.why}" for w in CATALOGUE])
