"""Checks for notebook 2, the speedup: 2a E(α, K), 2b wall time, 2c speedup, 2d the best K."""
from __future__ import annotations

import numpy as np

from lessonlib.core import theory
from lessonlib.course.checks import numeric
from lessonlib.course.checks.framework import (
    as_number,
    call,
    expect_close,
    expect_equal,
    fail,
    low_precision,
    run_check,
)
from lessonlib.course.messages import N_, _, say, translated

# both ends of α's range [0, 1] and just inside them (α = 1 exactly: K + 1 tokens, no 0/0; 0.995 and 0.999
# tell a special case for "α near 1" from α = 1 itself; a float32 closed form still meets 1e-5 there)
ALPHAS = np.array([0.0, 0.001, 0.3, 0.5, 0.6, 0.8, 0.9, 0.99, 0.995, 0.999, 1.0])
KS = (1, 2, 3, 4, 5, 8, 16)
# c from a free draft to one as costly as the target: the course's own measurements sit at 0.15-0.67
COSTS = (0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.99, 1.0)
LEVIATHAN_TABLE_1 = {(0.6, 2): 1.96, (0.7, 3): 2.53, (0.8, 2): 2.44, (0.8, 5): 3.69, (0.9, 2): 2.71, (0.9, 10): 6.86}
NUMBER = N_("for a number α return one number (a float, numpy scalar or 0-d array); only an array α gives an array")
ARRAY_IF = {"truth value of an array": N_("an `if` on α fails when α is an array: use np.where and numpy arithmetic")}
RTOL = 1e-6  # relative: an answer computed in float32 and returned as a float64 is still right
POWERS = N_("E = 1 + α + α² + … + α^K = (1 − α^(K+1))/(1 − α): K drafts can give up to K+1 tokens")


def _verify_tokens_per_verify(expected_tokens_per_verify):
    case = N_("alpha 0.8, K 4")
    got = as_number(case, call(expected_tokens_per_verify, case, 0.8, 4), NUMBER)
    expected = theory.expected_tokens_per_verify(0.8, 4)  # 3.3616
    if abs(got - expected) > 1e-9 + max(RTOL, low_precision(got)) * expected:
        one_short = abs(got - theory.expected_tokens_per_verify(0.8, 3)) < 1e-6
        no_one = abs(got - (expected - 1)) < 1e-6
        fail(case, _("wrong value"), expected, got, say(
            "{rule} (your value is (1 − α^K)/(1 − α): one power short)", rule=translated(POWERS)) if one_short else say(
            "{rule} (your value misses the α⁰ = 1 term: every round emits one token, even when it rejects the first "
            "draft)", rule=translated(POWERS)) if no_one else POWERS)
    for k in KS:
        for alpha in ALPHAS:
            case = f"alpha {alpha:g}, K {k}"
            expect_close(case, as_number(case, call(expected_tokens_per_verify, case, float(alpha), k), NUMBER),
                         theory.expected_tokens_per_verify(alpha, k), atol=1e-9, rtol=RTOL,
                         hint=_("at α = 1 every draft is accepted: K + 1 tokens (avoid dividing 0 by 0)") if alpha == 1
                         else _("E = 1 + α + … + α^K for every α below 1, however close: only α = 1 itself gives "
                                "K + 1 (no threshold such as α > 0.99)") if alpha > 0.99
                         else _("E = 1 + α + … + α^K (the sum of K + 1 powers, starting at α⁰ = 1)"))
    case = _("alpha as a numpy scalar np.float64(0.5), K 3")
    expect_close(case, as_number(case, call(expected_tokens_per_verify, case, np.float64(0.5), 3), NUMBER), 1.875)
    case = say("alpha as a numpy array {alphas}, K 4", alphas=ALPHAS.tolist())
    got = call(expected_tokens_per_verify, case, ALPHAS.copy(), 4, hints=ARRAY_IF)
    expect_close(case, got, theory.expected_tokens_per_verify(ALPHAS, 4), atol=1e-9, rtol=RTOL,
                 hint=_("make it work on arrays: numpy arithmetic, np.where instead of if"))
    return [f"E(0.8, 4) = {expected:.4f}",
            say("matches (1 − α^(K+1))/(1 − α) on {n} (α, K) pairs to {tolerance}, including α = 0 (1 token), "
                "α = 0.995 and 0.999, and α = 1 (K + 1 tokens)", n=len(KS) * len(ALPHAS), tolerance=_stated()),
            _("vectorised over an array of α")]


def _stated() -> str:
    """The relative tolerance the grid checks applied: 1e-6, or a lower-precision answer's own."""
    return numeric.phrase(say("{rtol:g} relative", rtol=RTOL))


def exercise_2a(expected_tokens_per_verify):
    """Check ``expected_tokens_per_verify(alpha, k)`` = (1 − α^(k+1))/(1 − α)."""
    return run_check("2a", expected_tokens_per_verify, theory.expected_tokens_per_verify, _verify_tokens_per_verify)


def _grid_check(fn, reference, name, hint_for):
    for c in COSTS:
        for k in KS:
            for alpha in ALPHAS:
                case = f"{name}(alpha={alpha:g}, k={k}, c={c:g})"
                expect_close(case, as_number(case, call(fn, case, float(alpha), k, c), NUMBER), reference(alpha, k, c),
                             atol=1e-9, rtol=RTOL, hint=hint_for(alpha, k, c))


def _verify_wall_time(wall_time_per_token):
    _grid_check(wall_time_per_token, theory.wall_time_per_token, "wall_time_per_token",
                lambda a, k, c: _("one round costs K draft steps (K·c) plus one target pass (1); "
                                  "divide by the tokens it yields, E(α, K)"))
    return [say("matches (K·c + 1)/E(α, K) to {tolerance} on {n} (α, K, c) points, α from 0 to 1 and c from 0 "
                "to 1", n=len(COSTS) * len(KS) * len(ALPHAS), tolerance=_stated())]


def exercise_2b(wall_time_per_token):
    """Check ``wall_time_per_token(alpha, k, c)`` = (k·c + 1)/E, in target forwards."""
    return run_check("2b", wall_time_per_token, theory.wall_time_per_token, _verify_wall_time)


def _verify_speedup(expected_speedup):
    for (alpha, k), paper in LEVIATHAN_TABLE_1.items():
        case = say("Leviathan et al. Table 1: alpha {alpha}, K {k}, c 0", alpha=alpha, k=k)
        got = as_number(case, call(expected_speedup, case, alpha, k, 0.0), NUMBER)
        if round(got, 2) != paper:
            fail(case, _("does not reproduce the paper to two decimals"), paper, got,
                 _("with a free draft (c = 0) the speedup equals E(α, K)"))
    case = N_("alpha 0.8, K 4: c = 0 vs c = 0.2")
    free, costly = (as_number(case, call(expected_speedup, case, 0.8, 4, c), NUMBER) for c in (0.0, 0.2))
    if abs(free - costly) < 1e-12:
        fail(case, _("the speedup does not change with the draft cost c"),
             hint=_("divide E by the round's cost K·c + 1"))
    _grid_check(expected_speedup, theory.expected_speedup, "expected_speedup",
                lambda a, k, c: _("speedup = E(α, K)/(K·c + 1) (Leviathan et al. Thm 3.8)"))
    return [say("reproduces Leviathan et al. Table 1 (c = 0) to two decimals: {n} entries", n=len(LEVIATHAN_TABLE_1)),
            say("matches E/(K·c + 1) to {tolerance} on {n} (α, K, c) points, α from 0 to 1 and c from 0 to 1, and "
                "depends on c", n=len(COSTS) * len(KS) * len(ALPHAS), tolerance=_stated())]


def exercise_2c(expected_speedup):
    """Check ``expected_speedup(alpha, k, c)`` = E/(k·c + 1)."""
    return run_check("2c", expected_speedup, theory.expected_speedup, _verify_speedup)


def _brute_force_k(alpha, c, k_max):
    return 1 + int(np.argmax([theory.expected_speedup(alpha, k, c) for k in range(1, k_max + 1)]))


def _expect_k(case, got, best, hint):
    if numeric.ndim(got) == 0 and numeric.dtype_name(got).startswith(("int", "uint")):
        got = int(got)  # a 0-d integer array or tensor
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        fail(case, say("expected an integer K, got {kind}", kind=type(got).__name__), best, got,
             _("return K itself (an int from 1..k_max), not its speedup or an index"))
    expect_equal(case, got, best, hint)


TIES = N_("every K gives speedup 1 here: on ties return the smallest K (max() and np.argmax keep the first "
          "maximum; a loop must replace the best only on a strictly larger speedup)")


def _verify_optimal_k(optimal_k):
    checked = 0
    for c in (0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 1.0):  # up to a draft as costly as the target
        for alpha in (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.995, 1.0):
            case = f"optimal_k(alpha={alpha}, c={c})"
            got, best = call(optimal_k, case, alpha, c), _brute_force_k(alpha, c, 32)
            hint = _("maximise expected_speedup(α, K, c) over K = 1..k_max, not E")
            if isinstance(got, (int, np.integer)) and 1 <= got <= 32 and got != best and \
                    theory.expected_speedup(alpha, int(got), c) == theory.expected_speedup(alpha, best, c):
                hint = TIES
            elif got == best - 1:
                hint = (_("K = k_max = 32 is the best here: search K = 1..k_max inclusive, range(1, k_max + 1)")
                        if best == 32 else _("K counts from 1: the best K is argmax + 1 over K = 1..k_max"))
            _expect_k(case, got, best, hint)
            checked += 1
    for case, args, best, hint in [
            ("optimal_k(alpha=0.9, c=0, k_max=5)", (0.9, 0.0, 5), 5, N_("with a free draft more K always helps, so "
             "the answer is k_max: search K = 1..k_max inclusive (range(1, k_max + 1)) and respect the k_max "
             "argument")),
            ("optimal_k(alpha=0.9, c=0.05, k_max=3)", (0.9, 0.05, 3), 3, N_("search only K = 1..k_max, k_max "
                                                                            "included")),
            ("optimal_k(alpha=0.9, c=0.05, k_max=1)", (0.9, 0.05, 1), 1, N_("search only K = 1..k_max, k_max "
                                                                            "included")),
            (N_("optimal_k(alpha=0, c=0, k_max=8): every K ties"), (0.0, 0.0, 8), 1, TIES),
            (N_("optimal_k(alpha=1, c=1, k_max=8): every K ties"), (1.0, 1.0, 8), 1, TIES)]:
        _expect_k(case, call(optimal_k, case, *args[:2], k_max=args[2]), best, hint)
    return [say("matches brute force over K = 1..32 on {n} (α, c) pairs, α from 0 to 1 and c from 0.01 to 1",
                n=checked), _("respects k_max"), _("returns the smallest K among ties")]


def exercise_2d(optimal_k):
    """Check ``optimal_k(alpha, c, k_max=32)``: the integer K ≥ 1 with the largest speedup."""
    return run_check("2d", optimal_k, theory.optimal_k, _verify_optimal_k)
