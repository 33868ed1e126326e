"""The pieces every trainer shares: bf16 autocast where the hardware has it, and the one
optimizer step (``train``, ``train_heads`` and the MTP trainer use both)."""
from __future__ import annotations

import contextlib

import torch


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX, as oneDNN reports).
    Without it bfloat16 is emulated: on the course's AVX2-only AMD EPYC machine a training
    step under bfloat16 autocast ran 8.6x slower than in float32 (3.90 s against 0.45 s, a
    4 x 160 GPT on 8 x 256 tokens, forward and backward)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast(device):
    """bfloat16 autocast where the hardware computes bfloat16 (CUDA, or a CPU with native
    bfloat16: ``native_bf16``); float32 elsewhere, where emulated bfloat16 is several
    times slower, not faster."""
    if torch.device(device).type == "cuda" or (torch.backends.mkldnn.is_available() and native_bf16()):
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def optimizer_step(model, optimizer, loss) -> float:
    """The one optimizer step every trainer takes: clear the old gradients (else they add up
    across steps), backpropagate, clip the gradient norm to 1, step; returns the loss value."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()
