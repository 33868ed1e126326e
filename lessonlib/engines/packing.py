"""The oneDNN packing engine: weight packing for fast CPU decoding, the only module that touches
private oneDNN ops.

``torch.ops.mkldnn._reorder_linear_weight`` / ``_linear_pointwise`` are private and may be
missing from a torch build; ``can_pack`` says whether they are here, and every caller falls
back to the plain ``nn.Linear`` (same numbers, slower verify passes) when they are not.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def onednn_available() -> bool:
    """Whether this torch build has the private oneDNN packing ops (tests switch it off)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


# Smaller matrices run faster unpacked (oneDNN costs ~15 us a call). 1 << 16 takes in the
# target's 256 x 256 attention projection: in the decoding loop, two interleaved runs gave
# plain steps of 1.29 / 1.27 ms instead of 1.38 / 1.32 (1 << 17) and K = 3 speedups of 1.69x /
# 1.64x instead of 1.67x / 1.60x.
PACK_MIN_WEIGHTS = 1 << 16


class PackedLinear(nn.Module):
    """A frozen ``nn.Linear`` whose weight is also packed once into oneDNN's blocked layout (CPU).

    Why: an unpacked matmul with several input rows re-packs the weight on every call, so on a
    CPU a verify pass over K + 1 tokens costs about 3x a one-token step. Measured on the
    course's 2-core CPU, one 1024 x 256 weight alone, 1 / 6 / 16 rows: 15.9 / 47.7 / 69.6 us
    unpacked, 21.0 / 23.9 / 34.4 us packed. Inside the whole target, whose weights do not stay
    in cache between calls, packed is faster even for one row (see ``GPT.pack_for_cpu``);
    below ``PACK_MIN_WEIGHTS`` oneDNN's fixed cost per call (~15 us) outweighs the saving.
    """

    def __init__(self, weight, bias=None):
        super().__init__()
        # the same Parameter objects as the nn.Linear's: parameter counts and devices stay right
        self.weight, self.bias = weight, bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
        self.packed_bias = None if bias is None else bias.detach()

    def forward(self, x):
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.packed_bias, "none", [], "")


def pack_linears(module: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``module`` with at least ``PACK_MIN_WEIGHTS`` weights
    by a ``PackedLinear``, in place, and freeze the module: inference only."""
    if not can_pack(module):
        raise ValueError("packing needs a float32 or bfloat16 model on a CPU with oneDNN (mkldnn)")
    module.eval().requires_grad_(False)
    for name, child in module.named_children():
        if isinstance(child, nn.Linear) and child.weight.numel() >= PACK_MIN_WEIGHTS:
            setattr(module, name, PackedLinear(child.weight, child.bias))
        else:
            pack_linears(child)
    return module


def can_pack(model: nn.Module) -> bool:
    """Whether ``pack_for_cpu`` can pack this model here (a float32/bfloat16 model on a oneDNN CPU)."""
    weight = next(model.parameters())
    return weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16) and onednn_available()


@torch.no_grad()
def pack_for_cpu(model):
    """Pack a ``GPT``'s large weight matrices (``pack_linears``) and its tied LM head for fast CPU
    decoding, in place; inference only (no gradients). A model that cannot be packed here (no
    oneDNN, a GPU or float16 model) is returned as it is: plain ``nn.Linear``, the same numbers.

    Measured on the course's 2-core CPU (float32, the first 8 x 256 target, 100 cached tokens):
    a one-token step 1.86 -> 1.15 ms, a 6-token verify pass 3.36 -> 1.63 ms, a 16-token
    tree pass 4.37 -> 2.17 ms. Packing the one-layer draft does not change its step time,
    so decoding packs the target (and the heads that run beside it) only.
    """
    if not can_pack(model):
        return model
    pack_linears(model)
    model.packed_head = PackedLinear(model.wte.weight)  # the LM head is tied to the embedding
    return model
