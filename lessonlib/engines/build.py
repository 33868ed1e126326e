"""Building and loading the engines' C files (``native.c``, ``native_llama.c``): one compiler
call per source, flags, compiler and CPU, cached in the course's cache folder and verified
before it is mapped.

* ``build(compiler, source)`` compiles with ``FLAGS`` into ``cache_dir()``, retrying without
  ``-fopenmp`` when the compiler rejects it (macOS clang has no OpenMP): the library then runs on
  one thread. It is written to a temporary file and renamed into place; a second process finds it.
* **Verified before it is mapped.** Beside ``<name>.so`` the build writes ``<name>.so.json``
  (atomically, before the rename): the file's size and sha256 and the flags it was built with. A
  library whose size or hash differs from its record, or that has no record, is removed and
  rebuilt: a cached file cut in half once killed every later process with SIGBUS when mapped.
* ``load(source, setup)`` is what an engine calls: the ``ctypes.CDLL`` (``setup`` declares its
  functions), or None, once per process and source. The first fallback of the process prints one
  line naming the reason (``why(source)`` keeps it for ``status()``).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

from lessonlib import paths
from lessonlib.jsonio import write_atomic

FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared")
ENV, CACHE_ENV = "LESSONLIB_NATIVE", "LESSONLIB_CACHE"

_loaded: dict[str, tuple[ctypes.CDLL | None, str]] = {}  # source path -> (library or None, why)
_told = False  # whether this process has printed its one fallback line


def enabled() -> bool:
    """``LESSONLIB_NATIVE``: unset or "1" uses the native forwards when they build, "0" never."""
    text = os.environ.get(ENV, "1").strip()
    if text not in ("0", "1"):
        raise ValueError(f"environment variable {ENV} must be 0 or 1, got {text!r}")
    return text == "1"


def cache_dir() -> pathlib.Path:
    text = os.environ.get(CACHE_ENV)
    if text is not None and not text.strip():
        raise ValueError(f"environment variable {CACHE_ENV} is empty: set it to a folder or unset it")
    # the course's one cache folder, shared with models.data's token cache (git ignores it)
    return pathlib.Path(text) if text else paths.ROOT / ".cache"


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _cpu() -> str:
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
        return next((line for line in lines if line.startswith("flags")), platform.processor())
    except OSError:
        return platform.processor()


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_of(library: pathlib.Path) -> pathlib.Path:
    """Where the size and hash of ``library`` are recorded: ``<name>.so.json`` beside it."""
    return library.with_name(library.name + ".json")


def verified(library: pathlib.Path) -> bool:
    """Whether ``library`` exists with the size and sha256 its record holds (read before mapping)."""
    try:
        record = json.loads(record_of(library).read_text())
        return (library.stat().st_size == record["size"] and isinstance(record["sha256"], str)
                and sha256(library) == record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def target_of(compiler: str, source: pathlib.Path) -> pathlib.Path:
    """The cached library's path: keyed by the source, the flags, the compiler and the CPU."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\n".join([source.read_text(), " ".join(FLAGS), version, _cpu()]).encode()).hexdigest()
    return cache_dir() / f"{source.stem}-{key[:16]}.so"


def build(compiler: str, source: pathlib.Path, extra: tuple[str, ...] = ()) -> pathlib.Path:
    """The verified shared library for ``source`` (``extra`` flags appended to ``FLAGS``, and to
    the key), built if it is not there or fails its record."""
    target = target_of(compiler, source)
    if extra:
        target = target.with_name(target.stem + "-" + hashlib.sha256(" ".join(extra).encode()).hexdigest()[:8] + ".so")
    if verified(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for bad in (target, record_of(target)):  # a truncated or unrecorded file is never mapped
        bad.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        flags = (*FLAGS, *extra)
        done = subprocess.run([compiler, *flags, "-o", tmp, str(source), "-lm"], capture_output=True, text=True)
        if done.returncode and "-fopenmp" in flags:  # e.g. Apple clang: build it single-threaded
            flags = tuple(f for f in flags if f != "-fopenmp")
            done = subprocess.run([compiler, *flags, "-o", tmp, str(source), "-lm"], capture_output=True, text=True)
        if done.returncode:
            raise OSError(f"{compiler} failed: {done.stderr.strip()[:400]}")
        built = pathlib.Path(tmp)
        record = {"size": built.stat().st_size, "sha256": sha256(built), "flags": list(flags)}
        write_atomic(record_of(target), json.dumps(record) + "\n")
        os.replace(tmp, target)  # atomic: a process beside this one sees no half-written file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(source: pathlib.Path, setup: Callable[[ctypes.CDLL], str],
         extra: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The library built from ``source``, its functions declared by ``setup`` (which returns a
    description for ``why``), or None; built and loaded once per process."""
    key = str(source) + " ".join(extra)
    if key not in _loaded:
        _loaded[key] = _load(source, setup, extra)
        if _loaded[key][0] is None:
            tell(_loaded[key][1])
    return _loaded[key][0]


def _load(source: pathlib.Path, setup: Callable[[ctypes.CDLL], str],
          extra: tuple[str, ...]) -> tuple[ctypes.CDLL | None, str]:
    cc = compiler()
    if cc is None:
        return None, "no C compiler (cc) on PATH"
    try:
        lib = ctypes.CDLL(str(build(cc, source, extra)))
    except OSError as error:
        return None, f"the native forward did not build: {error}"
    return lib, "built (" + setup(lib) + ")"


def why(source: pathlib.Path, extra: tuple[str, ...] = ()) -> str:
    """Why ``source``'s library is or is not loaded ("not built yet" before the first ``load``)."""
    return _loaded.get(str(source) + " ".join(extra), (None, "not built yet"))[1]


def tell(reason: str) -> None:
    """Print one line, the first time in this process, that the PyTorch path runs and why."""
    global _told
    if not _told:
        _told = True
        print(f"lessonlib: the native forward is off, the PyTorch path runs instead: {reason.splitlines()[0]}",
              file=sys.stderr)
