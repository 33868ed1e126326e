"""The native forward (``native.c``) from Python: built once with the machine's C compiler,
loaded with ``ctypes``, and run by ``fast.FastGPT`` and ``fast.head_block`` on every batch-1
cached call of up to ``MAX_T`` new tokens.

Why: the fast PyTorch path (``fast.py``) still pays a fixed cost per operator call, about a
dozen calls per block, and the shipped target has 24 blocks of 160-wide products; a one-token
step cost about three times what reading its weights does. ``native.c`` runs all the blocks in
one call, reading each weight once per forward, whatever the number of new tokens. What it
gains is measured by ``python -m lessonlib.bench bandwidth`` (one step, a verify pass, the
memory bound) and ``bench peers`` (against llama.cpp on the same weights).

* Built on first use with ``cc -O3 -march=native -fopenmp`` into ``cache_dir()``
  (``LESSONLIB_CACHE``, else the repository's ``.cache/``, which git ignores) by ``build``
  (shared with ``native_llama.c``): keyed by the source, the flags, the compiler and the CPU,
  renamed into place, verified against its recorded size and sha256 before it is mapped.
* Weights stay float32 unless every matrix of the model is exactly representable in half
  precision (the shipped checkpoints are stored as float16): then the C code reads half-precision
  copies, half the bytes, the same numbers.
* Matrices whose output width is a multiple of ``PANEL`` (every shipped one) are packed in panels
  (``to_panels``): a verify pass over several tokens then widens each weight once and needs no
  horizontal sums (``native.c``'s ``panels()`` has the measurements).
* ``EagleStep`` runs an EAGLE head's fuse, fc and block and the target's tied head in one call: a
  chain's draft step and a round's commit (``heads.EagleHead.step``).
* It runs on ``torch.get_num_threads()`` threads (the course's policy, ``lessonlib.threads``),
  splitting only the products and attention large enough to pay for a second thread.
* ``LESSONLIB_NATIVE=0`` turns it off (the PyTorch fast path runs; benchmarks compare the two);
  without a C compiler, or on a CPU without AVX2/FMA/F16C for half precision, the course runs
  as before and ``status()`` says why.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from lessonlib.engines import build
from lessonlib.engines.build import CACHE_ENV, ENV, FLAGS, cache_dir, enabled

__all__ = ["CACHE_ENV", "ENV", "FLAGS", "cache_dir", "enabled", "library", "status", "prepare", "eagle_step"]

SOURCE = pathlib.Path(__file__).with_name("native.c")
MAX_T = 64  # longer calls (a long prefill) run PyTorch's path: its matrix kernels win there


@contextlib.contextmanager
def turned_off():
    """Within the block, models prepared (``FastGPT`` loaded or moved, a head block's first fast
    call) take the PyTorch fast path: what the benchmarks and tests compare the native one with."""
    before = os.environ.get(ENV)
    os.environ[ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _build(compiler: str) -> pathlib.Path:
    """The verified shared library of ``native.c`` (``build.build``)."""
    return build.build(compiler, SOURCE)


def _setup(lib: ctypes.CDLL) -> str:
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.lessonlib_blocks.argtypes = [i, i, i, i, i, i, p, p, p, i, p, i, p, p, p, i]
    lib.lessonlib_head.argtypes = [i, i, i, i, p, p, p, p, i, p]
    lib.lessonlib_eagle_step.argtypes = [i, i, i, i, i, p, i, p, i, p, i, p, p, p, p, p, p, p, i, i, i, p, p, p, p, p]
    lib.lessonlib_set_threads.argtypes = [i]
    lib.lessonlib_blocks.restype = lib.lessonlib_head.restype = lib.lessonlib_has_f16.restype = i
    lib.lessonlib_eagle_step.restype = i
    return "half-precision weights" if lib.lessonlib_has_f16() else "float32 weights only"


def library() -> ctypes.CDLL | None:
    """The loaded native library, or None (``status()`` says why); built once per process."""
    return build.load(SOURCE, _setup)


def status() -> str:
    """One line: whether the native forward runs here, and why not when it does not."""
    if not enabled():
        return f"off ({ENV}=0)"
    return "on, " + build.why(SOURCE) if library() is not None else "off: " + build.why(SOURCE)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


_NO_LAYERS = (ctypes.c_int * 0)()
_threads_set: dict[int, int] = {}  # id(library) -> the thread count last handed to it


def _threads(lib: ctypes.CDLL) -> None:
    """Hand the library torch's thread count (the course's policy, ``lessonlib.threads``) when it
    changed: a ctypes call on every draft step costs more than the check."""
    n = torch.get_num_threads()
    if _threads_set.get(id(lib)) != n:
        lib.lessonlib_set_threads(n)
        _threads_set[id(lib)] = n


PANEL = 16  # outputs per panel (native.c's panels()): a matrix whose out is a multiple of it is packed so


def to_panels(w: torch.Tensor) -> torch.Tensor:
    """(out, in) -> (out / PANEL, in, PANEL) contiguous: each panel's outputs side by side per input."""
    out, n_in = w.shape
    return w.reshape(out // PANEL, PANEL, n_in).transpose(1, 2).contiguous()


class Blocks:
    """Blocks (``gpt.Block``) ready for ``native.c``: their matrices (half precision when every
    one of them is exact in it; in panels when native.c has its vector kernels and every output
    width is a multiple of ``PANEL``), the pointers the C code reads, and the tied head when given."""

    def __init__(self, lib: ctypes.CDLL, blocks: Sequence, head: tuple | None, f16: bool):
        self.lib, self.f16 = lib, int(f16)
        first = blocks[0]
        self.n_layer, self.C, self.H = len(blocks), first.qkv.weight.shape[1], first.n_head
        widths = [getattr(b, n).weight.shape[0] for b in blocks for n in ("qkv", "proj", "fc", "fc_out")]
        if head is not None:
            widths.append(head[0].shape[0])
        self.panel = int(bool(lib.lessonlib_has_f16()) and all(w % PANEL == 0 for w in widths))
        self.mats = [self.pack(getattr(b, n).weight) for b in blocks for n in ("qkv", "proj", "fc", "fc_out")]
        self.vecs = [v.detach().float().contiguous() for b in blocks
                     for v in (b.ln_1.weight, b.ln_1.bias, b.qkv.bias, b.proj.bias, b.ln_2.weight, b.ln_2.bias,
                               b.fc.bias, b.fc_out.bias)]
        self.mat_ptrs = (ctypes.c_void_p * len(self.mats))(*map(_ptr, self.mats))
        self.vec_ptrs = (ctypes.c_void_p * len(self.vecs))(*map(_ptr, self.vecs))
        self.head = None
        if head is not None:  # (wte (V, C), ln_f): the tied LM head
            wte, ln_f = head
            self.V = wte.shape[0]
            self.head = (self.pack(wte), ln_f.weight.detach().float().contiguous(),
                         ln_f.bias.detach().float().contiguous())

    def pack(self, w: torch.Tensor) -> torch.Tensor:
        """A matrix (out, in) as these blocks' matrices are read: their precision, their layout."""
        w = w.detach().half() if self.f16 else w.detach().float()
        return to_panels(w) if self.panel else w.contiguous()

    @property
    def nbytes(self) -> int:
        """Bytes of weights a forward reads: every matrix, vector and the head once."""
        return sum(t.numel() * t.element_size() for t in [*self.mats, *self.vecs, *(self.head or ())])

    def run(self, x: torch.Tensor, kv: torch.Tensor, start: int, attn: torch.Tensor | None,
            keep_layers: tuple[int, ...] = ()) -> torch.Tensor | None:
        """All the blocks over x (T, C) in place after ``start`` cached positions of ``kv``
        (n_layer, 2, H, S, D); ``attn`` None (causal) or additive (T, start + T). Returns the
        outputs of ``keep_layers`` side by side (T, len * C), or None when none is asked for."""
        T = x.shape[0]
        _threads(self.lib)
        mask = None if attn is None else attn.contiguous()
        keep, layers = None, _NO_LAYERS  # a draft step keeps none: no array to build on every call
        if keep_layers:
            keep_layers = tuple(sorted(set(keep_layers)))  # in block order, as the readable forward keeps them
            keep = torch.empty(T, len(keep_layers) * self.C)
            layers = (ctypes.c_int * len(keep_layers))(*keep_layers)
        code = self.lib.lessonlib_blocks(self.n_layer, self.C, self.H, kv.shape[-2], self.f16, self.panel,
                                         self.mat_ptrs, self.vec_ptrs, x.data_ptr(), T, kv.data_ptr(), start,
                                         None if mask is None else mask.data_ptr(),
                                         None if keep is None else keep.data_ptr(), layers, len(keep_layers))
        if code:
            raise MemoryError(f"native forward failed with code {code}")
        return keep

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The tied head's logits (T, V) from final hidden states x (T, C)."""
        assert self.head is not None
        W, w, b = self.head
        _threads(self.lib)
        out = torch.empty(x.shape[0], self.V)
        code = self.lib.lessonlib_head(self.C, self.V, self.f16, self.panel, W.data_ptr(), w.data_ptr(), b.data_ptr(),
                                       x.contiguous().data_ptr(), x.shape[0], out.data_ptr())
        if code:
            raise MemoryError(f"native head failed with code {code}")
        return out


def prepare(blocks: Sequence, head: tuple | None = None) -> Blocks | None:
    """``Blocks`` for these blocks (and the tied head ``(wte, ln_f)``), or None when the native
    forward is off or unavailable here, or the model is not one it runs: float32 on the CPU,
    widths that are multiples of 8."""
    if not blocks or not enabled():
        return None
    first = blocks[0]
    weight = first.qkv.weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or first.qkv.weight.shape[1] % 8:
        return None
    lib = library()
    if lib is None:
        return None
    mats = [getattr(b, n).weight for b in blocks for n in ("qkv", "proj", "fc", "fc_out")]
    if head is not None:
        mats.append(head[0])
    return Blocks(lib, blocks, head, bool(lib.lessonlib_has_f16()) and all(map(exact_in_half, mats)))


def exact_in_half(w: torch.Tensor) -> bool:
    """Whether every entry of ``w`` is a half-precision number (then a half copy holds it exactly)."""
    return torch.equal(w, w.half().float())


class EagleStep:
    """An EAGLE head over new tokens in one ``native.c`` call (``lessonlib_eagle_step``): EAGLE-3's
    ``fuse`` when given, the input map ``fc``, the block (``Blocks``, one layer), the target's
    embedding and tied head. Built by ``eagle_step``; ``EagleDrafter`` runs it for a chain's draft
    step and for a round's commit."""

    def __init__(self, lib: ctypes.CDLL, block: Blocks, fc: tuple[torch.Tensor, torch.Tensor],
                 fuse: tuple[torch.Tensor, torch.Tensor] | None, wte: torch.Tensor, head: Blocks):
        self.lib, self.block, self.head, self.fc, self.fuse, self.wte = lib, block, head, fc, fuse, wte
        self.C, self.V = block.C, head.V  # the tensors are kept: the C code reads their memory

    def __call__(self, tokens: np.ndarray, features: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """(g (T, C), logits (V,) after the last token) of ``tokens`` (T,) int64, ids of the
        target's vocabulary, paired with ``features`` (T, C) -- or (T, F) for the fused map --
        after the head's ``cache`` (a ``gpt.KVCache``), which gets the tokens' keys/values."""
        b, h = self.block, self.head
        W, w, bias = cast(tuple, h.head)
        T, F = features.shape
        kv, start = cache.kv, cache.length
        if start + T > cache.capacity:
            raise ValueError(f"cache holds {cache.capacity} positions; got {start}+{T}")
        features = features.float().contiguous()
        if F != self.C and self.fuse is None:
            raise ValueError(f"features must be {self.C} wide, got {F}")
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        fuse_w, fuse_b = (None, None) if self.fuse is None or F == self.C else (t.data_ptr() for t in self.fuse)
        _threads(self.lib)
        g, logits = torch.empty(T, self.C), torch.empty(self.V)
        code = self.lib.lessonlib_eagle_step(self.C, b.H, kv.shape[-2], b.f16, b.panel, self.wte.data_ptr(), self.V,
                                             tokens.ctypes.data, T, features.data_ptr(), F, fuse_w, fuse_b,
                                             self.fc[0].data_ptr(), self.fc[1].data_ptr(), b.mat_ptrs, b.vec_ptrs,
                                             kv.data_ptr(), start, h.f16, h.panel, W.data_ptr(), w.data_ptr(),
                                             bias.data_ptr(), g.data_ptr(), logits.data_ptr())
        if code == -3:
            raise ValueError(f"tokens must be token ids in [0, {self.V}), got {tokens.tolist()}")
        if code:
            raise MemoryError(f"native EAGLE step failed with code {code}")
        cache.length = start + T
        return g, logits


def eagle_step(fc, block, wte: torch.Tensor, head: Blocks | None, fuse=None) -> EagleStep | None:
    """An ``EagleStep`` for a head's ``fc`` (C <- 2C), ``block`` and EAGLE-3's ``fuse`` (C <- F, or
    None) beside a target whose native forward is ``head`` (its ``Blocks``, with the tied head)
    and embedding ``wte`` (V, C); None when the native forward does not run them (``prepare``'s
    conditions) or a map's weights are not read as the block's (half precision for all, or none)."""
    if head is None or head.head is None or wte.dtype != torch.float32 or not wte.is_contiguous():
        return None
    blocks = prepare([block])
    if blocks is None or fc.weight.shape != (blocks.C, 2 * blocks.C):
        return None
    maps = [linear for linear in (fc, fuse) if linear is not None]
    if blocks.f16 and not all(exact_in_half(linear.weight) for linear in maps):
        return None
    fc_map, fuse_map = ((blocks.pack(linear.weight), linear.bias.detach().float().contiguous())
                        if linear is not None else None for linear in (fc, fuse))
    return EagleStep(blocks.lib, blocks, cast(tuple, fc_map), fuse_map, wte.detach(), head)
