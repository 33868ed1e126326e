"""Claims that check themselves: a sentence about a measured result, stated where it is measured.

A notebook states a finding once, in the code cell that measured it, as a condition on this
run's values, and prints it with them:

    claim("draft-kl's α ({kl:.3f}) is above draft-ce's ({ce:.3f})", kl > ce, kl=kl, ce=ce)
    # draft-kl's α (0.577) is above draft-ce's (0.551) — holds here
    # ... or: ... — does not hold here: measured kl = 0.531, ce = 0.551

so a student's re-run says whether the conclusion still holds on their machine, and the prose
cannot drift from the run. The sentence is one template string (placeholders are the names of
``values``), so a later catalogue can translate it as one source string.

Comparisons of measured spreads go through ``Interval``: ``a > b`` holds only when a's whole
interval lies above b's, so "faster" cannot be printed as holding while the intervals overlap.

A claim can also be given its condition as a function of its values (``holds=lambda a, b, **_: a > b``,
the threshold and direction fixed in code before the run). Then ``claim`` *sweeps* it: every
``Interval`` value is replaced by a single value at each end of its spread (where the measured
quantity could as well be), in every combination, and a verdict that flips is printed as fragile,
naming the ends that flip it (``sweep``). A comparison of intervals that do not overlap never
flips; a median against a threshold inside its spread, an "overlaps" or a "does not lie below",
or a fastest picked by medians does: rewrite that claim (two overlapping measurements show "no
difference measured", not a claim), or measure longer, until its interval excludes the alternative.

The line is printed in the course's language (``messages.use``): the sentence through the
catalogue (``locale/fa/claims.po``, written by ``claim_catalogue``), the verdict words too, and a
string value that is a word the code computes (``order``'s "above") as a value word
(``messages.word``); names and numbers stay as they are. ``Claim.sentence`` is always the English
template, and in English the line is exactly what it was before there were translations.
"""
from __future__ import annotations

import itertools
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from lessonlib.course import messages

HOLDS = "holds here"
FAILS = "does not hold here"
# The verdicts as catalogue templates, the dash included: translating stored output matches them
# only after a claim's sentence, never a "(holds here)" in some other printed line.
SAYS_HOLDS = f"— {HOLDS}"
SAYS_FAILS = f"— {FAILS}"
MEASURED = f"— {FAILS}: measured {{measured}}"  # a failing claim's verdict, with what was measured
FRAGILE = "(fragile: the verdict flips within the measured spread, at {where})"  # what sweep found
SWEEP_LIMIT = 6  # intervals swept in every combination (3 ** 6 calls); beyond, one and two at a time
ORDER_WORDS = ("above", "below", "overlaps")  # what order returns: value words of the catalogue


@dataclass(frozen=True)
class Interval:
    """A measured value with its spread: median and [low, high] (an IQR or a bootstrap interval).

    Ordering is strict and interval-wise: ``a > b`` means a.low > b.high (a lies wholly above
    b), ``a < b`` means a.high < b.low; against a plain number x, ``a > x`` means a.low > x.
    Overlapping intervals are neither above nor below each other (``a.overlaps(b)``).
    """

    median: float
    low: float
    high: float
    unit: str = ""

    def __post_init__(self) -> None:
        for name in ("median", "low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(f"Interval {name} must be a finite number, got {value!r}")
        if not self.low <= self.median <= self.high:
            raise ValueError(f"Interval needs low <= median <= high, got {self.low!r}, {self.median!r}, {self.high!r}")

    @classmethod
    def of(cls, summary: Mapping[str, Any], unit: str = "") -> Interval:
        """From a ``measures.summary`` dict ({"median", "q25", "q75", ...}) or a record cell."""
        if not isinstance(summary, Mapping) or not {"median", "q25", "q75"} <= set(summary):
            raise ValueError(f"summary must be a mapping with median, q25 and q75 (measures.summary), got {summary!r}")
        return cls(float(summary["median"]), float(summary["q25"]), float(summary["q75"]), unit)

    def _bounds(self, other: object) -> tuple[float, float]:
        if isinstance(other, Interval):
            return other.low, other.high
        if isinstance(other, Real) and not isinstance(other, bool) and math.isfinite(other):
            return float(other), float(other)
        raise ValueError(f"an Interval compares with an Interval or a finite number, got {other!r}")

    def __gt__(self, other: object) -> bool:
        return self.low > self._bounds(other)[1]

    def __lt__(self, other: object) -> bool:
        return self.high < self._bounds(other)[0]

    def __ge__(self, other: object) -> bool:  # "at least" over intervals is not one idea: refuse, not guess
        raise TypeError("Interval supports > and < (wholly above / below) and overlaps(), not >= or <=")

    __le__ = __ge__

    def overlaps(self, other: object) -> bool:
        """True when the two intervals (or the interval and the number) share a point."""
        low, high = self._bounds(other)
        return self.low <= high and low <= self.high

    def __format__(self, spec: str) -> str:
        spec = spec or ".2f"
        return f"{self.median:{spec}}{self.unit} [{self.low:{spec}}, {self.high:{spec}}]"


def highest(intervals: Mapping[Any, Interval]) -> Any:
    """The key whose interval has the highest median: a "fastest" picked by medians, which a claim
    given as a function (``lambda s, **_: highest(s) == "tree"``) re-picks at every end its sweep tries."""
    if (not isinstance(intervals, Mapping) or not intervals
            or not all(isinstance(v, Interval) for v in intervals.values())):
        raise ValueError(f"intervals must be a non-empty mapping of Intervals, got {intervals!r}")
    return max(intervals, key=lambda key: intervals[key].median)


def order(a: Interval, b: Interval) -> str:
    """'above', 'below' or 'overlaps': where interval a lies against b (the word a sentence may use;
    always English here, ``claim`` shows it in the course's language)."""
    if not isinstance(a, Interval) or not isinstance(b, Interval):
        raise ValueError(f"order needs two Intervals, got {a!r} and {b!r}")
    return "above" if a > b else "below" if a < b else "overlaps"


@dataclass(frozen=True)
class Claim:
    """One checked sentence: the template, this run's values, whether it holds, the printed line."""

    sentence: str
    values: Mapping[str, Any]
    holds: bool
    text: str
    flips: tuple[str, ...] = ()  # where the sweep flipped the verdict (a condition given as a function)

    def __bool__(self) -> bool:
        return self.holds

    def __str__(self) -> str:
        return self.text


def _fields(sentence: str) -> list[tuple[str, str]]:
    """[(name, format spec)] of the template's placeholders; only plain names are allowed."""
    try:
        parsed = list(string.Formatter().parse(sentence))
    except ValueError as error:
        raise ValueError(f"sentence is not a valid template ({error}): {sentence!r}") from None
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or conversion:
            raise ValueError(f"sentence placeholders must be plain names such as {{alpha:.3f}}, got {{{name}}}")
        fields.append((name, spec or ""))
    return fields


def _check_value(name: str, value: Any) -> None:
    if isinstance(value, Real) and not isinstance(value, bool) and not math.isfinite(value):
        raise ValueError(f"value {name} must be finite, got {value!r}")


def _as_bool(holds: Any) -> bool:
    """A bool (numpy's too); anything else is a mistake: an array, a number, a string, None."""
    if isinstance(holds, (bool, np.bool_)):
        return bool(holds)
    raise ValueError(f"holds must be a bool (the condition on this run's values), got {holds!r}")


def _template(sentence: str) -> str:
    """The sentence in the course's language; English when the translation is missing or names
    other placeholders than the English (a broken catalogue entry must not break a student's run)."""
    translated = messages._(sentence)
    try:
        same = sorted(_fields(translated)) == sorted(_fields(sentence))
    except ValueError:  # a placeholder the English could not have ({0}, {x!r})
        same = False
    return translated if same else sentence


def _ends(value: Interval) -> list[tuple[str, Interval]]:
    """Where else within its spread the measured quantity could be: a single value (an interval of
    width zero) at its low end and at its high end."""
    return [("low end", Interval(value.low, value.low, value.low, value.unit)),
            ("high end", Interval(value.high, value.high, value.high, value.unit))]


def _leaves(values: Mapping[str, Any]) -> list[tuple[str, Any, Interval]]:
    """(label, (name, key or None), interval) of every Interval among ``values``: a value itself, or
    an item of a list, tuple or dict value (one level deep)."""
    found = []
    for name, value in values.items():
        if isinstance(value, Interval):
            found.append((name, (name, None), value))
        elif isinstance(value, Mapping):
            found += [(f"{name}[{key}]", (name, key), v) for key, v in value.items() if isinstance(v, Interval)]
        elif isinstance(value, (list, tuple)):
            found += [(f"{name}[{i}]", (name, i), v) for i, v in enumerate(value) if isinstance(v, Interval)]
    return found


def _with(values: Mapping[str, Any], changes: Mapping[tuple[str, Any], Interval]) -> dict[str, Any]:
    """``values`` with the intervals at ``changes``' places replaced (containers copied, not changed)."""
    out = dict(values)
    for (name, key), interval in changes.items():
        if key is None:
            out[name] = interval
            continue
        container = out[name] if out[name] is not values[name] else (
            dict(values[name]) if isinstance(values[name], Mapping) else list(values[name]))
        container[key] = interval
        out[name] = container
    for name, value in values.items():  # a tuple stays a tuple
        if isinstance(value, tuple) and out[name] is not value:
            out[name] = tuple(out[name])
    return out


def _trials(leaves: list) -> list[tuple]:
    """The ends tried: every combination of {as measured, low end, high end} up to ``SWEEP_LIMIT``
    intervals; beyond, each interval alone and each pair in all four directions."""
    options = [_ends(interval) for _, _, interval in leaves]
    if len(leaves) <= SWEEP_LIMIT:
        full = [[(None, None)] + [(end, point) for end, point in opts] for opts in options]
        return [tuple((i, end, v) for i, (end, v) in enumerate(combo) if end is not None)
                for combo in itertools.product(*full)]
    trials: list[tuple] = [((i, end, v),) for i, opts in enumerate(options) for end, v in opts]
    for i, j in itertools.combinations(range(len(leaves)), 2):
        trials += [((i, a, v), (j, b, w)) for a, v in options[i] for b, w in options[j]]
    return trials


def sweep(holds: Any, values: Mapping[str, Any]) -> list[str]:
    """Where the condition ``holds(**values)`` gives another verdict than at the measured values,
    with each ``Interval`` among the values (or among the items of a list, tuple or dict value)
    replaced by a single value at the low or the high end of its spread (where the measured
    quantity could as well be), as "name at its low end, ...": the smallest sets of ends that flip
    it (a superset of one is not listed), empty for a claim no such choice can flip. Every
    combination up to ``SWEEP_LIMIT`` intervals; beyond, one and two at a time."""
    if not callable(holds):
        raise ValueError(f"holds must be a function of the values to sweep, got {holds!r}")
    verdict = _as_bool(holds(**values))
    leaves = _leaves(values)
    flips: list[frozenset] = []
    for trial in sorted(_trials(leaves), key=len):  # smallest first: a flip's supersets say nothing new
        moved = frozenset((i, end) for i, end, _ in trial)
        if not trial or any(f <= moved for f in flips):
            continue
        if _as_bool(holds(**_with(values, {leaves[i][1]: v for i, _, v in trial}))) != verdict:
            flips.append(moved)
    return [", ".join(f"{leaves[i][0]} at its {end}" for i, end in sorted(f)) for f in flips]


def claim(sentence: str, holds: Any, *, show: bool = True, **values: Any) -> Claim:
    """State ``sentence`` (a template over ``values``) with this run's numbers and whether it holds.

    sentence: one template string, e.g. "the tree ({tree}) is faster than the chain ({chain})";
        every placeholder names a keyword in ``values``, with an optional format spec.
    holds: the condition on those values, a bool (for spreads: ``Interval`` comparisons), or a
        function of them, called with every value by name (``lambda a, b, **_: a > b``), which is
        also swept across the spreads (``sweep``).
    show: print the line (a notebook cell); False only builds it (a test).
    Returns a ``Claim``: truthy when it holds; ``.text`` is the printed line (in the course's
    language), ``.sentence`` the English template.
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"sentence must be a non-empty template string, got {sentence!r}")
    fields = _fields(sentence)
    missing = sorted({name for name, _ in fields} - set(values))
    if missing:
        raise ValueError(f"sentence names {', '.join(missing)}, which values does not give")
    for name, value in values.items():
        _check_value(name, value)
    flips: list[str] = []
    if callable(holds):
        flips = sweep(holds, values)
        holds = holds(**values)
    ok = _as_bool(holds)
    said = {name: messages.word(value) for name, value in values.items()}  # "above" in the course's language
    text = _template(sentence).format(**said)
    if ok:
        line = f"{text} {messages._(SAYS_HOLDS)}"
    else:
        specs = dict(fields)
        numbers = {k: v for k, v in said.items() if isinstance(v, (Real, Interval)) and not isinstance(v, bool)}
        shown = numbers or said  # the measured numbers; labels (a draft's name) are already in the sentence
        measured = ", ".join(f"{name} = {value:{specs.get(name, '')}}" for name, value in shown.items())
        # a sentence without values has nothing to list: the verdict alone, not "measured" and nothing
        verdict = messages.say(MEASURED, measured=measured) if measured else messages._(SAYS_FAILS)
        line = f"{text} {verdict}"
    if flips:
        line += " " + messages.say(FRAGILE, where="; ".join(flips[:3]))
    line = messages.printed(line)  # one line laid out for the language, its parts together
    if show:
        print(line)
    return Claim(sentence, dict(values), ok, line, tuple(flips))
