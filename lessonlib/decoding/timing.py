"""The one clock: every time the course reports is measured here.

* ``Clock`` -- wall time per phase (draft, verify, target, ...) inside a decoding loop,
  ``time.perf_counter`` based; on CUDA the device is synchronised around every call so the
  times are real, not launch times.
* ``fastest`` -- the fastest of ``repeats`` identical runs of a whole decode: other programs
  on the machine can only add time, so the minimum is the least disturbed run.
* ``interleaved`` -- several methods (plain decoding and the speculative ones) on the same
  prompts, taking turns run by run, each kept as its fastest: the way every speedup in the
  course is measured, so a slow spell on a shared machine hits all methods of a prompt alike.
* ``warm_seconds`` -- the median time of one call repeated back to back (a *warm* figure:
  the weights stay in cache, so it understates the in-loop cost; name it as such).
* ``pass_times`` -- notebook 00's table: the fastest forward over n new tokens after a cached
  context, the sizes taking turns within each repeat.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    import torch

    from lessonlib.decoding.stats import DecodeStats
    from lessonlib.models.gpt import GPT


class Timer(Protocol):
    """What a loop times its work with: a ``Clock`` or ``untimed``. ``clock(phase, fn, *args,
    **kwargs)`` returns ``fn(*args, **kwargs)`` (a ``Clock`` files its seconds under ``phase``)."""

    def __call__(self, phase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...


# run() -> (tokens, stats): one repeatable decode (``fastest``); runs[name](i) likewise for item i
Run = Callable[[], tuple[Any, Any]]


def _synchronize(device: torch.device | str | None) -> None:
    if device is not None and getattr(device, "type", str(device)).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


class Clock:
    """Accumulates wall time and call counts per phase."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, phase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, its wall time filed under ``phase`` (the ``Timer`` protocol)."""
        with self.phase(phase):
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """``with clock.phase("verify"): ...``: the block's wall time (the device synchronised at both
        ends) and one call filed under ``name``. A block that raises is not counted."""
        _synchronize(self.device)
        start = time.perf_counter()
        yield
        _synchronize(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        self.calls[name] = self.calls.get(name, 0) + 1

    def as_phase(self, name: str) -> Timer:
        """A clock that files every call under ``name`` (a drafter's prefill, timed as "prefill")."""
        return lambda phase, fn, *args, **kwargs: self(name, fn, *args, **kwargs)

    def per_call(self, phase: str) -> float:
        """Mean seconds per call of ``phase`` (0 if it never ran)."""
        return self.seconds.get(phase, 0.0) / max(1, self.calls.get(phase, 0))


def untimed(phase: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A ``Clock`` stand-in that times nothing (for loops run outside a benchmark)."""
    return fn(*args, **kwargs)


def run_seconds(stats: DecodeStats) -> float:
    """The seconds of a decoding loop's run (``DecodeStats.seconds``)."""
    return stats.seconds


def fastest(run: Run, repeats: int, seconds: Callable[[Any], float] = run_seconds) -> tuple[Any, Any]:
    """The (tokens, stats) of the fastest of ``repeats`` identical runs of ``run()``; each run
    returns (tokens, stats), ``seconds(stats)`` its time (default: a ``DecodeStats``'s)."""
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    return min((run() for _ in range(int(repeats))), key=lambda result: seconds(result[1]))


def interleaved(runs: dict[str, Callable[[int], tuple[Any, Any]]], n_items: int, repeats: int,
                seconds: Callable[[Any], float] = run_seconds) -> dict[str, list[tuple[Any, Any]]]:
    """The fastest (tokens, stats) of each ``runs[name](i)`` for every item i in range(n_items).

    For each item the methods take turns -- A, B, C, A, B, C, ... -- ``repeats`` times, so a
    busy spell slows every method of that item alike, and the fastest run of each is kept
    (other programs can only add time). Each call returns (tokens, stats), ``seconds(stats)``
    its time (default: a ``DecodeStats``'s); a call must be repeatable (seed its own rng from ``i``).
    Returns {name: [(tokens, stats) for each item]}.
    """
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if int(n_items) != n_items or n_items < 1:
        raise ValueError(f"n_items must be an integer >= 1, got {n_items!r}")
    if not runs:
        raise ValueError("runs must name at least one method")
    best: dict[str, list[tuple[Any, Any]]] = {name: [] for name in runs}
    for i in range(int(n_items)):
        fastest_i: dict[str, tuple[Any, Any]] = {}
        for _ in range(int(repeats)):
            for name, run in runs.items():
                result = run(i)
                if name not in fastest_i or seconds(result[1]) < seconds(fastest_i[name][1]):
                    fastest_i[name] = result
        for name in runs:
            best[name].append(fastest_i[name])
    return best


def warm_seconds(fn: Callable[[], object], reps: int = 200, device: torch.device | str | None = None,
                 warmup: int = 3) -> float:
    """Median seconds of ``fn()`` called ``reps`` times back to back, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = np.empty(reps)  # (reps,) seconds
    for i in range(reps):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times[i] = time.perf_counter() - start
    return float(np.median(times))


def pass_times(model: GPT, sizes: Iterable[int], context: int = 128, repeats: int = 30) -> dict[int, float]:
    """{n: fastest seconds of one forward of ``model`` over n new random tokens after a cached
    ``context``} for each n in ``sizes``. The sizes take turns within each repeat, so a busy
    machine slows them all alike, and the minimum keeps the least disturbed run."""
    import torch

    sizes = [int(n) for n in sizes]
    if not sizes or min(sizes) < 1 or context < 1 or context + max(sizes) > model.config.block_size:
        raise ValueError(f"sizes must be >= 1 and context ({context}) + max(sizes) must fit the model's "
                         f"{model.config.block_size} positions, got sizes={sizes}")
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    vocab, device = model.config.vocab_size, model.device
    gen = torch.Generator().manual_seed(0)
    best = {n: float("inf") for n in sizes}
    with torch.inference_mode():
        cache = model.new_cache()
        model(torch.randint(vocab, (1, context), generator=gen).to(device), cache=cache)
        for _ in range(int(repeats)):
            for n in sizes:
                cache.truncate(context)  # drop the previous pass's tokens, keep the context
                idx = torch.randint(vocab, (1, n), generator=gen).to(device)  # (1, n) int64
                _synchronize(device)
                start = time.perf_counter()
                model(idx, cache=cache)
                _synchronize(device)
                best[n] = min(best[n], time.perf_counter() - start)
    return best
