"""The load check (lessonlib.bench.load): its verdicts, and the busy process it starts and kills.
Nothing here asserts on time."""
import os

import numpy as np
import pytest

from lessonlib.bench import load
from lessonlib.decoding import measures


def _condition(condition, threads, vs_one, speedup):
    return {"condition": condition, "threads": threads,
            "pass_table": {"vs_one": vs_one, "monotone": bool(np.all(np.diff(vs_one) >= -0.1 * np.array(vs_one[:-1])))},
            "chain": {"chain draft-kl K=3, T=0": {"speedup": measures.summary([speedup] * 5)}}}


def test_load_verdicts():
    results = {"idle, 1 thread(s)": _condition("idle", 1, [1, 1.1, 1.2], 1.8),
               "busy, 1 thread(s)": _condition("busy", 1, [1, 1.05, 1.3], 1.6),
               "idle, 2 thread(s)": _condition("idle", 2, [1, 1.1, 1.2], 1.6),
               "busy, 2 thread(s)": _condition("busy", 2, [1, 0.4, 1.3], 0.9)}
    verdict = load.checks(results)
    assert verdict["1 thread(s)"]["passed"]  # 1.6 / 1.8 is within 25 %
    two = verdict["2 thread(s)"]
    assert not two["passed"] and not two["pass_table_monotone"]["busy"] and not two["speedups_within_25_percent"]
    results["busy, 1 thread(s)"]["chain"] = {"skipped": "too slow"}
    assert not load.checks(results)["1 thread(s)"]["passed"]  # unmeasurable counts as failed


def test_busy_process_is_started_and_killed():
    with load.busy_process() as busy:
        pid = busy["pid"]
        assert os.sched_getaffinity(pid) == {busy["core"]}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with load.busy_process(False) as none:
        assert none is None
