"""Chain speculative decoding at the level of distributions and of ``logits(tokens)`` models.

* ``verify_chain`` -- one stochastic verification round (its arithmetic is
  ``lessonlib.core.batched.verify_rounds``, the one implementation for numpy and torch).
* ``verify_greedy`` -- the T = 0 rule: accept while the draft equals the target argmax.
* ``exact_round_distribution`` / ``exact_output_distribution`` -- the exact law of a
  round's output, by summing over every draft token and accept/reject outcome.
* ``draft_with_alpha`` -- a draft q whose acceptance rate against p is exactly alpha.
The generic loops over any ``logits(tokens)`` model are in ``lessonlib.decoding.reference``.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from lessonlib.core.batched import check_rounds, verify_rounds
from lessonlib.core.sampling import residual_rows
from lessonlib.core.validate import check_interval, check_probs, check_rng, check_token_ids


def _check_round(p_rows: npt.ArrayLike, q_rows: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, int]:
    """``check_rounds`` for one round: p_rows (K+1, V), q_rows (K, V), both 2-D; returns them
    with a leading axis of 1, (1, K+1, V) and (1, K, V), and K."""
    p, q, K = check_rounds(p_rows, q_rows)
    if p.shape[0] != 1 or q.shape[0] != 1:
        raise ValueError("p_rows and q_rows must be 2-D: (K+1, V) and (K, V)")
    return p, q, K


def _check_draft_tokens(draft_tokens: npt.ArrayLike, K: int, V: int) -> np.ndarray:
    """Exactly K token ids in [0, V), as int64 (K,). An integer dtype is required here (no
    2.0 for 2, unlike ``check_token_ids`` alone)."""
    d = np.asarray(draft_tokens)
    if d.shape != (K,) or not np.issubdtype(d.dtype, np.integer):
        raise ValueError(f"draft_tokens must be {K} integer token ids (one per q row), got {d.tolist()!r}")
    return check_token_ids(d, V, "draft_tokens")


def verify_chain(p_rows: np.ndarray, q_rows: np.ndarray, draft_tokens: npt.ArrayLike,
                 rng: np.random.Generator, validate: bool = True) -> list[int]:
    """One round of speculative sampling. ``p_rows`` (K+1, V): the target at each drafted
    position plus the bonus position; ``q_rows`` (K, V): the distributions the K
    ``draft_tokens`` were sampled from. Accept x_j while u_j < p_j(x_j) / q_j(x_j),
    u_j ~ U[0, 1); at the first rejection emit a token from norm(max(p_j - q_j, 0)), after
    K acceptances a bonus token from p_K. Returns the emitted tokens (1 to K+1 of them).
    Draws K + 1 uniforms from ``rng`` (accept tests, then the final token).
    ``validate=False`` skips the input checks (about 0.1 ms): for decoding loops whose rows
    come straight from ``softmax``."""
    if validate:
        p, q, K = _check_round(p_rows, q_rows)
        d = _check_draft_tokens(draft_tokens, K, p.shape[-1])
        check_rng(rng)
    else:
        d = np.asarray(draft_tokens, dtype=np.int64)  # (K,)
        p, q, K = p_rows[None], q_rows[None], len(d)
    u = rng.random(K + 1)
    tokens, n_acc = verify_rounds(p, q, d[None], u[None, :K], u[None, K], validate=validate)
    return tokens[0, : n_acc[0] + 1].tolist()


def verify_greedy(p_rows: np.ndarray, draft_tokens: npt.ArrayLike, validate: bool = True) -> list[int]:
    """The T = 0 rule: accept draft j while argmax p_j == x_j; emit argmax p_j at the first
    mismatch, or the bonus argmax p_K when all K match. ``p_rows``: (K+1, V).
    ``validate=False`` skips the input checks, for decoding loops: only each row's argmax is
    read, so the target's logits give the same tokens as their softmax (no softmax needed)."""
    if validate:
        p = check_probs(p_rows, "p_rows", ndim=(2,))
        K = p.shape[0] - 1
        if K < 1:
            raise ValueError("p_rows must hold K + 1 >= 2 rows")
        d = _check_draft_tokens(draft_tokens, K, p.shape[-1])
    else:
        p, d = p_rows, np.asarray(draft_tokens, dtype=np.int64)
        K = len(d)
    best = p.argmax(axis=-1)
    n = int(np.cumprod(best[:K] == d).sum())
    return d[:n].tolist() + [int(best[n])]


# ----------------------------------------------------------------------------- exact law

def exact_round_distribution(p_rows: npt.ArrayLike, q_rows: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of one ``verify_chain`` round, by enumerating every draft token x and
    both outcomes of its accept test (the rows do not depend on the drafted prefix).

    Returns (accepted (K, V), stop (K+1, V)), both conditional on the round reaching
    position j: accepted[j, x] = q_j(x) a_j(x) with a_j(x) = min(1, p_j(x) / q_j(x)) the
    probability that u < p/q; stop[j, y] = (sum_x q_j(x) (1 - a_j(x))) residual_j(y), and
    stop[K] = p_K. The emitted sequence (x_0..x_{m-1}, y) has probability
    prod_{j<m} accepted[j, x_j] * stop[m, y].
    """
    p, q, K = _check_round(p_rows, q_rows)
    p, q = p[0], q[0]
    drafted = q > 0  # tokens the draft can propose; the others carry weight q = 0
    a = np.where(drafted, np.minimum(1.0, p[:K] / np.where(drafted, q, 1.0)), 0.0)
    accepted = q * a
    rejected_mass = (q * (1.0 - a)).sum(axis=-1, keepdims=True)
    stop = np.concatenate([rejected_mass * residual_rows(p[:K], q), p[K:]])
    return accepted, stop


def exact_output_distribution(p_rows: npt.ArrayLike, q_rows: npt.ArrayLike) -> np.ndarray:
    """(K+1, V): row j is the exact law of the token a round emits at position j, given it
    gets that far (accepted[j] + stop[j] of ``exact_round_distribution``). Row 0 is the law
    of the first emitted token. Speculative sampling is exact iff this equals p_rows."""
    accepted, stop = exact_round_distribution(p_rows, q_rows)
    return stop + np.concatenate([accepted, np.zeros_like(stop[:1])])


def draft_with_alpha(p: npt.ArrayLike, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """A draft q with acceptance_rate(p, q) == alpha (to 1e-9), for each row of p (V,) or
    (N, V); q has p's shape.

    q = (1 - lam) p + lam r, where r is a random distribution on the quarter of tokens that
    p finds least likely. sum_x min(p, q) is concave in lam and equals 1 at lam = 0, so it
    falls monotonically to acceptance_rate(p, r) at lam = 1: bisection finds lam. alpha
    below acceptance_rate(p, r) is unreachable (ValueError)."""
    p = check_probs(p)
    check_rng(rng)
    check_interval(alpha, "alpha", "[0, 1]")
    if p.ndim == 2:
        return np.stack([draft_with_alpha(row, alpha, rng) for row in p])
    far = np.argsort(p, kind="stable")[: max(1, -(-p.size // 4))]
    r = np.zeros_like(p)
    r[far] = rng.dirichlet(np.ones(far.size))
    mix = lambda lam: (1 - lam) * p + lam * r  # noqa: E731
    rate = lambda lam: np.minimum(p, mix(lam)).sum()  # noqa: E731
    if rate(1.0) > alpha + 1e-9:
        raise ValueError(f"alpha={alpha} is below the smallest rate this construction reaches for p ({rate(1.0):.4g})")
    lo, hi = 0.0, 1.0  # rate(lo) >= alpha >= rate(hi)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rate(mid) >= alpha else (lo, mid)
    lam = lo if abs(rate(lo) - alpha) <= abs(rate(hi) - alpha) else hi
    return mix(lam)
