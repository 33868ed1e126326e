"""The real LLM's heads on the native engine, beside a ``NativeLlama`` (``engines.llama``):
EAGLE-3's draft step (``eagle3_forward``: the fuse, the layer and the draft-vocabulary head in one
C call), Medusa's heads (``medusa_forward``: the final norm, the K residual heads and the draft
vocabulary's rows in one call) and the distilled draft model (``draft_forward``: proj_in, its
blocks -- the target's own block code -- and its folded head), each at its target's precision.
``accelerate_head`` puts a loaded
head on its target's engine; anything else -- training, a readable target, other shapes -- runs the
readable code the classes inherit, whose outputs the tests hold them to.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np
import torch

from lessonlib.engines.llama import _ERRORS, HEAD_MAX_T, Prepared, call_inputs
from lessonlib.engines.native import _threads, to_panels
from lessonlib.models.gpt import prefix_mask
from lessonlib.models.llama import Llama, LlamaKVCache, rope_tables
from lessonlib.models.llm_draft import LlamaDraftModel
from lessonlib.models.llm_heads import LlamaEagle3Head
from lessonlib.models.llm_medusa import LlamaMedusaHeads


def panels_at(w: torch.Tensor, target: Prepared) -> torch.Tensor:
    """A head's weight (out, in) in panels (``native.to_panels``) at its target's precision."""
    return to_panels(w.detach().float().to(torch.float16 if target.f16 else torch.float32))


class PreparedEagle3:
    """An EAGLE-3 head's weights as ``eagle3_forward`` (``native_llama.c``) reads them, at its
    target's precision: fuse, q|k|v (over 2C), o, gate|up, down in panels, the four norms in
    float32, the draft vocabulary's rows of the tied embedding as its LM head; token rows are read
    from the target's own packed head (``Prepared.head``), not copied."""

    def __init__(self, head: LlamaEagle3Head, target: Prepared):
        c, layer = head.config, head.layer
        pack = functools.partial(panels_at, target=target)
        self.target, self.C, self.N = target, c.n_embd, len(head.d2t)
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
        # over the full vocabulary, -inf outside the draft vocabulary (``full_logits``'s scatter), in
        # float64 as the readable step's rows reach the drafter's log-softmax (``drafters.log_probs``)
        return g, self.full_logits(logits.double())


class PreparedMedusa:
    """Medusa's heads as ``medusa_forward`` (``native_llama.c``) reads them, at the target's
    precision: each head's (C, C) weight in panels and its bias in float32, the target's final norm,
    the draft vocabulary's rows of the tied embedding as one (N, C) product."""

    def __init__(self, heads: LlamaMedusaHeads, target: Prepared):
        pack = functools.partial(panels_at, target=target)
        self.target, self.C, self.K, self.N = target, heads.config.n_embd, heads.n_heads, len(heads.d2t)
        self.mats = [pack(h.weight) for h in heads.heads]
        self.biases = [h.bias.detach().float().contiguous() for h in heads.heads]
        self.norm_f = target.model.norm_f.weight.detach().float().contiguous()
        self.eps = target.model.config.norm_eps
        self.draft = pack(heads.draft_head(target.model).float())
        self.dims = (ctypes.c_int * 4)(self.C, self.K, self.N, target.f16)
        self.mat_ptrs = (ctypes.c_void_p * self.K)(*(t.data_ptr() for t in self.mats))
        self.bias_ptrs = (ctypes.c_void_p * self.K)(*(t.data_ptr() for t in self.biases))

    def run(self, hidden: torch.Tensor) -> torch.Tensor:
        """(K, N) draft-vocabulary logits at one position; ``hidden`` (C,) float32, contiguous (the
        caller checks, ``NativeMedusaHeads.draft_logits``)."""
        lib = self.target.lib
        _threads(lib)
        logits = torch.empty(self.K, self.N)
        code = lib.medusa_forward(self.dims, self.mat_ptrs, self.bias_ptrs, self.norm_f.data_ptr(), self.eps,
                                  self.draft.data_ptr(), hidden.data_ptr(), logits.data_ptr())
        if code:
            raise RuntimeError(f"native_llama.c refused Medusa's heads ({_ERRORS.get(code, code)})")
        return logits


class NativeMedusaHeads(LlamaMedusaHeads):
    """``LlamaMedusaHeads`` whose drafting call -- one position's hidden state, what
    ``MedusaDrafter`` asks each round -- runs ``medusa_forward`` beside a ``NativeLlama`` (in
    PyTorch it cost about a quarter of a target step: the norm, K small products, the draft rows in
    float32); training and other shapes run the readable ``draft_logits`` it inherits."""

    native: PreparedMedusa | None = None

    def draft_logits(self, target: Llama, hidden: torch.Tensor) -> torch.Tensor:
        """``LlamaMedusaHeads.draft_logits``'s contract: (K, N) for one position's (C,) hidden state."""
        if (self.native is None or getattr(target, "native", None) is not self.native.target or hidden.ndim != 1
                or hidden.dtype != torch.float32 or self.training
                or (torch.is_grad_enabled() and (hidden.requires_grad or self.heads[0].weight.requires_grad))):
            return super().draft_logits(target, hidden)
        if hidden.shape[0] != self.native.C:
            raise ValueError(f"hidden must be ({self.native.C},), the target's width, got {tuple(hidden.shape)}")
        return self.native.run(hidden.contiguous())


class PreparedDraft:
    """The distilled draft model's weights as ``draft_forward`` (``native_llama.c``) reads them, at
    its target's precision: proj_in, then per block q|k|v, o, gate|up, down in panels; the norms in
    float32; proj_out folded into the draft vocabulary's embedding rows as one (N, d) head (the
    readable model's ``out_rows``); token rows read from the target's packed head, not copied."""

    def __init__(self, model: LlamaDraftModel, target: Prepared):
        pack = functools.partial(panels_at, target=target)
        c = model.config
        self.target, self.d, self.N = target, c.n_embd, len(model.d2t)
        self.mats = [pack(model.proj_in.weight)] + [
            pack(m) for b in model.blocks for m in (torch.cat([b.q.weight, b.k.weight, b.v.weight]), b.o.weight,
                                                    torch.cat([b.gate.weight, b.up.weight]), b.down.weight)]
        self.norms = [n.weight.detach().float().contiguous() for b in model.blocks
                      for n in (b.norm_1, b.norm_2)] + [model.norm.weight.detach().float().contiguous()]
        self.out = pack(model.out_rows())
        cos, sin = rope_tables(torch.arange(c.block_size), c.head_dim, c.rope_theta, torch.float32)
        self.cos, self.sin = cos[:, : c.head_dim // 2].contiguous(), sin[:, : c.head_dim // 2].contiguous()
        self.eps = c.norm_eps
        self.dims = (ctypes.c_int * 11)(c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.n_hidden, c.vocab_size,
                                        c.block_size, c.block_size, target.f16, target.C, self.N)
        self.mat_ptrs = (ctypes.c_void_p * len(self.mats))(*(t.data_ptr() for t in self.mats))
        self.norm_ptrs = (ctypes.c_void_p * len(self.norms))(*(t.data_ptr() for t in self.norms))

    def run(self, tokens: np.ndarray, positions: np.ndarray, cache: LlamaKVCache, allowed: torch.Tensor | None,
            n_logits: int) -> torch.Tensor:
        """Draft-vocabulary logits (n_logits, N) of the last ``n_logits`` tokens; the caller checks the
        bounds (``engines.llama.call_inputs``)."""
        lib = self.target.lib
        _threads(lib)
        x, logits = torch.empty(len(tokens), self.d), torch.empty(n_logits, self.N)
        code = lib.draft_forward(self.dims, self.mat_ptrs, self.norm_ptrs, self.target.head.data_ptr(),
                                 self.out.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr(), self.eps,
                                 tokens.ctypes.data, positions.ctypes.data, len(tokens), cache.kv.data_ptr(),
                                 cache.length, None if allowed is None else allowed.data_ptr(), x.data_ptr(),
                                 n_logits, logits.data_ptr())
        if code:
            raise RuntimeError(f"native_llama.c refused the draft model ({_ERRORS.get(code, code)}): a bound "
                               "the Python side should have checked")
        return logits


class NativeDraftModel(LlamaDraftModel):
    """``LlamaDraftModel`` whose batch-1 cached calls run ``draft_forward`` beside a ``NativeLlama``
    (in PyTorch a one-token step made ~40 calls: about 0.15 of a target step, three times the bytes
    it reads); training and every other call run the readable forward it inherits."""

    native: PreparedDraft | None = None

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: LlamaKVCache | None = None, last: bool = False) -> torch.Tensor:
        """``LlamaDraftModel.forward``'s contract, in one native call when it runs here."""
        if (self.native is None or getattr(self.target, "native", None) is not self.native.target or cache is None
                or idx.ndim != 2 or idx.shape[0] != 1 or not 1 <= idx.shape[1] <= HEAD_MAX_T or self.training
                or cache.kv.dtype != torch.float32 or not cache.kv.is_contiguous()
                or (torch.is_grad_enabled() and self.proj_in.weight.requires_grad)):
            return super().forward(idx, positions, mask, cache, last)
        tokens, pos, allowed = call_inputs(self, idx, positions, mask, cache)
        logits = self.native.run(tokens, pos, cache, allowed, 1 if last else len(tokens))
        cache.length += len(tokens)
        return self.full_logits(logits)[None]


def accelerate_head(head: Any, target: Llama) -> Any:
    """``head`` on ``target``'s engine, in place: an EAGLE-3 head's draft step, Medusa's heads or the
    draft model in ``native_llama.c`` when the target is a prepared ``NativeLlama`` (at the target's precision);
    else unchanged (the EAGLE control, ``llm_eagle.LlamaEagleHead``, has no native step)."""
    prepared = getattr(target, "native", None)
    if isinstance(head, LlamaEagle3Head) and isinstance(prepared, Prepared):
        head.__class__ = NativeEagle3Head
        head.native = PreparedEagle3(head, prepared)  # type: ignore[attr-defined]
    elif isinstance(head, LlamaMedusaHeads) and isinstance(prepared, Prepared):
        head.__class__ = NativeMedusaHeads
        head.native = PreparedMedusa(head, prepared)  # type: ignore[attr-defined]
    elif isinstance(head, LlamaDraftModel) and isinstance(prepared, Prepared) and head.target is target:
        head.__class__ = NativeDraftModel
        head.native = PreparedDraft(head, prepared)  # type: ignore[attr-defined]
    return head
