"""Medusa (Cai et al. 2024, Medusa-1: the target frozen) for the real LLM, on the same cached
features as EAGLE-3 (``llm_features``) and with its draft vocabulary (``llm_heads.DraftVocabulary``).

As the reference (FasterDecoding/Medusa ``medusa_model.py``): head k is a residual block on the
target's last hidden state *after* its final norm, x + SiLU(W_k x) (W_k zero at the start, so
every head starts as the target's own next-token head), then an LM head; head k at position s
predicts token s + 2 + k (head 0 the token after the target's own next one). Two choices differ,
both stated in the shipped metadata:

* the LM head is **tied**: the target's embedding rows of the draft vocabulary, frozen (the
  reference trains a copy of the full LM head per head: 3 x 49,152 x 576 weights = 170 MB in
  float16, over the course's 40 MB; a draft vocabulary of 8,192 rows is what EAGLE-3 uses too);
* the loss is forward KL to the target's distribution of that token (renormalised over the draft
  vocabulary, positions whose target argmax is outside it masked), not cross-entropy on the
  data's token: the same soft labels as every head of the course, recomputed from the cached
  final hidden states. Head k's loss is weighted 0.8 ** k, the reference's lambda_k.

Unlike EAGLE, a Medusa head never sees the tokens it drafted: every depth is guessed from the
same feature at once, which is why its deeper heads agree less often with the target.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.models.llama import Llama, LlamaConfig
from lessonlib.models.llm_heads import DraftVocabulary, teacher

N_HEADS = 3  # deeper heads agree too rarely to pay for the verify pass's extra tokens on a CPU


class LlamaMedusaHeads(DraftVocabulary):
    """``n_heads`` Medusa heads beside a ``Llama`` target, over the draft vocabulary ``draft_ids``."""

    layers = None  # the round hands the drafter the target's top feature (its last block's output)

    def __init__(self, config: LlamaConfig, draft_ids: np.ndarray | torch.Tensor, n_heads: int = N_HEADS,
                 target_name: str = "smollm2"):
        super().__init__(config.vocab_size, draft_ids)
        if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(f"n_heads must be an integer >= 1, got {n_heads!r}")
        self.config = dataclasses.replace(config, n_layer=1)
        self.target_name = target_name
        self.n_heads = n_heads
        C = config.n_embd
        self.heads = nn.ModuleList(nn.Linear(C, C) for _ in range(n_heads))
        for head in self.heads:  # start as the target's own next-token head (restricted to the draft vocabulary)
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    @property
    def device(self) -> torch.device:
        return self.heads[0].weight.device

    def draft_logits(self, target: Llama, hidden: torch.Tensor) -> torch.Tensor:
        """(K, ..., N) logits over the draft vocabulary from the target's last block outputs (..., C)."""
        x = target.norm_f(hidden.to(self.heads[0].weight.dtype))  # Medusa reads the normed hidden state
        y = torch.stack([x + F.silu(head(x)) for head in self.heads])  # (K, ..., C)
        return y @ self.draft_head(target, transposed=True).to(x.dtype)  # one product: the rows read once, not K times

    def forward(self, target: Llama, hidden: torch.Tensor) -> torch.Tensor:
        """(K, ..., V): ``decoding.drafters.MedusaDrafter``'s contract, -inf outside the draft vocabulary."""
        return self.full_logits(self.draft_logits(target, hidden))


def medusa_losses(heads: LlamaMedusaHeads, target: Llama, final: torch.Tensor,
                  top1: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per head k: forward KL(p || q) of head k at s against the target's distribution of token
    s + 2 + k over the draft vocabulary (the positions whose target argmax is in it), and alpha,
    its argmax's agreement with the target's full-vocabulary argmax over all positions (a target
    token outside the draft vocabulary is a miss). ``final`` (B, L, C), ``top1`` (B, L)."""
    p, keep = teacher(heads, target, final, top1)  # row s: the distribution of token s + 2
    logits = heads.draft_logits(target, final[:, :-1].float())  # (K, B, L - 1, N)
    ids = heads.draft_ids
    kls, alphas = [], []
    for k in range(heads.n_heads):
        logq = F.log_softmax(logits[k, :, : logits.shape[2] - k].float(), -1)
        pk, mk = p[:, k:], keep[:, k:].float()
        kl = (pk * (torch.log(pk.clamp_min(1e-30)) - logq)).sum(-1)  # (B, L - 1 - k)
        kls.append((kl * mk).sum() / mk.sum().clamp_min(1.0))
        alphas.append((ids[logq.argmax(-1)] == top1[:, 1 + k :]).float().mean())
    return kls, alphas
