"""The one clock: every time the course reports is measured here.

* ``Clock`` -- wall time per phase (draft, verify, target, ...) inside a decoding loop,
  ``time.perf_counter`` based; on CUDA the device is synchronised around every call so the
  times are real, not launch times.
* ``fastest`` -- the fastest of ``repeats`` identical runs of a whole decode: other programs
  on the machine can only add time, so the minimum is the least disturbed run.
* ``warm_seconds`` -- the median time of one call repeated back to back (a *warm* figure:
  the weights stay in cache, so it understates the in-loop cost; name it as such).
"""
from __future__ import annotations

import time

import numpy as np


def _synchronize(device) -> None:
    if device is not None and getattr(device, "type", str(device)).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class Clock:
    """Accumulates wall time and call counts per phase."""

    def __init__(self, device=None):
        self.device = device
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, phase, fn, *args, **kwargs):
        _synchronize(self.device)
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        _synchronize(self.device)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
        self.calls[phase] = self.calls.get(phase, 0) + 1
        return out

    def per_call(self, phase) -> float:
        """Mean seconds per call of ``phase`` (0 if it never ran)."""
        return self.seconds.get(phase, 0.0) / max(1, self.calls.get(phase, 0))


def untimed(phase, fn, *args, **kwargs):
    """A ``Clock`` stand-in that times nothing (for loops run outside a benchmark)."""
    return fn(*args, **kwargs)


def fastest(run, repeats: int):
    """The (tokens, stats) of the fastest of ``repeats`` identical runs of ``run()``; each run
    returns (tokens, stats) with ``stats["seconds"]``."""
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    return min((run() for _ in range(int(repeats))), key=lambda result: result[1]["seconds"])


def warm_seconds(fn, reps: int = 200, device=None, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` called ``reps`` times back to back, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = np.empty(reps)
    for i in range(reps):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times[i] = time.perf_counter() - start
    return float(np.median(times))
