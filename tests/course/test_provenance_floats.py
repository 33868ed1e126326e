"""The provenance tests pass on any CPU (issue 54, item 1): the committed skill file is compared with
its re-rendering as text with parsed numbers (``tests/float_text.py``), and here every number it is
rendered from is moved by one unit in the last place -- what another machine's arithmetic does -- and
the comparison still passes; a real change of the measurements still fails it."""
from __future__ import annotations

import copy
import json

import pytest
from float_text import differences, perturbed

from lessonlib import paths
from lessonlib.bench import record
from lessonlib.course import skill
from lessonlib.course.skill import concurrency

BENCH = paths.ROOT / "outputs" / "benchmarks"
COMMITTED = paths.ROOT / "outputs" / "skill-speculative-tuning.md"


def _inputs():
    measurements = skill.load_measurements(BENCH / "temperature.json")
    return measurements, record.load(BENCH), concurrency.load(BENCH)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_skill_file_survives_its_inputs_moved_one_ulp(seed):
    m, rows, batch = _inputs()
    moved = [perturbed(json.loads(json.dumps(x)), seed) for x in (m, rows, batch)]
    assert moved[0] != m  # the perturbation moved numbers
    rendered = skill.build_skill(*moved)
    assert not differences(rendered, COMMITTED.read_text())


def test_at_full_precision_the_ulp_shows_in_the_text_and_the_comparison_still_passes(monkeypatch):
    """Without the renderer's rounding the perturbation reaches the text (so the test above is not vacuous
    about what it survives), and the number-parsing comparison alone still accepts it."""
    monkeypatch.setattr(skill.render, "SIGNIFICANT", 17)
    m, rows, batch = _inputs()
    exact = skill.build_skill(m, rows, batch)
    moved = skill.build_skill(*[perturbed(json.loads(json.dumps(x)), 1) for x in (m, rows, batch)])
    assert moved != exact and not differences(moved, exact)


def test_a_real_change_still_fails_and_so_does_an_edited_word():
    m, rows, batch = _inputs()
    committed = COMMITTED.read_text()
    other = copy.deepcopy(m)
    other["c"] = {name: value * 1.01 for name, value in other["c"].items()}  # a 1 % change of the draft's cost
    assert differences(skill.build_skill(other, rows, batch), committed)
    assert differences(committed.replace("turn", "tum", 1), committed)


def test_the_comparison_rule_on_hand_cases():
    # the AVX-512 / AVX2 pair from the issue, and a short number on a rounding boundary
    assert not differences("x 1.3004290537155567 y", "x 1.300429053715557 y")
    assert not differences("speedup 1.21×", "speedup 1.20×")
    # beyond the tolerance, an integer, a sign, a missing number or text: all differences
    for a, b in [("1.3004", "1.3006"), ("K=3", "K=4"), ("0.5", "-0.5"), ("a 1.0 b", "a b"), ("on 1.0", "off 1.0"),
                 ("1.2e-3", "1.2e-2")]:
        assert differences(a, b), (a, b)


def test_the_decision_block_prints_a_fixed_number_of_significant_digits():
    block = COMMITTED.read_text().rsplit("```json\n", 1)[1]
    digits = [len(t.replace("-", "").replace(".", "").lstrip("0")) for t in
              __import__("re").findall(r"-?\d+\.\d+", block)]
    assert digits and max(digits) <= skill.render.SIGNIFICANT
