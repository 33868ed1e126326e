"""Wrong implementations for notebook 1: the residual, one verification round, the greedy rule (the 1d
detectors are in ``ex1_detect``)."""
from __future__ import annotations

import numpy as np

from lessonlib.core import sampling
from lessonlib.course.checks.framework import Wrong

# ----------------------------------------------------------------------------- the two verifiers notebook 01 shows
# (their source is printed in the notebook: keep them plain, each bug in one visible line)


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


# ----------------------------------------------------------------------------- the scalar-q bug, vectorised
# (the library's statistical tests use these forms: many first tokens at once, and the exact law)


def first_tokens_scalar_q(p, q, n, rng):
    """First emitted token of ``n`` rounds under the scalar-q bug: the residual subtracts q(x) from all of p."""
    x = sampling.inverse_cdf(q[0], rng.random(n))
    accept = rng.random(n) * q[0, x] < p[0, x]
    bad = sampling.residual_rows(np.broadcast_to(p[0], (n, p.shape[1])), q[0, x][:, None])
    return np.where(accept, x, sampling.inverse_cdf(bad, rng.random(n)))


def scalar_q_first_token_law(p0, q0):
    """Exact law of the first emitted token under the scalar-q bug (for power calculations)."""
    a = np.minimum(1.0, p0 / q0)
    bad = sampling.residual_rows(np.broadcast_to(p0, (p0.size,) * 2), q0[:, None])
    return q0 * a + (q0 * (1 - a)) @ bad


# ----------------------------------------------------------------------------- 1a residual


def _norm(x):
    return x / x.sum()


def residual_sign_swapped(p, q):
    r = np.maximum(q - p, 0)
    return r / r.sum() if r.sum() > 0 else p


def residual_no_zero_mass_guard(p, q):
    r = np.maximum(p - q, 0)
    with np.errstate(invalid="ignore"):
        return r / r.sum()


def residual_in_place(p, q):
    p -= q
    np.maximum(p, 0, out=p)
    return p / p.sum() if p.sum() > 0 else p + q


def residual_one_minus_overlap(p, q):
    """Normalises by 1 − Σ min(p, q): the same in exact arithmetic, but not 0 when p == q in floating point."""
    mass = 1 - np.minimum(p, q).sum()
    return np.maximum(p - q, 0) / mass if mass > 0 else p


def residual_small_mass_is_zero(p, q):
    r = np.maximum(p - q, 0)
    return r / r.sum() if r.sum() > 1e-3 else p  # a "numerical" threshold that is a wrong answer


def residual_signed_sum(p, q):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.maximum(p - q, 0) / (p - q).sum()


# ----------------------------------------------------------------------------- 1b one round


def _sample(dist, rng):
    return int(rng.choice(len(dist), p=dist))


def _chain(accept_prob, correction, bonus_row=lambda k: k):
    """A verify_chain with one part swapped out: ``accept_prob(p, q, x)``; ``correction(p, q, x)``
    is the law drawn from at a rejection of x; ``bonus_row(K)`` the row of the bonus (None: none)."""
    def verify(p_rows, q_rows, draft, rng):
        out = []
        for j, x in enumerate(draft):
            if rng.random() >= accept_prob(p_rows[j], q_rows[j], x):
                return out + [_sample(correction(p_rows[j], q_rows[j], x), rng)]
            out.append(int(x))
        row = bonus_row(len(draft))
        return out if row is None else out + [_sample(p_rows[row], rng)]
    return verify


def _ratio(p, q, x):
    return p[x] / q[x]


def _residual(p, q, x):
    return sampling.residual(p, q)


def chain_keeps_going_after_rejection(p_rows, q_rows, draft, rng):
    out = []
    for j, x in enumerate(draft):
        if rng.random() < p_rows[j][x] / q_rows[j][x]:
            out.append(int(x))
        else:
            out.append(_sample(sampling.residual(p_rows[j], q_rows[j]), rng))
    return out + [_sample(p_rows[len(draft)], rng)]


def chain_one_u_per_round(p_rows, q_rows, draft, rng):
    u = rng.random()  # drawn once, compared with every draft
    for j, x in enumerate(draft):
        if u >= p_rows[j][x] / q_rows[j][x]:
            return [int(t) for t in draft[:j]] + [_sample(sampling.residual(p_rows[j], q_rows[j]), rng)]
    return [int(t) for t in draft] + [_sample(p_rows[len(draft)], rng)]


def chain_reuses_u_for_correction(p_rows, q_rows, draft, rng):
    for j, x in enumerate(draft):
        u = rng.random()
        if u >= p_rows[j][x] / q_rows[j][x]:  # the same u then picks the correction by inverse CDF
            fix = sampling.residual(p_rows[j], q_rows[j])
            return [int(t) for t in draft[:j]] + [int(sampling.inverse_cdf(fix, np.asarray(u)))]
    return [int(t) for t in draft] + [_sample(p_rows[len(draft)], rng)]


def chain_correction_into_draft(p_rows, q_rows, draft_tokens, rng):
    """Writes the correction over the rejected draft token: the caller's draft_tokens change."""
    for j, x in enumerate(draft_tokens):
        if rng.random() >= p_rows[j][x] / q_rows[j][x]:
            draft_tokens[j] = _sample(sampling.residual(p_rows[j], q_rows[j]), rng)
            return [int(t) for t in draft_tokens[: j + 1]]
    return [int(t) for t in draft_tokens] + [_sample(p_rows[len(draft_tokens)], rng)]


def chain_residual_in_place(p_rows, q_rows, draft_tokens, rng):
    """Builds the residual inside p_rows[j]: the caller's p_rows change."""
    for j, x in enumerate(draft_tokens):
        if rng.random() >= p_rows[j][x] / q_rows[j][x]:
            fix = p_rows[j]
            fix -= q_rows[j]
            np.maximum(fix, 0, out=fix)
            fix /= fix.sum()
            return [int(t) for t in draft_tokens[:j]] + [_sample(fix, rng)]
    return [int(t) for t in draft_tokens] + [_sample(p_rows[len(draft_tokens)], rng)]


def chain_rows_shifted(p_rows, q_rows, draft, rng):
    """Judges draft j against p_rows[j + 1] (the row after it)."""
    return _chain(_ratio, _residual)(np.vstack([p_rows[1:], p_rows[-1:]]), q_rows, draft, rng)


# ----------------------------------------------------------------------------- 1c greedy


def _greedy(bonus_row=lambda k: k, shift=0):
    """Stops at the first x_j != argmax p_rows[j + shift] emitting that argmax; after K matches adds
    the argmax of row ``bonus_row(K)`` (None: no bonus)."""
    def verify(p_rows, draft):
        best = np.argmax(p_rows, axis=-1)
        for j, x in enumerate(draft):
            if x != best[j + shift]:
                return [int(t) for t in draft[:j]] + [int(best[j + shift])]
        row = bonus_row(len(draft))
        return [int(t) for t in draft] + ([] if row is None else [int(best[row])])
    return verify


def greedy_emits_draft_at_mismatch(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    out = []
    for j, x in enumerate(draft):
        out.append(int(x))
        if x != best[j]:
            return out
    return out + [int(best[len(draft)])]


def greedy_skips_mismatch(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    return [int(x) for x, b in zip(draft, best) if x == b] + [int(best[len(draft)])]


def greedy_argmax_wrong_axis(p_rows, draft):
    best = np.argmax(p_rows, axis=0)  # the row with the largest p of each token, not each row's argmax
    for j, x in enumerate(draft):
        if x != best[j]:
            return [int(t) for t in draft[:j]] + [int(best[j])]
    return [int(t) for t in draft] + [int(best[len(draft)])]


def greedy_argmax_in_place(p_rows, draft):
    """Marks each row's argmax by overwriting p_rows (np.argmax(p_rows, out=...) style shortcut)."""
    best = np.argmax(p_rows, axis=-1)
    p_rows[:] = 0.0
    p_rows[np.arange(len(best)), best] = 1.0
    for j, x in enumerate(draft):
        if x != best[j]:
            return [int(t) for t in draft[:j]] + [int(best[j])]
    return [int(t) for t in draft] + [int(best[len(draft)])]


def greedy_no_correction(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    for j, x in enumerate(draft):
        if x != best[j]:
            return [int(t) for t in draft[:j]]
    return [int(t) for t in draft] + [int(best[len(draft)])]


def chain_global_generator(p_rows, q_rows, draft, rng):
    """The exact rule drawing from numpy's global generator instead of ``rng``: right in law, not reproducible."""
    return _chain(_ratio, _residual)(p_rows, q_rows, draft, np.random.mtrand._rand)


def chain_new_generator(p_rows, q_rows, draft, rng):
    """A fresh generator seeded 0 on every call: every round draws the same uniforms whatever ``rng`` is."""
    return _chain(_ratio, _residual)(p_rows, q_rows, draft, np.random.default_rng(0))


def greedy_any_tied_maximum(p_rows, draft):
    """Accepts x_j whenever p_rows[j][x_j] equals the row's maximum (a tie with the argmax passes)."""
    best = np.argmax(p_rows, axis=-1)
    for j, x in enumerate(draft):
        if p_rows[j][x] != p_rows[j].max():
            return [int(t) for t in draft[:j]] + [int(best[j])]
    return [int(t) for t in draft] + [int(best[len(draft)])]


def greedy_last_tied_maximum(p_rows, draft):
    """The argmax taken from the end of each row: ties go to the highest token id."""
    rows = np.asarray(p_rows)
    best = rows.shape[1] - 1 - np.argmax(rows[:, ::-1], axis=-1)
    n = int(np.cumprod(best[: len(draft)] == np.asarray(draft)).sum())
    return [int(t) for t in draft[:n]] + [int(best[n])]


def residual_bfloat16_unnormalised(p, q):
    """A bfloat16 tensor (a dtype the check must read) that forgot the normalisation."""
    import torch

    return torch.tensor(np.maximum(p - q, 0), dtype=torch.bfloat16)


NORMALISE = "max(p - q, 0) / sum(max(p - q, 0))"
FRESH_U = "a fresh u for each draft"
ENTRIES = [
    Wrong("1a", "unnormalised", lambda p, q: np.maximum(p - q, 0), NORMALISE,
          "returns max(p − q, 0) without dividing by its sum"),
    Wrong("1a", "unnormalised, as a bfloat16 tensor", residual_bfloat16_unnormalised, NORMALISE,
          "a torch.bfloat16 answer (read at bfloat16's precision) without the division by its sum"),
    Wrong("1a", "sign swapped", residual_sign_swapped, NORMALISE,
          "max(q − p, 0): the draft's excess, not the target's"),
    Wrong("1a", "absolute difference", lambda p, q: _norm(np.abs(p - q)), NORMALISE, "normalises |p − q|"),
    Wrong("1a", "no zero-mass guard", residual_no_zero_mass_guard, "return p in that case",
          "divides 0 by 0 when p == q (returns nan)"),
    Wrong("1a", "modifies p in place", residual_in_place, "modified `p` in place", "p -= q changes the caller's array"),
    Wrong("1a", "normalised by 1 − Σ min(p, q)", residual_one_minus_overlap, "return p in that case",
          "1 − Σ min(p, q) is a rounding error, not 0, when p == q: returns zeros"),
    Wrong("1a", "small mass treated as zero", residual_small_mass_is_zero, "small but non-zero",
          "returns p whenever Σ max(p − q, 0) < 1e-3"),
    Wrong("1a", "the overlap", lambda p, q: _norm(np.minimum(p, q)), NORMALISE,
          "normalises min(p, q) instead of the shortfall"),
    Wrong("1a", "divides by the signed sum", residual_signed_sum, NORMALISE,
          "divides by Σ(p − q) = 0 instead of Σ max(p − q, 0)"),
    Wrong("1b", "numpy's global generator", chain_global_generator, "from the rng argument",
          "the exact rule, drawing from np.random instead of rng: right in law, a seed does not reproduce it"),
    Wrong("1b", "a new generator seeded 0 per call", chain_new_generator, "from the rng argument",
          "np.random.default_rng(0) inside: every round draws the same numbers whatever rng is"),
    Wrong("1b", "scalar-q residual", verify_chain_scalar_q, "residual(p_i, q_i)",
          "the seed text's bug: subtracts the scalar q(x) from the whole of p", control=True),
    Wrong("1b", "always accept", verify_chain_always_accept, "p(x) = 0 never passes",
          "emits the draft (samples q), never rejects",
          control=True),
    Wrong("1b", "inverted ratio", _chain(lambda p, q, x: q[x] / p[x] if p[x] > 0 else 0.0, _residual), FRESH_U,
          "accepts with u < q(x)/p(x)"),
    Wrong("1b", "accepts with p(x)", _chain(lambda p, q, x: p[x], _residual), FRESH_U,
          "u < p(x), the tree rule, instead of u < p(x)/q(x)"),
    Wrong("1b", "correction from p", _chain(_ratio, lambda p, q, x: p), "residual(p_i, q_i)",
          "after a rejection samples p instead of the residual"),
    Wrong("1b", "bonus from p_rows[K-1]", _chain(_ratio, _residual, lambda k: k - 1), "p_rows[K]",
          "the bonus token comes from the last drafted position's row"),
    Wrong("1b", "no bonus token", _chain(_ratio, _residual, lambda k: None), "the bonus comes from p_rows[K]",
          "emits only the K accepted drafts when all pass"),
    Wrong("1b", "keeps going after a rejection", chain_keeps_going_after_rejection, "stop at the first rejection",
          "replaces a rejected draft and judges the next one"),
    Wrong("1b", "one u per round", chain_one_u_per_round, FRESH_U, "compares every draft with the same u"),
    Wrong("1b", "reuses u for the correction", chain_reuses_u_for_correction, "with its own random draw",
          "the rejected u also picks the correction (it is no longer uniform)"),
    Wrong("1b", "rows shifted by one", chain_rows_shifted, "judge draft j with p_rows[j] and q_rows[j]",
          "judges draft j against p_rows[j + 1]"),
    Wrong("1b", "correction written into draft_tokens", chain_correction_into_draft, "modified `draft_tokens` in place",
          "overwrites the rejected draft in the caller's array"),
    Wrong("1b", "residual built in p_rows", chain_residual_in_place, "modified `p_rows` in place",
          "fix = p_rows[j]; fix -= q_rows[j] changes the caller's table"),
    Wrong("1c", "one-hot rows written into p_rows", greedy_argmax_in_place, "modified `p_rows` in place",
          "overwrites the caller's p_rows"),
    Wrong("1c", "no bonus", _greedy(lambda k: None), "append the bonus argmax of p_rows[K]",
          "stops after K matches without the bonus"),
    Wrong("1c", "bonus from p_rows[K-1]", _greedy(lambda k: k - 1), "append the bonus argmax of p_rows[K]",
          "the bonus is the argmax of the last drafted row"),
    Wrong("1c", "emits the draft at the mismatch", greedy_emits_draft_at_mismatch, "emit the target's argmax there",
          "keeps the mismatching draft token instead of replacing it"),
    Wrong("1c", "skips mismatches", greedy_skips_mismatch, "emit the target's argmax there",
          "drops mismatching drafts and keeps going"),
    Wrong("1c", "compares with the next row", _greedy(shift=1), "row j is the target's distribution",
          "x_j compared with argmax p_rows[j + 1]"),
    Wrong("1c", "argmax over the wrong axis", greedy_argmax_wrong_axis, "not axis=0", "np.argmax(p_rows, axis=0)"),
    Wrong("1c", "no correction token", greedy_no_correction, "one correction token",
          "stops at a mismatch without emitting the target's token"),
    Wrong("1c", "any tied maximum accepted", greedy_any_tied_maximum, "the lowest token id",
          "accepts a draft whose probability equals the row's maximum, though the argmax is a lower id",
          control=True),
    Wrong("1c", "ties to the highest id", greedy_last_tied_maximum, "the lowest token id",
          "takes the argmax from the end of each row"),
]
