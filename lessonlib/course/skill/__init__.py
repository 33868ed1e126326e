"""The lesson's deliverable: a tuning procedure for speculative decoding, built from measurements.

* ``recommend`` (``recommend.py``) -- the decision as a dict: which draft, K and tree width
  maximising S = (1 + alpha_w E(alpha, K - 1)) / (K c + r(w K + 1)), the temperature gate, the
  concurrency limit, fallback thresholds and what to monitor, all from that one cost model.
* ``load_measurements`` / ``validate_measurements`` (``schema.py``) -- the measurements notebook 5
  writes to ``measurements_path()`` (``outputs/benchmarks/temperature.json``; schema there).
* ``build_skill`` / ``write_skill`` (``render.py``) -- the Markdown file at ``skill_path()``
  (``outputs/skill-speculative-tuning.md``).
* ``python -m lessonlib.course.skill`` regenerates the file; ``python -m lessonlib.course.skill
  --alpha 0.7 --c 0.05 --temperature 0.8`` prints the decision for your own numbers.

Paths are resolved when used, through ``lessonlib.paths`` (``LESSONLIB_OUTPUTS`` moves them):
``MEASUREMENTS`` and ``SKILL_FILE`` are computed on each access, like ``measurements_path()``
and ``skill_path()``.
"""
from lessonlib import paths
from lessonlib.course.skill.recommend import (
    CONCURRENCIES,
    OFF_BELOW,
    alpha_from_tau,
    breakeven_alpha_best_k,
    recommend,
    speedup_grid,
    temperature_gate,
    verify_cost,
    worked_examples,
)
from lessonlib.course.skill.render import build_skill, decision_block, skill_path, write_skill
from lessonlib.course.skill.schema import (
    check_forward_cost,
    load_measurements,
    measurements_path,
    validate_measurements,
)

ROOT = paths.ROOT

__all__ = ["CONCURRENCIES", "MEASUREMENTS", "OFF_BELOW", "ROOT", "SKILL_FILE", "alpha_from_tau",
           "breakeven_alpha_best_k", "build_skill", "check_forward_cost", "decision_block", "load_measurements",
           "measurements_path", "recommend", "skill_path", "speedup_grid", "temperature_gate",
           "validate_measurements", "verify_cost", "worked_examples", "write_skill"]


def __getattr__(name):
    # module attributes computed on access (PEP 562), so a test's LESSONLIB_OUTPUTS is honoured
    if name == "MEASUREMENTS":
        return measurements_path()
    if name == "SKILL_FILE":
        return skill_path()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
