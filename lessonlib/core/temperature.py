"""alpha against temperature, and the temperature where speculation stops paying (numpy only).

* ``acceptance_by_temperature`` -- alpha(T) for sampled, deterministic and mistempered drafts,
  teacher-forced: one target and one draft forward over held-out text give every temperature.
* ``tau_by_position`` -- tokens per verify from per-position acceptances.
* ``breakeven_temperature`` -- from a measured alpha(T) and c, the lowest temperature at which
  the expected speedup falls to 1 (the first crossing, interpolated).
* ``alpha_mle`` -- alpha estimated from a window of (accepted, rejected) rounds.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from lessonlib.core.sampling import acceptance_rate, softmax
from lessonlib.core.theory import breakeven_alpha
from lessonlib.core.validate import check_c, check_finite_1d, check_int, check_k, check_unit


def acceptance_by_temperature(p_logits: npt.ArrayLike, q_logits: npt.ArrayLike, temperatures: npt.ArrayLike,
                              widths: Sequence[int] = (4,),
                              draft_temperature: float | None = None) -> dict[str, np.ndarray]:
    """Per-position acceptance at each temperature for each kind of draft (teacher-forced).

    p_logits, q_logits: (N, V) target and draft logits at the same N positions of a text.
    Returns {kind: (len(temperatures), N) array}, with p_T = softmax(p_logits / T):
      "sampled"  -- draft sampled from q_T (tempered like the target): sum_x min(p_T, q_T);
      "greedy"   -- deterministic draft x = argmax q (q one-hot): the exact rule accepts with p_T(x);
      "top{w}"   -- w deterministic candidates (top-w of q, as in a top-k tree): the chance the
                    target's token is one of them, sum over the candidates of p_T;
      "mismatch" -- draft sampled at ``draft_temperature`` whatever T is: sum_x min(p_T, q_Tq).
    Tempering keeps the order of the logits, so argmax and top-w of q are the same at every T.
    """
    p_logits, q_logits = np.asarray(p_logits, dtype=float), np.asarray(q_logits, dtype=float)
    if p_logits.ndim != 2 or p_logits.shape != q_logits.shape:
        raise ValueError(f"p_logits and q_logits must be (N, V) arrays of the same shape, "
                         f"got {p_logits.shape} and {q_logits.shape}")
    temps = np.asarray(temperatures, dtype=float)
    if temps.ndim != 1 or len(temps) == 0 or not np.all(np.isfinite(temps)) or np.any(temps < 0):
        raise ValueError(f"temperatures must be a non-empty 1-D sequence of numbers >= 0, got {temperatures!r}")
    V = p_logits.shape[1]
    widths = [check_int(w, "widths", minimum=1, maximum=V) for w in widths]  # each in [1, V]
    order = np.argsort(-q_logits, axis=1)  # candidates by draft preference, best first
    q_fixed = None if draft_temperature is None else softmax(q_logits, draft_temperature)
    out: dict[str, list[float | np.ndarray]] = {"sampled": [], "greedy": [], **{f"top{w}": [] for w in widths}}
    if q_fixed is not None:
        out["mismatch"] = []
    for t in temps:
        p = softmax(p_logits, t)
        out["sampled"].append(acceptance_rate(p, softmax(q_logits, t)))
        p_sorted = np.take_along_axis(p, order[:, : max(widths, default=1)], axis=1)
        out["greedy"].append(p_sorted[:, 0])
        cum = np.cumsum(p_sorted, axis=1)
        for w in widths:
            out[f"top{w}"].append(cum[:, w - 1])
        if q_fixed is not None:
            out["mismatch"].append(acceptance_rate(p, q_fixed))
    return {kind: np.array(rows) for kind, rows in out.items()}


def tau_by_position(beta: npt.ArrayLike, k: int) -> float:
    """Tokens per verify from per-position acceptance beta_t along a text (chains started at every t):

        tau = mean_t [1 + sum_{j=1..K} prod_{i<j} beta_{t+i}].

    Equals E(alpha, K) when beta is constant; with real text, easy and hard tokens cluster,
    so tau differs from E(mean beta, K) -- this measures by how much. ``beta``: (T,).
    """
    beta = np.asarray(beta, dtype=float)
    k = check_k(k)
    if beta.ndim != 1 or len(beta) < k or np.any(~np.isfinite(beta)) or np.any((beta < 0) | (beta > 1)):
        raise ValueError(f"beta must be a 1-D array of at least k={k} acceptance probabilities in [0, 1]")
    runs = np.cumprod(sliding_window_view(beta, k), axis=1)  # P(first j drafts accepted), j = 1..K
    return float(1 + runs.sum(axis=1).mean())


def breakeven_temperature(temperatures: npt.ArrayLike, alphas: npt.ArrayLike, c: float, k: int | None = None) -> float:
    """The lowest temperature T at which speculation stops paying, from a measured alpha(T).

    alpha(T) is interpolated linearly between the measured points. With ``k`` given the
    speedup is S(T) = E(alpha(T), k) / (k c + 1); with ``k=None`` it is the best-K speedup
    max_K E/(K c + 1). S rises with alpha, so S(T) = 1 exactly where alpha(T) = alpha*, with
    alpha* = breakeven_alpha(k, c); for the best K, alpha* = breakeven_alpha(1, c) = c, because
    E(alpha, K) <= 1 + K alpha < 1 + K c whenever alpha < c (Leviathan et al. Cor. 3.9).

    Returns the first T in [T_0, T_max] with alpha(T) <= alpha* (T_0 itself if speculation
    never pays in the measured range), or ``inf`` if alpha stays above alpha* everywhere.
    """
    t = check_finite_1d(temperatures, "temperatures", 2)
    a = check_finite_1d(alphas, "alphas", 2)
    if len(t) != len(a):
        raise ValueError(f"temperatures and alphas must have the same length, got {len(t)} and {len(a)}")
    if np.any(t < 0) or np.any(np.diff(t) <= 0):
        raise ValueError(f"temperatures must be >= 0 and strictly increasing, got {temperatures!r}")
    check_unit(alphas, "alphas")
    check_c(c)
    if k is not None:
        k = check_k(k)
    a_star = float(breakeven_alpha(1 if k is None else k, c))
    a_star = 1.0 if np.isnan(a_star) else a_star  # c > 1: no alpha pays
    below = np.flatnonzero(a <= a_star)
    if len(below) == 0:
        return float("inf")
    i = int(below[0])
    if i == 0:
        return float(t[0])
    # alpha crosses alpha* inside [t[i-1], t[i]]: solve the straight line for it
    w = (a[i - 1] - a_star) / (a[i - 1] - a[i])
    return float(t[i - 1] + w * (t[i] - t[i - 1]))


def alpha_mle(accepted: npt.ArrayLike, rejected: npt.ArrayLike) -> float:
    """Per-token acceptance from rounds: sum(accepted) / (sum(accepted) + sum(rejected)).

    Each round judges its accepted drafts (successes) and at most one rejected draft
    (a failure); drafts after a rejection are never judged. Counting them (accepted / drafted,
    the "draft acceptance rate" engines report) would bias alpha low. Returns nan with no data.
    """
    judged = np.sum(accepted) + np.sum(rejected)
    return float(np.sum(accepted) / judged) if judged > 0 else float("nan")
