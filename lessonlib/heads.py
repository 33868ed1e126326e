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

    python -m lessonlib.heads train eagle [--minutes M] [--ttt 3]
    python -m lessonlib.heads train medusa [--minutes M]
    python -m lessonlib.heads train both [--minutes M]     # one target forward feeds both

writes ``lessonlib/assets/{eagle,medusa}.safetensors`` + JSON (config, target, held-out
top-1 agreement with the target by depth, training time).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import data
from .models import CHECKPOINTS, GPT, Block, GPTConfig, KVCache, can_pack, load, load_state, pack_linears, prefix_mask, read_meta, save
from .train import autocast, distillation_loss, fit, git_revision

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
        B, T = tokens.shape
        x = self.fc(torch.cat([target.wte(tokens), features.to(target.wte.weight.dtype)], -1))
        start = cache.length if cache is not None else 0
        attn = None if (mask is None and start == 0) else prefix_mask(mask, start, T, x.device, x.dtype)
        g = self.block(x, attn, cache.kv[0] if cache is not None else None, start)
        if cache is not None:
            cache.length = start + T
        return g

    def new_cache(self) -> KVCache:
        return KVCache(self.config, self.device, self.fc.weight.dtype)


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
    """(T, (step + 1) T) mask of unroll step ``step`` (0: plain causal). Step j's query at s = a depth-j draft node whose last committed position is s - j: it
    sees step-0 keys at positions <= s - j and the step-i key at s - j + i (its ancestors)."""
    s = torch.arange(T, device=device)[:, None]
    col = torch.arange(T, device=device)[None, :]
    blocks = [col <= s - step] + [col == s - step + i for i in range(1, step + 1)]
    return torch.cat(blocks, 1)


def target_outputs(target: GPT, x):
    """(logits, h) of the frozen target on token windows ``x`` (B, T)."""
    with torch.no_grad():
        return target(x, return_hidden=True)


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


def eagle_losses(head: EagleHead, target: GPT, x, t_logits, h, ttt_steps=1):
    """Per-step losses (forward KL to the target + REG_WEIGHT * smooth-L1 to its feature) and
    top-1 agreements with the target, over the positions where each step is meaningful."""
    teacher, h_next = t_logits[:, 1:].float(), h[:, 1:].float()
    losses, agree = [], []
    for j, (logits, g) in enumerate(eagle_unroll(head, target, x, h, ttt_steps)):
        student, t = logits[:, j:].float(), teacher[:, j:]
        losses.append(distillation_loss(student, t, "fkl") + REG_WEIGHT * F.smooth_l1_loss(g[:, j:].float(), h_next[:, j:]))
        agree.append((student.argmax(-1) == t.argmax(-1)).float().mean())
    return losses, agree


def medusa_losses(heads: MedusaHeads, target: GPT, t_logits, h):
    """Per-head losses and agreements: head k at s vs the target's distribution of x_{s+2+k}."""
    logits = heads(target, h)
    losses, agree = [], []
    for k in range(heads.n_heads):
        shift = k + 1
        student, teacher = logits[k, :, :-shift].float(), t_logits[:, shift:].float()
        losses.append(distillation_loss(student, teacher, "fkl"))
        agree.append((student.argmax(-1) == teacher.argmax(-1)).float().mean())
    return losses, agree


class Trainee(nn.Module):
    """The heads trained together on one target forward per batch (the forward dominates the
    cost, so training EAGLE and Medusa at once halves it)."""

    def __init__(self, config: GPTConfig, kinds=("eagle", "medusa"), n_heads=4, ttt_steps=1):
        super().__init__()
        self.config, self.ttt_steps = config, ttt_steps
        self.heads = nn.ModuleDict({kind: build(kind, config, n_heads) for kind in kinds})

    @property
    def device(self):
        return next(self.parameters()).device

    def losses(self, target, x):
        """{kind: (per-depth losses, per-depth top-1 agreements)} on windows ``x``."""
        t_logits, h = target_outputs(target, x)
        out = {}
        for kind, head in self.heads.items():
            if kind == "eagle":
                out[kind] = eagle_losses(head, target, x, t_logits, h, self.ttt_steps)
            else:
                out[kind] = medusa_losses(head, target, t_logits, h)
        return out


def _step(model: Trainee, optimizer, x, y, teacher=None, kind=None):
    """One optimizer step for ``train.fit`` (``teacher`` is the frozen target): the sum over
    kinds of the mean loss over depths."""
    with autocast(model.device):
        losses = model.losses(teacher, x)
    loss = sum(sum(l) / len(l) for l, _ in losses.values())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def heldout_agreement(model: Trainee, target, n_windows=16, corpus="code", seed=0, eagle_depths=4):
    """Held-out top-1 agreement with the target per depth, teacher-forced windows of ``corpus``
    (the EAGLE head is unrolled ``eagle_depths`` steps on its own features)."""
    tokens = data.token_array(corpus, "heldout").astype(np.int64)
    T = target.config.block_size
    starts = np.random.default_rng(seed).integers(0, len(tokens) - T - 1, size=n_windows)
    x = torch.from_numpy(np.stack([tokens[s : s + T] for s in starts])).to(target.device)
    model.eval()
    ttt, model.ttt_steps = model.ttt_steps, eagle_depths
    with autocast(target.device):
        agree = {kind: [round(float(a), 4) for a in v[1]] for kind, v in model.losses(target, x).items()}
    model.ttt_steps = ttt
    return agree


def build(kind, config: GPTConfig, n_heads=4):
    if kind not in ("eagle", "medusa"):
        raise ValueError(f"kind must be 'eagle' or 'medusa', got {kind!r}")
    return EagleHead(config) if kind == "eagle" else MedusaHeads(config, n_heads)


def train_heads(kinds=("eagle", "medusa"), steps=3000, minutes=None, ttt_steps=1, n_heads=4, batch_size=8, lr=2e-3,
                seed=0, device=None, target_name="target", suffix="", directory=CHECKPOINTS, resume=False):
    """Train EAGLE and/or Medusa heads on the frozen shipped target; save each as
    ``{kind}{suffix}`` and return {kind: meta}. ``resume``: start from those checkpoints (a new
    learning-rate schedule; steps, tokens and seconds add up in the metadata)."""
    target = load(target_name, device, directory)
    for p in target.parameters():
        p.requires_grad_(False)
    torch.manual_seed(seed)
    model = Trainee(target.config, kinds, n_heads, ttt_steps).to(target.device)
    before = {kind: {"steps": 0, "tokens_seen": 0, "train_seconds": 0.0} for kind in kinds}
    if resume:
        for kind, head in model.heads.items():
            head.load_state_dict(load_state(kind + suffix, directory))
            before[kind] = read_meta(kind + suffix, directory)
    state = fit(model, steps, batch_size, lr, seed, step_fn=_step, teacher=target,
                time_budget_s=None if minutes is None else 60 * minutes, desc="+".join(kinds))
    agreement = heldout_agreement(model, target)
    metas = {}
    for kind, head in model.heads.items():
        metas[kind] = {
            "name": kind + suffix,
            "kind": kind,
            "target": target_name,
            "config": dataclasses.asdict(target.config),
            "n_heads": n_heads if kind == "medusa" else None,
            "ttt_steps": ttt_steps if kind == "eagle" else None,
            "trained_with": list(kinds),
            "params": sum(p.numel() for p in head.parameters()),
            "steps": before[kind]["steps"] + state["step"],
            "planned_steps": steps,
            "runs": before[kind].get("runs", 0) + 1,
            "batch_size": batch_size,
            "tokens_seen": before[kind]["tokens_seen"] + state["tokens"],
            "train_seconds": round(before[kind]["train_seconds"] + state["seconds"], 1),
            "final_train_loss": float(np.mean(state["losses"][-50:])),
            "heldout_top1_agreement_by_depth": agreement[kind],
            "device": str(target.device),
            "torch": torch.__version__,
            "git_revision": git_revision(),
            "seed": seed,
        }
        save(head, kind + suffix, metas[kind], directory)
    return metas


def load_head(name, target: GPT, directory=CHECKPOINTS, pack=None):
    """A trained EAGLE head or Medusa heads for ``target``, in eval mode on its device.

    ``pack``: pack the weights for fast CPU decoding (``models.pack_linears``); by default
    the head is packed when its target is (``load(..., pack=True)``), as it runs beside it.
    """
    meta = read_meta(name, directory)  # a missing file names the rebuild command
    model = build(meta["kind"], GPTConfig(**meta["config"]), meta.get("n_heads") or 4)
    if model.config.n_embd != target.config.n_embd or meta["config"]["vocab_size"] != target.config.vocab_size:
        raise ValueError(f"head {name!r} was trained for a different target config")
    try:
        model.load_state_dict(load_state(name, directory))
    except RuntimeError as err:
        raise ValueError(f"checkpoint {name!r} does not match its config; rebuild it with: "
                         f"python -m lessonlib.heads train {meta['kind']}") from err
    model = model.to(target.device).eval()
    return pack_linears(model) if (target.packed if pack is None else pack) and can_pack(model) else model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["train"])
    parser.add_argument("kind", choices=["eagle", "medusa", "both"])
    parser.add_argument("--steps", type=int, default=3000, help="planned optimizer steps (sets the lr schedule)")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    parser.add_argument("--ttt", type=int, default=1, help="EAGLE-3 training-time test: unroll steps (1 = off)")
    parser.add_argument("--heads", type=int, default=4, help="number of Medusa heads")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--suffix", default="", help="checkpoint name suffix, e.g. -ttt")
    parser.add_argument("--resume", action="store_true", help="continue from the saved heads (new lr schedule)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    kinds = ("eagle", "medusa") if args.kind == "both" else (args.kind,)
    started = time.time()
    metas = train_heads(kinds, args.steps, args.minutes, args.ttt, args.heads, args.batch, args.lr, args.seed, args.device,
                        suffix=args.suffix, resume=args.resume)
    for meta in metas.values():
        print({k: meta[k] for k in ("name", "steps", "tokens_seen", "train_seconds", "heldout_top1_agreement_by_depth")})
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
