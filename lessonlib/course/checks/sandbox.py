"""Calling a student's function so that it can neither fool nor break a check.

* **Copies.** ``own_copy`` deep-copies the data a check hands over (arrays, tensors, lists,
  tuples, dicts); ``changed_argument`` compares them with the check's pristine originals after
  the call, so an in-place change is reported by name and never reaches the check's own data
  (or the next case, or the next run of the cell). Random generators, models and optimizers
  are passed as they are: sharing them is part of the contract.
* **Time limits.** ``limited`` runs a call under a deadline: a ``SIGALRM`` timer on the main
  thread (where a Jupyter kernel and pytest run cells and tests), which interrupts Python code
  and ``time.sleep``; elsewhere (another thread, no ``setitimer``) the call runs in a daemon
  thread that is abandoned when late. An outer timer (pytest-timeout's) is saved and restored,
  and still fires on time. ``LIMITS`` holds the limits; tests make them tiny.
"""
from __future__ import annotations

import _signal
import ctypes
import inspect
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Limits:
    per_call_s: float = 10.0  # one call of the student's function (a correct call takes < 0.1 s)
    per_check_s: float = 120.0  # all calls of one check together (the slowest check, 1b, takes 1.5-3.5 s)


LIMITS = Limits()


class TimeUp(BaseException):
    """The deadline passed (a BaseException, so a student's ``except Exception`` cannot swallow it)."""

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "clone")


def own_copy(x):
    """A deep copy of check data; other objects (generators, models, callables) as they are.

    A tensor that requires grad is the check's fresh leaf for this call: it is passed as is, so
    the gradient can be read back."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if _is_tensor(x):
        return x if x.requires_grad else x.detach().clone()
    if isinstance(x, list):
        return [own_copy(v) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(own_copy(v) for v in x)
    if isinstance(x, dict):
        return {k: own_copy(v) for k, v in x.items()}
    return x


def same(a, b) -> bool:
    """Whether a copy still equals the original (arrays and tensors element by element, NaN == NaN)."""
    if isinstance(a, np.ndarray):  # bit for bit (NaN stays NaN), and fast on the small arrays of the checks
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and (a.tobytes() == b.tobytes() if a.dtype != object else bool(np.array_equal(a, b))))
    if _is_tensor(a):
        return _is_tensor(b) and a.shape == b.shape and bool((a.detach() == b.detach()).all() or
                                                             a.detach().isnan().all() and b.detach().isnan().all())
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float, complex, str, bytes, np.generic)):
        return type(a) is type(b) and bool(a == b or a != a and b != b)  # NaN stays NaN
    return True  # an object passed as it is (generator, model): nothing to compare


def argument_names(fn, args, kwargs) -> list[str]:
    """The student's own names for the positional arguments (``argument 1`` … when unknown)."""
    try:
        names = list(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        names = []
    return names[: len(args)] + [f"argument {i + 1}" for i in range(len(names), len(args))]


def changed_argument(fn, originals, copies, kw_originals, kw_copies) -> str | None:
    """The name of the first argument the call changed in place, or None."""
    for i, (a, b) in enumerate(zip(originals, copies)):
        if not same(a, b):
            return argument_names(fn, originals, kw_originals)[i]
    return next((k for k in kw_originals if not same(kw_originals[k], kw_copies[k])), None)


def _in_thread(fn, args, kwargs, seconds):
    result: dict = {}

    def target():
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as err:  # handed back to the caller's thread
            result["error"] = err

    worker = threading.Thread(target=target, daemon=True, name="student-call")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():  # ask it to stop at its next bytecode; abandon it either way
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident or 0), ctypes.py_object(TimeUp))
        raise TimeUp(seconds)
    if "error" in result:
        raise result["error"]
    return result.get("value")


def limited(fn, args=(), kwargs=None, seconds: float = 10.0):
    """``fn(*args, **kwargs)``, or ``TimeUp`` once ``seconds`` have passed."""
    kwargs = kwargs or {}
    if seconds <= 0:
        raise TimeUp(0.0)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return _in_thread(fn, args, kwargs, seconds)
    start = time.monotonic()
    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    state = {"done": False, "outer fired": False}

    def on_alarm(signum, frame):
        if state["done"]:
            return
        elapsed = time.monotonic() - start
        if old_delay > 0 and not state["outer fired"] and elapsed >= old_delay - 1e-3:
            state["outer fired"] = True  # the outer timer's moment: it acts as if we were not here
            if callable(old_handler):
                old_handler(signum, frame)
            if elapsed < seconds - 1e-3:  # it did not stop the call: keep our own deadline
                signal.setitimer(signal.ITIMER_REAL, seconds - elapsed, 0.1)
                return
        raise TimeUp(seconds)

    old_handler = _signal.signal(signal.SIGALRM, on_alarm)  # _signal: without the enum wrapping (18000 calls in 1b)
    # re-fires every 0.1 s, in case the student's code swallows the first with a bare except
    signal.setitimer(signal.ITIMER_REAL, min(seconds, old_delay) if old_delay > 0 else seconds, 0.1)
    try:
        return fn(*args, **kwargs)
    finally:
        state["done"] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        _signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0 and not state["outer fired"]:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - start), 1e-4), old_interval)
        elif old_interval > 0:
            signal.setitimer(signal.ITIMER_REAL, old_interval, old_interval)
