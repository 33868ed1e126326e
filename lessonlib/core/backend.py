"""The one place that decides where lessonlib's array maths runs.

Backends: ``numpy`` (CPU), ``torch-cpu`` and ``torch-cuda``. The choice, first match wins:
the ``name`` argument of ``select``, the environment variable ``LESSONLIB_BACKEND``, then
automatic -- ``torch-cuda`` when ``torch.cuda.is_available()``, else ``numpy``.
Notebooks print ``describe()`` once at the top ("running on: CPU (numpy); 1 torch thread ...").

The batched algorithms are written once against an *array namespace*: the handful of
functions they need are spelled the same in numpy and torch (``cumsum``, ``where``,
``clip``, ``argmax``, ``.sum(axis=..., keepdims=...)``), and the two that are not
(``take_along``, ``arange_like``) live here. torch is imported lazily, so
``import lessonlib`` stays fast and works without torch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard, TypeVar, overload

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # for annotations only: core never imports torch at run time
    import torch

BACKENDS = ("numpy", "torch-cpu", "torch-cuda")
ENV_VAR = "LESSONLIB_BACKEND"

# A numpy array or a torch tensor: what the batched algorithms are written against.
Array: TypeAlias = "np.ndarray | torch.Tensor"
# The same, for functions that return the kind they are given (numpy in, numpy out).
ArrayT = TypeVar("ArrayT", np.ndarray, "torch.Tensor")


def cuda_available() -> bool:
    """True when torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@dataclass(frozen=True)
class Backend:
    """An array backend: ``xp`` is the namespace (numpy or torch), ``device`` torch's device."""

    name: str

    @property
    def is_torch(self) -> bool:
        return self.name.startswith("torch")

    @property
    def device(self) -> str | None:
        return {"numpy": None, "torch-cpu": "cpu", "torch-cuda": "cuda"}[self.name]

    @property
    def xp(self) -> ModuleType:
        """The array namespace: the numpy module, or the torch module."""
        if not self.is_torch:
            return np
        import torch

        return torch

    def asarray(self, x: npt.ArrayLike | torch.Tensor, dtype: str = "float64") -> Any:
        """``x`` as this backend's array (float64 by default; ``dtype="int64"`` for tokens):
        a numpy array or a torch tensor, which one known only at run time (``self.name``)."""
        if not self.is_torch:
            return np.asarray(to_numpy(x), dtype=dtype)
        import torch

        return torch.as_tensor(to_numpy(x), dtype=getattr(torch, dtype), device=self.device)

    def uniform(self, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
        """Uniforms in [0, 1) of ``shape`` (a numpy array or a torch tensor, as ``asarray``).
        numpy draws from ``rng``; torch draws on its device from a torch generator seeded from
        ``rng`` (same distribution, different numbers)."""
        if not self.is_torch:
            return rng.random(shape)
        import torch

        gen = torch.Generator(device=self.device).manual_seed(int(rng.integers(2**62)))
        return torch.rand(shape, generator=gen, dtype=torch.float64, device=self.device)

    def describe(self) -> str:
        if self.name == "numpy":
            return "running on: CPU (numpy)"
        if self.name == "torch-cpu":
            return "running on: CPU (torch)"
        import torch

        return f"running on: CUDA ({torch.cuda.get_device_name(0)})"


def select(name: str | None = None) -> Backend:
    """The backend named by ``name``, else by ``$LESSONLIB_BACKEND``, else CUDA if available."""
    source = "name"
    if name is None:
        name, source = os.environ.get(ENV_VAR) or None, ENV_VAR
    if name is None:
        return Backend("torch-cuda" if cuda_available() else "numpy")
    if name not in BACKENDS:
        raise ValueError(f"{source} must be one of {BACKENDS}, got {name!r}")
    if name.startswith("torch"):
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ValueError(f"{source}={name!r} needs torch, which is not installed") from None
    if name == "torch-cuda" and not cuda_available():
        raise ValueError(f"{source}='torch-cuda' but torch.cuda.is_available() is False")
    return Backend(name)


def describe(backend: Backend | str | None = None) -> str:
    """One line saying where the maths runs and with how many CPU threads (``lessonlib.threads``):
    "running on: CPU (numpy); 1 torch thread (course default; LESSONLIB_THREADS overrides)"."""
    from lessonlib import threads  # standard library only: core stays free of torch

    return (backend if isinstance(backend, Backend) else select(backend)).describe() + "; " + threads.describe()


# ----------------------------------------------------------------------------- namespace

def is_torch(x: object) -> TypeGuard[torch.Tensor]:
    """True for a torch tensor, told apart by its type's module (torch is never imported)."""
    return type(x).__module__.startswith("torch")


def array_namespace(x: object) -> ModuleType:
    """numpy for numpy arrays (and lists), torch for torch tensors."""
    if is_torch(x):
        import torch

        return torch
    return np


def to_numpy(x: npt.ArrayLike | torch.Tensor) -> np.ndarray:
    """A numpy copy of a numpy array, list or torch tensor (on any device)."""
    return x.detach().cpu().numpy() if is_torch(x) else np.asarray(x)


@overload
def take_along(a: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray: ...
@overload
def take_along(a: torch.Tensor, idx: torch.Tensor, axis: int) -> torch.Tensor: ...
def take_along(a: Any, idx: Any, axis: int) -> Any:
    """``np.take_along_axis`` / ``torch.take_along_dim`` (both broadcast ``a`` against ``idx``)."""
    if is_torch(a):
        import torch

        return torch.take_along_dim(a, idx, dim=axis)
    return np.take_along_axis(a, idx, axis=axis)


@overload
def arange_like(x: np.ndarray, n: int) -> np.ndarray: ...
@overload
def arange_like(x: torch.Tensor, n: int) -> torch.Tensor: ...
def arange_like(x: Any, n: int) -> Any:
    """0..n-1 as an integer array on ``x``'s backend and device."""
    if is_torch(x):
        import torch

        return torch.arange(n, device=x.device)
    return np.arange(n)
