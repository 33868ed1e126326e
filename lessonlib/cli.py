"""What every command line shares: argparse types that refuse a bad value at the flag, and the
one way a command reports an error (one line naming the flag or variable, exit code 2, no
traceback; ``--debug`` shows it).

Standard library only, like ``paths`` and ``jsonio``, so every layer may use it. A type's
error is argparse's own ``argument --new-tokens: invalid value: '-3' (expected an integer
>= 1)``: argparse names the flag the user typed, so a library parameter name never reaches
the user.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence

_PROG: list[str] = []  # the name cli.run was given, for a parser built inside its main


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose error is one line (``prog: error: argument --k: ...``, exit 2), not
    the usage block and then the error; ``--help`` still shows the usage."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("prog") is None and _PROG:
            kwargs["prog"] = _PROG[-1]
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (and <= ``maximum``)."""
    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum or maximum is not None and value > maximum:
            high = "" if maximum is None else f" and <= {maximum}"
            raise argparse.ArgumentTypeError(f"{text!r} (expected an integer >= {minimum}{high})")
        return value
    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def number(low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (an open end leaves it out)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        below = low is not None and (value <= low if low_open else value < low)
        above = high is not None and (value >= high if high_open else value > high)
        if not math.isfinite(value) or below or above:
            left = "(-inf" if low is None else f"{'(' if low_open else '['}{low:g}"
            right = "inf)" if high is None else f"{high:g}{')' if high_open else ']'}"
            span = f"{left}, {right}"
            raise argparse.ArgumentTypeError(f"{text!r} (expected a finite number in {span})")
        return value
    parse.__name__ = "number"
    return parse


def pattern(regex: str, expected: str) -> Callable[[str], str]:
    """An argparse type: a string matching ``regex`` in full (``expected`` says what in words)."""
    def parse(text: str) -> str:
        if not re.fullmatch(regex, text):
            raise argparse.ArgumentTypeError(f"{text!r} (expected {expected})")
        return text
    parse.__name__ = "text"
    return parse


def clock_time(text: str) -> float:
    """An argparse type: a UTC wall-clock time HH:MM, as epoch seconds of its next occurrence (later
    today, else tomorrow: ``--until 01:30`` given at 23:00 means the coming night, not the past)."""
    import datetime as dt

    match = re.fullmatch(r"(\d{1,2}):(\d{2})", text)
    if not match or int(match[1]) > 23 or int(match[2]) > 59:
        raise argparse.ArgumentTypeError(f"{text!r} (expected a UTC time HH:MM, 00:00 to 23:59)")
    now = dt.datetime.now(dt.UTC)
    at = now.replace(hour=int(match[1]), minute=int(match[2]), second=0, microsecond=0)
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


def device(text: str) -> str:
    """An argparse type: a torch device this machine has (cpu, cuda, cuda:N, mps)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", text):
        raise argparse.ArgumentTypeError(f"{text!r} (expected cpu, cuda, cuda:N or mps)")
    if text.startswith("cuda"):
        import torch

        index = int(text.partition(":")[2] or 0)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text!r}: this machine has no such CUDA device (use cpu)")
    return text


def env_int(name: str, minimum: int, default: int) -> int:
    """An integer environment variable >= ``minimum``; unset means ``default``; anything else
    raises ValueError naming the variable."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"environment variable {name} must be an integer >= {minimum}, got {text!r}")
    return value


def check_writable_folder(folder, name: str) -> None:
    """Raise ValueError naming ``name`` (a flag or an environment variable) unless ``folder`` is a
    folder this process can write into, or one it can create (its nearest existing parent is a
    writable folder). Checked before any work, so that a long run is not refused when it writes."""
    import pathlib

    path = pathlib.Path(folder)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} must name a folder, got the file {str(path)!r}")
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{name}: {str(path)!r} cannot be created: {str(probe)!r} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: {str(path)!r} is not writable (no write permission on {str(probe)!r})")


def outputs_name(flag_value, flag: str = "--out") -> str:
    """How to name the folder a command writes to in an error: the flag when given, else the
    environment variable when set, else the default's name."""
    if flag_value is not None:
        return flag
    return "environment variable LESSONLIB_OUTPUTS" if os.environ.get("LESSONLIB_OUTPUTS") is not None \
        else "the default outputs folder"


def run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None,
        prog: str | None = None) -> int:
    """Run a command's ``main(argv)``: a ValueError or an OSError (a missing file, a folder where
    a file was expected, no permission) becomes one line on stderr and exit code 2 (``--debug``
    anywhere in argv re-raises it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    name = prog or os.path.basename(sys.argv[0])
    _PROG.append(name)
    try:
        return main(args) or 0
    except (ValueError, OSError) as err:
        if debug:
            raise
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2
    finally:
        _PROG.pop()
