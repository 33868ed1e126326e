"""EAGLE-3 for the real LLM (SmolLM2, ``llama.Llama``), laid out as the reference is.

The reference (SafeAILab/EAGLE ``cnets.py``; vLLM ``llama_eagle3.py``; SGLang) and this module:

* ``fuse`` (reference ``fc``, 3C -> C, no bias) maps the target's fused features: the outputs of
  blocks ``llama.eagle3_reference_layers`` = the inputs of layers {2, N//2, N-3}. Deeper draft
  steps feed the head's own output g (width C), which skips ``fuse``.
* One Llama decoder layer whose attention reads [norm_emb(embedding); norm_1(feature)] (2C wide
  -> q, k, v); the residual is the feature (not the concatenation); then RMSNorm + SwiGLU.
  Names: ``norm_emb`` = reference ``input_layernorm``, ``norm_1`` = ``hidden_norm``, ``norm_2`` =
  ``post_attention_layernorm``; ``norm`` is the final norm before the LM head.
* Its own RoPE positions: the pair (x_{s+1}, feature at s) sits at s; a draft node at depth d
  under the last committed pair L - 1 sits at L - 1 + d (the reference's inference does the same;
  its training keeps positions fixed across unroll steps, ours advances them as inference does).
* A **draft vocabulary** of the N most frequent target tokens (``d2t``: draft id i -> target id
  i + d2t[i], the reference's offset form; ``t2d``: bool over the target vocabulary). The LM head
  over it is **tied** to the target's embedding rows it selects (not stored, not trained): SmolLM2's
  LM head is its embedding, so those rows already are the target's own output space; it keeps the
  shipped head at ~10 MB in float16 (a trained 8192 x 576 head would add 9.4 MB) and leaves the
  few hundred thousand tokens a CPU can extract to the layer. The exporter writes it out.

``step`` returns logits over the full target vocabulary, -inf outside the draft vocabulary, so a
drafter's q rows are zero there and the exact rejection rule stays exact.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.models.gpt import prefix_mask
from lessonlib.models.heads import _ttt_mask
from lessonlib.models.llama import (
    Block,
    Llama,
    LlamaConfig,
    LlamaKVCache,
    RMSNorm,
    eagle3_reference_layers,
    hf_init,
    rope_tables,
    rotate,
)

TTT_STEPS = 7  # the reference's training-time test unrolls 7 steps
STEP_WEIGHT = 0.8  # the reference weights unroll step j's loss by 0.8 ** j
DRAFT_VOCAB = 8192


class Eagle3Layer(Block):
    """The reference's decoder layer: ``Block`` with q, k, v over 2C (embedding; feature)."""

    def __init__(self, config: LlamaConfig):
        super().__init__(config)
        C, D = config.n_embd, config.head_dim
        self.norm_emb = RMSNorm(C, config.norm_eps)
        self.q = nn.Linear(2 * C, config.n_head * D, bias=False)
        self.k = nn.Linear(2 * C, config.n_kv_head * D, bias=False)
        self.v = nn.Linear(2 * C, config.n_kv_head * D, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm_2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))

    def qkv_input(self, emb: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.norm_emb(emb), self.norm_1(feature)], -1)  # (B, T, 2C)


class DraftVocabulary(nn.Module):
    """A head's draft vocabulary and its tied LM head, shared by EAGLE-3 and the real LLM's Medusa
    heads (``llm_medusa``): ``draft_ids`` (N,) distinct target ids, kept as the reference's
    ``d2t`` offsets and a ``t2d`` mask; the LM head is the target's embedding rows it selects."""

    d2t: torch.Tensor  # (N,) int64 buffers, saved with the weights
    t2d: torch.Tensor  # (V,) bool

    def __init__(self, vocab_size: int, draft_ids: np.ndarray | torch.Tensor):
        super().__init__()
        ids = torch.as_tensor(np.asarray(draft_ids), dtype=torch.long)
        if ids.ndim != 1 or len(ids) < 1 or len(torch.unique(ids)) != len(ids) or int(ids.min()) < 0 \
                or int(ids.max()) >= vocab_size:
            raise ValueError(f"draft_ids must be distinct target ids in [0, {vocab_size}), got {ids.shape}")
        self.vocab_size = vocab_size
        ids = torch.sort(ids).values  # the reference's d2t is an increasing offset table
        self.register_buffer("d2t", ids - torch.arange(len(ids)))  # (N,) target id = i + d2t[i]
        t2d = torch.zeros(vocab_size, dtype=torch.bool)
        t2d[ids] = True
        self.register_buffer("t2d", t2d)  # (V,)

    @property
    def draft_ids(self) -> torch.Tensor:
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t  # (N,)

    @property
    def support(self) -> np.ndarray:
        """(N,) the target ids it drafts, as numpy: the support of its q rows (``drafters.log_probs``)."""
        return self.draft_ids.cpu().numpy()

    def draft_head(self, target: Llama, transposed: bool = False) -> torch.Tensor:
        """(N, C): the tied LM head, the target's embedding rows of the draft vocabulary (frozen);
        ``transposed``: the same as a contiguous (C, N) copy (x @ it reads memory in order: on the
        CPU a few rows times the (N, C) rows through ``F.linear`` ran ~3x slower at batch 1). Each
        is gathered once and kept while the embedding and ``d2t`` stay the same tensors (a gather
        of N rows each step would copy 19 MB, more than the head's layer reads)."""
        w = target.wte.weight
        version = lambda t: -1 if t.is_inference() else t._version  # noqa: E731 (inference tensors keep none)
        key = (w.data_ptr(), w.dtype, w.device, version(w), self.d2t.data_ptr(), version(self.d2t))
        cache = self.__dict__.setdefault("_tied", {})  # not a buffer: never saved with the weights
        if cache.get(transposed, (None,))[0] != key:
            rows = w.detach()[self.draft_ids]
            cache[transposed] = (key, rows.T.contiguous() if transposed else rows)
        return cache[transposed][1]

    def full_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """(..., V): ``draft_logits`` placed at their target ids, -inf elsewhere (q = 0 there)."""
        out = draft_logits.new_full((*draft_logits.shape[:-1], self.vocab_size), float("-inf"))
        # scatter_ along the last dimension: ~3x faster than out[..., ids] = ... on the CPU, same values
        return out.scatter_(-1, self.draft_ids.expand(*draft_logits.shape[:-1], -1), draft_logits)


class LlamaEagle3Head(DraftVocabulary):
    """EAGLE-3 beside a ``Llama`` target; ``draft_ids`` (N,) are the draft vocabulary's target ids."""

    def __init__(self, config: LlamaConfig, draft_ids: np.ndarray | torch.Tensor, target_name: str = "smollm2"):
        super().__init__(config.vocab_size, draft_ids)
        self.config = dataclasses.replace(config, n_layer=1)  # one layer; its cache has one
        self.target_name = target_name
        self.layers = eagle3_reference_layers(config.n_layer)
        C = config.n_embd
        self.fuse = nn.Linear(len(self.layers) * C, C, bias=False)
        self.layer = Eagle3Layer(self.config)
        self.norm = RMSNorm(C, config.norm_eps)
        hf_init(self)

    @property
    def device(self) -> torch.device:
        return self.fuse.weight.device

    def features(self, features: torch.Tensor) -> torch.Tensor:
        """Fused-width target features (..., 3C) through ``fuse``; the head's own g (..., C) as is."""
        if features.shape[-1] == self.config.n_embd:
            return features.to(self.fuse.weight.dtype)
        return self.fuse(features.to(self.fuse.weight.dtype))

    def draft_logits(self, target: Llama, g: torch.Tensor) -> torch.Tensor:
        """(..., N) logits over the draft vocabulary from the head's outputs g (..., C)."""
        return F.linear(self.norm(g), self.draft_head(target).to(g.dtype))

    def forward(self, target: Llama, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
                mask: torch.Tensor | None = None, cache: LlamaKVCache | None = None) -> torch.Tensor:
        """g (B, T, C) for ``tokens`` (B, T) paired with ``features`` (B, T, 3C or C) at
        ``positions`` (T,); ``mask``/``cache`` as in ``Llama.forward`` (bool over [fed, new])."""
        x = self.features(features)  # (B, T, C): the residual stream
        emb = target.wte(tokens).to(x.dtype)
        start = cache.length if cache is not None else 0
        T = tokens.shape[1]
        rope = rope_tables(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        attn = None if (mask is None and start == 0) else prefix_mask(mask, start, T, x.device, x.dtype)
        x = x + self.layer.attend(self.layer.qkv_input(emb, x), rope, attn,
                                  cache.kv[0] if cache is not None else None, start)
        if cache is not None:
            cache.length = start + T
        return self.layer.mlp(x)

    def new_cache(self, capacity: int | None = None) -> LlamaKVCache:
        config = self.config if capacity is None else dataclasses.replace(self.config, block_size=capacity)
        return LlamaKVCache(config, self.device, self.fuse.weight.dtype)

    def step(self, target: Llama, tokens: np.ndarray, features: torch.Tensor, cache: LlamaKVCache,
             mask: np.ndarray | None = None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``heads.EagleHead.step``'s contract: (g (T, C), logits (T, V) or (1, V) when ``last``)
        over the full target vocabulary, -inf outside the draft vocabulary. Positions: committed
        pairs at their cache index; a tree node (``mask`` given) at the last committed pair's
        position + its depth (its ancestors among the fed and new nodes, itself included)."""
        T = len(tokens)
        if mask is None:
            positions = torch.arange(cache.length, cache.length + T)
        else:
            n_fed = mask.shape[1] - T
            depth = torch.from_numpy(mask.sum(1).astype(np.int64))  # (T,) >= 1
            positions = cache.length - n_fed - 1 + depth
        idx = torch.as_tensor(tokens, dtype=torch.long, device=self.device)[None]
        g = self(target, idx, features[None], positions.to(self.device),
                 None if mask is None else torch.from_numpy(mask), cache)[0]
        return g, self.full_logits(self.draft_logits(target, g[-1:] if last else g))


def ids_from_d2t(d2t: torch.Tensor) -> np.ndarray:
    """The draft vocabulary's target ids from the reference's offset table: id i + d2t[i] (a stored
    head's ``d2t``, which rebuilds the head it came from)."""
    d2t = torch.as_tensor(d2t).long()
    return (torch.arange(len(d2t)) + d2t).numpy()


def draft_vocabulary(tokens: np.ndarray, size: int, vocab_size: int) -> np.ndarray:
    """The ``size`` most frequent ids of ``tokens`` (ties: lower id), padded with the lowest unseen
    ids when fewer occur; sorted."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"size must be in [1, {vocab_size}], got {size}")
    counts = np.bincount(np.asarray(tokens).ravel(), minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # by count descending, then id
    return np.sort(order[:size])


# ----------------------------------------------------------------------------- training

def _unrolled(layer: Eagle3Layer, emb: torch.Tensor, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
              memory: list[Any], mask: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``layer`` on a batch whose queries also see the keys/values of earlier unroll steps (the
    batch-1 cache of ``Block.attend`` cannot); memory: [(k, v)] of earlier steps, each (B, G, T, D)."""
    B, T, _ = x.shape
    h = layer.qkv_input(emb, x)
    q = rotate(layer.q(h).view(B, T, layer.n_head, -1).transpose(1, 2), *rope)  # (B, H, T, D)
    k = rotate(layer.k(h).view(B, T, layer.n_kv_head, -1).transpose(1, 2), *rope)  # (B, G, T, D)
    v = layer.v(h).view(B, T, layer.n_kv_head, -1).transpose(1, 2)
    keys = torch.cat([m[0] for m in memory] + [k], 2)
    values = torch.cat([m[1] for m in memory] + [v], 2)
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)  # (B, H, T, D)
    x = x + layer.o(y.transpose(1, 2).reshape(B, T, -1))
    return layer.mlp(x), (k, v)


def unroll(head: LlamaEagle3Head, target: Llama, tokens: torch.Tensor, fused: torch.Tensor,
           steps: int) -> list[torch.Tensor]:
    """The head unrolled ``steps`` times on windows ``tokens`` (B, L) with the target's fused
    features (B, L, 3C), teacher-forced: [draft logits (B, L - 1, N) of step j]. Pair s is
    (x_{s+1}, f_j(s)) at position s, f_0 = fuse(features at s), f_{j+1}(s) = g_j(s - 1); step j
    predicts the target's distribution of x_{s+2}, meaningful for s >= j (``heads._ttt_mask``)."""
    x, T = head.features(fused[:, :-1]), tokens.shape[1] - 1
    emb = target.wte(tokens[:, 1:]).to(x.dtype)
    rope = rope_tables(torch.arange(T, device=x.device), head.config.head_dim, head.config.rope_theta, x.dtype)
    memory: list[Any] = []
    out = []
    for j in range(steps):
        g, kv = _unrolled(head.layer, emb, x, rope, memory, _ttt_mask(T, j, x.device))
        memory.append(kv)
        out.append(head.draft_logits(target, g))
        x = torch.cat([x[:, :1], g[:, :-1]], 1)
    return out


def teacher(head: DraftVocabulary, target: Llama, final: torch.Tensor,
            top1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's T = 1 distribution restricted to the draft vocabulary and renormalised there
    (softmax over its logits at the draft ids, as SpecForge's ``target_p``), from the cached final
    hidden states (B, L, C); and the mask of positions whose target argmax ``top1`` (B, L) lies in
    the draft vocabulary. Both shifted to the pairs: row s is the distribution of x_{s+2}."""
    with torch.no_grad():
        p = F.softmax(F.linear(target.norm_f(final[:, 1:].float()), head.draft_head(target).float()), -1)
    return p, head.t2d[top1[:, 1:]]  # (B, L - 1, N), (B, L - 1)


def losses(head: LlamaEagle3Head, target: Llama, tokens: torch.Tensor, fused: torch.Tensor, final: torch.Tensor,
           top1: torch.Tensor, steps: int = TTT_STEPS) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per unroll step: forward KL(p || q) over the draft vocabulary, averaged over the pairs s >= j
    whose target argmax is in the draft vocabulary; and alpha, the top-1 agreement with the
    target's full-vocabulary argmax over *all* pairs s >= j (a position outside the draft
    vocabulary counts as a miss: what T = 0 decoding would accept)."""
    p, keep = teacher(head, target, final, top1)
    ids = head.draft_ids
    kls, alphas = [], []
    for j, logits in enumerate(unroll(head, target, tokens, fused, steps)):
        logq = F.log_softmax(logits[:, j:].float(), -1)
        pj, mj = p[:, j:], keep[:, j:].float()
        kl = (pj * (torch.log(pj.clamp_min(1e-30)) - logq)).sum(-1)  # (B, T - j)
        kls.append((kl * mj).sum() / mj.sum().clamp_min(1.0))
        alphas.append((ids[logits[:, j:].argmax(-1)] == top1[:, 1 + j :]).float().mean())
    return kls, alphas


def weighted(kls: list[torch.Tensor]) -> torch.Tensor:
    """The reference's sum over steps of 0.8 ** j * loss_j."""
    return sum((STEP_WEIGHT ** j * kl for j, kl in enumerate(kls)), torch.zeros(()))
