"""Comparing a re-rendered artifact with committed text without comparing machine-computed floats
as text (issue 54, item 1).

Two CPUs compute the same float to within its last bits (AVX2 and AVX-512 sum in different
orders), so a file rendered on one machine differs from a file rendered on another in the last
digits of a full-precision number, or, for a value on a rounding boundary, in the last printed
digit of a short one. ``differences(a, b)`` splits both texts into numbers and the text between
them: the text must be identical (every word, decision and table cell), integers identical, and
two decimals agree when they are within ``REL`` of each other relative to the larger, or within
one unit of the last digit printed (a value on a rounding boundary prints either way). A real
change of the measurements moves numbers by far more (the tests' controls show it).
"""
from __future__ import annotations

import math
import re

REL = 1e-9  # the stated relative tolerance for full-precision numbers
NUMBER = re.compile(r"-?(?:\d+\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _unit(token: str) -> float:
    """One unit in the last digit ``token`` prints (0 for an integer: integers must match)."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa:
        return 0.0
    return 10.0 ** (int(exponent or 0) - len(mantissa.split(".")[1]))


def _agree(x: str, y: str, rel: float) -> bool:
    if x == y:
        return True
    a, b = float(x), float(y)
    if _unit(x) == 0.0 or _unit(y) == 0.0:  # an integer (a K, a count, a width) never moves by float noise
        return False
    # 1e-12 of slack: the printed unit itself is a float (10 ** -2 is not exactly 0.01)
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), max(_unit(x), _unit(y)) * (1 + 1e-12))


def differences(a: str, b: str, rel: float = REL, limit: int = 5) -> list[str]:
    """Where ``a`` and ``b`` differ beyond float noise: up to ``limit`` descriptions (empty: the same)."""
    words_a, words_b = NUMBER.split(a), NUMBER.split(b)
    nums_a, nums_b = NUMBER.findall(a), NUMBER.findall(b)
    if words_a != words_b or len(nums_a) != len(nums_b):
        for i, (x, y) in enumerate(zip(words_a, words_b)):
            if x != y:
                return [f"text differs at piece {i}: {x[:80]!r} against {y[:80]!r}"]
        return [f"one text is longer ({len(words_a)} against {len(words_b)} pieces)"]
    out = [f"number {i}: {x} against {y}" for i, (x, y) in enumerate(zip(nums_a, nums_b)) if not _agree(x, y, rel)]
    return out[:limit]


def one_ulp(value, direction: int):
    """``value`` moved by one unit in the last place (floats only; ints, bools and text unchanged)."""
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return math.nextafter(value, math.inf if direction > 0 else -math.inf)
    return value


def perturbed(x, seed: int = 0, _state: list | None = None):
    """A copy of a JSON value with every computed float moved one ulp, up or down in a fixed pseudo-random
    order (what another CPU's arithmetic does to the numbers it writes). A float of 8 significant
    digits or fewer (a temperature of 1.0, a margin of 0.2, a quantile 0.25) is a setting someone
    typed, the same on every machine, and stays."""
    state = _state if _state is not None else [seed * 2654435761 % 2**32 or 1]
    if isinstance(x, dict):
        return {k: perturbed(v, seed, state) for k, v in x.items()}
    if isinstance(x, list):
        return [perturbed(v, seed, state) for v in x]
    if isinstance(x, float) and len(repr(x).lstrip("-0.").replace(".", "").split("e")[0]) > 8:
        state[0] = (1103515245 * state[0] + 12345) % 2**31
        return one_ulp(x, 1 if state[0] & 1024 else -1)
    return x
