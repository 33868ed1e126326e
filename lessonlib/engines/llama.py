"""The real LLM on the native engine: ``NativeLlama`` is ``models.llama.Llama`` whose batch-1
cached calls of up to ``MAX_T`` new tokens run ``native_llama.c`` (every block, the final norm
and the tied head in one C call, 16-bit weights read once per forward whatever the number of
tokens, float32 arithmetic). Everything else -- batch > 1, no cache, training, a prefill longer
than ``MAX_T`` -- runs the readable forward it inherits. ``load_llm`` is the loader.

Precision, chosen when prepared:

* ``"f16"`` (the default): weights rounded to float16 (half the bytes: 269 MB); logits differ
  from the readable float32 model's by the rounding of the weights (``F16_ATOL`` in the tests).
* ``"f32"``: the readable model's float32 weights (538 MB): its logits within summation order.

Either way a token's logits are **batch invariant**: bitwise the same whether the token is
verified alone, in a pass of n tokens or as a tree's node (``native_llama.c`` says how), so a
speculative verify pass gives exactly plain decoding's tokens. PyTorch's own kernels do not
promise that (their summation order depends on the shapes).
"""
from __future__ import annotations

import ctypes
import pathlib
from typing import Any

import numpy as np
import torch

from lessonlib.core.validate import check_int
from lessonlib.engines import build
from lessonlib.engines.native import _threads, to_panels
from lessonlib.models.gpt import KVCache, prefix_mask
from lessonlib.models.llama import Llama, load_smollm2, rope_tables

SOURCE = pathlib.Path(__file__).with_name("native_llama.c")
MAX_T = 64  # native_llama.c's MAX_T: a longer call (a long prefill) runs the readable forward
HEAD_MAX_T = 4096  # native_llama.c's HEAD_MAX_T: a head's (or the draft model's) commit of a whole prompt runs in C too
PRECISIONS = ("f16", "f32")
ENGINES = ("readable", "native")
_ERRORS = {-1: "out of memory", -2: "sizes it does not run", -3: "a token id outside the vocabulary",
           -4: "a position outside the RoPE table", -5: "a cache too small", -6: "a token that may see nothing"}


def _setup(lib: ctypes.CDLL) -> str:
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.llama_forward.argtypes = [p, p, p, p, p, p, p, ctypes.c_float, p, p, i, p, i, p, p, p, p, i, p]
    lib.llama_forward.restype = lib.llama_simd.restype = lib.lessonlib_set_threads.restype = i
    lib.eagle3_forward.argtypes = [p, p, p, p, p, p, p, ctypes.c_float, p, p, i, p, i, p, p, p, i, p]
    lib.eagle3_forward.restype = lib.medusa_forward.restype = i
    lib.medusa_forward.argtypes = [p, p, p, p, ctypes.c_float, p, p, p]
    lib.draft_forward.argtypes = [p, p, p, p, p, p, p, ctypes.c_float, p, p, i, p, i, p, p, i, p]
    lib.draft_forward.restype = i
    lib.lessonlib_set_threads.argtypes = [i]
    return {2: "AVX-512", 1: "AVX2/FMA/F16C"}.get(lib.llama_simd(), "portable C")


def library(extra: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The loaded ``native_llama.c``, or None (``status()`` says why); ``extra`` compiler flags
    build another variant (the tests build ``-DLESSONLIB_PORTABLE``, the path of non-x86 CPUs)."""
    return build.load(SOURCE, _setup, extra)


def status() -> str:
    if not build.enabled():
        return f"off ({build.ENV}=0)"
    return ("on, " if library() is not None else "off: ") + build.why(SOURCE)


def unavailable() -> str | None:
    """Why the native engine cannot run the real LLM here, in one line, or None when it can."""
    if not build.enabled() or library() is None:
        return f"engine 'native' is not available here: native forward {status()}"
    return None


class Prepared:
    """A ``Llama``'s weights as ``native_llama.c`` reads them: per block q|k|v, o, gate|up and down
    in panels (``native.to_panels``) of ``precision``, the norms in float32, the tied embedding as
    the head, RoPE tables for every position the model serves."""

    def __init__(self, lib: ctypes.CDLL, model: Llama, precision: str):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        c = model.config
        blocks: list[Any] = list(model.blocks)
        self.lib, self.precision, self.f16 = lib, precision, int(precision == "f16")
        self.model = model  # the readable weights (a head's draft rows are gathered from its embedding)
        dtype = torch.float16 if self.f16 else torch.float32
        pack = lambda w: to_panels(w.detach().to(dtype))  # noqa: E731
        self.mats = [pack(m) for b in blocks for m in (torch.cat([b.q.weight, b.k.weight, b.v.weight]),
                                                             b.o.weight, torch.cat([b.gate.weight, b.up.weight]),
                                                             b.down.weight)]
        self.norms = [n.weight.detach().float().contiguous() for b in blocks for n in (b.norm_1, b.norm_2)]
        self.head, self.norm_f = pack(model.wte.weight), model.norm_f.weight.detach().float().contiguous()
        cos, sin = rope_tables(torch.arange(c.block_size), c.head_dim, c.rope_theta, torch.float32)
        self.cos, self.sin = cos[:, : c.head_dim // 2].contiguous(), sin[:, : c.head_dim // 2].contiguous()
        self.eps, self.V, self.C, self.n_layer = c.norm_eps, c.vocab_size, c.n_embd, c.n_layer
        self.dims = (ctypes.c_int * 9)(c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.n_hidden, c.vocab_size,
                                       c.block_size, c.block_size, self.f16)
        self.mat_ptrs = (ctypes.c_void_p * len(self.mats))(*(t.data_ptr() for t in self.mats))
        self.norm_ptrs = (ctypes.c_void_p * len(self.norms))(*(t.data_ptr() for t in self.norms))

    @property
    def nbytes(self) -> int:
        """Bytes of weights a forward reads: every matrix, norm and the head once."""
        return sum(t.numel() * t.element_size() for t in [*self.mats, *self.norms, self.head, self.norm_f])

    def run(self, tokens: np.ndarray, positions: np.ndarray, kv: torch.Tensor, start: int,
            allowed: torch.Tensor | None,
            keep_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """logits (T, V), the last block's output (T, C) and the outputs of ``keep_layers`` (T, n C)
        or None, for ``tokens`` (T,) at ``positions`` (T,) after ``start`` cached positions of
        ``kv``; ``allowed`` uint8 (T, start + T) or None (causal). The caller checks the bounds."""
        T = len(tokens)
        _threads(self.lib)
        x, logits = torch.empty(T, self.C), torch.empty(T, self.V)
        keep, layers = None, None
        if keep_layers:
            keep = torch.empty(T, len(keep_layers) * self.C)
            layers = (ctypes.c_int * len(keep_layers))(*keep_layers)
        code = self.lib.llama_forward(self.dims, self.mat_ptrs, self.norm_ptrs, self.head.data_ptr(),
                                      self.norm_f.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr(), self.eps,
                                      tokens.ctypes.data, positions.ctypes.data, T, kv.data_ptr(), start,
                                      None if allowed is None else allowed.data_ptr(), x.data_ptr(),
                                      None if keep is None else keep.data_ptr(), layers, len(keep_layers),
                                      logits.data_ptr())
        if code:
            raise RuntimeError(f"native_llama.c refused the call ({_ERRORS.get(code, code)}): a bound "
                               "the Python side should have checked")
        return logits, x, keep


def call_inputs(model: Any, idx: torch.Tensor, positions: torch.Tensor | None, mask: torch.Tensor | None,
                cache: KVCache) -> tuple[np.ndarray, np.ndarray, torch.Tensor | None]:
    """(tokens (T,) int64, positions (T,) int64, allowed uint8 (T, start + T) or None) of a batch-1
    cached call of ``model`` (a ``Llama`` or the draft model) as the C code reads them, after every
    bound it relies on is checked here (token ids, the cache's room, positions in the RoPE table)."""
    T, start, block = idx.shape[1], cache.length, model.config.block_size
    model.check_tokens(idx, "idx")
    if start + T > cache.capacity or cache.kv.shape[-2] != block:
        raise ValueError(f"cache holds batch 1 and {cache.capacity} positions; got batch 1, {start}+{T}")
    if positions is None:
        pos = np.arange(start, start + T, dtype=np.int64)
    else:
        pos = np.ascontiguousarray(torch.as_tensor(positions).cpu().numpy(), dtype=np.int64).reshape(-1)
        if len(pos) != T or int(pos.min()) < 0 or int(pos.max()) >= block:
            raise ValueError(f"positions must hold {T} position ids in [0, block_size={block})")
    allowed = None if mask is None else prefix_mask(mask, start, T, "cpu").eq(0).to(torch.uint8).contiguous()
    return np.ascontiguousarray(idx[0].cpu().numpy(), dtype=np.int64), pos, allowed


class NativeLlama(Llama):
    """``Llama`` whose batch-1 cached inference calls of up to ``MAX_T`` tokens run ``native``
    (a ``Prepared``, or None: then every call is the readable forward)."""

    native: Prepared | None = None

    def prepare(self, precision: str = "f16") -> NativeLlama:
        """Pack the weights for ``native_llama.c`` at ``precision`` (``PRECISIONS``); a ValueError
        names why when the native engine does not run here."""
        why = unavailable()
        if why is not None:
            raise ValueError(why)
        if self.device.type != "cpu" or self.wte.weight.dtype != torch.float32:
            raise ValueError(f"engine 'native' runs a float32 model on the CPU, got {self.wte.weight.dtype} "
                             f"on {self.device}")
        self.native = Prepared(library(), self, precision)  # type: ignore[arg-type]
        return self

    def _runs_native(self, idx: torch.Tensor, cache: KVCache | None) -> bool:
        return (self.native is not None and cache is not None and idx.ndim == 2 and idx.shape[0] == 1
                and 1 <= idx.shape[1] <= MAX_T and not self.training and cache.kv.dtype == torch.float32
                and cache.kv.is_contiguous() and not (torch.is_grad_enabled() and self.wte.weight.requires_grad))

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: KVCache | None = None, return_hidden: bool | tuple[int, ...] = False) -> Any:
        """``Llama.forward``'s contract; batch-1 cached calls of up to ``MAX_T`` tokens in C."""
        if not self._runs_native(idx, cache):
            return super().forward(idx, positions, mask, cache, return_hidden)
        assert cache is not None and self.native is not None
        tokens, pos, allowed = call_inputs(self, idx, positions, mask, cache)
        start = cache.length
        layers = return_hidden if isinstance(return_hidden, tuple) else ()
        if any(not 0 <= i < self.config.n_layer for i in layers):
            raise ValueError(f"return_hidden must name blocks in [0, {self.config.n_layer}), got {layers}")
        layers = tuple(sorted(set(layers)))  # in block order, as the readable forward keeps them
        logits, x, keep = self.native.run(tokens, pos, cache.kv, start, allowed, layers)
        cache.length = start + len(tokens)
        if layers:
            assert keep is not None
            return logits[None], keep[None]
        return (logits[None], x[None]) if return_hidden else logits[None]


def load_llm(engine: str = "auto", precision: str = "f16", block_size: int = 2048) -> Llama:
    """SmolLM2-135M-Instruct (``models.llama.load_smollm2``, float32) ready to decode on ``engine``:
    "readable" (the model a student reads), "native" (``NativeLlama`` at ``precision``, "f16" or
    "f32"; a ValueError naming why where it does not build) or "auto" (native where it runs, else
    readable, which then prints why once). Eval mode, no gradients; ``model.engine`` names it."""
    if engine not in (*ENGINES, "auto"):
        raise ValueError(f"engine must be one of {', '.join((*ENGINES, 'auto'))}, got {engine!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    block_size = check_int(block_size, "block_size", minimum=1)
    if engine == "native" and unavailable() is not None:
        raise ValueError(unavailable())
    chosen = engine if engine != "auto" else "native" if unavailable() is None else "readable"
    model = load_smollm2(torch.float32, block_size)
    if chosen == "native":
        model.__class__ = NativeLlama  # the same modules and weights; only the cached calls change
        model.prepare(precision)  # type: ignore[attr-defined,operator]
    model.requires_grad_(False)
    model.engine = chosen  # type: ignore[assignment]
    return model
