"""The one ``default=`` hook lessonlib gives ``json.dumps`` (benchmarks, the skill file, the CLI),
the one atomic file write (``write_atomic``) and the one reader of the JSON files the course writes.

Standard library only, like ``paths`` and ``threads``, so every layer may use it.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping


def jsonable(x):
    """A JSON value for what ``json`` cannot write itself: numpy scalars and arrays (and torch
    tensors) through their ``tolist()``, any other real number as a float; TypeError otherwise."""
    if hasattr(x, "tolist"):  # numpy scalars (np.bool_ -> bool, np.int64 -> int) and arrays
        return x.tolist()
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"not JSON serialisable: {type(x)}") from None


def write_atomic(path, data: str | bytes, encoding: str = "utf-8") -> pathlib.Path:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never half
    of one (``write_together`` with one file). Returns the path."""
    return write_together({path: data}, encoding)[0]


# Called, when set, after every temporary file is written and before the first rename: the test
# of an interrupted write pauses a subprocess here and sends it SIGTERM or SIGINT (tests/test_interrupts.py).
BEFORE_COMMIT: Callable[[], None] | None = None


class _Terminated(BaseException):
    """SIGTERM, raised inside ``write_together`` so that its cleanup runs (then re-sent)."""


@contextlib.contextmanager
def _sigterm_raises():
    """Inside the block SIGTERM raises ``_Terminated`` instead of ending the process on the spot
    (its default), so that ``finally`` blocks remove temporary files; afterwards the process ends
    by SIGTERM as it would have. Only in the main thread, and only where no one installed a handler."""
    own = (threading.current_thread() is threading.main_thread()
           and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    if not own:
        yield
        return

    def handler(signum, frame):
        raise _Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # end as SIGTERM ends a process (exit status -15)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _interrupts_held():
    """SIGINT and SIGTERM held back until the block ends, then delivered: the renames of a group of
    files cannot be cut in the middle by an interrupt. A Python handler that only records the signal,
    not a blocked signal mask: numpy's and torch's worker threads would take a blocked signal for the
    process. Main thread only (elsewhere Python runs no handler and this is a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda signum, frame: arrived.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(arrived):
            os.kill(os.getpid(), sig)  # now: the handler that was in place acts on it


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary(path: pathlib.Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would leave the report unreadable to others
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_together(files: Mapping, encoding: str = "utf-8") -> list[pathlib.Path]:
    """Write several files ({path: str or bytes}) so that they change together or not at all: every
    file is written to a temporary file beside it first (the slow part, where an error or an
    interrupt leaves the old files and no temporary one), then all are renamed into place with
    SIGINT and SIGTERM held back; should a rename fail, the ones already made are rolled back.
    A report's JSON, its Markdown and the record derived from it go through here at once
    (``bench.record.write_with``). Returns the paths."""
    targets = [pathlib.Path(p) for p in files]
    for path in targets:
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a folder: give the name of the file to write")
    blobs = [d.encode(encoding) if isinstance(d, str) else bytes(d) for d in files.values()]
    made: list[tuple[str, pathlib.Path]] = []  # (temporary, target)
    backups: dict[pathlib.Path, str] = {}
    with _sigterm_raises():
        try:
            for path, blob in zip(targets, blobs):
                path.parent.mkdir(parents=True, exist_ok=True)
                made.append((_temporary(path, blob), path))
            if BEFORE_COMMIT is not None:
                BEFORE_COMMIT()
            with _interrupts_held():
                _commit(made, backups)
        finally:
            for tmp, _ in made:
                pathlib.Path(tmp).unlink(missing_ok=True)
            for backup in backups.values():
                pathlib.Path(backup).unlink(missing_ok=True)
    return targets


def _commit(made: list[tuple[str, pathlib.Path]], backups: dict[pathlib.Path, str]) -> None:
    """Rename every temporary file onto its target; on a failure put the old targets back."""
    if len(made) > 1:  # a second name for each old file (a hard link: no copy), to roll back to
        for _, path in made:
            if path.exists():
                backup = f"{path.parent / ('.' + path.name)}.{os.getpid()}.old.tmp"
                try:
                    os.link(path, backup)
                except OSError:  # a file system without hard links: no rollback for this file
                    continue
                backups[path] = backup
    existed = {path for _, path in made if path.exists()}
    done: list[pathlib.Path] = []
    try:
        for tmp, path in made:
            os.replace(tmp, path)
            done.append(path)
    except BaseException:
        for path in done:
            if path in backups:
                os.replace(backups[path], path)
            elif path not in existed:
                path.unlink(missing_ok=True)
        raise


def read_json(path, rebuild: str, kind: type = dict):
    """A JSON file the course wrote: its value, which must be a ``kind``; a missing, truncated or
    non-JSON file raises FileNotFoundError / ValueError naming the file and ``rebuild`` (the
    command that writes it again)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; write it with: {rebuild}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is corrupt ({err}); rebuild it with: {rebuild}") from None
    if not isinstance(value, kind):
        raise ValueError(f"{path} must hold a JSON {'object' if kind is dict else kind.__name__}, "
                         f"got {type(value).__name__}; rebuild it with: {rebuild}")
    return value
