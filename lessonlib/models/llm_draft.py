"""A small distilled draft model for the real LLM (SmolLM2, ``llama.Llama``): a separate model that
drafts on its own tokens alone (no target features), as the course's tiny ``draft-kl`` does for
the tiny GPT, distilled from the frozen target (forward KL) on the same cached windows as the heads.

Shape, and why (every byte it reads is part of c, and the shipped set must stay under 40 MB):

* **in**: the target's token embedding (576 wide, frozen, not stored) through ``proj_in`` (576 -> d);
* ``n_layer`` Llama blocks of width d (``llama.Block``: RMSNorm, RoPE, GQA, SwiGLU), its own KV cache;
* **out**: RMSNorm, ``proj_out`` (d -> 576), then the target's embedding rows of the draft
  vocabulary (``llm_heads.DraftVocabulary``, tied and frozen, as the heads'). At inference the two
  products are folded once into one (N, d) matrix, so a draft step reads N x d weights, not N x 576.

Its logits are -inf outside the draft vocabulary, so its q rows are zero there and the exact
rejection rule stays exact. ``forward`` keeps ``Llama.forward``'s contract (positions, tree mask,
KV cache), so ``decoding.drafters.ModelDrafter`` drafts chains and trees with it unchanged.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.models.gpt import prefix_mask
from lessonlib.models.llama import (
    Block,
    Llama,
    LlamaConfig,
    LlamaKVCache,
    RMSNorm,
    call_positions,
    hf_init,
    rope_tables,
)
from lessonlib.models.llm_heads import DraftVocabulary, teacher

# width 256, 2 blocks, 4 query heads over 2 key/value heads (D = 64, as the target's), SwiGLU 512:
# 1.47 M parameters, 2.9 MB in float16 (what the 40 MB shipped set had left)
SHAPE = {"n_embd": 256, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_hidden": 512}


class LlamaDraftModel(DraftVocabulary):
    """A small Llama beside ``target`` (read for its embedding only, never stored or trained), over
    the draft vocabulary ``draft_ids``; ``shape``: the fields of its own ``LlamaConfig``."""

    def __init__(self, target: Llama, draft_ids: np.ndarray | torch.Tensor, shape: dict[str, int] | None = None,
                 target_name: str = "smollm2"):
        super().__init__(target.config.vocab_size, draft_ids)
        tc = target.config
        self.config = LlamaConfig(vocab_size=tc.vocab_size, block_size=tc.block_size, rope_theta=tc.rope_theta,
                                  norm_eps=tc.norm_eps, **(shape or SHAPE))
        self.__dict__["target"] = target  # a plain attribute: not a submodule, so never saved nor moved
        self.target_name = target_name
        C, d = tc.n_embd, self.config.n_embd
        self.proj_in = nn.Linear(C, d, bias=False)
        self.blocks = nn.ModuleList(Block(self.config) for _ in range(self.config.n_layer))
        self.norm = RMSNorm(d, tc.norm_eps)
        self.proj_out = nn.Linear(d, C, bias=False)
        hf_init(self)

    @property
    def device(self) -> torch.device:
        return self.proj_in.weight.device

    def check_tokens(self, idx: torch.Tensor, name: str) -> None:
        self.target.check_tokens(idx, name)

    def out_rows(self) -> torch.Tensor:
        """(N, d): the draft vocabulary's embedding rows times ``proj_out``, folded once and kept while
        both stay the same tensors (in training the two products run apart: the gradient needs them)."""
        w = self.proj_out.weight
        key = (w.data_ptr(), -1 if w.is_inference() else w._version, id(self.draft_head(self.target)))
        cached = self.__dict__.get("_folded")
        if cached is None or cached[0] != key:
            with torch.no_grad():
                cached = (key, (self.draft_head(self.target).to(w.dtype) @ w).contiguous())
            self.__dict__["_folded"] = cached
        return cached[1]

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., N) logits over the draft vocabulary from the last block's outputs (..., d)."""
        h = self.norm(hidden)
        if self.training and torch.is_grad_enabled():
            return F.linear(self.proj_out(h), self.draft_head(self.target).to(h.dtype))
        return F.linear(h, self.out_rows())

    def hidden(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
               cache: LlamaKVCache | None = None) -> torch.Tensor:
        """The last block's outputs (B, T, d) for ``idx`` (B, T); arguments as ``Llama.forward``'s."""
        self.check_tokens(idx, "idx")
        start, positions = call_positions(idx, positions, cache, self.config.block_size)
        T = idx.shape[1]
        dtype = self.proj_in.weight.dtype
        rope = rope_tables(positions.to(idx.device), self.config.head_dim, self.config.rope_theta, dtype)
        attn = prefix_mask(mask, start, T, idx.device, dtype) if mask is not None or (start > 0 and T > 1) else None
        x = self.proj_in(self.target.wte(idx).to(dtype))  # (B, T, d)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, attn, cache.kv[i] if cache is not None else None, start)
        if cache is not None:
            cache.length = start + T
        return x

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: LlamaKVCache | None = None, last: bool = False) -> torch.Tensor:
        """Logits (B, T, V) over the target's vocabulary, -inf outside the draft vocabulary
        (``Llama.forward``'s contract: ``positions``, tree ``mask``, ``cache``); ``last``: (B, 1, V),
        the last token's only (a prompt's commit needs no more)."""
        hidden = self.hidden(idx, positions, mask, cache)
        return self.full_logits(self.draft_logits(hidden[:, -1:] if last else hidden))

    def new_cache(self) -> LlamaKVCache:
        return LlamaKVCache(self.config, self.device, self.proj_in.weight.dtype)

    def shape(self) -> dict[str, Any]:
        return {k: getattr(self.config, k) for k in SHAPE}


def draft_losses(model: LlamaDraftModel, target: Llama, tokens: torch.Tensor, final: torch.Tensor,
                 top1: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Teacher-forced on windows ``tokens`` (B, L): forward KL(p || q) at each position t >= 1 against
    the target's distribution of token t + 1 over the draft vocabulary (from the cached final hidden
    states ``final`` (B, L, C); positions whose target argmax is outside it masked), and alpha, the
    draft's argmax agreeing with the target's full-vocabulary argmax ``top1`` (B, L) (a target token
    outside the draft vocabulary is a miss). One depth: a draft model drafts each depth the same way."""
    p, keep = teacher(model, target, final, top1)  # row s: the distribution of token s + 2
    logits = model.draft_logits(model.hidden(tokens)[:, 1:])  # position t = s + 1 predicts token s + 2
    logq = F.log_softmax(logits.float(), -1)
    kl = (p * (torch.log(p.clamp_min(1e-30)) - logq)).sum(-1)  # (B, L - 1)
    m = keep.float()
    alpha = (model.draft_ids[logits.argmax(-1)] == top1[:, 1:]).float().mean()
    return [(kl * m).sum() / m.sum().clamp_min(1.0)], [alpha]
