"""EAGLE (Li et al. 2024) for the real LLM: the top feature only, the target's full LM head -- the
control for EAGLE-3's fused features and draft vocabulary (``llm_heads``), on the same data.

As the reference (SafeAILab/EAGLE ``cnets.py``, EAGLE-1): g_s = Layer(fc([emb(x_{s+1}); h_s])), fc
2C -> C with a bias, one Llama decoder layer (``llama.Block``), its own RoPE positions (the same
rule as ``llm_heads``: pair s at s, a draft node at the last committed position + its depth);
``target.lm_head(g)`` (norm_f, then the tied 49,152-row embedding) gives the draft distribution,
so a draft step reads the layer *and* the whole embedding (the issue's c ~ 0.24 against EAGLE-3's
~0.07). Deeper steps feed g in place of h. Loss: forward KL to the target at T = 1 over the full
vocabulary + ``REG_WEIGHT`` x smooth-L1 of g to the target's next feature (``heads.eagle_losses``'s
recipe), unrolled ``steps`` times with the training-time test's masks when asked.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.models.gpt import prefix_mask
from lessonlib.models.heads import REG_WEIGHT, _ttt_mask
from lessonlib.models.llama import Block, Llama, LlamaConfig, LlamaKVCache, rope_tables, rotate


class LlamaEagleHead(nn.Module):
    """EAGLE beside a ``Llama`` target: reads the last block's output (before ``norm_f``)."""

    def __init__(self, config: LlamaConfig, target_name: str = "smollm2"):
        super().__init__()
        self.config = dataclasses.replace(config, n_layer=1)
        self.target_name = target_name
        self.layers: tuple[int, ...] | None = None  # the drafter asks the target for its top feature
        C = config.n_embd
        self.fc = nn.Linear(2 * C, C, bias=True)
        self.layer = Block(self.config)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def forward(self, target: Llama, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None, cache: LlamaKVCache | None = None) -> torch.Tensor:
        """g (B, T, C) for ``tokens`` (B, T) with ``features`` (B, T, C) at ``positions`` (T,)."""
        x = self.fc(torch.cat([target.wte(tokens).to(self.fc.weight.dtype), features.to(self.fc.weight.dtype)], -1))
        start = cache.length if cache is not None else 0
        T = tokens.shape[1]
        rope = rope_tables(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        attn = None if (mask is None and start == 0) else prefix_mask(mask, start, T, x.device, x.dtype)
        g = self.layer(x, rope, attn, cache.kv[0] if cache is not None else None, start)
        if cache is not None:
            cache.length = start + T
        return g

    def new_cache(self) -> LlamaKVCache:
        return LlamaKVCache(self.config, self.device, self.fc.weight.dtype)

    def step(self, target: Llama, tokens: np.ndarray, features: torch.Tensor, cache: LlamaKVCache,
             mask: np.ndarray | None = None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``heads.EagleHead.step``'s contract; positions as ``LlamaEagle3Head.step``'s."""
        T = len(tokens)
        if mask is None:
            positions = torch.arange(cache.length, cache.length + T)
        else:
            positions = cache.length - (mask.shape[1] - T) - 1 + torch.from_numpy(mask.sum(1).astype(np.int64))
        idx = torch.as_tensor(tokens, dtype=torch.long, device=self.device)[None]
        g = self(target, idx, features[None], positions.to(self.device),
                 None if mask is None else torch.from_numpy(mask), cache)[0]
        return g, target.lm_head(g[-1:] if last else g)


def _unrolled(layer: Block, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], memory: list[Any],
              mask: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``layer`` whose queries also see earlier unroll steps' keys/values (``llm_heads._unrolled``)."""
    B, T, _ = x.shape
    h = layer.norm_1(x)
    q = rotate(layer.q(h).view(B, T, layer.n_head, -1).transpose(1, 2), *rope)
    k = rotate(layer.k(h).view(B, T, layer.n_kv_head, -1).transpose(1, 2), *rope)
    v = layer.v(h).view(B, T, layer.n_kv_head, -1).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, torch.cat([m[0] for m in memory] + [k], 2),
                                       torch.cat([m[1] for m in memory] + [v], 2), attn_mask=mask, enable_gqa=True)
    x = x + layer.o(y.transpose(1, 2).reshape(B, T, -1))
    h = layer.norm_2(x)
    return x + layer.down(F.silu(layer.gate(h)) * layer.up(h)), (k, v)


def unroll(head: LlamaEagleHead, target: Llama, tokens: torch.Tensor, final: torch.Tensor,
           steps: int) -> list[torch.Tensor]:
    """The head unrolled ``steps`` times on windows ``tokens`` (B, L) with the target's top features
    ``final`` (B, L, C): [g_j (B, L - 1, C)], pair s = (x_{s+1}, f_j(s)) at position s, f_0 = h_s,
    f_{j+1}(s) = g_j(s - 1), masks ``heads._ttt_mask`` (as ``llm_heads.unroll``)."""
    T = tokens.shape[1] - 1
    emb, feats = target.wte(tokens[:, 1:]).float(), final[:, :-1].float()
    rope = rope_tables(torch.arange(T, device=tokens.device), head.config.head_dim, head.config.rope_theta,
                       feats.dtype)
    memory: list[Any] = []
    out = []
    for j in range(steps):
        g, kv = _unrolled(head.layer, head.fc(torch.cat([emb, feats], -1)), rope, memory,
                          _ttt_mask(T, j, tokens.device))
        memory.append(kv)
        out.append(g)
        feats = torch.cat([feats[:, :1], g[:, :-1]], 1)
    return out


def eagle_losses(head: LlamaEagleHead, target: Llama, tokens: torch.Tensor, final: torch.Tensor,
                 top1: torch.Tensor, steps: int = 1) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per unroll step: forward KL to the target's full-vocabulary distribution at T = 1 (mean over
    pairs s >= j) + ``REG_WEIGHT`` x smooth-L1(g, h_{s+1}); and alpha (top-1 agreement with
    ``top1``). ``final``: (B, L, C) the target's last block outputs (``llm_features``' cache)."""
    with torch.no_grad():
        logp = F.log_softmax(target.lm_head(final[:, 1:].float()), -1)  # (B, L - 1, V): x_{s+2}
    kls, alphas = [], []
    for j, g in enumerate(unroll(head, target, tokens, final, steps)):
        logq = F.log_softmax(target.lm_head(g[:, j:]).float(), -1)
        kl = (logp[:, j:].exp() * (logp[:, j:] - logq)).sum(-1).mean()
        kls.append(kl + REG_WEIGHT * F.smooth_l1_loss(g[:, j:], final[:, 1 + j :].float()))
        alphas.append((logq.argmax(-1) == top1[:, 1 + j :]).float().mean())
    return kls, alphas
