"""The heads on an engine: the EAGLE, EAGLE-3 and MTP drafters' draft step on the fast paths.

A head (``models.heads``, ``models.mtp``) makes two calls on every draft step -- an input map
(``project``) and its decoder block (``run_block``) -- and EAGLE's ``step`` adds the target's
LM head. The readable modules make them with ``nn.Linear`` and ``gpt.one_block``; here the same
classes make them on the engine their target runs on:

* ``project``: one ``addmm`` on a cached transposed weight (``fast.linear``);
* ``run_block``: ``fast.head_block`` (``native.c`` where the target's engine is native, else
  the PyTorch fast path) on a batch-1 cached call, the readable block otherwise;
* EAGLE's ``step``: the head's fuse, fc, block and the target's tied head in one native call
  (``native.eagle_step``) for a chain's draft step or a round's commit.

``accelerate(module, target)`` turns a loaded head into its engine class in place (the same
parameters, the same state dict); ``tests/engines/test_fast_heads.py`` checks each against the
readable one.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from lessonlib.engines import native
from lessonlib.engines.fast import FastGPT, head_block, linear
from lessonlib.engines.packing import can_pack, pack_linears
from lessonlib.models.gpt import GPT, KVCache
from lessonlib.models.heads import Eagle3Head, EagleHead
from lessonlib.models.mtp import MTPModule


class _FastBlock:
    """``run_block`` on the engine: ``use_native`` says whether the target's engine is native."""

    block: nn.Module
    use_native = True

    def run_block(self, x: torch.Tensor, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        return head_block(self.block, x, mask, cache, self.use_native)  # type: ignore[arg-type]


class _FastEagle(_FastBlock):
    """EAGLE's draft step on the engine (module docstring)."""

    def project(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return linear(layer, x)

    def step(self, target: GPT, tokens: np.ndarray, features: torch.Tensor, cache: KVCache,
             mask: np.ndarray | None = None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``EagleHead.step``; one native call when it runs here, every new token sees the whole
        cache (causal) and the logits asked for are one row: a chain's draft step, a commit."""
        step = native_step(self, target)
        causal = mask is None or len(tokens) == 1 and bool(mask.all())
        if step is not None and causal and (last or len(tokens) == 1) and len(tokens) <= native.MAX_T:
            g, logits = step(tokens, features, cache)
            return g, logits[None]
        return super().step(target, tokens, features, cache, mask, last)  # type: ignore[misc]


class FastEagleHead(_FastEagle, EagleHead):
    pass


class FastEagle3Head(_FastEagle, Eagle3Head):
    pass


class FastMTPModule(_FastBlock, MTPModule):
    pass


FAST = {EagleHead: FastEagleHead, Eagle3Head: FastEagle3Head, MTPModule: FastMTPModule}


def native_step(head, target: GPT) -> native.EagleStep | None:
    """``head``'s one-token draft step beside ``target`` in one native call (``native.eagle_step``),
    or None where the native forward does not run it. Kept on the head, keyed by the weights'
    storage and the target's native forward, like ``fast.fast_one_block``'s prepared block."""
    blocks = getattr(target, "native", None) if head.use_native else None
    fuse = getattr(head, "fuse", None)
    key = (head.fc.weight.data_ptr(), head.block.qkv.weight.data_ptr(),
           None if fuse is None else fuse.weight.data_ptr(), id(target), id(blocks), native.enabled())
    if getattr(head, "_step_key", None) != key:
        head._step = native.eagle_step(head.fc, head.block, target.wte.weight, blocks, fuse)
        head._step_key = key
    return head._step


def accelerate(module: nn.Module, target: GPT) -> nn.Module:
    """``module`` (heads or MTP modules loaded for ``target``) on ``target``'s engine, in place:
    packed for oneDNN when the target is, and its EAGLE/MTP blocks on the fast path (native when
    the target's forward is) when the target is a ``FastGPT``. A readable target leaves it readable."""
    if target.packed and can_pack(module):
        pack_linears(module)
    if isinstance(target, FastGPT):
        for sub in module.modules():
            fast = FAST.get(type(sub))
            if fast is not None:
                sub.__class__ = fast
                sub.use_native = target.use_native and native.enabled()  # type: ignore[attr-defined]
    return module
