"""Instant feedback for the exercise notebooks.

Each ``exercise_XY(fn)`` runs the student's function on cases with known answers and returns
the function the notebook should use from then on::

    residual = checks.exercise_1a(residual)

* right   -> prints "✓ exercise 1a: ..." with what was verified, returns ``fn``;
* wrong   -> raises ``CheckFailed`` (an ``AssertionError``) naming the case, what was
             expected and what came back, with a hint;
* a stub  -> (``NotImplementedError``) prints "not implemented yet — using the reference"
             and returns the library's implementation, so every later cell still runs.

Statistical checks state their test, sample count and false-alarm rate, and run a negative
control: a known-wrong implementation that the same test must reject.

Other notebooks add their checks at the end of this file, built from the same pieces:
``run_check``, ``call``, ``expect_close``, ``expect_equal``, ``chi_square_gate``, ``fail``.
"""
from __future__ import annotations

import numpy as np

from . import sampling, speculative, stats, theory

# ----------------------------------------------------------------------------- framework


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message names the case and what was expected."""


def _fmt(value) -> str:
    if isinstance(value, str):
        return value
    arr = np.asarray(value) if isinstance(value, (np.ndarray, list, tuple)) else None
    if arr is not None and arr.dtype.kind in "biuf":
        return np.array2string(arr, precision=4, suppress_small=True, max_line_width=100)
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def fail(case: str, problem: str, expected=None, got=None, hint: str | None = None):
    """Raise ``CheckFailed`` with a message a student can act on."""
    lines = [f"case {case!r}: {problem}"]
    if expected is not None:
        lines.append(f"  expected: {_fmt(expected)}")
    if got is not None:
        lines.append(f"  got:      {_fmt(got)}")
    if hint:
        lines.append(f"  hint: {hint}")
    raise CheckFailed("\n".join(lines))


def call(fn, case: str, *args, **kwargs):
    """Call the student's ``fn``; any error other than NotImplementedError names the case."""
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as err:  # the student's bug, reported with the inputs that triggered it
        raise CheckFailed(f"case {case!r}: your function raised {type(err).__name__}: {err}") from err


def expect_close(case: str, got, expected, atol: float = 1e-10, hint: str | None = None) -> None:
    got_arr = np.asarray(got, dtype=float)
    expected_arr = np.asarray(expected, dtype=float)
    if got_arr.shape != expected_arr.shape:
        fail(case, f"wrong shape {got_arr.shape}, expected {expected_arr.shape}", expected, got, hint)
    if not np.allclose(got_arr, expected_arr, atol=atol, rtol=0, equal_nan=False):
        worst = float(np.nanmax(np.abs(got_arr - expected_arr))) if np.isfinite(got_arr).all() else float("nan")
        fail(case, f"values differ (largest difference {worst:.3g}, tolerance {atol:g})", expected, got, hint)


def expect_equal(case: str, got, expected, hint: str | None = None) -> None:
    if got != expected:
        fail(case, "wrong result", expected, got, hint)


def chi_square_gate(case: str, counts, probs, level: float, hint: str | None = None) -> float:
    """Chi-square goodness of fit of ``counts`` to ``probs``; fail when p-value < ``level``.

    A count in a bin with probability 0 fails at once (no test needed). Returns the p-value.
    """
    counts, probs = np.asarray(counts), np.asarray(probs, dtype=float)
    impossible = np.flatnonzero((probs == 0) & (counts > 0))
    if impossible.size:
        fail(case, f"produced outcome {int(impossible[0])} ({int(counts[impossible[0]])} times), which has probability 0",
             hint=hint)
    _, p_value = stats.chi_square(counts, probs)
    if p_value < level:
        n = int(counts.sum())
        fail(case, f"chi-square test rejects the expected distribution (p-value {p_value:.2g} < {level:g}, n = {n})",
             probs, counts / max(n, 1), hint)
    return float(p_value)


def run_check(exercise: str, fn, reference, verify):
    """Run ``verify(fn)`` (a list of what was verified); return the function to use from now on."""
    if not callable(fn):
        raise TypeError(f"exercise {exercise}: pass the function itself, e.g. checks.exercise_{exercise}(my_function)")
    try:
        verified = verify(fn)
    except NotImplementedError:
        print(f"… exercise {exercise}: not implemented yet — using the reference "
              f"{reference.__module__}.{reference.__name__} so the rest of the notebook runs.")
        return reference
    except CheckFailed as err:
        err.args = (f"✗ exercise {exercise}, {err.args[0]}",)
        raise
    print(f"✓ exercise {exercise}: " + "\n    ".join(verified))
    return fn


def _tokens(case: str, out, k: int) -> list[int]:
    """The emitted tokens as a list of ints, with a readable failure for anything else."""
    try:
        tokens = [int(t) for t in out]
    except TypeError:
        fail(case, f"expected a list of token ids, got {type(out).__name__}", got=out)
    if any(t != s for t, s in zip(tokens, out)):
        fail(case, "token ids must be integers", got=out)
    if not 1 <= len(tokens) <= k + 1:
        fail(case, f"a round emits between 1 and K+1 = {k + 1} tokens, got {len(tokens)}", got=tokens,
             hint="stop at the first rejection (one correction token); the bonus token comes only when all K are accepted")
    return tokens


def _random_rows(rng, shape, zero_fraction=0.0):
    rows = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    rows[rng.random(rows.shape) < zero_fraction] = 0.0
    rows[..., 0] += rows.sum(-1) == 0  # never an all-zero row
    return rows / rows.sum(-1, keepdims=True)


# ----------------------------------------------------------------------------- exercise 1: the exact rule


def _residual_cases():
    rng = np.random.default_rng(101)
    p, q = _random_rows(rng, (2, 8))
    one_hot = np.eye(8)
    zero_q = q.copy()
    zero_q[[1, 4]] = 0.0
    zero_q /= zero_q.sum()
    return [
        ("random p and q (vocab 8)", p, q),
        ("q is 0 where p is not", p, zero_q),
        ("p == q (no residual mass)", p, p.copy()),
        ("disjoint supports", np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.25, 0.75])),
        ("one-hot p", one_hot[3], q),
        ("one-hot q", p, one_hot[5]),
        ("one-hot p == one-hot q", one_hot[2], one_hot[2].copy()),
    ]


def _verify_residual(residual):
    hints = {
        "p == q (no residual mass)": "max(p - q, 0) sums to 0 here; the contract says return p in that case",
        "one-hot p == one-hot q": "max(p - q, 0) sums to 0 here; the contract says return p in that case",
    }
    for case, p, q in _residual_cases():
        p_in, q_in = p.copy(), q.copy()
        got = call(residual, case, p_in, q_in)
        if not (np.array_equal(p_in, p) and np.array_equal(q_in, q)):
            fail(case, "your function modified its inputs p or q", hint="work on a new array (np.maximum(p - q, 0) makes one)")
        expect_close(case, got, sampling.residual(p, q), atol=1e-12,
                     hint=hints.get(case, "residual = max(p - q, 0) / sum(max(p - q, 0)): subtract the whole q vector, then normalise"))
    rng = np.random.default_rng(102)
    worst = 0.0
    for p, q in _random_rows(rng, (200, 2, 16), zero_fraction=0.3):
        alpha = np.minimum(p, q).sum()
        recon = np.minimum(p, q) + (1 - alpha) * np.asarray(call(residual, "200 random pairs", p, q))
        worst = max(worst, float(np.abs(recon - p).max()))
    if worst > 1e-12:
        fail("200 random pairs (vocab 16, 30% zeros)", f"min(p, q) + (1 - alpha) * residual differs from p by {worst:.3g}")
    return [f"matches the reference on {len(_residual_cases())} cases (p == q, disjoint supports, zeros, one-hot) to 1e-12",
            f"min(p, q) + (1 − α)·residual(p, q) = p on 200 random pairs (largest error {worst:.1e})",
            "inputs left unmodified"]


def exercise_1a(residual):
    """Check ``residual(p, q)``: max(p − q, 0) normalised, p itself when that has no mass."""
    return run_check("1a", residual, sampling.residual, _verify_residual)


# Rows for the statistical check: vocab 6, K = 2. Token 5 has p = 0 at position 0 but q > 0 (a
# draft proposal the target forbids), token 4 has q = 0 at position 0 (only reachable through
# the residual), and each position has its own p so a row mix-up changes the histograms.
CHAIN_P = np.array([[0.40, 0.25, 0.15, 0.10, 0.10, 0.00],
                    [0.05, 0.10, 0.20, 0.30, 0.15, 0.20],
                    [0.10, 0.40, 0.05, 0.05, 0.20, 0.20]])
CHAIN_Q = np.array([[0.15, 0.15, 0.25, 0.20, 0.00, 0.25],
                    [0.20, 0.10, 0.10, 0.30, 0.20, 0.10]])
CHAIN_ROUNDS = 6000
CHAIN_LEVEL = 1e-4  # per test; four tests -> a correct verifier fails with probability < 0.04%


def chain_length_probs(p_rows, q_rows):
    """Exact P(a round emits L tokens), L = 1..K+1, for per-position acceptance α_i = Σ min(p_i, q_i)."""
    alphas = np.minimum(p_rows[:-1], q_rows).sum(-1)
    reach = np.concatenate([[1.0], np.cumprod(alphas)])  # P(first i drafts all accepted)
    return reach * np.append(1 - alphas, 1.0)


def chain_statistics(verify_chain, rounds=CHAIN_ROUNDS, seed=2, p_rows=CHAIN_P, q_rows=CHAIN_Q, level=CHAIN_LEVEL):
    """Run ``verify_chain`` for ``rounds`` rounds on drafts sampled from q; test four histograms.

    Exact targets: length L ~ chain_length_probs; first token ~ p_0; token 2 given L ≥ 2 ~ p_1;
    the bonus given L = K+1 ~ p_K. Returns the p-values; raises ``CheckFailed`` on a rejection.
    """
    rng = np.random.default_rng(seed)
    k, vocab = q_rows.shape
    drafts = np.stack([rng.choice(vocab, size=rounds, p=q) for q in q_rows], axis=1)
    outs = [_tokens("statistical test", call(verify_chain, "statistical test", p_rows, q_rows, d, rng), k) for d in drafts]
    for out, d in zip(outs, drafts):
        if out[:-1] != [int(t) for t in d[: len(out) - 1]]:
            fail("statistical test", "every emitted token before the last must be an accepted draft token, in order",
                 expected=f"a prefix of the draft {d.tolist()} plus one token", got=out)
    lengths = np.array([len(o) for o in outs])
    count = lambda tokens: np.bincount(tokens, minlength=vocab)
    return {
        "length": chi_square_gate("number of tokens per round", np.bincount(lengths - 1, minlength=k + 1),
                                  chain_length_probs(p_rows, q_rows), level,
                                  "accept draft i with probability min(1, p_i(x)/q_i(x)) and stop at the first rejection"),
        "first token": chi_square_gate("first emitted token", count([o[0] for o in outs]), p_rows[0], level,
                                       "at a rejection sample the correction from residual(p_i, q_i) of that position"),
        "second token": chi_square_gate("second token (rounds with ≥ 2 tokens)", count([o[1] for o in outs if len(o) > 1]),
                                        p_rows[1], level, "position i uses p_rows[i] and q_rows[i]"),
        "bonus token": chi_square_gate("bonus token (all K accepted)", count([o[-1] for o in outs if len(o) == k + 1]),
                                       p_rows[k], level, "after K acceptances sample the bonus from p_rows[K]"),
    }


def verify_chain_scalar_q(p_rows, q_rows, draft_tokens, rng):
    """A wrong verifier, kept as a negative control (notebook 01 asks you to find the bug)."""
    out = []
    for j, x in enumerate(draft_tokens):
        q_x = q_rows[j, x]
        if rng.random() < p_rows[j, x] / q_x:
            out.append(int(x))
            continue
        fix = np.maximum(p_rows[j] - q_x, 0)
        fix = fix / fix.sum() if fix.sum() > 0 else p_rows[j]
        return out + [int(rng.choice(len(fix), p=fix))]
    return out + [int(rng.choice(p_rows.shape[1], p=p_rows[-1]))]


def verify_chain_always_accept(p_rows, q_rows, draft_tokens, rng):
    """A wrong verifier, kept as a negative control (notebook 01 asks you to find the bug)."""
    return [int(x) for x in draft_tokens] + [int(rng.choice(p_rows.shape[1], p=p_rows[-1]))]


NEGATIVE_CONTROLS = {"scalar-q residual": verify_chain_scalar_q, "always accept": verify_chain_always_accept}


def _rejects(verify, name, wrong) -> str:
    """Run ``verify`` on a known-wrong implementation; it must raise CheckFailed."""
    try:
        verify(wrong)
    except CheckFailed as err:
        return f"{name} (caught: {err.args[0].splitlines()[0]})"
    raise RuntimeError(f"the check failed to catch the negative control {name!r}; the check is broken")


def _with_controls(verify, controls: dict):
    """``verify`` followed by the same check on each known-wrong implementation in ``controls``."""
    def verify_with_controls(fn):
        label = "negative controls" if len(controls) > 1 else "negative control"
        return verify(fn) + [f"{label}, same check: " + "; ".join(_rejects(verify, n, f) for n, f in controls.items())]
    return verify_with_controls


def _verify_chain_fn(verify_chain):
    one_hot = np.eye(5)
    p_rows, q_rows = one_hot[[1, 3, 4, 0]], one_hot[[1, 3, 4]]
    rng = np.random.default_rng(7)
    for _ in range(20):
        out = _tokens("p == q, one-hot", call(verify_chain, "p == q, one-hot", p_rows, q_rows, np.array([1, 3, 4]), rng), 3)
        expect_equal("p == q, one-hot", out, [1, 3, 4, 0],
                     "when p == q every draft is accepted (u < 1 always) and the bonus comes from p_rows[K]")
    p_rows = np.array([[0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25]])
    q_rows = np.array([[0, 0, 0.5, 0.5]])
    for _ in range(50):
        out = _tokens("disjoint supports", call(verify_chain, "disjoint supports", p_rows, q_rows, np.array([2]), rng), 1)
        if len(out) != 1 or out[0] not in (0, 1):
            fail("disjoint supports", "p(x) = 0 for the drafted token, so it must be rejected and the correction drawn "
                 "from the residual (= p here)", expected="one token, 0 or 1", got=out)
    p_values = chain_statistics(verify_chain)
    controls = [_rejects(chain_statistics, name, fn) for name, fn in NEGATIVE_CONTROLS.items()]
    return ["p == q accepts all K and adds the bonus; a draft with p(x) = 0 is always rejected",
            f"chi-square tests on {CHAIN_ROUNDS} rounds (vocab 6, K = 2) at level {CHAIN_LEVEL:g} each "
            f"(false alarm < {4 * CHAIN_LEVEL:.2%} for a correct verifier): "
            + ", ".join(f"{k} p = {v:.2g}" for k, v in p_values.items()),
            "negative controls, same test: " + "; ".join(controls)]


def exercise_1b(verify_chain):
    """Check ``verify_chain(p_rows, q_rows, draft_tokens, rng)``: one stochastic verification round."""
    return run_check("1b", verify_chain, speculative.verify_chain, _verify_chain_fn)


def _verify_greedy_fn(verify_greedy):
    rng = np.random.default_rng(11)
    k, vocab = 4, 10
    p_rows = _random_rows(rng, (k + 1, vocab))
    best = p_rows.argmax(-1)
    wrong = (best + 1) % vocab
    cases = {"all K match": (best[:k], list(best)),
             "first draft wrong": (np.r_[wrong[0], best[1:k]], [best[0]]),
             "third draft wrong": (np.r_[best[:2], wrong[2], best[3:k]], [*best[:2], best[2]]),
             "last draft wrong": (np.r_[best[: k - 1], wrong[k - 1]], list(best[:k])),
             "K = 1, match": (best[:1], list(best[:2]))}
    hints = {"all K match": "when all K drafts match, append the bonus argmax of p_rows[K]",
             "first draft wrong": "at the first mismatch emit the target's argmax there, then stop",
             "third draft wrong": "keep the matching prefix, then the target's argmax at the mismatch, then stop",
             "last draft wrong": "a mismatch at the last draft emits argmax p_rows[K-1]; no bonus",
             "K = 1, match": "K = 1: one draft plus the bonus"}
    for case, (draft, expected) in cases.items():
        rows = p_rows[: len(draft) + 1]
        out = _tokens(case, call(verify_greedy, case, rows, np.array(draft)), len(draft))
        expect_equal(case, out, [int(t) for t in expected], hints[case])
    for i in range(300):
        rows = _random_rows(rng, (k + 1, vocab))
        draft = np.where(rng.random(k) < 0.7, rows[:k].argmax(-1), rng.integers(vocab, size=k))
        out = _tokens(f"random case {i}", call(verify_greedy, f"random case {i}", rows, draft), k)
        expect_equal(f"random case {i}", out, [int(t) for t in speculative.verify_greedy(rows, draft)])
    return ["matches on the five hand cases (all match, mismatch first / middle / last, K = 1)",
            "matches the reference on 300 random rounds (vocab 10, K = 4)"]


def exercise_1c(verify_greedy):
    """Check ``verify_greedy(p_rows, draft_tokens)``: the temperature-0 rule."""
    return run_check("1c", verify_greedy, speculative.verify_greedy, _verify_greedy_fn)


# ----------------------------------------------------------------------------- exercise 2: speedup

ALPHAS = np.array([0.0, 0.3, 0.5, 0.6, 0.8, 0.9, 0.99, 1.0])
KS = (1, 2, 3, 4, 5, 8, 16)
COSTS = (0.0, 0.02, 0.1, 0.3)
LEVIATHAN_TABLE_1 = {(0.6, 2): 1.96, (0.7, 3): 2.53, (0.8, 2): 2.44, (0.8, 5): 3.69, (0.9, 2): 2.71, (0.9, 10): 6.86}


def _scalar(case, value) -> float:
    if np.ndim(value) != 0 or not isinstance(value, (int, float, np.number)):
        fail(case, f"expected a single number, got {type(value).__name__}", got=value)
    return float(value)


def _verify_tokens_per_verify(expected_tokens_per_verify):
    got = _scalar("alpha 0.8, K 4", call(expected_tokens_per_verify, "alpha 0.8, K 4", 0.8, 4))
    expected = theory.expected_tokens_per_verify(0.8, 4)  # 3.3616
    if abs(got - expected) > 1e-9:
        one_short = abs(got - theory.expected_tokens_per_verify(0.8, 3)) < 1e-9
        fail("alpha 0.8, K 4", "wrong value", expected, got,
             "E = 1 + α + α² + … + α^K = (1 − α^(K+1))/(1 − α): K drafts can give up to K+1 tokens"
             + (" (your value is (1 − α^K)/(1 − α): one power short)" if one_short else ""))
    for k in KS:
        for alpha in ALPHAS:
            case = f"alpha {alpha:g}, K {k}"
            expect_close(case, _scalar(case, call(expected_tokens_per_verify, case, float(alpha), k)),
                         theory.expected_tokens_per_verify(alpha, k), atol=1e-9,
                         hint="at α = 1 every draft is accepted: K + 1 tokens (avoid dividing 0 by 0)" if alpha == 1 else None)
    case = f"alpha as a numpy array {ALPHAS.tolist()}, K 4"
    got = call(expected_tokens_per_verify, case, ALPHAS.copy(), 4)
    expect_close(case, got, theory.expected_tokens_per_verify(ALPHAS, 4), atol=1e-9,
                 hint="make it work on arrays: numpy arithmetic, np.where instead of if")
    return [f"E(0.8, 4) = {expected:.4f}", f"matches (1 − α^(K+1))/(1 − α) on {len(KS) * len(ALPHAS)} (α, K) pairs, "
            "including α = 0 (1 token) and α = 1 (K + 1 tokens)", "vectorised over an array of α"]


def exercise_2a(expected_tokens_per_verify):
    """Check ``expected_tokens_per_verify(alpha, k)`` = (1 − α^(k+1))/(1 − α)."""
    return run_check("2a", expected_tokens_per_verify, theory.expected_tokens_per_verify, _verify_tokens_per_verify)


def _grid_check(fn, reference, name, hint_for):
    for c in COSTS:
        for k in KS:
            for alpha in ALPHAS:
                case = f"{name}(alpha={alpha:g}, k={k}, c={c:g})"
                expect_close(case, _scalar(case, call(fn, case, float(alpha), k, c)), reference(alpha, k, c),
                             atol=1e-9, hint=hint_for(alpha, k, c))


def _verify_wall_time(wall_time_per_token):
    _grid_check(wall_time_per_token, theory.wall_time_per_token, "wall_time_per_token",
                lambda a, k, c: "one round costs K draft steps (K·c) plus one target pass (1); "
                                "divide by the tokens it yields, E(α, K)")
    return [f"matches (K·c + 1)/E(α, K) on {len(COSTS) * len(KS) * len(ALPHAS)} (α, K, c) points, c from 0 to 0.3"]


def exercise_2b(wall_time_per_token):
    """Check ``wall_time_per_token(alpha, k, c)`` = (k·c + 1)/E, in target forwards."""
    return run_check("2b", wall_time_per_token, theory.wall_time_per_token, _verify_wall_time)


def _verify_speedup(expected_speedup):
    for (alpha, k), paper in LEVIATHAN_TABLE_1.items():
        case = f"Leviathan et al. Table 1: alpha {alpha}, K {k}, c 0"
        got = _scalar(case, call(expected_speedup, case, alpha, k, 0.0))
        if round(got, 2) != paper:
            fail(case, "does not reproduce the paper to two decimals", paper, got,
                 "with a free draft (c = 0) the speedup equals E(α, K)")
    case = "alpha 0.8, K 4: c = 0 vs c = 0.2"
    free, costly = (_scalar(case, call(expected_speedup, case, 0.8, 4, c)) for c in (0.0, 0.2))
    if abs(free - costly) < 1e-12:
        fail(case, "the speedup does not change with the draft cost c", hint="divide E by the round's cost K·c + 1")
    _grid_check(expected_speedup, theory.expected_speedup, "expected_speedup",
                lambda a, k, c: "speedup = E(α, K)/(K·c + 1) (Leviathan et al. Thm 3.8)")
    return [f"reproduces Leviathan et al. Table 1 (c = 0) to two decimals: {len(LEVIATHAN_TABLE_1)} entries",
            f"matches E/(K·c + 1) on {len(COSTS) * len(KS) * len(ALPHAS)} (α, K, c) points, and depends on c"]


def exercise_2c(expected_speedup):
    """Check ``expected_speedup(alpha, k, c)`` = E/(k·c + 1)."""
    return run_check("2c", expected_speedup, theory.expected_speedup, _verify_speedup)


def _verify_optimal_k(optimal_k):
    checked = 0
    for c in (0.01, 0.05, 0.1, 0.3):
        for alpha in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
            case = f"optimal_k(alpha={alpha}, c={c})"
            got = call(optimal_k, case, alpha, c)
            best = 1 + int(np.argmax([theory.expected_speedup(alpha, k, c) for k in range(1, 33)]))
            if not isinstance(got, (int, np.integer)):
                fail(case, f"expected an integer K, got {type(got).__name__}", best, got)
            if got != best:
                fail(case, "not the K with the largest speedup", best, got,
                     "K counts from 1: the best K is argmax + 1 over K = 1..k_max"
                     if got == best - 1 else "maximise expected_speedup(α, K, c) over K = 1..k_max, not E")
            checked += 1
    case = "optimal_k(alpha=0.9, c=0, k_max=5)"
    expect_equal(case, call(optimal_k, case, 0.9, 0.0, k_max=5), 5,
                 "with a free draft more K always helps, so the answer is k_max; respect the k_max argument")
    case = "optimal_k(alpha=0.9, c=0.05, k_max=3)"
    expect_equal(case, call(optimal_k, case, 0.9, 0.05, k_max=3), 3, "search only K = 1..k_max")
    return [f"matches brute force over K = 1..32 on {checked} (α, c) pairs", "respects k_max"]


def exercise_2d(optimal_k):
    """Check ``optimal_k(alpha, c, k_max=32)``: the integer K ≥ 1 with the largest speedup."""
    return run_check("2d", optimal_k, theory.optimal_k, _verify_optimal_k)


# ----------------------------------------------------------------------------- exercise 3: distil a draft
# (appended by the notebook-3 helper; uses the framework above, the lead's train.py and distill.py)


class _TableModel:
    """Order-1 toy language model with a fixed next-token table; follows ``logits(tokens)``."""

    def __init__(self, table):
        self.table = np.asarray(table, dtype=np.float64)

    def logits(self, tokens):
        return np.log(self.table[np.asarray(tokens)])


def _loss_cases():
    import torch

    gen = torch.Generator().manual_seed(301)
    student = torch.randn(2, 5, 11, generator=gen)
    teacher = 2.5 * torch.randn(2, 5, 11, generator=gen)  # sharper than the student, so KL is asymmetric
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    return [(f"kind={kind!r}, T={t:g}", kind, t, student, teacher, labels)
            for kind in ("ce", "fkl", "tvd") for t in (1.0, 0.5, 2.0)]


LOSS_HINTS = {
    "ce": "cross-entropy of the student's logits on the labels: F.cross_entropy(student / T, labels), averaged over positions",
    "fkl": "forward KL(p || q) = Σ p (log p − log q) with p = softmax(teacher / T), q = softmax(student / T), "
           "mean over positions",
    "tvd": "total variation ½ Σ |p − q| with both distributions tempered, mean over positions",
}


def _verify_distillation_loss(distillation_loss):
    import torch

    from . import train

    for case, kind, t, student, teacher, labels in _loss_cases():
        s = student.clone().requires_grad_(True)
        got = call(distillation_loss, case, s, teacher.clone(), kind, labels=labels, temperature=t)
        if not isinstance(got, torch.Tensor) or got.ndim != 0:
            fail(case, "expected a scalar torch tensor (the mean loss), so that .backward() works", got=repr(got)[:80])
        expected = train.distillation_loss(student, teacher, kind, labels=labels, temperature=t)
        hint = LOSS_HINTS[kind]
        if kind == "fkl":
            swapped = train.distillation_loss(teacher, student, "fkl", temperature=t)  # KL(q || p)
            if abs(got.item() - swapped.item()) < 1e-5:
                hint = "that is KL(q || p): the arguments are swapped. Forward KL puts the teacher's p in front: Σ p log(p/q)"
        if kind == "tvd" and abs(got.item() - 2 * expected.item()) < 1e-5:
            hint = "that is twice the answer: TV = ½ Σ |p − q| (without the ½, 1 − TV is no longer α)"
        expect_close(case, got.item(), expected.item(), atol=1e-5, hint=hint)
        if got.grad_fn is None:
            fail(case, "the loss is not connected to the student's logits (no gradient would flow)",
                 hint="compute it with torch operations on student_logits; no .detach(), .item() or numpy inside")
        (grad,) = torch.autograd.grad(got, s)
        s_ref = student.clone().requires_grad_(True)
        (grad_ref,) = torch.autograd.grad(train.distillation_loss(s_ref, teacher, kind, labels=labels, temperature=t), s_ref)
        expect_close(case + ", gradient", grad.numpy(), grad_ref.numpy(), atol=1e-5, hint=hint)
    return [f"matches the reference value and gradient for ce, fkl and tvd at T = 0.5, 1, 2 ({len(_loss_cases())} cases)"]


def _loss_swapped_kl(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Negative control: KL(q || p), the arguments of forward KL swapped."""
    from . import train

    if kind == "fkl":
        return train.distillation_loss(teacher_logits, student_logits, "fkl", temperature=temperature)
    return train.distillation_loss(student_logits, teacher_logits, kind, labels, temperature)


def _loss_tv_without_half(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Negative control: Σ |p − q| without the ½."""
    from . import train

    scale = 2.0 if kind == "tvd" else 1.0
    return scale * train.distillation_loss(student_logits, teacher_logits, kind, labels, temperature)


def _loss_teacher_untempered(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Negative control: only the student is divided by T."""
    from . import train

    if kind == "ce":
        return train.distillation_loss(student_logits, teacher_logits, kind, labels, temperature)
    return train.distillation_loss(student_logits, teacher_logits * temperature, kind, labels, temperature)


_verify_distillation_loss_with_controls = _with_controls(_verify_distillation_loss, {
    "KL with the arguments swapped": _loss_swapped_kl, "TV without the ½": _loss_tv_without_half,
    "teacher not tempered": _loss_teacher_untempered})


def exercise_3a(distillation_loss):
    """Check ``distillation_loss(student_logits, teacher_logits, kind, labels=None, temperature=1.0)``."""
    from . import train

    return run_check("3a", distillation_loss, train.distillation_loss, _verify_distillation_loss_with_controls)


def _alpha_cases():
    rng = np.random.default_rng(302)
    vocab = 9
    table = rng.dirichlet(np.full(vocab, 0.5), size=vocab)
    noisy = 0.6 * table + 0.4 * rng.dirichlet(np.full(vocab, 0.5), size=vocab)  # agrees on some rows only
    tokens = rng.integers(0, vocab, 120)
    target, draft = _TableModel(table), _TableModel(noisy)
    return [(f"toy order-1 models (vocab {vocab}), T={t:g}", target, draft, tokens, t) for t in (1.0, 0.0, 0.5, 2.0)] + [
        ("draft == target, T=1", target, _TableModel(table), tokens, 1.0)]


def _verify_measure_alpha(measure_alpha):
    from . import distill

    for case, target, draft, tokens, t in _alpha_cases():
        out = call(measure_alpha, case, target, draft, tokens.copy(), t)
        if not (isinstance(out, tuple) and len(out) == 2):
            fail(case, "expected a pair (mean alpha, per-position alpha)", got=repr(out)[:80])
        mean, per_position = out
        _, expected = distill.measure_alpha(target, draft, tokens, t)
        p = sampling.softmax(target.logits(tokens[:-1]), t)
        q = sampling.softmax(draft.logits(tokens[:-1]), t)
        hint = ("α at one position is Σ_x min(p(x), q(x)) = 1 − TV(p, q), with p and q the tempered distributions"
                if t > 0 else "at T = 0 both distributions are one-hot on their argmax, so α is [argmax p == argmax q]")
        got = np.asarray(per_position, dtype=float)
        if got.shape == expected.shape:
            if t > 0 and np.allclose(got, p.argmax(-1) == q.argmax(-1)):
                hint = "that is the greedy agreement rate; at T > 0 the draft samples, and α = Σ min(p, q)"
            elif np.allclose(got, 1 - np.abs(p - q).sum(-1)):
                hint = "that is 1 − Σ|p − q|: total variation has a ½ in front"
        expect_close(case + ", per-position alpha", got, expected, atol=1e-9, hint=hint)
        expect_close(case + ", mean alpha", _scalar(case, mean), expected.mean(), atol=1e-9)
    return [f"per-position and mean α match Σ min(p, q) on {len(_alpha_cases())} cases: T = 0 (greedy agreement), "
            "0.5, 1, 2, and α = 1 when draft == target"]


def _alpha_argmax_at_any_t(target, draft, tokens, temperature):
    """Negative control: greedy agreement used as α at every temperature."""
    from . import distill

    return distill.measure_alpha(target, draft, tokens, 0.0)


def _alpha_tv_without_half(target, draft, tokens, temperature):
    """Negative control: α = 1 − Σ|p − q|."""
    p = sampling.softmax(target.logits(tokens)[:-1], temperature)
    q = sampling.softmax(draft.logits(tokens)[:-1], temperature)
    alpha = 1 - np.abs(p - q).sum(-1)
    return float(alpha.mean()), alpha


_verify_measure_alpha_with_controls = _with_controls(_verify_measure_alpha, {
    "argmax agreement used as α at T = 1": _alpha_argmax_at_any_t, "TV without the ½": _alpha_tv_without_half})


def exercise_3b(measure_alpha):
    """Check ``measure_alpha(target, draft, tokens, temperature) -> (mean, per_position)``."""
    from . import distill

    return run_check("3b", measure_alpha, distill.measure_alpha, _verify_measure_alpha_with_controls)


STEP_STEPS = 12  # optimizer steps on one fixed batch; a working step lowers the loss a lot in this many


def _step_setup(kind):
    import torch

    from .models import GPT, GPTConfig

    config = GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32)
    torch.manual_seed(303)
    student, teacher = GPT(config), GPT(config).eval()
    with torch.no_grad():
        teacher.wte.weight.mul_(20.0)  # a confident teacher: KL and TV to it are far from 0
    gen = torch.Generator().manual_seed(304)
    x = torch.randint(0, 64, (4, 16), generator=gen)
    y = torch.randint(0, 64, (4, 16), generator=gen)
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-2)
    return student, teacher, optimizer, x, y


def _verify_train_step(train_step):
    import torch

    from . import train

    verified = []
    for kind in ("ce", "fkl", "tvd"):
        case = f"kind={kind!r}, {STEP_STEPS} steps on one batch"
        student, teacher, optimizer, x, y = _step_setup(kind)
        teacher_before = [p.detach().clone() for p in teacher.parameters()]
        with torch.no_grad():
            start = train.distillation_loss(student(x), teacher(x), kind, labels=y).item()
        student.train()
        losses = [call(train_step, case, student, optimizer, x, y, teacher=teacher, kind=kind) for _ in range(STEP_STEPS)]
        if not all(isinstance(v, float) for v in losses):
            fail(case, "train_step must return the loss as a Python float (loss.item())", got=repr(losses[0])[:80])
        # bf16 autocast (used by lessonlib on CPUs that support it) moves the value by < 3 %
        if abs(losses[0] - start) > 0.03 * abs(start) + 1e-3:
            fail(case, "the first returned loss is not the distillation loss of this kind before the update", start,
                 losses[0], f"compute distillation_loss(student(x), teacher(x), kind={kind!r}, labels=y) and return its .item()")
        with torch.no_grad():
            end = train.distillation_loss(student(x), teacher(x), kind, labels=y).item()
        if not end < 0.7 * start:
            fail(case, f"the loss did not fall (from {start:.4f} to {end:.4f}; expected below {0.7 * start:.4f})",
                 hint="optimizer.zero_grad(), loss.backward(), optimizer.step() — in that order, every call")
        if any(not torch.equal(a, b) for a, b in zip(teacher_before, teacher.parameters())):
            fail(case, "the teacher's weights changed", hint="only the student is trained: run the teacher under torch.no_grad()")
        if any(p.grad is not None for p in teacher.parameters()):
            fail(case, "gradients reached the teacher", hint="run the teacher's forward under torch.no_grad()")
        verified.append(f"{kind} {start:.3f} → {end:.3f}")
    return [f"returns the loss of the right kind, lowers it in {STEP_STEPS} steps on a fixed batch ("
            + ", ".join(verified) + "), and leaves the teacher untouched"]


def _step_no_update(model, optimizer, x, y, teacher=None, kind="ce"):
    """Negative control: computes the loss but never steps the optimizer."""
    import torch

    from . import train

    with torch.no_grad():
        t = teacher(x) if teacher is not None else None
    return train.distillation_loss(model(x), t, kind, labels=y).item()


def _step_always_ce(model, optimizer, x, y, teacher=None, kind="ce"):
    """Negative control: ignores ``kind`` and trains on the labels."""
    from . import train

    return train.train_step(model, optimizer, x, y, teacher=None, kind="ce")


_verify_train_step_with_controls = _with_controls(_verify_train_step, {
    "no optimizer step": _step_no_update, "always cross-entropy": _step_always_ce})


def exercise_3c(train_step):
    """Check ``train_step(model, optimizer, x, y, teacher=None, kind="ce") -> float`` (``train.fit``'s step_fn)."""
    from . import train

    return run_check("3c", train_step, train.train_step, _verify_train_step_with_controls)


def _theory_best_loss():
    """The loss whose minimum is the maximum of α on the training distribution: α = 1 − TV."""
    return "tvd"


def _verify_best_loss(predicted_best_loss):
    got = call(predicted_best_loss, "which loss")
    if got not in ("ce", "fkl", "tvd"):
        fail("which loss", "answer with one of 'ce', 'fkl', 'tvd'", got=got)
    hints = {"fkl": "forward KL is only an upper bound on α's shortfall (Pinsker: TV ≤ √(KL/2)); "
                    "which loss is 1 − α itself?",
             "ce": "cross-entropy fits the data's next tokens, not the target's distribution p that α compares with"}
    expect_equal("which loss", got, "tvd", hints.get(got))
    return ["'tvd': minimising the mean TV maximises the mean α = 1 − TV on the training text"]


def exercise_3d(predicted_best_loss):
    """Check ``predicted_best_loss() -> str``: the loss that theory says maximises α."""
    return run_check("3d", predicted_best_loss, _theory_best_loss, _verify_best_loss)


# ----------------------------------------------------------------------------- exercise 5: high temperature, fallback

def _breakeven_cases():
    rng = np.random.default_rng(5)
    cases = [("alpha falls through c", [0.0, 1.0, 2.0], [0.9, 0.5, 0.05], 0.1, None),
             ("never breaks even in range", [0.0, 1.0, 2.0], [0.9, 0.8, 0.7], 0.1, None),
             ("already below at the first T", [0.0, 1.0, 2.0], [0.05, 0.9, 0.9], 0.1, None),
             ("non-monotone curve: the first crossing", [0.0, 1.0, 2.0, 3.0], [0.9, 0.0, 0.9, 0.0], 0.45, None),
             ("fixed K = 4", [0.0, 1.0, 2.0], [0.9, 0.5, 0.05], 0.1, 4)]
    for i in range(20):
        t = np.cumsum(rng.uniform(0.1, 0.6, 9)) - 0.1
        a = np.sort(rng.uniform(0, 1, 9))[::-1]
        cases.append((f"random falling curve #{i}", t.tolist(), a.tolist(), float(rng.uniform(0.02, 0.4)),
                      None if i % 2 else int(rng.integers(1, 8))))
    return cases


def _verify_breakeven_temperature(breakeven_temperature):
    from . import fallback

    for case, t, a, c, k in _breakeven_cases():
        args = (t, a, c) if k is None else (t, a, c, k)
        got = _scalar(case, call(breakeven_temperature, case, *args))
        want = fallback.breakeven_temperature(*args)
        if np.isinf(want) or np.isinf(got):
            expect_equal(case, got, want, "return float('inf') when α(T) stays above the break-even α everywhere")
        else:
            expect_close(case, got, want, atol=1e-9,
                         hint="with k=None the best K breaks even exactly at α = c (notebook 2, Cor. 3.9); "
                              "with k given, at theory.breakeven_alpha(k, c). Interpolate α linearly between "
                              "the two measured temperatures around the first crossing")
    for case, args in [("lengths differ", ([0.0, 1.0, 2.0], [0.5, 0.4], 0.1)),
                       ("temperatures not increasing", ([1.0, 0.0], [0.5, 0.4], 0.1)),
                       ("alpha above 1", ([0.0, 1.0], [0.5, 1.4], 0.1))]:
        try:
            breakeven_temperature(*args)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as err:
            fail(case, f"raised {type(err).__name__}, expected ValueError naming the argument")
        fail(case, "accepted bad input; raise ValueError naming the argument and what was expected")
    return [f"matches the definition on {len(_breakeven_cases())} curves (first crossing, interpolated, "
            "best K or a given K, inf when it never breaks even)", "rejects bad input with ValueError"]


def _breakeven_fixed_k(t, a, c, k=None):
    """Negative control: uses K = 4's break-even even when asked for the best K."""
    from . import fallback

    return fallback.breakeven_temperature(t, a, c, 4 if k is None else k)


def _breakeven_last_crossing(t, a, c, k=None):
    """Negative control: the last crossing instead of the first."""
    from . import fallback

    t, a = np.asarray(t, float), np.asarray(a, float)
    fallback.breakeven_temperature(t, a, c, k)  # same input validation
    a_star = theory.breakeven_alpha(1 if k is None else k, c)
    above = np.flatnonzero(a > a_star)
    if len(above) == 0:
        return float(t[0])
    i = int(above[-1])
    if i == len(t) - 1:
        return float("inf")
    return float(t[i] + (a[i] - a_star) / (a[i] - a[i + 1]) * (t[i + 1] - t[i]))


def _breakeven_nearest(t, a, c, k=None):
    """Negative control: the first measured temperature below break-even, no interpolation."""
    from . import fallback

    exact = fallback.breakeven_temperature(t, a, c, k)
    return exact if np.isinf(exact) else float(min(x for x in t if x >= exact))


_verify_breakeven_with_controls = _with_controls(_verify_breakeven_temperature, {
    "fixed K = 4 instead of the best K": _breakeven_fixed_k, "last crossing": _breakeven_last_crossing,
    "no interpolation": _breakeven_nearest})


def exercise_5a(breakeven_temperature):
    """Check ``breakeven_temperature(temperatures, alphas, c, k=None)``."""
    from . import fallback

    return run_check("5a", breakeven_temperature, fallback.breakeven_temperature, _verify_breakeven_with_controls)


POLICY_K, POLICY_C = 4, 0.1  # S(alpha) = E(alpha, 4) / 1.4: 1.65 at alpha 0.6, 0.75 at alpha 0.05


def _mode_changes(trace):
    on = trace["action"] == "speculate"
    return int(np.count_nonzero(on[1:] != on[:-1]))


def _verify_policy(policy_class):
    from . import fallback

    def run(alphas, seed):
        policy = call(policy_class, "constructing the policy", POLICY_K, POLICY_C)
        try:
            return fallback.simulate_stream(alphas, policy, POLICY_K, POLICY_C, np.random.default_rng(seed))
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as err:
            raise CheckFailed(f"case 'running the policy on a stream': {type(err).__name__}: {err}") from err

    for seed in (0, 1):
        trace = run(np.full(4000, 0.6), seed)
        if _mode_changes(trace) or not (trace["action"] == "speculate").all():
            fail(f"steady alpha 0.6 (speedup 1.65), seed {seed}", "left speculation although it clearly pays",
                 "speculate throughout", f"{_mode_changes(trace)} switches",
                 "estimate α over a window of rounds (accepted / (accepted + rejected)) and switch off only "
                 "below the off threshold, once the window holds enough rounds")
        trace = run(np.full(4000, 0.05), seed)
        late = trace["position"] >= 200
        plain_share = trace["tokens"][late & (trace["action"] != "speculate")].sum() / trace["tokens"][late].sum()
        if plain_share < 0.9 or _mode_changes(trace) > 3:
            fail(f"steady alpha 0.05 (speedup 0.75), seed {seed}", "does not settle on plain decoding",
                 "≥ 90% of tokens after the first 200 decoded plainly, ≤ 3 switches",
                 f"{plain_share:.0%} plainly, {_mode_changes(trace)} switches",
                 "switch on again only when the probes predict a speedup ≥ on_above (> off_below: hysteresis)")
    n = 1500
    alphas = np.r_[np.full(n, 0.8), np.full(n, 0.05), np.full(n, 0.8)]
    bounds = [0, n, 2 * n, 3 * n]
    tps = {name: fallback.throughput_by_phase(fallback.simulate_stream(
        alphas, p, POLICY_K, POLICY_C, np.random.default_rng(7)), bounds)
        for name, p in [("always", fallback.AlwaysSpeculate()), ("never", fallback.NeverSpeculate())]}
    policy = fallback.throughput_by_phase(run(alphas, 7), bounds)
    better = np.maximum(tps["always"], tps["never"])
    if np.any(policy < 0.9 * better):
        fail("alpha 0.8 → 0.05 → 0.8, 1500 tokens each", "not within 10% of the better baseline in every phase",
             0.9 * better, policy, "after switching off, probe every probe_every plain tokens so a recovery is seen")
    return ["speculates throughout at α 0.6 (2 seeds × 4000 tokens)", "settles on plain decoding at α 0.05",
            f"within 10% of the better of always/never in each phase of a 0.8 → 0.05 → 0.8 stream "
            f"(policy/better: {np.round(policy / better, 2).tolist()})"]


class _FlappyPolicy:
    """Negative control: decides on the last 2 rounds, no hysteresis."""

    def __init__(self, k, c):
        from . import fallback

        self.inner = fallback.FallbackPolicy(k, c, window=2, min_rounds=2, probe_window=1,
                                             on_above=1.0 + 1e-9, probe_every=1)
        self.action, self.record, self.record_plain = self.inner.action, self.inner.record, self.inner.record_plain


class _NeverProbes:
    """Negative control: switches off correctly but never probes, so never recovers."""

    def __init__(self, k, c):
        from . import fallback

        self.inner = fallback.FallbackPolicy(k, c, probe_every=10 ** 9)
        self.action, self.record, self.record_plain = self.inner.action, self.inner.record, self.inner.record_plain


_verify_policy_with_controls = _with_controls(_verify_policy, {
    "no hysteresis, 2-round window": _FlappyPolicy, "never probes": _NeverProbes})


def exercise_5b(policy_class):
    """Check a fallback policy class: ``policy_class(k, c)`` with ``action()``, ``record(accepted,
    drafted)`` and ``record_plain(n)``, on synthetic streams (``fallback.simulate_stream``)."""
    from . import fallback

    return run_check("5b", policy_class, fallback.FallbackPolicy, _verify_policy_with_controls)


def _verify_throughput_by_phase(throughput_by_phase):
    from . import fallback

    trace = {"position": np.array([0, 3, 5, 6]), "tokens": np.array([3, 2, 1, 4]), "seconds": np.array([1.0, 1.0, 1.0, 2.0])}
    case = "4 steps: positions 0, 3, 5, 6; boundaries [0, 5, 10]"
    expect_close(case, call(throughput_by_phase, case, trace, [0, 5, 10]), [5 / 2, 5 / 3], atol=1e-12,
                 hint="a step belongs to the phase its first token is in (the step at position 3 emits tokens 3 and "
                      "4, both in phase 0); tokens/s = sum of tokens / sum of seconds of the steps in the phase")
    rng = np.random.default_rng(11)
    for i in range(5):
        tokens = rng.integers(1, 6, 60)
        trace = {"position": np.concatenate([[0], np.cumsum(tokens)[:-1]]), "tokens": tokens,
                 "seconds": rng.uniform(0.5, 2.0, 60)}
        end = int(tokens.sum())
        bounds = [0, end // 3, 2 * end // 3, end]
        case = f"random trace #{i}"
        expect_close(case, call(throughput_by_phase, case, trace, bounds), fallback.throughput_by_phase(trace, bounds),
                     atol=1e-9)
    return ["attributes each step to the phase it starts in", "matches the reference on 5 random traces"]


def _throughput_mean_of_rates(trace, boundaries):
    """Negative control: averages per-step rates instead of dividing total tokens by total time."""
    b = np.asarray(boundaries)
    phase = np.searchsorted(b, trace["position"], side="right") - 1
    rate = trace["tokens"] / trace["seconds"]
    return np.array([rate[phase == i].mean() for i in range(len(b) - 1)])


_verify_throughput_with_controls = _with_controls(_verify_throughput_by_phase, {
    "mean of per-step rates": _throughput_mean_of_rates})


def exercise_5c(throughput_by_phase):
    """Check ``throughput_by_phase(trace, boundaries)`` -> tokens per second in each phase."""
    from . import fallback

    return run_check("5c", throughput_by_phase, fallback.throughput_by_phase, _verify_throughput_with_controls)


# ----------------------------------------------------------------------------- exercise 4: EAGLE trees


def _random_tree(rng, n):
    return np.array([rng.integers(-1, i) for i in range(n)], dtype=np.int64)


def _verify_tree_mask(build_tree_mask):
    from . import tree

    cases = {"the lesson's tree (root -> a, b; a -> c, d; b -> e, f)": np.array([-1, -1, 0, 0, 1, 1]),
             "a chain of 4": np.array([-1, 0, 1, 2]), "one node": np.array([-1])}
    rng = np.random.default_rng(40)
    cases.update({f"random tree #{i} ({n} nodes)": _random_tree(rng, n) for i, n in enumerate((7, 15, 30))})
    for case, parents in cases.items():
        got = np.asarray(call(build_tree_mask, case, parents))
        if got.shape != (len(parents), len(parents)):
            fail(case, f"the mask must be (N, N) = {(len(parents),) * 2}, got shape {got.shape}")
        expect_equal(case, got.astype(bool).tolist(), tree.tree_attention_mask(parents).tolist(),
                     hint="mask[i, j] is True iff j == i or j is an ancestor of i (walk up parents[] until -1)")
    return ["matches the ancestor rule on the lesson's tree, a chain, one node and 3 random trees"]


def _mask_parent_only(parents):
    """Negative control: each node sees itself and its parent, not the grandparents."""
    parents = np.asarray(parents)
    mask = np.eye(len(parents), dtype=bool)
    mask[np.arange(len(parents))[parents >= 0], parents[parents >= 0]] = True
    return mask


def exercise_4a(build_tree_mask):
    """Check ``build_tree_mask(parents)`` -> bool (N, N), mask[i, j] iff j is i or an ancestor."""
    from . import tree

    verify = _with_controls(_verify_tree_mask, {"parent only": _mask_parent_only})
    return run_check("4a", build_tree_mask, tree.tree_attention_mask, verify)


def markov_expand(table, context_token=0):
    """A toy draft for the tree checks: log q(next | node) = log table[token of the node]."""
    def expand(parents, tokens, nodes):
        nodes = np.asarray(nodes)
        last = np.full(len(nodes), context_token)
        last[nodes >= 0] = np.asarray(tokens)[nodes[nodes >= 0]]
        return np.log(table[last])
    return expand


def _verify_topk_tree(draft_topk_tree):
    from . import tree

    rng = np.random.default_rng(41)
    for i, branching in enumerate([(3,), (3, 2, 2), (2, 2, 2, 1), (4, 1, 1)]):
        table = rng.dirichlet(np.full(12, 0.4), size=12)
        case = f"branching {branching}, random 12-token draft #{i}"
        got = call(draft_topk_tree, case, markov_expand(table), branching)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(case, "return (parents, tokens)", got=type(got).__name__)
        parents, tokens = (np.asarray(x) for x in got)
        want_parents, want_tokens, _ = tree.draft_topk(markov_expand(table), branching)
        expect_equal(case + ": parents", parents.tolist(), want_parents.tolist(),
                     hint="nodes depth by depth; under each node of the previous depth, its children in rank order")
        expect_equal(case + ": tokens", tokens.tolist(), want_tokens.tolist(),
                     hint="a node's r-th child carries the r-th most likely token of the draft at that node")
    return ["parents and tokens match the reference for 4 branchings (3; 3-2-2; 2-2-2-1; 4-1-1)"]


def _topk_sampled(expand, branching):
    """Negative control: samples the children from q instead of taking the top-k."""
    from . import tree

    rng = np.random.default_rng(0)
    parents, tokens, _ = tree.draft_topk(expand, branching)
    logq = expand(parents, tokens, np.concatenate([[-1], np.arange(len(parents))]))
    p = np.exp(logq[parents + 1])
    return parents, np.array([rng.choice(len(r), p=r / r.sum()) for r in p])


def exercise_4b(draft_topk_tree):
    """Check ``draft_topk_tree(expand, branching)`` -> (parents, tokens) on toy drafts."""
    from . import tree

    def reference(expand, branching):
        return tree.draft_topk(expand, branching)[:2]

    verify = _with_controls(_verify_topk_tree, {"sampled children": _topk_sampled})
    return run_check("4b", draft_topk_tree, reference, verify)


def _verify_greedy_tree(verify_tree_greedy):
    from . import tree

    rng = np.random.default_rng(42)
    parents = np.array([-1, -1, 0, 0, 1, 1])
    tokens = np.array([7, 3, 5, 2, 2, 9])
    cases = {"lesson tree, b -> f accepted, bonus 8": (parents, tokens, np.array([3, 4, 9, 4, 4, 4, 8])),
             "lesson tree, nothing accepted": (parents, tokens, np.array([1, 4, 4, 4, 4, 4, 4])),
             "lesson tree, a -> d accepted, bonus 8": (parents, tokens, np.array([7, 2, 4, 4, 8, 4, 4]))}
    for i in range(6):
        p = _random_tree(rng, 20)
        t = rng.integers(0, 3, 20)
        cases[f"random tree #{i}, 3-token vocabulary"] = (p, t, rng.integers(0, 3, 21))
    for case, (p, t, argmax) in cases.items():
        got = call(verify_tree_greedy, case, p, t, argmax)
        if not (isinstance(got, tuple) and len(got) == 2):
            fail(case, "return (path, emitted)", got=type(got).__name__)
        want = tree.verify_tree_greedy(p, t, argmax)
        expect_equal(case + ": path", [int(x) for x in got[0]], want[0],
                     hint="a node is accepted iff it and all its ancestors equal the target's argmax at their parent "
                          "(target_argmax[parent + 1]); keep the deepest (the first one on a tie)")
        expect_equal(case + ": emitted", [int(x) for x in got[1]], want[1],
                     hint="the path's tokens, then the bonus: target_argmax[last accepted node + 1] (row 0 if none)")
    return ["longest accepted path and bonus token match on the lesson's tree (3 cases) and 6 random trees"]


def _greedy_first_child(parents, tokens, target_argmax):
    """Negative control: follows only the first child at each node (a chain, not a tree)."""
    node, path = -1, []
    while True:
        kids = np.flatnonzero(np.asarray(parents) == node)
        if not len(kids) or tokens[kids[0]] != target_argmax[node + 1]:
            return path, [int(tokens[i]) for i in path] + [int(target_argmax[node + 1])]
        node = int(kids[0])
        path.append(node)


def exercise_4c(verify_tree_greedy):
    """Check ``verify_tree_greedy(parents, tokens, target_argmax)`` -> (path, emitted)."""
    from . import tree

    verify = _with_controls(_verify_greedy_tree, {"first child only": _greedy_first_child})
    return run_check("4c", verify_tree_greedy, tree.verify_tree_greedy, verify)


TREE_ROUNDS, TREE_LEVEL = 5000, 1e-3


def _verify_sampled_tree(verify_tree_sampled, rounds=TREE_ROUNDS):
    from . import tree

    rng = np.random.default_rng(43)
    parents, tokens = np.array([-1, -1, -1, 0, 0, 1]), np.array([0, 1, 2, 1, 3, 0])
    p_rows = rng.dirichlet(np.full(4, 1.5), size=len(parents) + 1)
    exact = tree.tree_output_distribution(parents, tokens, p_rows)
    keys = sorted(exact)
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys) + 1)  # last bin: an output the rule can never emit
    sample_rng = np.random.default_rng(44)
    case = f"{rounds} rounds on a 6-node tree over 4 tokens"
    for _ in range(rounds):
        got = call(verify_tree_sampled, case, parents, tokens, p_rows, sample_rng)
        counts[index.get(tuple(int(x) for x in got[1]), len(keys))] += 1
    chi_square_gate(case, counts, [exact[k] for k in keys] + [0.0], TREE_LEVEL,
                    hint="try the children in order: accept child c with probability p(c); on rejection set p(c) = 0 "
                         "and renormalise before the next child; if all fail, sample from what is left")
    return [f"the emitted sequences follow the exact enumeration (chi-square, {rounds} rounds, false alarm {TREE_LEVEL:g})"]


def _sampled_no_renormalise(parents, tokens, p_rows, rng):
    """Negative control: tries each sibling with the original p (no zeroing/renormalising)."""
    parents, node, path = np.asarray(parents), -1, []
    while True:
        p = np.asarray(p_rows[node + 1], dtype=float)
        for c in np.flatnonzero(parents == node):
            if rng.random() < p[tokens[c]]:
                path.append(int(c))
                break
        else:
            rest = p.copy()
            rest[tokens[parents == node]] = 0
            return path, [int(tokens[i]) for i in path] + [int(rng.choice(len(p), p=rest / rest.sum()))]
        node = path[-1]


def exercise_4d(verify_tree_sampled):
    """Check ``verify_tree_sampled(parents, tokens, p_rows, rng)`` -> (path, emitted) in distribution."""
    from . import tree

    verify = _with_controls(_verify_sampled_tree, {"no renormalisation": _sampled_no_renormalise})
    return run_check("4d", verify_tree_sampled, tree.verify_tree, verify)
