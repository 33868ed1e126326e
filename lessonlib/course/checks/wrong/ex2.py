"""Wrong implementations for notebook 2: E(α, K), wall time, speedup, the best K."""
from __future__ import annotations

import numpy as np

from lessonlib.core import theory
from lessonlib.course.checks.framework import Wrong

E = theory.expected_tokens_per_verify
S = theory.expected_speedup


def tokens_closed_form_without_alpha_one(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_scalar_only(alpha, k):
    if alpha == 1:  # an `if` on an array raises
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_infinite_k(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(alpha < 1, 1 / np.where(alpha < 1, 1 - alpha, 1), k + 1.0)


def tokens_as_list(alpha, k):
    return [float(E(alpha, k))]  # wrapped in a list


def optimal_k_largest_on_ties(alpha, c, k_max=32):
    best = 1
    for k in range(1, k_max + 1):
        if S(alpha, k, c) >= S(alpha, best, c):  # >= moves to the last of equal speedups
            best = k
    return best


def tokens_near_one_is_one(alpha, k):
    """Treats every α above 0.99 as 1: K + 1 tokens (a "numerical" threshold that is a wrong answer)."""
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(alpha > 0.99, k + 1.0, (1 - alpha ** (k + 1)) / (1 - alpha))


ARRAYS = "use np.where"
ONE_POWER = "E = 1 + α + α² + … + α^K"
WALL = "one round costs K draft steps (K·c) plus one target pass (1)"
SPEEDUP = "speedup = E(α, K)/(K·c + 1)"
ENTRIES = [
    Wrong("2a", "one power short", lambda a, k: sum(np.asarray(a, dtype=float) ** j for j in range(k)),
          "one power short", "sums α⁰ … α^(K−1): K terms instead of K + 1"),
    Wrong("2a", "0/0 at α = 1", tokens_closed_form_without_alpha_one, "avoid dividing 0 by 0",
          "the closed form without the α = 1 case returns nan"),
    Wrong("2a", "linear in α", lambda a, k: 1 + k * np.asarray(a, dtype=float), ONE_POWER, "1 + K·α, the linear "
          "'production' formula"),
    Wrong("2a", "an if on α", tokens_scalar_only, ARRAYS, "`if alpha == 1` fails on a numpy array"),
    Wrong("2a", "infinite K", tokens_infinite_k, ONE_POWER, "1/(1 − α), the K → ∞ limit"),
    Wrong("2a", "starts at α¹", lambda a, k: sum(np.asarray(a, dtype=float) ** j for j in range(1, k + 1)),
          "α⁰ = 1 term",
          "forgets the token every round emits (α⁰ = 1)"),
    Wrong("2a", "a one-element list", tokens_as_list, "only an array α gives an array",
          "returns [E] instead of a number"),
    Wrong("2a", "α above 0.99 counts as 1", tokens_near_one_is_one, "however close",
          "returns K + 1 for α = 0.995 and 0.999"),
    Wrong("2a", "E as a string", lambda a, k: f"{float(E(a, k)):.6f}", "expected a single number",
          "returns the formatted number, not the number"),
    Wrong("2b", "c clipped to 0.3", lambda a, k, c: (k * min(c, 0.3) + 1) / E(a, k), WALL,
          "caps the draft cost at 0.3, below what the course measures (0.15-0.67)"),
    Wrong("2b", "ignores c", lambda a, k, c: 1 / E(a, k), WALL, "1/E: the drafts cost nothing"),
    Wrong("2b", "K + 1 draft steps", lambda a, k, c: ((k + 1) * c + 1) / E(a, k), WALL,
          "charges a draft step for the bonus token too"),
    Wrong("2b", "inverted", lambda a, k, c: E(a, k) / (k * c + 1), WALL, "E/(K·c + 1): the speedup, not the time"),
    Wrong("2b", "one draft step", lambda a, k, c: (c + 1) / E(a, k), WALL, "charges c once per round instead of K·c"),
    Wrong("2c", "c clipped to 0.3", lambda a, k, c: E(a, k) / (k * min(c, 0.3) + 1), SPEEDUP,
          "caps the draft cost at 0.3: wrong for drafts as costly as the course measures"),
    Wrong("2c", "ignores c", lambda a, k, c: E(a, k), "does not change with the draft cost c", "returns E"),
    Wrong("2c", "one draft's cost", lambda a, k, c: E(a, k) / (1 + c), SPEEDUP, "divides by 1 + c instead of K·c + 1"),
    Wrong("2c", "subtracts the cost", lambda a, k, c: E(a, k) * (1 - k * c) if k * c < 1 else 0.0, SPEEDUP,
          "E·(1 − K·c)"),
    Wrong("2c", "E one power short", lambda a, k, c: E(a, k - 1) / (k * c + 1) if k > 1 else 1 / (c + 1),
          "does not reproduce the paper", "uses E(α, K − 1)"),
    Wrong("2d", "zero-based K", lambda a, c, k_max=32: int(np.argmax([S(a, k, c) for k in range(1, k_max + 1)])),
          "argmax + 1", "returns the argmax index, one less than K"),
    Wrong("2d", "maximises E", lambda a, c, k_max=32: max(range(1, k_max + 1), key=lambda k: E(a, k)), "not E",
          "ignores the cost: the largest E is always at k_max"),
    Wrong("2d", "ignores k_max", lambda a, c, k_max=32: max(range(1, 33), key=lambda k: S(a, k, c)), "k_max",
          "always searches K = 1..32"),
    Wrong("2d", "returns the speedup", lambda a, c, k_max=32: max(S(a, k, c) for k in range(1, k_max + 1)),
          "return K itself", "returns the best speedup instead of the K that reaches it"),
    Wrong("2d", "ignores c", lambda a, c, k_max=32: max(range(1, k_max + 1), key=lambda k: S(a, k, 0.0)),
          "maximise expected_speedup(α, K, c)", "maximises the c = 0 speedup"),
    Wrong("2d", "c clipped to 0.3", lambda a, c, k_max=32: max(range(1, k_max + 1), key=lambda k: S(a, k, min(c, 0.3))),
          "maximise expected_speedup(α, K, c)", "caps the draft cost at 0.3: too many drafts for a costly draft"),
    Wrong("2d", "largest K among ties", optimal_k_largest_on_ties, "return the smallest K",
          "a loop with >= keeps the last of equal speedups"),
    Wrong("2d", "range stops at k_max − 1", lambda a, c, k_max=32: max(range(1, k_max), key=lambda k: S(a, k, c)),
          "range(1, k_max + 1)", "never tries K = k_max"),
]
