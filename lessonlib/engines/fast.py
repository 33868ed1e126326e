"""The fast decode path: the same GPT (``models.gpt``, the readable teaching model), the same
weights, a forward written for what decoding does -- one sequence, new tokens after a KV cache.

Why a second forward: on a CPU the shipped target's one-token step is limited neither by
arithmetic (7.75 M multiply-adds) nor by memory traffic (31 MB of float32 weights read once),
but by the fixed cost of each operator call, times 24 blocks. ``FastGPT.forward`` on a batch-1
cached call computes the same numbers with cheaper calls:

* every matrix product is one ``torch.addmm`` (bias included) on a weight stored transposed,
  (in, out) contiguous, over 2-D (T, C) activations: a T-row product then reaches MKL's
  kernel directly. ``nn.Linear`` on 3-D input reshapes and transposes on every call, and the
  oneDNN-packed linears of ``GPT.pack_for_cpu`` pay about 15-20 us of fixed cost per call on
  this machine, several times a 160-wide product (``MEASURED``);
* the weights of every block are gathered once into a flat tuple (``prepare``), so the loop
  touches no ``nn.Module`` (each module call costs hooks and attribute look-ups);
* the new keys/values are written into the cache with one in-place copy, and attention reads
  the cache slices directly; the residual adds are in place;
* no per-call validation inside the loop: token ids and positions are checked by the
  embedding look-ups themselves (a CPU ``F.embedding`` raises on an index out of range, which
  becomes the readable model's ``ValueError``), the cache bounds by two integer compares.

Where the native forward builds (``engines.native``, the default), a batch-1 cached call of up to
``native.MAX_T`` new tokens runs every block in one call to ``native.c`` instead, and the LM head
too; the PyTorch path above is what runs without it (``LESSONLIB_NATIVE=0``, no C compiler).
Anything else (a batch, no cache, training) runs the readable ``GPT.forward``. The LM head
(``lm_head``, which the EAGLE, Medusa and MTP drafters call on every draft step) is one
``matmul`` on the transposed embedding as well. ``engines.load(name, engine="native" | "fast")``
returns a ``FastGPT`` ("packed" the readable packed ``GPT``); ``FastGPT.from_gpt(model)`` converts
a model in memory. ``python -m lessonlib.bench bandwidth`` measures both paths.

The one-block heads (EAGLE, EAGLE-3, MTP) run their block on every draft step through
``head_block``: the same ``block_step`` on a batch-1 cached call at inference, the readable
``gpt.one_block`` otherwise (``tests/engines/test_fast_heads.py``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lessonlib.engines import native
from lessonlib.engines.packing import pack_for_cpu
from lessonlib.models.gpt import GPT, Block, KVCache, one_block, prefix_mask

# One block's weights, in the order ``_block`` reads them: ln_1 (w, b), qkv (W.T, b),
# proj (W.T, b), ln_2 (w, b), fc (W.T, b), fc_out (W.T, b); each W.T (in, out) contiguous
Layer = tuple[torch.Tensor, ...]

# Measured on the course's 2-core CPU, shared with other jobs, so as CPU time of the one torch
# thread (time.thread_time: time spent descheduled does not count), fastest of many calls.
# One 480 x 160 product over 1 / 6 / 16 rows, weights warm: 11.1 / 21.4 / 31.5 us as nn.Linear,
# 26.9 / 32.3 / - us packed for oneDNN, 6.6 / 9.5 / 18.4 us as addmm on the transposed weight.
# The shipped target, a forward over 1 / 6 / 16 new tokens after 128 cached ones (fastest of 40,
# three rounds taking turns, best round): readable packed (the loops' model before) 9.1 / 10.7 /
# 13.4 ms, readable unpacked 6.3 / 8.6 / 11.1, fast 4.2 / 6.2 / 7.8 -- 2.2x / 1.7x / 1.7x over
# the readable packed model. Steps on the way: gathering the weights and fusing GELU and the
# residual adds into oneDNN calls gave only 7.3 against 7.8 ms (the oneDNN calls dominate);
# addmm on transposed weights gave the rest. Tried and not kept: bfloat16 weights and
# activations (this CPU has AVX512-BF16): 10.7 / 13.6 / 17.2 ms, slower (oneDNN's fixed cost
# again), logits off by up to 0.24 and greedy output different on 1 of 5 prompts within 64
# tokens. ``python -m lessonlib.bench bandwidth --compile --half`` re-measures both on the machine at
# hand (outputs/benchmarks/bandwidth.md; one run on a shared, busy 2-core machine):
# torch.compile (inductor, dynamic shapes) of ``_block`` compiled in 61 s from an empty cache and ran
# 0.43x / 0.69x as fast as eager over 1 / 6 new tokens (15.7 / 24.2 ms against 6.7 / 16.7), logits
# within 9e-6; compiling the whole 24-block loop as one graph took 235 s in a trial and was slower
# still. Not adopted: it loses, and its compile time alone is over a notebook's 60 s budget. That
# machine's CPU has f16c (conversions) but no AVX512-BF16/FP16 or AMX arithmetic: float16 and
# bfloat16 weights ran 3.0x / 2.5x slower per step, logits off by 0.029 / 0.21, greedy 32 tokens equal
# to float32's on 5/5 and 4/5 prompts -- not adopted either.
MEASURED = {"addmm_480x160_us": (6.6, 9.5, 18.4), "linear_480x160_us": (11.1, 21.4, 31.5),
            "onednn_480x160_us": (26.9, 32.3, None), "readable_packed_ms": (9.1, 10.7, 13.4),
            "readable_unpacked_ms": (6.3, 8.6, 11.1), "fast_ms": (4.2, 6.2, 7.8), "fast_bf16_ms": (10.7, 13.6, 17.2)}

class FastGPT(GPT):
    """A ``GPT`` whose batch-1 cached forward is the fast path (module docstring); same
    parameters, same state dict, the same logits within float32 rounding (``tests/engines/test_agreement.py``)."""

    fast_layers: list[Layer] | None = None  # set by ``prepare``; None: prepared on the next fast call
    native: native.Blocks | None = None  # the blocks and head for native.c, or None (``native.status()``)
    use_native = True  # False: the PyTorch fast path even where native.c builds (the "fast" engine)

    @classmethod
    def from_gpt(cls, model: GPT) -> FastGPT:
        """A ``FastGPT`` holding a copy of ``model``'s weights, on its device and dtype, packed
        when ``model`` is."""
        fast = cls(model.config).to(device=model.device, dtype=model.wte.weight.dtype)
        # a packed model's state also names the tied head's weight (packed_head.weight), not a parameter of its own
        fast.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("packed_head.")})
        if hasattr(model, "checkpoint_name"):
            fast.checkpoint_name = model.checkpoint_name
        fast.eval().requires_grad_(False)
        return (pack_for_cpu(fast) if model.packed else fast).prepare()

    @torch.no_grad()
    def prepare(self) -> FastGPT:
        """Gather every block's weights for the fast forward, the matrices transposed once
        (a copy: 4 bytes a weight more). Inference only: the weights stop taking gradients."""
        self.requires_grad_(False)

        self.fast_layers = [gather(b) for b in self.blocks]
        self.head_t = self.wte.weight.detach().t().contiguous()  # (C, V): the tied LM head
        self.native = native.prepare(list(self.blocks), (self.wte.weight, self.ln_f)) if self.use_native else None
        self.check_ids = self.device.type != "cpu"  # a CUDA embedding does not raise on a bad id
        return self

    def _apply(self, fn, *args, **kwargs):  # .to(), .double(), .cuda(): the gathered copies go stale
        self.fast_layers = self.native = None
        return super()._apply(fn, *args, **kwargs)

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (..., V) from final hidden states (..., C), as ``GPT.lm_head``."""
        if self.fast_layers is None or torch.is_grad_enabled() and hidden.requires_grad:
            return super().lm_head(hidden)
        if self.native is not None and hidden.ndim == 2 and hidden.shape[0] <= native.MAX_T:
            return self.native.logits(hidden)
        return F.layer_norm(hidden, self.ln_f.normalized_shape, self.ln_f.weight, self.ln_f.bias) @ self.head_t

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: KVCache | None = None,
                return_hidden: bool | tuple[int, ...] = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """As ``GPT.forward``; a batch-1 call with a cache takes the fast path."""
        if cache is None or idx.ndim != 2 or idx.shape[0] != 1 or self.training:
            return super().forward(idx, positions, mask, cache, return_hidden)
        if self.fast_layers is None:
            self.prepare()
        T, start = idx.shape[1], cache.length
        if T < 1 or start + T > cache.capacity:
            raise ValueError(f"cache holds batch 1 and {cache.capacity} positions; got batch 1, {start}+{T}")
        if positions is not None and len(positions) != T:
            raise ValueError(f"positions must hold {T} position ids in [0, block_size={self.config.block_size})")
        x = self._embed(idx[0], positions, start)  # (T, C)
        layers = return_hidden if isinstance(return_hidden, tuple) else ()
        if self.native is not None and T <= native.MAX_T and cache.kv.is_contiguous():
            fused = self.native.run(x, cache.kv, start, native_attn(mask, start, T, x), layers)  # x in place
        else:
            kept: list[torch.Tensor] = []
            attn = cached_attn(mask, start, T, x)
            for i, layer in enumerate(self.fast_layers):  # type: ignore[arg-type]
                x = self._block(x, layer, cache.kv[i], start, attn)
                if i in layers:
                    kept.append(x)
            fused = torch.cat(kept, -1) if layers else None
        cache.length = start + T
        logits = self.lm_head(x)[None]  # (1, T, V)
        if fused is not None:
            return logits, fused[None]
        return (logits, x[None]) if return_hidden else logits

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor | None, start: int) -> torch.Tensor:
        """Token + position embeddings (T, C) of ``ids`` (T,). The look-ups are the checks: an
        id or position out of range makes a CPU embedding raise, turned into a ValueError."""
        if self.check_ids:
            self.check_tokens(ids, "idx")
        try:
            tok = F.embedding(ids, self.wte.weight)
            if positions is None:
                return tok + self.wpe.weight[start : start + len(ids)]
            return tok + F.embedding(positions, self.wpe.weight)
        except (IndexError, RuntimeError):
            self.check_tokens(ids, "idx")  # raises the ValueError that names the bad id
            raise ValueError(f"positions must hold {len(ids)} position ids in "
                             f"[0, block_size={self.config.block_size})") from None

    def _block(self, x: torch.Tensor, layer: Layer, kv: torch.Tensor, start: int,
               attn: torch.Tensor | None) -> torch.Tensor:
        return block_step(x, layer, kv, start, attn, self.config.n_head)


def cached_attn(mask: torch.Tensor | None, start: int, T: int, x: torch.Tensor) -> torch.Tensor | None:
    """The attention mask of T new positions after ``start`` cached ones: None (causal, for
    ``block_step``) over a fresh prefill or for one new token, which sees everything; else the
    additive (T, start + T) ``prefix_mask``."""
    if mask is None and (start == 0 or T == 1):
        return None
    if T == 1 and mask is not None and mask.ndim == 2 and mask.shape[0] == 1 and bool(mask.all()):
        return None  # one new token that may see every position: a chain's draft step, no mask to build
    return prefix_mask(mask, start, T, x.device, x.dtype)


def native_attn(mask: torch.Tensor | None, start: int, T: int, x: torch.Tensor) -> torch.Tensor | None:
    """``cached_attn`` for ``native.c``, where no mask means causal over the whole cache at any
    ``start``: no mask is built for a chain's verify pass or a commit."""
    return None if mask is None else cached_attn(mask, start, T, x)


def _t(linear) -> torch.Tensor:  # (out, in) -> (in, out), contiguous
    return linear.weight.detach().t().contiguous()


def linear(layer, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` (an ``nn.Linear`` or a packed one) over (..., in); at inference one ``addmm``
    on a transposed copy of the weight kept on the layer, keyed by the weight's storage (the
    heads' input maps run it on every draft step: a module call costs several times the product)."""
    if torch.is_grad_enabled():  # training (a Linear has no train-mode behaviour of its own)
        return layer(x)
    key = (layer.weight.data_ptr(), layer.weight.dtype, layer.weight.device)
    if getattr(layer, "_fast_key", None) != key:
        layer._fast_t, layer._fast_key = _t(layer), key
    return torch.addmm(layer.bias, x.reshape(-1, x.shape[-1]), layer._fast_t).view(*x.shape[:-1], -1)


def gather(b: Block) -> Layer:
    """One block's weights as ``block_step`` reads them (the matrices transposed: a copy)."""
    return (b.ln_1.weight, b.ln_1.bias, _t(b.qkv), b.qkv.bias, _t(b.proj), b.proj.bias,
            b.ln_2.weight, b.ln_2.bias, _t(b.fc), b.fc.bias, _t(b.fc_out), b.fc_out.bias)


def block_step(x: torch.Tensor, layer: Layer, kv: torch.Tensor, start: int, attn: torch.Tensor | None,
               n_head: int) -> torch.Tensor:
    """One block over x (T, C) after ``start`` cached positions of this layer's ``kv``
    (2, H, block_size, D), which gets the new keys/values in place; ``attn``: None (causal) or
    an additive (T, start + T) mask (``prefix_mask``)."""
    ln1_w, ln1_b, qkv_t, qkv_b, proj_t, proj_b, ln2_w, ln2_b, fc_t, fc_b, out_t, out_b = layer
    T, C = x.shape
    H, end = n_head, start + T
    qkv = torch.addmm(qkv_b, F.layer_norm(x, (C,), ln1_w, ln1_b), qkv_t)  # (T, 3C)
    qkv = qkv.view(T, 3, H, C // H).permute(1, 2, 0, 3)  # (3, H, T, D)
    kv[:, :, start:end] = qkv[1:]  # the new keys and values: one in-place copy
    # (1, H, T, D) queries over the (1, H, end, D) cached keys/values
    y = F.scaled_dot_product_attention(qkv[0:1], kv[0:1, :, :end], kv[1:2, :, :end], attn_mask=attn,
                                       is_causal=attn is None and T > 1)
    x = torch.addmm(proj_b, y[0].transpose(0, 1).reshape(T, C), proj_t).add_(x)  # x + proj(y)
    h = F.gelu(torch.addmm(fc_b, F.layer_norm(x, (C,), ln2_w, ln2_b), fc_t), approximate="tanh")  # (T, 4C)
    return torch.addmm(out_b, h, out_t).add_(x)  # x + fc_out(h)


def fast_one_block(block: Block, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache,
                   use_native: bool = True) -> torch.Tensor:
    """``gpt.one_block`` for a batch-1 call with a cache, inference only (what the EAGLE and MTP
    drafters run on every draft step): the same numbers through ``native.c`` when it runs here
    (up to ``native.MAX_T`` new tokens), else ``block_step``. The prepared weights are kept on the
    block, keyed by the weights' storage, so a moved or reloaded block prepares again."""
    key = (block.qkv.weight.data_ptr(), block.qkv.weight.dtype, block.qkv.weight.device,
           use_native and native.enabled())
    if getattr(block, "_fast_key", None) != key:
        block._fast_layer, block._fast_key = gather(block), key
        block._native = native.prepare([block]) if use_native else None
    T, start = x.shape[1], cache.length
    if start + T > cache.capacity:
        raise ValueError(f"cache holds {cache.capacity} positions; got {start}+{T}")
    if block._native is not None and T <= native.MAX_T and x.dtype == torch.float32 and cache.kv.is_contiguous():
        h = x[0].clone(memory_format=torch.contiguous_format)  # the C code updates its input in place
        block._native.run(h, cache.kv, start, native_attn(mask, start, T, x))
    else:
        h = block_step(x[0], block._fast_layer, cache.kv[0], start, cached_attn(mask, start, T, x), block.n_head)
    cache.length = start + T
    return h[None]


def head_block(block: Block, x: torch.Tensor, mask: torch.Tensor | None = None,
               cache: KVCache | None = None, use_native: bool = True) -> torch.Tensor:
    """What a one-block head (EAGLE, EAGLE-3, MTP) runs: ``fast_one_block`` on a batch-1 cached
    call at inference, else the readable ``gpt.one_block`` (training, batches, no cache)."""
    if cache is None or x.shape[0] != 1 or torch.is_grad_enabled() or block.training:
        return one_block(block, x, mask, cache)
    return fast_one_block(block, x, mask, cache, use_native)
