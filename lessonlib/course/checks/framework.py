"""The pieces every exercise check is built from.

A check is ``run_check(exercise, fn, reference, verify)``: ``verify(fn)`` runs the student's
function on cases with known answers and returns a list of what it verified, or raises
``CheckFailed`` through ``fail`` / ``expect_*`` / ``chi_square_gate`` with a message that names
the case, what was expected, what came back and what to fix. ``with_controls`` appends the
negative controls: known-wrong implementations (from ``wrong.CATALOGUE``) that the same
``verify`` must reject, so a ✓ is evidence that the test has teeth.

Every sentence shown to the student is an English template passed through ``messages._`` /
``say`` where it is built, or marked with ``N_`` where it is defined once (a module-level hint)
and turned into the student's language by ``fail`` / ``call`` where it is shown (``translated``):
a case name, a problem or a hint may arrive as a marked English template or already translated.
"""
from __future__ import annotations

import os
import sysconfig
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from lessonlib.core import stats
from lessonlib.course.checks import numeric, sandbox
from lessonlib.course.checks.numeric import low_precision  # noqa: F401  (re-exported)
from lessonlib.course.checks.sandbox import LIMITS, TimeUp
from lessonlib.course.messages import N_, _, say, translated
from lessonlib.course.rtl import strip_isolates

SHOW = 8  # arrays with more entries print summarised, so the hint stays in view


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message names the case and what was expected.

    In Jupyter (IPython's ``_render_traceback_`` hook) only the message is shown, not the
    check's own stack: the message already names the case, and for an error in the student's
    code the line it came from. ``student_error`` holds that error, if any."""

    student_error: BaseException | None = None

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


_STDLIB = sysconfig.get_paths()["stdlib"]
_LIB = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the lessonlib package


def _fmt(value, precision: int = 4) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (np.ndarray, list, tuple)) or _is_array_like(value):
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):  # a ragged list: show it as it is
            arr = None
        if arr is not None and arr.dtype.kind in "biuf" and arr.ndim == 0:
            value = arr.item()  # a 0-d array is one number: "2", not numpy's "2." (whose dot a Persian line moves)
        elif arr is not None and arr.dtype.kind in "biuf":
            return np.array2string(arr, precision=precision, suppress_small=precision <= 4, max_line_width=100,
                                   threshold=SHOW, edgeitems=3)
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.{max(precision, 6)}g}"
    return repr(value)


def _is_array_like(value) -> bool:
    return hasattr(value, "__array__") and not isinstance(value, (str, bytes))


def _shown(expected, got) -> tuple[str, str]:
    """Both values with enough digits that different values never print alike (3.3616 vs 3.3616)."""
    for precision in (4, 8, 12, 17):
        e, g = _fmt(expected, precision), _fmt(got, precision)
        if e != g:
            return e, g
    return e, g


def quoted(case: str) -> str:
    """A case's name in the student's language, quoted as ``repr`` quotes it ('random p and q'), but
    with Persian's zero-width non-joiner kept as the letter it is (``repr`` would write \\u200c) and
    without bidi isolates (the line it is printed in is isolated as a whole, ``rtl.isolate_line``)."""
    return repr(strip_isolates(translated(case))).replace("\\u200c", "\u200c")


def fail(case: str, problem: str, expected=None, got=None, hint: str | None = None):
    """Raise ``CheckFailed`` with a message a student can act on."""
    lines = [say("case {case}: {problem}", case=quoted(case), problem=translated(problem))]
    if expected is not None and got is not None:
        e, g = _shown(expected, got)
        lines += [say("  expected: {value}", value=e), say("  got:      {value}", value=g)]
    elif expected is not None:
        lines.append(say("  expected: {value}", value=_fmt(expected)))
    elif got is not None:
        lines.append(say("  got:      {value}", value=_fmt(got)))
    if hint:
        lines.append(say("  hint: {hint}", hint=translated(hint)))
    raise CheckFailed("\n".join(lines))


_budget: dict = {"deadline": None, "calls": 0}  # set by run_check: one time budget for a whole check

MODIFIED = N_("work on a copy (e.g. p = np.array(p, dtype=float)) or build new arrays (p - q makes one): the caller's "
            "arrays must not change")


def call(fn, case: str, *args, hints: dict | None = None, **kwargs):
    """Call the student's ``fn`` on copies of the arguments, under the time limits.

    Any error other than NotImplementedError names the case (and the student's line); a call
    that changes an argument in place, or runs past ``LIMITS``, fails with its own message.
    ``hints`` maps a piece of an error message to advice (e.g. "does not require grad").
    """
    copies, kw_copies = [sandbox.own_copy(a) for a in args], {k: sandbox.own_copy(v) for k, v in kwargs.items()}
    seconds, whole_check = LIMITS.per_call_s, False
    if _budget["deadline"] is not None and _budget["deadline"] - time.monotonic() < seconds:
        seconds, whole_check = _budget["deadline"] - time.monotonic(), True
    _budget["calls"] += 1
    try:
        out = sandbox.limited(fn, copies, kw_copies, seconds)
    except (NotImplementedError, CheckFailed):
        raise
    except TimeUp:
        _too_slow(case, whole_check)
    except Exception as err:  # the student's bug, reported with the inputs that triggered it
        advice = next((h for key, h in (hints or {}).items() if key in str(err)), None)
        message = say("case {case}: your function raised {error}: {message}", case=quoted(case),
                      error=type(err).__name__, message=str(err)) + _student_line(err)
        failure = CheckFailed(message + ("\n" + say("  hint: {hint}", hint=translated(advice)) if advice else ""))
        failure.student_error = err
        raise failure from None
    name = sandbox.changed_argument(fn, args, copies, kwargs, kw_copies)
    if name is not None:
        fail(case, say("your function modified `{name}` in place", name=name), hint=MODIFIED)
    return out


def _too_slow(case: str, whole_check: bool):
    if whole_check:
        fail(case, say("the check stopped: your function used up the check's time limit of {limit:g} s "
                       "over {calls} calls", limit=LIMITS.per_check_s, calls=_budget["calls"]),
             hint=_("a correct answer takes a few seconds in all: look for slow "
                    "Python loops over the whole vocabulary or work repeated on every call"))
    fail(case, say("your function did not return within {limit:g} s, so the check stopped it", limit=LIMITS.per_call_s),
         hint=_("a correct answer returns in well under a second: look for a loop that never ends (a while loop "
                "whose condition never changes) or a recursion without a base case"))


def _student_line(err: BaseException) -> str:
    """Where in the student's own code the error came from ('' when nowhere outside the library)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith(_LIB) and "site-packages" not in f.filename
              and not f.filename.startswith(_STDLIB)]
    if not frames:
        return ""
    frame = frames[-1]
    return "\n" + say("  in {function}, line {number}: {code}", function=frame.name, number=frame.lineno,
                       code=(frame.line or "").strip())


def as_number(case: str, value, hint: str | None = None) -> Any:
    """A single number: Python int/float, numpy scalar, 0-d array or 0-d tensor (np.where returns those).

    A float; from a lower-precision answer a ``numeric.Rounded`` float that keeps its dtype, so that
    ``expect_close`` allows its precision."""
    if value is None:
        fail(case, _("your function returned None"), hint=_("did you forget the return statement?"))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, bytes)) and numeric.ndim(value) != 0:
        ndim = numeric.ndim(value)
        shape = say("an array of shape {shape}", shape=tuple(np.shape(value))) if ndim else type(value).__name__
        fail(case, say("expected a single number (a float, a numpy scalar or a 0-d array), got {what}", what=shape),
             got=value if ndim is not None else None,
             hint=hint or _("for a single α return one number; only an array α gives an array back"))
    try:
        arr, dtype = numeric.to_float64(value)
        number = float(arr)
    except (TypeError, ValueError):
        fail(case, say("expected a single number, got {kind}", kind=type(value).__name__), got=repr(value)[:80],
             hint=hint)
    return numeric.Rounded(number, dtype) if dtype else number


def numbers(case: str, got, hint: str | None = None) -> tuple[np.ndarray, str | None]:
    """``got`` as a float64 array and its lowest precision (``numeric.to_float64``), or a ✗ naming
    what came back."""
    if got is None:
        fail(case, _("your function returned None"), hint=_("did you forget the return statement?"))
    try:
        return numeric.to_float64(got)
    except TypeError as err:
        fail(case, say("expected numbers, got {kind}", kind=str(err)), got=repr(got)[:80], hint=hint)
    raise AssertionError("unreachable")  # fail raises


def _first_difference(got, expected, atol, rtol) -> dict:
    """Where two arrays first differ and both values there: {where, expected, got}."""
    bad = np.flatnonzero(~np.isclose(got.ravel(), expected.ravel(), atol=atol, rtol=rtol))
    i = int(bad[0])
    where = np.unravel_index(i, got.shape) if got.ndim > 1 else i
    e, g = _shown(float(expected.ravel()[i]), float(got.ravel()[i]))
    return {"where": where, "expected": e, "got": g}


def expect_close(case: str, got, expected, atol: float = 1e-10, hint: str | None = None, rtol: float = 0.0) -> None:
    """``got`` equals ``expected`` to ``atol`` + ``rtol``·|expected|, the relative part at least the
    ``numeric.LOW_PRECISION`` of a float32, float16 or bfloat16 ``got`` (any sequence of numbers: list,
    tuple, array, tensor); the tolerance applied is recorded for the ✓ line (``numeric.phrase``)."""
    got_arr, dtype = numbers(case, got, hint)
    rtol = numeric.record(dtype or numeric.rounded_dtype(got), max(rtol, numeric.low_precision(got)))
    expected_arr = np.asarray(expected, dtype=float)
    if got_arr.shape != expected_arr.shape:
        fail(case, say("wrong shape {shape}, expected {expected}", shape=got_arr.shape, expected=expected_arr.shape),
             expected, got_arr, hint)
    if not np.isfinite(got_arr).all() and np.isfinite(expected_arr).all():
        fail(case, _("your values include nan or inf (a division by zero?)"), expected, got_arr, hint)
    if not np.allclose(got_arr, expected_arr, atol=atol, rtol=rtol, equal_nan=True):
        worst = float(np.nanmax(np.abs(got_arr - expected_arr)))
        allowed = say("{atol:g} + {rtol:g}·|expected|", atol=atol, rtol=rtol) if rtol else f"{atol:g}"
        if expected_arr.size > SHOW:  # a long array prints summarised: name the first difference
            problem = say("values differ (largest difference {worst:.3g}, tolerance {allowed}; first at index "
                          "{where}: expected {expected}, got {got})", worst=worst, allowed=allowed,
                          **_first_difference(got_arr, expected_arr, atol, rtol))
        else:
            problem = say("values differ (largest difference {worst:.3g}, tolerance {allowed})", worst=worst,
                          allowed=allowed)
        fail(case, problem, expected, got_arr, hint)


def expect_equal(case: str, got, expected, hint: str | None = None) -> None:
    if got != expected:
        fail(case, _("wrong result"), expected, got, hint)


def chi_square_gate(case: str, counts, probs, level: float, hint: str | None = None, labels=None) -> float:
    """Chi-square goodness of fit of ``counts`` to ``probs``; fail when p-value < ``level``.

    A count in a bin with probability 0 fails at once (no test needed); ``labels[i]`` names bin
    i in that message (default "outcome i"). Returns the p-value.
    """
    counts, probs = np.asarray(counts), np.asarray(probs, dtype=float)
    impossible = np.flatnonzero((probs == 0) & (counts > 0))
    if impossible.size:
        i = int(impossible[0])
        name = labels[i] if labels is not None else say("outcome {i}", i=i)
        fail(case, say("produced {name} ({n} times), which has probability 0", name=name, n=int(counts[i])),
             hint=hint)
    p_value = stats.chi_square(counts, probs)[1]
    if p_value < level:
        n = int(counts.sum())
        fail(case, say("chi-square test rejects the expected distribution (p-value {p:.2g} < {level:g}, n = {n})",
                       p=p_value, level=level, n=n), probs, counts / max(n, 1), hint)
    return float(p_value)


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _lend(exercise: str, reference, why: str):
    print(say("… exercise {exercise}: not implemented yet — {why}; using the reference {reference} so the rest of "
              "the notebook runs.", exercise=exercise, why=why,
              reference=f"{reference.__module__}.{reference.__qualname__}"))
    return reference


def _within_budget(verify, fn):
    """``verify(fn)`` with one deadline for all its calls of ``fn`` (and a backstop a little later for
    the check's own work on what ``fn`` returned, e.g. an endless iterator)."""
    outer = _budget.copy()
    _budget.update(deadline=time.monotonic() + LIMITS.per_check_s, calls=0)
    numeric.reset()
    try:
        return sandbox.limited(verify, (fn,), seconds=LIMITS.per_check_s + 5.0)
    except TimeUp:
        fail(N_("the whole check"), say("it ran past its time limit of {limit:g} s", limit=LIMITS.per_check_s),
             hint=_("a correct answer takes a few seconds; if your function returns something unusual (a generator, "
                    "a huge array), return a list or an array of the expected size"))
    finally:
        _budget.update(outer)


def run_check(exercise: str, fn, reference, verify):
    """Run ``verify(fn)`` (a list of what was verified); return the function to use from now on.

    A stub (NotImplementedError) gets the reference back. The notebook rebinds its name to it
    (``residual = checks.exercise_1a(residual)``), so running the check cell again hands the
    check the reference itself: that is still the unimplemented stub, never a ✓.
    """
    if not callable(fn):
        raise TypeError(say("exercise {exercise}: pass the function itself, e.g. "
                            "checks.exercise_{exercise}(my_function)", exercise=exercise))
    if fn is reference:
        return _lend(exercise, reference, say("{name} is still the library's reference, lent when the stub above "
                                              "raised NotImplementedError (implement it, run its cell, then this one)",
                                              name=_name(fn)))
    try:
        verified = _within_budget(verify, fn)
    except NotImplementedError:
        return _lend(exercise, reference, _("the function above still raises NotImplementedError"))
    except CheckFailed as err:
        err.args = (say("✗ exercise {exercise}, {message}", exercise=exercise, message=err.args[0]),)
        raise err.with_traceback(None) from None
    print(say("✓ exercise {exercise}: {verified}", exercise=exercise,
              verified="\n    ".join(translated(line) for line in verified)))
    return fn


# ----------------------------------------------------------------------------- negative controls


@dataclass(frozen=True)
class Wrong:
    """One realistic wrong implementation of an exercise part (an entry of ``wrong.CATALOGUE``)."""

    exercise: str  # the part it answers, e.g. "1b"
    name: str  # a few words, e.g. "scalar-q residual"
    fn: object  # the wrong function (a class for 5b)
    hint: str  # a piece of the message its check must print: what to fix
    why: str  # one line for the instructor notes: what is wrong
    control: bool = False  # the check also runs it on itself as a negative control


def rejects(verify, name: str, wrong) -> str:
    """Run ``verify`` on a known-wrong implementation; it must raise CheckFailed (the tolerance it
    applied is not the student's: ``numeric.APPLIED`` is put back)."""
    before = numeric.reset()
    try:
        verify(wrong)
    except CheckFailed as err:
        return say("{name} (caught: {message})", name=translated(name), message=err.args[0].splitlines()[0])
    finally:
        numeric.APPLIED.update(before)
    raise RuntimeError(f"the check failed to catch the negative control {name!r}; the check is broken")


def with_controls(verify, controls: dict):
    """``verify`` followed by the same check on each known-wrong implementation in ``controls``."""
    def verify_with_controls(fn):
        caught = "; ".join(rejects(verify, n, f) for n, f in controls.items())
        return verify(fn) + [say("negative controls, same check: {caught}", caught=caught) if len(controls) > 1
                             else say("negative control, same check: {caught}", caught=caught)]
    return verify_with_controls

