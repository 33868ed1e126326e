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
from lessonlib.models.llama import Llama, LlamaKVCache, load_smollm2, rope_tables
from lessonlib.models.llm_heads import LlamaEagle3Head

SOURCE = pathlib.Path(__file__).with_name("native_llama.c")
MAX_T = 64  # native_llama.c's MAX_T: a longer call (a long prefill) runs the readable forward
HEAD_MAX_T = 4096  # native_llama.c's HEAD_MAX_T: an EAGLE-3 head's commit of a whole prompt runs in C too
PRECISIONS = ("f16", "f32")
ENGINES = ("readable", "native")
_ERRORS = {-1: "out of memory", -2: "sizes it does not run", -3: "a token id outside the vocabulary",
           -4: "a position outside the RoPE table", -5: "a cache too small", -6: "a token that may see nothing"}


def _setup(lib: ctypes.CDLL) -> str:
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.llama_forward.argtypes = [p, p, p, p, p, p, p, ctypes.c_float, p, p, i, p, i, p, p, p, p, i, p]
    lib.llama_forward.restype = lib.llama_simd.restype = lib.lessonlib_set_threads.restype = i
    lib.eagle3_forward.argtypes = [p, p, p, p, p, p, p, ctypes.c_float, p, p, i, p, i, p, p, p, i, p]
    lib.eagle3_forward.restype = i
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
        T, start = idx.shape[1], cache.length
        self.check_tokens(idx, "idx")  # every bound the C code relies on is checked here first
        if start + T > cache.capacity or cache.kv.shape[-2] != self.config.block_size:
            raise ValueError(f"cache holds batch 1 and {cache.capacity} positions; got batch 1, {start}+{T}")
        if positions is None:
            pos = np.arange(start, start + T, dtype=np.int64)
        else:
            pos = np.ascontiguousarray(torch.as_tensor(positions).cpu().numpy(), dtype=np.int64).reshape(-1)
            if len(pos) != T or int(pos.min()) < 0 or int(pos.max()) >= self.config.block_size:
                raise ValueError(f"positions must hold {T} position ids in [0, block_size={self.config.block_size})")
        allowed = None if mask is None else prefix_mask(mask, start, T, "cpu").eq(0).to(torch.uint8).contiguous()
        layers = return_hidden if isinstance(return_hidden, tuple) else ()
        if any(not 0 <= i < self.config.n_layer for i in layers):
            raise ValueError(f"return_hidden must name blocks in [0, {self.config.n_layer}), got {layers}")
        layers = tuple(sorted(set(layers)))  # in block order, as the readable forward keeps them
        tokens = np.ascontiguousarray(idx[0].cpu().numpy(), dtype=np.int64)
        logits, x, keep = self.native.run(tokens, pos, cache.kv, start, allowed, layers)
        cache.length = start + T
        if layers:
            assert keep is not None
            return logits[None], keep[None]
        return (logits[None], x[None]) if return_hidden else logits[None]


class PreparedEagle3:
    """An EAGLE-3 head's weights as ``eagle3_forward`` (``native_llama.c``) reads them, at its
    target's precision: fuse, q|k|v (over 2C), o, gate|up, down in panels, the four norms in
    float32, the draft vocabulary's rows of the tied embedding as its LM head; token rows are read
    from the target's own packed head (``Prepared.head``), not copied."""

    def __init__(self, head: LlamaEagle3Head, target: Prepared):
        c, layer = head.config, head.layer
        dtype = torch.float16 if target.f16 else torch.float32
        pack = lambda w: to_panels(w.detach().float().to(dtype))  # noqa: E731
        self.target, self.C, self.N = target, c.n_embd, len(head.d2t)
        self.ids, self.V = head.draft_ids.clone(), c.vocab_size  # draft id i -> target id ids[i]
        self.mats = [pack(head.fuse.weight), pack(torch.cat([layer.q.weight, layer.k.weight, layer.v.weight])),
                     pack(layer.o.weight), pack(torch.cat([layer.gate.weight, layer.up.weight])),
                     pack(layer.down.weight)]
        self.norms = [n.weight.detach().float().contiguous() for n in (layer.norm_emb, layer.norm_1, layer.norm_2,
                                                                       head.norm)]
        # the tied LM head over the draft vocabulary: rows of the weights the target's engine reads
        self.draft = pack(head.draft_head(target.model).float())
        cos, sin = rope_tables(torch.arange(c.block_size), c.head_dim, c.rope_theta, torch.float32)
        self.cos, self.sin = cos[:, : c.head_dim // 2].contiguous(), sin[:, : c.head_dim // 2].contiguous()
        self.n_pos, self.eps = c.block_size, c.norm_eps
        self.fused = head.fuse.weight.shape[1]
        self.dims = [c.n_embd, c.n_head, c.n_kv_head, c.n_hidden, c.vocab_size, self.N, 0, c.block_size,
                     target.f16, 0]
        self.mat_ptrs = (ctypes.c_void_p * 5)(*(t.data_ptr() for t in self.mats))
        self.norm_ptrs = (ctypes.c_void_p * 4)(*(t.data_ptr() for t in self.norms))

    def run(self, tokens: np.ndarray, positions: np.ndarray, features: torch.Tensor, cache: LlamaKVCache,
            allowed: torch.Tensor | None, n_logits: int) -> tuple[torch.Tensor, torch.Tensor]:
        """g (T, C) and the draft-vocabulary logits (n_logits, N) of the last ``n_logits`` tokens;
        the caller checks the bounds (``NativeEagle3Head.step``)."""
        T, lib = len(tokens), self.target.lib
        _threads(lib)
        width = features.shape[1]
        dims = (ctypes.c_int * 10)(*self.dims[:6], cache.kv.shape[-2], *self.dims[7:9], width)
        g, logits = torch.empty(T, self.C), torch.empty(n_logits, self.N)
        code = lib.eagle3_forward(dims, self.mat_ptrs, self.norm_ptrs, self.target.head.data_ptr(),
                                  self.draft.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr(), self.eps,
                                  tokens.ctypes.data, positions.ctypes.data, T, cache.kv.data_ptr(), cache.length,
                                  None if allowed is None else allowed.data_ptr(), features.data_ptr(),
                                  g.data_ptr(), n_logits, logits.data_ptr())
        if code:
            raise RuntimeError(f"native_llama.c refused the head's step ({_ERRORS.get(code, code)}): a bound "
                               "the Python side should have checked")
        return g, logits


class NativeEagle3Head(LlamaEagle3Head):
    """``LlamaEagle3Head`` whose draft steps run ``eagle3_forward`` beside a ``NativeLlama``: the
    fuse, the layer and the draft-vocabulary head in one C call (the readable step makes ~30
    PyTorch calls, about a quarter of a target step on this CPU). Other calls -- training, a
    readable target, a float16 cache -- run the readable step it inherits."""

    native: PreparedEagle3 | None = None

    def _runs_native(self, target: Llama, features: torch.Tensor, cache: LlamaKVCache, T: int) -> bool:
        prepared = getattr(target, "native", None)
        return (self.native is not None and prepared is self.native.target and 1 <= T <= HEAD_MAX_T
                and cache.kv.dtype == torch.float32 and cache.kv.is_contiguous() and not self.training
                and features.dtype == torch.float32
                and not (torch.is_grad_enabled() and (features.requires_grad or self.fuse.weight.requires_grad)))

    def step(self, target: Llama, tokens: np.ndarray, features: torch.Tensor, cache: LlamaKVCache,
             mask: np.ndarray | None = None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``LlamaEagle3Head.step``'s contract and positions, in one native call when it runs here."""
        T = len(tokens)
        if not self._runs_native(target, features, cache, T):
            return super().step(target, tokens, features, cache, mask, last)
        assert self.native is not None
        C, V, start = self.config.n_embd, self.config.vocab_size, cache.length
        ids = np.ascontiguousarray(np.asarray(tokens), dtype=np.int64).reshape(-1)
        if len(ids) != T or (T and (int(ids.min()) < 0 or int(ids.max()) >= V)):
            raise ValueError(f"tokens must be {T} ids in [0, {V})")
        if features.ndim != 2 or features.shape[0] != T or features.shape[1] not in (C, self.native.fused):
            raise ValueError(f"features must be ({T}, {self.native.fused}) fused or ({T}, {C}), "
                             f"got {tuple(features.shape)}")
        if start + T > cache.capacity:
            raise ValueError(f"head's cache holds {cache.capacity} positions; got {start}+{T}")
        if mask is None:
            positions, allowed = np.arange(start, start + T, dtype=np.int64), None
        else:
            n_fed = mask.shape[1] - T
            positions = (start - n_fed - 1 + mask.sum(1)).astype(np.int64)
            allowed = prefix_mask(torch.from_numpy(mask), start, T, "cpu").eq(0).to(torch.uint8).contiguous()
        if int(positions.min()) < 0 or int(positions.max()) >= self.native.n_pos:
            raise ValueError(f"positions must lie in [0, {self.native.n_pos}), got {positions.tolist()}")
        g, logits = self.native.run(ids, np.ascontiguousarray(positions), features.contiguous(), cache, allowed,
                                    1 if last else T)
        cache.length = start + T
        # over the full vocabulary, -inf outside the draft vocabulary (``full_logits``), in float64:
        # the drafter's log-softmax runs in float64 (``drafters.log_probs``), so no second copy
        out = torch.full((len(logits), self.native.V), float("-inf"), dtype=torch.float64)
        out[:, self.native.ids] = logits.double()
        return g, out


def accelerate_head(head: Any, target: Llama) -> Any:
    """``head`` on ``target``'s engine, in place: an EAGLE-3 head's draft step in ``native_llama.c``
    when the target is a prepared ``NativeLlama`` (at the target's precision); else unchanged
    (the EAGLE control, ``llm_eagle.LlamaEagleHead``, has no native step)."""
    prepared = getattr(target, "native", None)
    if isinstance(head, LlamaEagle3Head) and isinstance(prepared, Prepared):
        head.__class__ = NativeEagle3Head
        head.native = PreparedEagle3(head, prepared)  # type: ignore[attr-defined]
    return head


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
