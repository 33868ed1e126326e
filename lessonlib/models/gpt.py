"""Tiny GPTs for real speculative decoding: one clear model file in the spirit of nanoGPT.

* ``GPT`` -- pre-LayerNorm decoder, learned positions, tied input/output embeddings,
  attention through ``scaled_dot_product_attention``. ``forward`` accepts explicit position
  ids and an explicit attention mask so a whole draft tree is verified in one pass, and can
  return the final hidden states (EAGLE drafts from them).
* ``KVCache`` -- preallocated keys/values with ``truncate`` (rollback after a rejection) and
  ``keep`` (compaction after tree verification).
* Every model also follows the course's ``logits(tokens)`` protocol, so the generic
  ``lessonlib.decoding.reference.speculative_decode`` runs on it unchanged.
* Checkpoints live in ``lessonlib.models.checkpoints``. The fast paths that run these same
  weights for decoding (oneDNN packing, the PyTorch fast forward, the native C forward) are
  engines, in ``lessonlib.engines``; this file is the model they are all checked against.

Shapes: B batch, T new tokens, C = n_embd, V = vocab_size, H = n_head, D = C // H.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.core.validate import check_int, check_token_sequence, check_token_tensor


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 2048  # V: number of token ids (the tokenizer's vocabulary)
    block_size: int = 512  # longest context: positions 0..block_size-1 (and the KV cache's capacity)
    n_layer: int = 8  # number of transformer blocks
    n_head: int = 8  # attention heads per block (n_embd must divide by it)
    n_embd: int = 256  # C: width of the residual stream (and of the tied token embedding)

    def __post_init__(self) -> None:
        """Every field an integer >= 1 (True is not 1) and n_embd divisible by n_head; ValueError
        naming the field, before any tensor is built."""
        for field in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            object.__setattr__(self, field, check_int(getattr(self, field), field, minimum=1))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd must be divisible by n_head, got n_embd={self.n_embd}, n_head={self.n_head}")


class KVCache:
    """Keys and values of every layer for the tokens committed so far.

    Stored as (n_layer, 2, n_head, block_size, head_dim) for batch 1; ``length`` is how many
    positions are valid. Appending writes in place, truncating only moves ``length``.
    """

    def __init__(self, config: GPTConfig, device: torch.device | str, dtype: torch.dtype = torch.float32):
        head_dim = config.n_embd // config.n_head
        # (n_layer, 2 = keys/values, H, block_size, D)
        self.kv = torch.zeros(config.n_layer, 2, config.n_head, config.block_size, head_dim, device=device, dtype=dtype)
        self.length = 0  # positions 0..length-1 hold committed keys/values
        self.capacity = config.block_size

    def truncate(self, length: int) -> None:
        """Forget everything after the first ``length`` positions (rollback after a rejection)."""
        self.length = check_int(length, "length", minimum=0, maximum=self.length)

    def keep(self, start: int, indices: npt.ArrayLike) -> None:
        """Keep positions ``start + indices`` (in that order) after ``start``; drop the rest.

        Used after tree verification: the accepted nodes' keys/values move down to sit right
        after the committed prefix, so the cache equals a fresh prefill of the accepted tokens.
        ``indices``: distinct integer offsets from ``start``, each addressing a cached position
        (``start + i < length``).
        """
        start = check_int(start, "start", minimum=0, maximum=self.length)
        raw = np.asarray(indices)
        if raw.ndim != 1 or (raw.size and (raw.dtype == bool or not np.issubdtype(raw.dtype, np.number)
                                           or not np.all(np.mod(raw, 1) == 0))):
            raise ValueError(f"indices must be a 1-D sequence of integer offsets, got {indices!r}")
        indices = raw.astype(np.int64)  # (n,)
        if len(indices) and (indices.min() < 0 or start + indices.max() >= self.length):
            raise ValueError(f"indices must address cached positions: start + i in [{start}, {self.length}), "
                             f"got offsets {indices.tolist()}")
        if len(np.unique(indices)) != len(indices):
            raise ValueError("indices must be distinct (a position kept twice is not a prefill), "
                             f"got {indices.tolist()}")
        if np.array_equal(indices, np.arange(len(indices))):  # a prefix (every chain): nothing moves
            return self.truncate(start + len(indices))
        idx = torch.as_tensor(indices, device=self.kv.device) + start
        self.kv[:, :, :, start : start + len(idx)] = self.kv[:, :, :, idx]
        self.length = start + len(idx)


def prefix_mask(mask: torch.Tensor | None, start: int, T: int, device: torch.device | str,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(T, start + T) additive attention mask (0 = may attend, -inf = may not) for T new tokens
    after ``start`` cached ones.

    ``mask`` is bool (T, S) over the last S positions (the newest S - T cached ones, then the
    new ones; default (T, T) causal): a tree drafted in several feeds keeps its earlier nodes
    in the cache. Every older cached position is always visible. Additive rather than bool: a
    bool mask is converted to this inside every attention call.
    """
    local = mask.to(device) if mask is not None else torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if local.ndim != 2 or local.shape[0] != T or not T <= local.shape[1] <= start + T:
        raise ValueError(f"mask must be bool (T, S) with T = {T} new tokens and {T} <= S <= {start + T}, "
                         f"got {tuple(local.shape)}")
    allowed = torch.cat([torch.ones(T, start + T - local.shape[1], dtype=torch.bool, device=device), local], 1)
    return torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))


class Block(nn.Module):
    """One pre-LayerNorm transformer block: x + attention(ln_1(x)), then + MLP(ln_2(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.fc_out = nn.Linear(4 * config.n_embd, config.n_embd)

    def attend(self, x: torch.Tensor, mask: torch.Tensor | None, layer_cache: torch.Tensor | None,
               start: int) -> torch.Tensor:
        """Self-attention of the T new positions ``x`` (B, T, C); returns (B, T, C).

        mask: additive (T, start + T) (``prefix_mask``), or None for causal over the new tokens
              (with a cache: only when T == 1 or start == 0).
        layer_cache: this layer's (2, H, block_size, D) slice of a ``KVCache`` (batch 1): the new
              keys/values are written at ``start``, then attention reads all start + T of them.
        """
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        q, k, v = qkv  # each (B, H, T, D)
        if layer_cache is not None:
            # write the new keys/values after the committed prefix (one copy), attend over all of them
            layer_cache[:, :, start : start + T] = qkv[1:, 0]
            k = layer_cache[0, :, : start + T].unsqueeze(0)
            v = layer_cache[1, :, : start + T].unsqueeze(0)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1 and start == 0)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, layer_cache: torch.Tensor | None = None,
                start: int = 0) -> torch.Tensor:
        """(B, T, C) -> (B, T, C); ``mask``, ``layer_cache``, ``start`` as in ``attend``."""
        x = x + self.attend(self.ln_1(x), mask, layer_cache, start)
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


def one_block(block: Block, x: torch.Tensor, mask: torch.Tensor | None = None,
              cache: KVCache | None = None) -> torch.Tensor:
    """``block`` over new positions ``x`` (B, T, C) after a one-layer ``cache`` (batch 1): what
    the one-block heads (EAGLE, MTP) run. Causal by default; ``mask`` as in ``prefix_mask``."""
    T = x.shape[1]
    start = cache.length if cache is not None else 0
    attn = None if (mask is None and start == 0) else prefix_mask(mask, start, T, x.device, x.dtype)
    h = block(x, attn, cache.kv[0] if cache is not None else None, start)
    if cache is not None:
        cache.length = start + T
    return h


class LanguageModel:
    """What the course's decoders share beyond ``forward``: the token check and the
    ``logits(tokens)`` protocol (``core.toy``), over ``self.config.vocab_size`` and ``block_size``."""

    config: Any

    @property
    def device(self) -> torch.device:
        raise NotImplementedError  # each model's: where its weights are

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # each model's: logits (..., V) from final hidden states (..., C)

    def finish(self, x: torch.Tensor, kept: list[torch.Tensor], layers: tuple[int, ...], cache: KVCache | None,
               end: int, return_hidden: bool | tuple[int, ...]) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """How every forward ends: ``cache`` (when given) now holds ``end`` positions; the logits of the
        last block's output ``x`` (B, T, C), with the blocks' outputs ``kept`` (fused, when ``layers``
        names them) or ``x`` itself when ``return_hidden`` asks for features."""
        if cache is not None:
            cache.length = end
        logits = self.lm_head(x)
        if layers:
            return logits, torch.cat(kept, -1)
        return (logits, x) if return_hidden else logits

    def check_tokens(self, idx: torch.Tensor, name: str = "tokens") -> None:
        """Token ids must lie in [0, vocab_size) (``core.validate.check_token_tensor``)."""
        check_token_tensor(idx, self.config.vocab_size, name)

    @torch.inference_mode()
    def logits(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """The course's model protocol: row i = next-token logits after ``tokens[: i + 1]``,
        float64 (len(tokens), V). At most ``block_size`` tokens: a longer context raises
        (dropping the oldest tokens silently would give rows the protocol does not describe)."""
        ids = check_token_sequence(list(tokens), self.config.vocab_size, "tokens")  # (T,) int64
        if len(ids) > self.config.block_size:
            raise ValueError(f"tokens must fit the context of block_size={self.config.block_size} tokens, "
                             f"got {len(ids)}")
        idx = torch.as_tensor(ids, dtype=torch.long, device=self.device)[None]  # (1, T)
        model: Any = self  # an nn.Module: calling it runs its forward
        return model(idx)[0].float().cpu().numpy().astype(np.float64)


class GPT(LanguageModel, nn.Module):
    """The decoder: token + position embeddings, ``n_layer`` blocks, ``ln_f``, tied LM head."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.packed_head: nn.Module | None = None  # an engine's LM head (engines.packing.pack_for_cpu)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith(("proj.weight", "fc_out.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (..., V) from final hidden states (..., C) (tied to the input embedding)."""
        if self.packed_head is not None:
            return self.packed_head(self.ln_f(hidden))
        return F.linear(self.ln_f(hidden), self.wte.weight)

    @property
    def packed(self) -> bool:
        return self.packed_head is not None

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: KVCache | None = None,
                return_hidden: bool | tuple[int, ...] = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, V) for token ids ``idx`` (B, T).

        positions: (T,) position ids; default ``cache.length + arange(T)``.
        mask: (T, T) bool, ``mask[i, j]`` true iff new token i may see new token j (a tree
              mask); every new token always sees the whole cached prefix. Default causal.
              (T, S) with S > T also covers the newest S - T cached positions (``prefix_mask``).
        cache: when given, the new tokens' keys/values are appended to it (batch 1).
        return_hidden: also return the last block's output before ``ln_f`` (B, T, C); a tuple
              of block indices returns those blocks' outputs concatenated (B, T, len * C), the
              fused features EAGLE-3 reads.
        """
        if not isinstance(idx, torch.Tensor) or idx.ndim != 2:  # a 1-D row would fail as "not enough values"
            shape = tuple(idx.shape) if isinstance(idx, torch.Tensor) else type(idx).__name__
            raise ValueError(f"idx must be a (B, T) tensor of token ids (one row per sequence: idx[None] for "
                             f"one sequence), got {shape}")
        B, T = idx.shape
        self.check_tokens(idx, "idx")
        start = cache.length if cache is not None else 0
        if cache is not None and (B != 1 or start + T > cache.capacity):
            raise ValueError(f"cache holds batch 1 and {cache.capacity} positions; got batch {B}, {start}+{T}")
        if positions is None:  # consecutive positions: a slice of the table (no lookup, no device sync)
            if start + T > self.config.block_size:
                raise ValueError(f"positions must be < block_size={self.config.block_size}, got up to {start + T - 1}")
            pos = self.wpe.weight[start : start + T]
        else:
            if len(positions) != T or int(positions.min()) < 0 or int(positions.max()) >= self.config.block_size:
                raise ValueError(f"positions must hold {T} position ids in [0, block_size={self.config.block_size})")
            pos = self.wpe(positions)
        # None + is_causal covers plain training; one cached token sees everything
        attn_mask = (prefix_mask(mask, start, T, idx.device, self.wte.weight.dtype)
                     if mask is not None or (start > 0 and T > 1) else None)  # (T, start + T)
        x = self.wte(idx) + pos  # (B, T, C)
        layers = return_hidden if isinstance(return_hidden, tuple) else ()
        kept: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            x = block(x, attn_mask, cache.kv[i] if cache is not None else None, start)
            if i in layers:
                kept.append(x)
        return self.finish(x, kept, layers, cache, start + T, return_hidden)

    def new_cache(self) -> KVCache:
        return KVCache(self.config, self.device, self.wte.weight.dtype)


def config_dict(config: GPTConfig) -> dict[str, Any]:
    return asdict(config)
