"""Multi-token prediction (MTP) modules, DeepSeek-V3 style (DeepSeek-AI 2024, arXiv 2412.19437, sec. 2.2).

Module d (d = 1..D) at position i combines the RMS-normalised hidden state of depth d - 1
(h^0 = the target's last block output) with the RMS-normalised embedding of the token d ahead,
projects the pair back to the model width, runs one transformer block and shares the target's
output head:

    h^d_i = Block_d( W_d [ RMSNorm(h^{d-1}_i) ; RMSNorm(Emb(x_{i+d})) ] )
    p^d_i = softmax(lm_head(h^d_i))            predicts x_{i+d+1}

So the target trained with D modules also drafts D tokens for itself (self-speculation, no
separate draft): after a verify pass, module 1 reads the last accepted position's hidden state
and the token just emitted, module 2 reads module 1's output and module 1's draft, and so on.

Training (``mtp_loss``): L = L_main + (lambda / D) sum_d L_d, every L a cross-entropy on the
ground truth; the embedding and the output head are the target's own, so only the modules'
projections, norms and blocks are added. lambda = 0.3 for the first ``LAMBDA_SWITCH`` of
the steps, then 0.1 (DeepSeek-V3's schedule).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from lessonlib.core.validate import check_int
from lessonlib.models import GPT, Block, GPTConfig, KVCache
from lessonlib.models.gpt import one_block
from lessonlib.models.steps import autocast, optimizer_step

LAMBDA_EARLY, LAMBDA_LATE, LAMBDA_SWITCH = 0.3, 0.1, 2 / 3  # DeepSeek-V3: 0.3 for the first 10T of 14.8T tokens


class MTPModule(nn.Module):
    """One MTP depth: RMSNorm both inputs, project 2C -> C, one transformer block."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = dataclasses.replace(config, n_layer=1)  # one block; its cache has one layer
        self.norm_h = nn.RMSNorm(config.n_embd)
        self.norm_e = nn.RMSNorm(config.n_embd)
        self.proj = nn.Linear(2 * config.n_embd, config.n_embd, bias=False)
        self.block = Block(self.config)

    @property
    def device(self):
        return self.proj.weight.device

    def forward(self, target: GPT, tokens, hidden, mask=None, cache: KVCache | None = None):
        """h^d (B, T, C) from ``hidden`` = h^{d-1} (B, T, C) and the ``tokens`` (B, T) d ahead.

        Attention is causal over the positions (and the cached prefix, batch 1), as in the
        target; no position embedding: h^{d-1} already carries position.
        """
        x = self.proj(torch.cat([self.norm_h(hidden.to(self.proj.weight.dtype)), self.norm_e(target.wte(tokens))], -1))
        return self.run_block(x, mask, cache)

    def run_block(self, x: torch.Tensor, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        """The module's decoder block over x (B, T, C) after ``cache`` (``gpt.one_block``); an
        engine swaps it for its own (``engines.heads``)."""
        return one_block(self.block, x, mask, cache)

    def new_cache(self) -> KVCache:
        return KVCache(self.config, self.device, self.proj.weight.dtype)


class MTPModules(nn.Module):
    """D sequential MTP modules sharing the target's embedding and output head."""

    def __init__(self, config: GPTConfig, depth: int = 2):
        super().__init__()
        self.config, self.depth = config, check_int(depth, "depth", minimum=1)
        self.modules_ = nn.ModuleList(MTPModule(config) for _ in range(self.depth))

    def __getitem__(self, d: int) -> MTPModule:
        """Module of depth d = 1..D."""
        return self.modules_[d - 1]

    @property
    def device(self):
        return self.modules_[0].device

    def unroll(self, target: GPT, x, h0):
        """[h^1, ..., h^D] for windows ``x`` (B, T) with target hidden states ``h0`` (B, T, C):
        h^d covers positions 0 .. T - 1 - d (the token d ahead must be inside the window)."""
        out, h = [], h0
        for d in range(1, self.depth + 1):
            h = self[d](target, x[:, d:], h[:, : x.shape[1] - d])
            out.append(h)
        return out


def mtp_losses(mtp: MTPModules, target: GPT, x, y, h0):
    """Per-depth cross-entropies: depth d at position i predicts y_{i+d} = x_{i+d+1}."""
    losses = []
    for d, h in enumerate(mtp.unroll(target, x, h0), start=1):
        logits = target.lm_head(h)
        losses.append(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y[:, d:].reshape(-1)))
    return losses


def mtp_weight(step: int, planned_steps: int) -> float:
    """lambda at ``step`` of ``planned_steps``: 0.3, then 0.1 after the first two thirds."""
    return LAMBDA_EARLY if step < LAMBDA_SWITCH * planned_steps else LAMBDA_LATE


class TargetWithMTP(nn.Module):
    """The target and its MTP modules trained together (``train.fit`` steps this as one model).

    ``planned_steps`` and ``step`` set lambda; ``step`` is advanced by ``mtp_train_step``
    (and restored from the run state on resume)."""

    def __init__(self, gpt: GPT, depth: int = 2, planned_steps: int = 1):
        super().__init__()
        self.gpt, self.mtp = gpt, MTPModules(gpt.config, depth)
        self.config, self.planned_steps, self.step = gpt.config, planned_steps, 0

    @property
    def device(self):
        return self.gpt.device

    def losses(self, x, y):
        """(main loss, [depth losses]) on a batch."""
        logits, h0 = self.gpt(x, return_hidden=True)
        main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        return main, mtp_losses(self.mtp, self.gpt, x, y, h0)


def mtp_train_step(model: TargetWithMTP, optimizer, x, y, teacher=None, kind="ce"):
    """One optimizer step of L_main + (lambda / D) sum_d L_d (``train.fit``'s step_fn)."""
    with autocast(model.device):
        main, depth_losses = model.losses(x, y)
    lam = mtp_weight(model.step, model.planned_steps)
    model.step += 1
    return optimizer_step(model, optimizer, main + lam / len(depth_losses) * sum(depth_losses))


def load_mtp(name: str, target: GPT, directory=None) -> MTPModules:
    """Trained MTP modules for ``target`` (``{target}-mtp``), eval mode, on its device: the
    readable modules (``engines.load_mtp`` gives them on their target's engine)."""
    from lessonlib.models import CHECKPOINTS, read_meta
    from lessonlib.models.checkpoints import check_beside, config_from_meta, load_beside

    directory = CHECKPOINTS if directory is None else directory
    meta = read_meta(name, directory)
    check_beside(meta, name, target, ("mtp",))  # kind, widths, vocabulary, target: named ValueErrors
    config = config_from_meta(meta, name)
    if not isinstance(meta.get("depth"), int) or isinstance(meta["depth"], bool) or meta["depth"] < 1:
        raise ValueError(f"checkpoint {name!r} metadata must hold a depth >= 1, got {meta.get('depth')!r}")
    mtp = MTPModules(config, meta["depth"])
    return load_beside(mtp, name, target, directory, f"python -m lessonlib.models.train {meta['target']}")
