"""Checks for notebook 1, the exact rule: 1a residual, 1b one verification round, 1c the greedy rule (1d, the
detector, is in ``ex1_detect``)."""
from __future__ import annotations

import numpy as np

from lessonlib.core import chain, sampling
from lessonlib.course.checks import numeric, wrong
from lessonlib.course.checks.cases import emitted_tokens, random_rows, seeded
from lessonlib.course.checks.framework import (
    call,
    chi_square_gate,
    expect_close,
    expect_equal,
    fail,
    numbers,
    rejects,
    run_check,
    with_controls,
)
from lessonlib.course.messages import N_, _, say, translated

# ----------------------------------------------------------------------------- 1a residual

ZERO_MASS = N_("max(p - q, 0) sums to 0 here; the contract says return p in that case")
RESIDUAL = N_("residual = max(p - q, 0) / sum(max(p - q, 0)): subtract the whole q vector, then normalise")


TINY = N_("a small but non-zero max(p - q, 0) is still a residual: normalise it (return p only when the sum is "
        "0 — a guard like np.isclose(mass, 0) is fine, a threshold like 1e-3 is not — and divide by "
        "sum(max(p - q, 0)) itself, not by 1 - sum(min(p, q)))")


def _equal_pair(rng, below: bool):
    """p == q with a float sum just below (or above) 1: 1 - sum(min(p, q)) is then not 0."""
    while True:
        p = rng.dirichlet(np.ones(8))
        if (p.sum() < 1) if below else (p.sum() > 1):
            return p


def _tiny(p, mass):
    """q = p moved by ``mass`` onto token 0 from tokens 1 and 2: the residual has mass ``mass``."""
    q = p.copy()
    q[0] += mass
    q[[1, 2]] -= mass / 2
    return q


def _residual_cases():
    rng = np.random.default_rng(101)
    p, q = random_rows(rng, (2, 8))
    one_hot = np.eye(8)
    zero_q = q.copy()
    zero_q[[1, 4]] = 0.0
    zero_q /= zero_q.sum()
    below, above = _equal_pair(rng, True), _equal_pair(rng, False)
    return [
        (N_("random p and q (vocab 8)"), p, q, RESIDUAL),
        (N_("q is 0 where p is not"), p, zero_q, RESIDUAL),
        (N_("p == q (no residual mass)"), p, p.copy(), ZERO_MASS),
        (say("p == q, p summing to 1 - {gap:.1g} in floating point", gap=1 - below.sum()), below, below.copy(),
         ZERO_MASS),
        (say("p == q, p summing to 1 + {gap:.1g} in floating point", gap=above.sum() - 1), above, above.copy(),
         ZERO_MASS),
        (say("residual mass {mass}", mass="0.002"), p, _tiny(p, 2e-3), TINY),
        (say("residual mass {mass}", mass="1e-05"), p, _tiny(p, 1e-5), TINY),
        (say("residual mass {mass}", mass="1e-07"), p, _tiny(p, 1e-7), TINY),
        (N_("disjoint supports"), np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.25, 0.75]), RESIDUAL),
        (N_("one-hot p"), one_hot[3], q, RESIDUAL),
        (N_("one-hot q"), p, one_hot[5], RESIDUAL),
        (N_("one-hot p == one-hot q"), one_hot[2], one_hot[2].copy(), ZERO_MASS),
    ]


PRECISION = {None: 1e-12, "float32": 4e-7, "float16": 1e-3, "bfloat16": 8e-3}  # rounding of p - q in each precision


def _tolerance(dtype, p, q) -> float:
    """The rounding of p - q, divided by the residual's mass: 1e-12 / mass for float64 (4e-7 / mass for a
    float32 answer), so that a tiny residual mass gets a tolerance it can meet."""
    mass = float(np.maximum(p - q, 0).sum())
    return PRECISION.get(dtype, 1e-12) / (mass if 0 < mass < 1 else 1.0)


def _verify_residual(residual):
    cases, low = _residual_cases(), None
    for case, p, q, hint in cases:
        got, dtype = numbers(case, call(residual, case, p, q), hint)
        low = numeric.coarser(low, dtype)
        expect_close(case, got, sampling.residual(p, q), atol=_tolerance(dtype, p, q), hint=hint,
                     rtol=numeric.LOW_PRECISION.get(dtype or "", 0.0))
    rng = np.random.default_rng(102)
    worst = 0.0
    for p, q in random_rows(rng, (200, 2, 16), zero_fraction=0.3):
        alpha = np.minimum(p, q).sum()
        got, dtype = numbers(N_("200 random pairs"), call(residual, N_("200 random pairs"), p, q), RESIDUAL)
        low = numeric.coarser(low, dtype)
        if got.shape != p.shape:
            fail(N_("200 random pairs"), say("wrong shape {shape}, expected {expected}", shape=got.shape,
                                              expected=p.shape), hint=RESIDUAL)
        error = float(np.abs(np.minimum(p, q) + (1 - alpha) * got - p).max())
        worst = max(worst, error)
        if not error <= _tolerance(dtype, p, p) + numeric.LOW_PRECISION.get(dtype or "", 0.0):
            fail(N_("200 random pairs (vocab 16, 30% zeros)"),
                 say("min(p, q) + (1 - alpha) * residual differs from p by {error:.3g}", error=error), hint=RESIDUAL)
    tolerance = say("{atol:g} relative to the residual's mass", atol=PRECISION[None]) if low is None else say(
        "{atol:g} relative to the residual's mass and {rtol:g} relative to each value (the precision of your "
        "{dtype} values)", atol=PRECISION[low], rtol=numeric.LOW_PRECISION[low], dtype=low)
    return [say("matches the reference on {n} cases (p == q, also with sums a rounding away from 1; residual "
                "masses 0.002, 1e-5 and 1e-7; disjoint supports, zeros, one-hot) to {tolerance}", n=len(cases),
                tolerance=tolerance),
            say("min(p, q) + (1 − α)·residual(p, q) = p on 200 random pairs (largest error {worst:.1e})", worst=worst),
            _("inputs left unmodified")]


def exercise_1a(residual):
    """Check ``residual(p, q)``: max(p − q, 0) normalised, p itself when that has no mass."""
    return run_check("1a", residual, sampling.residual, _verify_residual)


# ----------------------------------------------------------------------------- 1b one round, in distribution

# Rows for the statistical check: vocab 6, K = 2. Token 5 has p = 0 at position 0 but q > 0 (a
# draft proposal the target forbids), token 4 has q = 0 at position 0 (only reachable through
# the residual), and each position has its own p so a row mix-up changes the histograms.
CHAIN_P = np.array([[0.40, 0.25, 0.15, 0.10, 0.10, 0.00],
                    [0.05, 0.10, 0.20, 0.30, 0.15, 0.20],
                    [0.10, 0.40, 0.05, 0.05, 0.20, 0.20]])
CHAIN_Q = np.array([[0.15, 0.15, 0.25, 0.20, 0.00, 0.25],
                    [0.20, 0.10, 0.10, 0.30, 0.20, 0.10]])
for _rows in (CHAIN_P, CHAIN_Q):
    _rows.setflags(write=False)  # shared with the notebook: nothing may write into them
CHAIN_ROUNDS = 6000
CHAIN_LEVEL = 1e-4  # per test; four tests -> a correct verifier fails with probability < 0.04%

ACCEPT = N_("accept draft i with probability min(1, p_i(x)/q_i(x)): draw a fresh u for each draft (u = rng.random()), "
          "accept if u < p_i(x)/q_i(x), and stop at the first rejection")
CORRECTION = N_("at a rejection sample the correction from residual(p_i, q_i) of that position, with its own random "
              "draw (not the u you compared)")


def chain_length_probs(p_rows, q_rows):
    """Exact P(a round emits L tokens), L = 1..K+1, for per-position acceptance α_i = Σ min(p_i, q_i)."""
    alphas = np.minimum(p_rows[:-1], q_rows).sum(-1)
    reach = np.concatenate([[1.0], np.cumprod(alphas)])  # P(first i drafts all accepted)
    return reach * np.append(1 - alphas, 1.0)


def _rounds(verify_chain, rounds, seed, p_rows, q_rows):
    rng = np.random.default_rng(seed)
    k, vocab = q_rows.shape
    drafts = np.stack([rng.choice(vocab, size=rounds, p=q) for q in q_rows], axis=1)
    case = N_("statistical test")
    outs = [emitted_tokens(case, call(verify_chain, case, p_rows, q_rows, d, rng), k) for d in drafts]
    for out, d in zip(outs, drafts):
        if out[:-1] != [int(t) for t in d[: len(out) - 1]]:
            fail(case, _("every emitted token before the last must be an accepted draft token, in order"),
                 expected=say("a prefix of the draft {draft} plus one token", draft=d.tolist()), got=out)
    return outs


def chain_statistics(verify_chain, rounds=CHAIN_ROUNDS, seed=2, p_rows=CHAIN_P, q_rows=CHAIN_Q, level=CHAIN_LEVEL):
    """Run ``verify_chain`` for ``rounds`` rounds on drafts sampled from q; test four histograms.

    Exact targets: length L ~ chain_length_probs; first token ~ p_0; token 2 given L ≥ 2 ~ p_1;
    the bonus given L = K+1 ~ p_K. Returns the p-values; raises ``CheckFailed`` on a rejection.
    """
    k, vocab = q_rows.shape
    outs = _rounds(verify_chain, rounds, seed, p_rows, q_rows)
    lengths = np.array([len(o) for o in outs])
    tokens = [say("token {i}", i=i) for i in range(vocab)]

    def gate(case, picked, row, hint):
        return chi_square_gate(case, np.bincount(picked, minlength=vocab), row, level, hint, tokens)

    return {
        "length": chi_square_gate(N_("number of tokens per round"), np.bincount(lengths - 1, minlength=k + 1),
                                  chain_length_probs(p_rows, q_rows), level, ACCEPT,
                                  [say("{n} tokens", n=n) for n in range(1, k + 2)]),
        "first token": gate(N_("first emitted token"), [o[0] for o in outs], p_rows[0], CORRECTION),
        "second token": gate(N_("second token (rounds with ≥ 2 tokens)"), [o[1] for o in outs if len(o) > 1],
                             p_rows[1], say("position i uses p_rows[i] and q_rows[i]; {rule}",
                                            rule=translated(ACCEPT))),
        "bonus token": gate(N_("bonus token (all K accepted)"), [o[-1] for o in outs if len(o) == k + 1], p_rows[k],
                            _("after K acceptances sample the bonus from p_rows[K]")),
    }


def _hand_cases(verify_chain):
    one_hot = np.eye(5)
    p_rows, q_rows = one_hot[[1, 3, 4, 0]], one_hot[[1, 3, 4]]
    rng = np.random.default_rng(7)
    case = N_("p == q, one-hot")
    for _round in range(20):
        out = emitted_tokens(case, call(verify_chain, case, p_rows, q_rows, np.array([1, 3, 4]), rng), 3)
        expect_equal(case, out, [1, 3, 4, 0], _("when p == q every draft is accepted (u < 1 always; judge draft j "
                                                "with p_rows[j] and q_rows[j]) and the bonus comes from p_rows[K]"))
    p_rows = np.array([[0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25]])
    q_rows = np.array([[0, 0, 0.5, 0.5]])
    case = N_("disjoint supports")
    for _round in range(50):
        out = emitted_tokens(case, call(verify_chain, case, p_rows, q_rows, np.array([2]), rng), 1)
        if len(out) != 1 or out[0] not in (0, 1):
            fail(case, _("p(x) = 0 for the drafted token, so it must be rejected and the correction drawn from the "
                         "residual (= p here)"), expected=_("one token, 0 or 1"), got=out,
                 hint=_("accept x only if u < p(x)/q(x); p(x) = 0 never passes") if out[0] == 2 else
                 _("stop at the first rejection: the correction is the round's last token (no bonus after it)"))


def _rounds_with(verify_chain, rng, n=30) -> list[list[int]]:
    """``n`` rounds on the statistical test's rows and fixed drafts, every random number from ``rng``."""
    fixed = np.random.default_rng(3)  # the drafts are the check's: only the verifier's draws may change
    drafts = np.stack([fixed.choice(q.size, size=n, p=q) for q in CHAIN_Q], axis=1)
    case = N_("the same rounds with generators of equal and of different seeds")
    return [emitted_tokens(case, call(verify_chain, case, CHAIN_P, CHAIN_Q, d, rng), 2) for d in drafts]


def _verify_chain_fn(verify_chain):
    _hand_cases(verify_chain)
    randomness = seeded(N_("the same rounds with generators of equal and of different seeds"),
                        lambda rng: _rounds_with(verify_chain, rng))
    p_values = chain_statistics(verify_chain)
    controls = [rejects(chain_statistics, name, fn) for name, fn in wrong.controls("1b").items()]
    return [_("p == q accepts all K and adds the bonus; a draft with p(x) = 0 is always rejected"),
            say("chi-square tests on {rounds} rounds (vocab 6, K = 2) at level {level:g} each "
                "(false alarm < {alarm:.2%} for a correct verifier): length p = {length:.2g}, first token p = "
                "{first:.2g}, second token p = {second:.2g}, bonus token p = {bonus:.2g}", rounds=CHAIN_ROUNDS,
                level=CHAIN_LEVEL, alarm=4 * CHAIN_LEVEL, length=p_values["length"], first=p_values["first token"],
                second=p_values["second token"], bonus=p_values["bonus token"]),
            randomness, say("negative controls, same test: {caught}", caught="; ".join(controls))]


def exercise_1b(verify_chain):
    """Check ``verify_chain(p_rows, q_rows, draft_tokens, rng)``: one stochastic verification round."""
    return run_check("1b", verify_chain, chain.verify_chain, _verify_chain_fn)


# ----------------------------------------------------------------------------- 1c the greedy rule

GREEDY_HINTS = {"all K match": N_("when all K drafts match, append the bonus argmax of p_rows[K]"),
                "first draft wrong": N_("at the first mismatch emit the target's argmax there, then stop"),
                "third draft wrong": N_("keep the matching prefix, then the target's argmax at the mismatch, then "
                                        "stop"),
                "last draft wrong": N_("a mismatch at the last draft emits argmax p_rows[K-1]; no bonus"),
                "K = 1, match": N_("K = 1: one draft plus the bonus")}
SHIFTED = N_("compare x_j with argmax p_rows[j]: row j is the target's distribution at draft j's position "
           "(row j + 1 is for the token after it)")


def _greedy_rule(p_rows, draft, shift=0, axis=-1):
    """The greedy rule comparing x_j with argmax p_rows[j + shift] (shift 1: the classic row mix-up;
    axis 0: the argmax down each column instead of along each row)."""
    best = np.argmax(p_rows, axis=axis)
    for j, x in enumerate(draft):
        if j + shift >= len(best) or x != best[j + shift]:
            return [int(t) for t in draft[:j]] + [int(best[min(j + shift, len(best) - 1)])]
    return [int(t) for t in draft] + [int(best[-1])]


def _greedy_hint(case, rows, draft, out):
    if out == _greedy_rule(rows, draft, shift=1):
        return SHIFTED
    if out == _greedy_rule(rows, draft, axis=0):
        return _("the target's choice at position j is the argmax of row j: np.argmax(p_rows, axis=-1), not axis=0")
    return GREEDY_HINTS.get(case)


TIED = N_("on a tie at the maximum the target's choice is the lowest token id, as np.argmax returns it: accept x_j "
          "only when x_j == np.argmax(p_rows[j]) (not when p_rows[j][x_j] equals the maximum), and emit that argmax")


def _tied_rows(rng, k, vocab):
    """Rows of small integer weights: several tokens share each row's maximum."""
    rows = rng.integers(0, 3, size=(k + 1, vocab)).astype(float)
    rows[np.arange(k + 1), rng.integers(vocab, size=k + 1)] = 2.0  # at least one entry at the maximum 2
    rows[np.arange(k + 1), rng.integers(vocab, size=k + 1)] = 2.0
    return rows / rows.sum(-1, keepdims=True)


def _tie_cases(rng, k=3, vocab=8):
    """Hand-made ties, then rounds whose drafts pick any token at the maximum (the lowest id or another)."""
    row = np.array([0.1, 0.3, 0.0, 0.3, 0.3, 0.0, 0.0, 0.0])  # tokens 1, 3 and 4 tie at the maximum
    rows = np.tile(row, (k + 1, 1))
    cases = [(N_("tie at the maximum, every draft the lowest tied id"), rows, np.array([1, 1, 1])),
             (N_("tie at the maximum, the first draft another tied id"), rows, np.array([3, 1, 1])),
             (N_("tie at the maximum, the last draft another tied id"), rows, np.array([1, 1, 4]))]
    for i in range(60):
        rows = _tied_rows(rng, k, vocab)
        tied = [np.flatnonzero(r == r.max()) for r in rows[:k]]
        draft = np.array([rng.choice(t) if rng.random() < 0.85 else rng.integers(vocab) for t in tied])
        cases.append((say("random tied case {i}", i=i), rows, draft))
    return cases


def _verify_greedy_fn(verify_greedy):
    rng = np.random.default_rng(11)
    k, vocab = 4, 10
    p_rows = random_rows(rng, (k + 1, vocab))
    best = p_rows.argmax(-1)
    wrong_tokens = (best + 1) % vocab
    cases = {N_("all K match"): best[:k],
             N_("first draft wrong"): np.r_[wrong_tokens[0], best[1:k]],
             N_("third draft wrong"): np.r_[best[:2], wrong_tokens[2], best[3:k]],
             N_("last draft wrong"): np.r_[best[: k - 1], wrong_tokens[k - 1]],
             N_("K = 1, match"): best[:1]}
    for case, draft in cases.items():
        rows = p_rows[: len(draft) + 1]
        out = emitted_tokens(case, call(verify_greedy, case, rows, np.array(draft)), len(draft))
        want = chain.verify_greedy(rows, draft)
        if out != want:
            expect_equal(case, out, want, _greedy_hint(case, rows, draft, out))
    for i in range(300):
        rows = random_rows(rng, (k + 1, vocab))
        draft = np.where(rng.random(k) < 0.7, rows[:k].argmax(-1), rng.integers(vocab, size=k))
        case = say("random case {i}", i=i)
        out = emitted_tokens(case, call(verify_greedy, case, rows, draft), k)
        want = chain.verify_greedy(rows, draft)
        if out != want:
            expect_equal(case, out, want, _greedy_hint(case, rows, draft, out) or _(
                "accept drafts while they equal argmax p_rows[j]; at the first mismatch emit that argmax and stop; "
                "else add the bonus"))
    for case, rows, draft in _tie_cases(rng):
        out = emitted_tokens(case, call(verify_greedy, case, rows, draft), len(draft))
        expect_equal(case, out, chain.verify_greedy(rows, draft), TIED)
    return [_("matches on the five hand cases (all match, mismatch first / middle / last, K = 1)"),
            _("matches the reference on 300 random rounds (vocab 10, K = 4)"),
            _("ties at the maximum go to the lowest token id, as np.argmax: 3 hand cases and 60 random tied rounds "
              "(drafts on tied tokens, the bonus and the correction from tied rows)")]


def exercise_1c(verify_greedy):
    """Check ``verify_greedy(p_rows, draft_tokens)``: the temperature-0 rule."""
    return run_check("1c", verify_greedy, chain.verify_greedy, with_controls(_verify_greedy_fn, wrong.controls("1c")))
