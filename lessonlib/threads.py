"""The CPU thread policy: how many threads torch may use for one forward pass.

Decided by measurement (``python -m lessonlib.bench decode`` runs every measurement under one
and two threads, ``outputs/benchmarks/record.md``; ``python -m lessonlib.bench load`` repeats the
lesson's timings idle and with a busy process pinned to one core, ``load.md``):

* **one thread** (the default) survives a busy machine: with another program on one of the two
  cores, a one-thread forward simply runs on the free core, while a two-thread forward waits for
  the busy core at every operator (a one-token target pass took a median of 328 ms instead of
  4 ms in one such run; on a machine already shared with other jobs, plain decoding ran at about
  100 tokens/s with one thread, with or without the busy process, and at 31 and 6 tokens/s with two);
* **two threads** give more plain tokens per second on an idle machine, because the target's
  matrix products split across both cores (the draft's are too small to gain, and the per-round
  Python work does not split). The speedup of speculative over plain decoding moves little
  either way on an idle machine: the two settings' speedups overlap within their spreads over
  prompts, and which is higher changes from run to run (``record.md``).

So the course runs with one thread. ``LESSONLIB_THREADS=2`` (any integer >= 1) overrides it;
``LESSONLIB_THREADS=0`` leaves torch's own default (one thread per core). The policy is
applied once, when ``lessonlib.models`` is imported, and ``lessonlib.describe()`` prints it.
This module imports nothing outside the standard library (``lessonlib.core`` reads it).
"""
from __future__ import annotations

import contextlib
import os

ENV_VAR = "LESSONLIB_THREADS"
DEFAULT = 1  # the measured choice (see the module docstring)


def policy() -> int:
    """Threads for torch's CPU operators: ``$LESSONLIB_THREADS`` if set, else ``DEFAULT``;
    0 means "torch's default". Raises ValueError for anything but an integer >= 0."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return DEFAULT
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be an integer >= 0 (0: torch's default), got {raw!r}") from None
    if n < 0 or n > maximum():
        raise ValueError(f"{ENV_VAR} must be an integer from 0 (torch's default) to {maximum()} (4 per CPU core "
                         f"here), got {raw!r}")
    return n


def maximum() -> int:
    """The most threads ``LESSONLIB_THREADS`` may ask for: 4 per core, at most 1024 (99,999 threads
    once crashed torch with a segmentation fault instead of an error)."""
    return min(1024, 4 * (os.cpu_count() or 1))


def apply() -> int:
    """Set torch's intra-op thread count from ``policy()``; returns the count torch now uses."""
    import torch

    n = policy()
    if n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


@contextlib.contextmanager
def using(n: int):
    """Run a block with ``n`` torch threads, then restore the previous count (the benchmarks
    measure both settings this way)."""
    import torch

    # an inline check, not core.validate.check_int: core reads this module, so importing core here is a cycle
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def describe() -> str:
    """One phrase for ``describe()``: "1 torch thread (course default; LESSONLIB_THREADS overrides)"."""
    n = policy()
    if n == 0:
        return f"torch's default thread count ({ENV_VAR}=0)"
    source = f"{ENV_VAR}={n}" if os.environ.get(ENV_VAR, "").strip() else f"course default; {ENV_VAR} overrides"
    return f"{n} torch thread{'s' if n > 1 else ''} ({source})"
