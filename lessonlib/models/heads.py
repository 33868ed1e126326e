"""Drafters that read the target's own features: the EAGLE head and Medusa heads.

Notation: h_s is the target's last hidden state at position s (``GPT.forward(...,
return_hidden=True)``); ``target.lm_head(h_s)`` gives the target's distribution of x_{s+1}.

* ``EagleHead`` (Li et al. 2024): g_s = Block(fc([emb(x_{s+1}), h_s])) predicts h_{s+1}, so
  ``target.lm_head(g_s)`` predicts x_{s+2}. It reuses the target's embedding and LM head
  (frozen, not stored) and adds one decoder block; deeper draft steps feed it its own g.
  Trained by forward KL to the target's next-token distribution plus a small feature
  regression; ``ttt_steps > 1`` adds EAGLE-3's "training-time test": the head is unrolled on
  its own predicted features, with the attention pattern it will see while drafting.
* ``MedusaHeads`` (Cai et al. 2024): K independent residual heads on h_s; head k predicts
  x_{s+2+k} through the target's LM head. No recurrence, so depth k never sees the drafted
  tokens before it.

Training is in ``train_heads`` (``python -m lessonlib.models.train_heads all``); it writes
``lessonlib/assets/{eagle,medusa}.safetensors`` + JSON (config, target, held-out top-1
agreement with the target by depth, training time).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.core import kinds as core_kinds
from lessonlib.models import CHECKPOINTS, GPT, Block, GPTConfig, KVCache, read_meta
from lessonlib.models.checkpoints import check_beside, config_from_meta, load_beside
from lessonlib.models.gpt import one_block
from lessonlib.models.loop import distillation_loss

REG_WEIGHT = 0.1  # feature regression weight: keeps g close to h so deeper steps see familiar inputs


class EagleHead(nn.Module):
    """g = Block(fc([emb(token), feature])); its logits are ``target.lm_head(g)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = dataclasses.replace(config, n_layer=1)  # one block; its cache has one layer
        self.fc = nn.Linear(2 * config.n_embd, config.n_embd)
        self.block = Block(self.config)

    @property
    def device(self):
        return self.fc.weight.device

    def forward(self, target: GPT, tokens, features, mask=None, cache: KVCache | None = None):
        """Predicted next features g (B, T, C) for ``tokens`` (B, T) paired with ``features``
        (B, T, C); the caller applies ``target.lm_head`` only where it needs logits.

        mask: (T, T) bool among the new positions (a tree mask), default causal; with a
        ``cache`` every new position also sees the whole cached prefix (batch 1). A (T, S)
        mask also covers the newest S - T cached positions (``models.prefix_mask``).
        No position embedding: the target's features already carry position.
        """
        x = self.project(self.fc, torch.cat([F.embedding(tokens, target.wte.weight),
                                             features.to(target.wte.weight.dtype)], -1))
        return self.run_block(x, mask, cache)

    # The two calls a draft step makes, kept apart so that an engine can swap them for its own
    # (``engines.heads``): here the readable modules, which training runs too.
    def project(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """An input map (``fc``, EAGLE-3's ``fuse``) over (..., in)."""
        return layer(x)

    def run_block(self, x: torch.Tensor, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        """The head's decoder block over x (B, T, C) after ``cache`` (``gpt.one_block``)."""
        return one_block(self.block, x, mask, cache)

    def new_cache(self) -> KVCache:
        return KVCache(self.config, self.device, self.fc.weight.dtype)

    def step(self, target: GPT, tokens: np.ndarray, features: torch.Tensor, cache: KVCache,
             mask: np.ndarray | None = None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """What a drafter runs: (g (T, C), logits) of ``tokens`` (T,) paired with ``features``
        (T, C), or fused-width ones, after ``cache`` (batch 1); logits (T, V), or (1, V) of the
        last token when ``last``; ``mask`` (T, n_fed + T) bool as in ``forward``, None causal.
        An engine may run the whole step in one call (``engines.heads``); here: ``forward``,
        then the target's head."""
        idx = torch.as_tensor(tokens, dtype=torch.long, device=self.device)[None]
        g = self(target, idx, features[None], None if mask is None else torch.from_numpy(mask), cache)[0]
        return g, target.lm_head(g[-1:] if last else g)


def fusion_layers(n_layer: int) -> tuple[int, ...]:
    """The low, middle and top blocks whose outputs EAGLE-3 fuses (0-based block indices)."""
    return (max(0, n_layer // 4 - 1), n_layer // 2 - 1, n_layer - 1) if n_layer >= 4 else tuple(range(n_layer))[:3]


class Eagle3Head(EagleHead):
    """EAGLE-3 (Li et al. 2025, arXiv 2503.01840): the head reads the target's low, middle and
    top features fused by one linear map (3C -> C) instead of the top feature alone, and is
    trained on tokens only (forward KL, no feature regression) with the training-time test,
    so its own outputs g need not imitate any target feature. Deeper draft steps feed it g.

    ``forward`` takes either fused-width features (B, T, 3C) -- the target's, fused first -- or
    width-C features (the head's own g); ``layers`` are the fused blocks (``fusion_layers``)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.layers = fusion_layers(config.n_layer)
        self.fuse = nn.Linear(len(self.layers) * config.n_embd, config.n_embd)

    def forward(self, target: GPT, tokens, features, mask=None, cache: KVCache | None = None):
        if features.shape[-1] != self.config.n_embd:
            features = self.project(self.fuse, features.to(self.fuse.weight.dtype))
        return super().forward(target, tokens, features, mask, cache)


class MedusaHeads(nn.Module):
    """K residual heads: logits_k = target.lm_head(h + SiLU(W_k h)); head k predicts x_{s+2+k}."""

    def __init__(self, config: GPTConfig, n_heads: int = 4):
        super().__init__()
        self.config = config
        self.n_heads = n_heads
        self.heads = nn.ModuleList(nn.Linear(config.n_embd, config.n_embd) for _ in range(n_heads))
        for head in self.heads:  # start as copies of the target's own next-token head
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    @property
    def device(self):
        return self.heads[0].weight.device

    def forward(self, target: GPT, hidden):
        """(K, ..., V) logits from hidden states (..., C)."""
        return torch.stack([target.lm_head(hidden + F.silu(head(hidden))) for head in self.heads])


# ----------------------------------------------------------------------------- training

def _unrolled_block(block: Block, x, memory, mask):
    """``block`` on a batch whose queries also see keys/values of earlier unroll steps.

    ``Block.attend`` only keeps a batch-1 cache, so the training-time test runs the same
    weights through this batched variant. memory: list of (k, v) of earlier steps.
    """
    B, T, C = x.shape
    q, k, v = block.qkv(block.ln_1(x)).view(B, T, 3, block.n_head, C // block.n_head).permute(2, 0, 3, 1, 4)
    keys = torch.cat([m[0] for m in memory] + [k], 2)
    values = torch.cat([m[1] for m in memory] + [v], 2)
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    x = x + block.proj(y.transpose(1, 2).reshape(B, T, C))
    return x + block.fc_out(F.gelu(block.fc(block.ln_2(x)), approximate="tanh")), (k, v)


def _ttt_mask(T, step, device):
    """(T, (step + 1) T) mask of unroll step ``step`` (0: plain causal). Step j's query at s = a
    depth-j draft node whose last committed position is s - j: it sees step-0 keys at positions
    <= s - j and the step-i key at s - j + i (its ancestors)."""
    s = torch.arange(T, device=device)[:, None]
    col = torch.arange(T, device=device)[None, :]
    blocks = [col <= s - step] + [col == s - step + i for i in range(1, step + 1)]
    return torch.cat(blocks, 1)


def target_outputs(target: GPT, x, layers=None):
    """(logits, h) of the frozen target on token windows ``x`` (B, T); ``layers``: h is those
    blocks' outputs concatenated (EAGLE-3's fused features), else the top block's."""
    with torch.no_grad():
        return target(x, return_hidden=tuple(layers) if layers else True)


def eagle_unroll(head: EagleHead, target: GPT, x, h, steps=1):
    """The EAGLE head unrolled ``steps`` times on token windows ``x`` (B, T) with the target's
    features ``h``, teacher-forced; returns [(logits_j, g_j)], each (B, T - 1, ...).

    Step j (0-based) is draft depth j. Its input at s is (emb(x_{s+1}), f_j(s)) with f_0 = h_s
    (the target's true feature) and f_j(s) = g_{j-1}(s-1), the head's own prediction of h_s;
    its query sees what a depth-j tree node sees while drafting (``_ttt_mask``). Every step
    predicts the target's distribution of x_{s+2} and its feature h_{s+1}; step j is only
    meaningful for s >= j.
    """
    tokens, features = x[:, 1:], h[:, :-1]
    T = tokens.shape[1]
    emb = target.wte(tokens)
    memory, out = [], []
    for j in range(steps):
        inp = head.fc(torch.cat([emb, features.to(emb.dtype)], -1))
        g, kv = _unrolled_block(head.block, inp, memory, _ttt_mask(T, j, x.device))
        memory.append(kv)
        out.append((target.lm_head(g), g))
        features = torch.cat([features[:, :1], g[:, :-1]], 1)  # f_{j+1}(s) = g_j(s - 1)
    return out


def tempered_fkl(student, teacher, temperatures=(1.0,)):
    """Forward KL(p_T || q_T) averaged over the sampling ``temperatures`` (both tempered alike).
    One temperature, 1, matches the distributions; several weight the regions each T samples
    from (T < 1 the head of p, T > 1 its tail)."""
    if not temperatures:
        raise ValueError("temperatures must name at least one temperature, got ()")
    return sum(distillation_loss(student, teacher, "fkl", temperature=t) for t in temperatures) / len(temperatures)


OBJECTIVES = ("fkl", "top1")


def check_objective(objective) -> str:
    """A head's training objective, one of ``OBJECTIVES`` (else a ValueError naming it)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return objective


def head_loss(student, teacher, temperatures=(1.0,), objective="fkl"):
    """A head's loss against the target's logits (both (..., V)). "fkl": ``tempered_fkl``, the
    distribution matching that sampling wants. "top1": cross-entropy on the target's argmax
    token alone, a head trained for top-1 agreement only (the control of ``bench calibration``:
    its q is never taught the rest of p, so at T > 0 it keeps less)."""
    if check_objective(objective) == "top1":
        return distillation_loss(student, None, "ce", labels=teacher.argmax(-1))
    return tempered_fkl(student, teacher, temperatures)


def eagle_losses(head: EagleHead, target: GPT, x, t_logits, h, ttt_steps=1, temperatures=(1.0,),
                 objective="fkl"):
    """Per-step losses (``head_loss``: forward KL to the target by default, + REG_WEIGHT * smooth-L1 to
    its feature) and top-1 agreements with the target, over the positions where each step is
    meaningful."""
    teacher, h_next = t_logits[:, 1:].float(), h[:, 1:].float()
    losses, agree = [], []
    for j, (logits, g) in enumerate(eagle_unroll(head, target, x, h, ttt_steps)):
        student, t = logits[:, j:].float(), teacher[:, j:]
        losses.append(head_loss(student, t, temperatures, objective)
                      + REG_WEIGHT * F.smooth_l1_loss(g[:, j:].float(), h_next[:, j:]))
        agree.append((student.argmax(-1) == t.argmax(-1)).float().mean())
    return losses, agree


def eagle3_losses(head: Eagle3Head, target: GPT, x, t_logits, h_layers, ttt_steps=3, temperatures=(1.0,),
                  objective="fkl"):
    """EAGLE-3's losses: forward KL to the target per unroll step (direct token prediction, no
    feature regression) and top-1 agreements; step 0 reads the fused features."""
    fused = head.fuse(h_layers.to(head.fuse.weight.dtype))
    teacher = t_logits[:, 1:].float()
    losses, agree = [], []
    for j, (logits, _) in enumerate(eagle_unroll(head, target, x, fused, ttt_steps)):
        student, t = logits[:, j:].float(), teacher[:, j:]
        losses.append(head_loss(student, t, temperatures, objective))
        agree.append((student.argmax(-1) == t.argmax(-1)).float().mean())
    return losses, agree


def medusa_losses(heads: MedusaHeads, target: GPT, t_logits, h, temperatures=(1.0,), objective="fkl"):
    """Per-head losses and agreements: head k at s vs the target's distribution of x_{s+2+k}."""
    logits = heads(target, h)
    losses, agree = [], []
    for k in range(heads.n_heads):
        shift = k + 1
        student, teacher = logits[k, :, :-shift].float(), t_logits[:, shift:].float()
        losses.append(head_loss(student, teacher, temperatures, objective))
        agree.append((student.argmax(-1) == teacher.argmax(-1)).float().mean())
    return losses, agree


HEAD_KINDS = core_kinds.names("head")  # ("eagle", "eagle3", "medusa"): core.kinds is the one list


def build(kind, config: GPTConfig, n_heads=4):
    if kind not in HEAD_KINDS:
        raise ValueError(f"kind must be one of {HEAD_KINDS}, got {kind!r}")
    if kind == "medusa":
        return MedusaHeads(config, n_heads)
    return {"eagle": EagleHead, "eagle3": Eagle3Head}[kind](config)


def load_head(name, target: GPT, directory=CHECKPOINTS):
    """A trained EAGLE head or Medusa heads for ``target``, in eval mode on its device: the
    readable modules (``engines.load_head`` gives the same head on its target's engine)."""
    meta = read_meta(name, directory)  # a missing file names the rebuild command
    kind = check_beside(meta, name, target, HEAD_KINDS)  # kind, widths, vocabulary, target: named ValueErrors
    model = build(kind, config_from_meta(meta, name), meta.get("n_heads") or 4)
    return load_beside(model, name, target, directory, f"python -m lessonlib.models.train_heads {meta['kind']}")
