"""Many independent chain-verification rounds at once: no per-round Python loop.

This is the only implementation of the accept/reject rule; ``lessonlib.core.chain.verify_chain``
is the one-round case. It is written once against the array namespace (``backend``), so the
same lines run on numpy arrays, torch CPU tensors and torch CUDA tensors, and give
identical tokens for identical uniforms.

A round with draft length K uses 2K + 1 uniforms in [0, 1): K to draft x_j ~ q_j by inverse
CDF, K for the accept tests u_j < p_j(x_j) / q_j(x_j), and one for the final token (the
correction from the residual at the first rejection, or the bonus from p_K).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from lessonlib.core.backend import Array, ArrayT, Backend, arange_like, array_namespace, select, take_along, to_numpy
from lessonlib.core.sampling import inverse_cdf, residual_rows
from lessonlib.core.validate import check_int, check_probs, check_rng, check_same_vocab

if TYPE_CHECKING:  # for annotations only: core never imports torch at run time
    import torch


@overload
def check_rounds(p_rows: torch.Tensor, q_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]: ...
@overload
def check_rounds(p_rows: npt.ArrayLike, q_rows: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, int]: ...
def check_rounds(p_rows: Any, q_rows: Any) -> tuple[Any, Any, int]:
    """Validate (K+1, V) or (N, K+1, V) target rows against (K, V) or (N, K, V) draft rows;
    returns both as 3-D (a shared set of rows gets a leading axis of 1) and K."""
    p = check_probs(p_rows, "p_rows", ndim=(2, 3))
    q = check_probs(q_rows, "q_rows", ndim=(2, 3))
    p = p if p.ndim == 3 else p[None]
    q = q if q.ndim == 3 else q[None]
    check_same_vocab(p, q, "p_rows", "q_rows")
    K = q.shape[1]
    if K < 1:
        raise ValueError("q_rows must hold K >= 1 rows (one per draft token)")
    if p.shape[1] != K + 1:
        raise ValueError(f"p_rows must hold K + 1 = {K + 1} rows (K drafts + the bonus position), got {p.shape[1]}")
    if p.shape[0] != q.shape[0] and 1 not in (p.shape[0], q.shape[0]):
        raise ValueError(f"p_rows and q_rows disagree on the number of rounds: {p.shape[0]} vs {q.shape[0]}")
    return p, q, K


def _check_uniforms(u: Array, name: str, shape: tuple[int, ...]) -> None:
    if tuple(u.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(u.shape)}")
    if bool((u < 0).any()) or bool((u >= 1).any()) or bool(array_namespace(u).isnan(u).any()):
        raise ValueError(f"{name} must lie in [0, 1)")


def verify_rounds(p_rows: ArrayT, q_rows: ArrayT, draft_tokens: ArrayT, u_accept: ArrayT, u_final: ArrayT,
                  validate: bool = True) -> tuple[ArrayT, ArrayT]:
    """N verification rounds. ``p_rows``: (K+1, V) shared or (N, K+1, V); ``q_rows``: (K, V)
    or (N, K, V), the distributions the drafts were sampled from; ``draft_tokens``: (N, K);
    ``u_accept``: (N, K); ``u_final``: (N,). All numpy arrays (lists are fine too) or all
    torch tensors on one device.

    Round n accepts draft j while u_accept[n, j] * q_j(x_j) < p_j(x_j), i.e. u < p/q written
    without a division (a token with p(x) = 0 is never accepted). At the first rejection m it
    emits inverse_cdf(norm(max(p_m - q_m, 0)), u_final), after K acceptances
    inverse_cdf(p_K, u_final). Returns (tokens, n_accepted): tokens (N, K+1) hold the
    accepted drafts, then the final token, then -1; n_accepted (N,) in 0..K.
    """
    if validate:
        p, q, K = check_rounds(p_rows, q_rows)
    else:
        p = p_rows if p_rows.ndim == 3 else p_rows[None]
        q = q_rows if q_rows.ndim == 3 else q_rows[None]
        K = q.shape[1]
    xp = array_namespace(p)
    # numpy arrays (lists are fine too) or torch tensors, whichever p is: typed Any, the
    # namespace decides
    as_array: Any = np.asarray if xp is np else (lambda a: a)
    d, u_accept, u_final = as_array(draft_tokens), as_array(u_accept), as_array(u_final)
    N = d.shape[0] if d.ndim else 0
    if validate:
        if d.ndim != 2 or d.shape[1] != K or "int" not in str(d.dtype):
            raise ValueError(f"draft_tokens must be integer token ids of shape (N, K={K}), "
                             f"got {tuple(d.shape)} {d.dtype}")
        if max(p.shape[0], q.shape[0]) not in (1, N):
            raise ValueError(f"p_rows/q_rows hold {max(p.shape[0], q.shape[0])} rounds but draft_tokens {N}")
        if bool((d < 0).any()) or bool((d >= p.shape[-1]).any()):
            raise ValueError(f"draft_tokens must be token ids in [0, {p.shape[-1]})")
        _check_uniforms(u_accept, "u_accept", (N, K))
        _check_uniforms(u_final, "u_final", (N,))
    px = take_along(p[:, :K], d[..., None], axis=-1)[..., 0]  # p_j(x_j), (N, K)
    qx = take_along(q, d[..., None], axis=-1)[..., 0]  # q_j(x_j)
    if validate and bool((qx == 0).any()):
        raise ValueError("draft_tokens include a token with q = 0: "
                         "q_rows must be the distributions the drafts were sampled from")
    accept = u_accept * qx < px
    n_acc = xp.cumprod(accept, axis=-1).sum(axis=-1)  # length of the accepted prefix
    # what the final token is drawn from after m acceptances: the residual of position m
    # for m < K, p_K for m = K (computed once per set of rows, then looked up per round)
    res = residual_rows(p[:, :K], q)
    finals = xp.concatenate([res, xp.broadcast_to(p[:, K:], (res.shape[0], 1, res.shape[2]))], axis=1)
    final = inverse_cdf(take_along(finals, n_acc[:, None, None], axis=1)[:, 0], u_final)
    pos = arange_like(d, K + 1)[None, :]
    padded = xp.concatenate([d, d[:, :1]], axis=-1)  # the last column is never read
    tokens = xp.where(pos < n_acc[:, None], padded, xp.where(pos == n_acc[:, None], final[:, None], -1))
    return tokens, n_acc


def sample_rounds(p_rows: ArrayT, q_rows: ArrayT, uniforms: ArrayT,
                  validate: bool = True) -> tuple[ArrayT, ArrayT, ArrayT]:
    """Draft and verify N rounds from ``uniforms`` (N, 2K+1) in [0, 1): drafts x_j =
    inverse_cdf(q_j, uniforms[:, j]), then ``verify_rounds`` with the rest.
    Returns (draft_tokens (N, K), tokens (N, K+1), n_accepted (N,))."""
    if validate:
        p, q, K = check_rounds(p_rows, q_rows)
        _check_uniforms(uniforms, "uniforms", (uniforms.shape[0], 2 * K + 1))
    else:
        p, q, K = p_rows, q_rows, q_rows.shape[-2]
    drafts = inverse_cdf(q, uniforms[:, :K])
    tokens, n_acc = verify_rounds(p, q, drafts, uniforms[:, K : 2 * K], uniforms[:, 2 * K], validate=False)
    return drafts, tokens, n_acc


def simulate_rounds(p_rows: npt.ArrayLike | torch.Tensor, q_rows: npt.ArrayLike | torch.Tensor, n_rounds: int,
                    rng: np.random.Generator, backend: Backend | str | None = None,
                    chunk: int = 1_000_000) -> tuple[np.ndarray, np.ndarray]:
    """``n_rounds`` independent rounds of speculative sampling with shared target rows
    (K+1, V) and draft rows (K, V), on ``backend`` (default: ``backend.select()``), in
    chunks of ``chunk`` rounds. Returns numpy (tokens (N, K+1), n_accepted (N,))."""
    n_rounds = check_int(n_rounds, "n_rounds", minimum=1)
    check_rng(rng)
    be = backend if isinstance(backend, Backend) else select(backend)
    p_np, q_np, K = check_rounds(to_numpy(p_rows), to_numpy(q_rows))
    p, q = be.asarray(p_np), be.asarray(q_np)  # numpy arrays or torch tensors, as the backend says
    tokens: list[np.ndarray] = []
    n_acc: list[np.ndarray] = []
    for start in range(0, n_rounds, chunk):
        u = be.uniform((min(chunk, n_rounds - start), 2 * K + 1), rng)
        _, t, n = sample_rounds(p, q, u, validate=False)
        tokens.append(to_numpy(t))
        n_acc.append(to_numpy(n))
    return np.concatenate(tokens), np.concatenate(n_acc)
