"""Drafting with the real LLM's heads in the course's decoding loops: the EAGLE-3 head
(``models.llm_heads``) through ``LlamaHeadDrafter``, the Medusa heads (``models.llm_medusa``)
through ``drafters.MedusaDrafter`` unchanged (their logits are -inf outside the draft vocabulary
too); ``head_drafter`` picks the class a kind of ``core.kinds.LLM_KINDS`` names.

``EagleDrafter`` already does what EAGLE-3 needs: it commits the target's fused features (its
``feature_layers`` are the head's ``layers``), feeds each tree node the head's own g at its
parent and calls ``head.step``. The head's draft vocabulary changes one thing only, inside
``step``: its logits over the N draft ids are placed at their target ids (``d2t``) and every
other target id gets -inf, so each q row (``log_probs``) is a distribution over the full target
vocabulary that is zero outside the draft vocabulary -- what the exact rejection rule and the
sibling rule read, unchanged. Tree nodes sit at RoPE position (last committed + depth), which
``step`` reads off the mask the drafter passes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lessonlib.core.validate import check_head_fits
from lessonlib.decoding.drafters import EagleDrafter, ModelDrafter

if TYPE_CHECKING:
    from lessonlib.models.llama import Llama
    from lessonlib.models.llm_eagle import LlamaEagleHead
    from lessonlib.models.llm_heads import LlamaEagle3Head


class LlamaHeadDrafter(EagleDrafter):
    """``EagleDrafter`` for a head of the real LLM (``LlamaEagle3Head``, or ``llm_eagle.LlamaEagleHead``
    whose ``layers`` None asks the target for its top feature) beside its ``Llama`` target."""

    head: Any  # a LlamaEagle3Head or LlamaEagleHead: EagleDrafter's readers only call step and new_cache
    target: Any  # a Llama: the round's contract is GPT's (forward, new_cache, lm_head)

    def __init__(self, head: LlamaEagle3Head | LlamaEagleHead, target: Llama) -> None:
        check_head_fits(head.config.n_embd, head.config.vocab_size, target.config.n_embd, target.config.vocab_size,
                        "head")
        if head.config.block_size < target.config.block_size:
            raise ValueError(f"head's cache must hold the target's context ({target.config.block_size} positions), "
                             f"got {head.config.block_size}")
        self.head, self.target, self.cache, self.committed = head, target, head.new_cache(), 0
        self.feature_layers = head.layers


class LlamaDraftDrafter(ModelDrafter):
    """``ModelDrafter`` for the real LLM's distilled draft model (``llm_draft.LlamaDraftModel``) beside
    its ``Llama`` target; its q rows' softmax runs over the draft vocabulary only (``log_probs``'s
    ``support``: every other logit is -inf)."""

    def __init__(self, model: Any, target: Llama) -> None:
        check_head_fits(target.config.n_embd, model.config.vocab_size, target.config.n_embd,
                        target.config.vocab_size, "draft model")
        if model.config.block_size < target.config.block_size:
            raise ValueError(f"draft model's cache must hold the target's context ({target.config.block_size} "
                             f"positions), got {model.config.block_size}")
        super().__init__(model)
        self.root_call = {"last": True}  # a prompt's commit needs the last token's row only, not T of them


def _frozen_on_engine(target: Llama, name: str) -> Any:
    """The stored head ``name`` (``models.llm_store.load_llm_head``; refuses a head of another
    target), frozen, on the target's engine (``engines.llama_heads.accelerate_head``: EAGLE-3's
    draft step and Medusa's heads in ``native_llama.c`` beside a native target, else readable)."""
    from lessonlib.engines.llama_heads import accelerate_head
    from lessonlib.models.llm_store import load_llm_head

    return accelerate_head(load_llm_head(target, name).requires_grad_(False), target)  # never trained here


def load_eagle3_drafter(target: Llama, name: str | None = None) -> LlamaHeadDrafter:
    """The shipped EAGLE-3 head (or the stored head ``name``) as a drafter beside ``target``."""
    from lessonlib.models.llm_store import NAME

    return LlamaHeadDrafter(_frozen_on_engine(target, name or NAME), target)


def load_head(target: Llama, kind: str) -> Any:
    """The shipped head of ``kind`` (a name of ``core.kinds.LLM_KINDS``) beside ``target``, frozen,
    on the target's engine (EAGLE-3's and Medusa's native steps beside a native target)."""
    from lessonlib.core import kinds

    k = kinds.kind(kind)
    if k.loader != "llm-head":
        raise ValueError(f"kind must be a kind of the real LLM (core.kinds.LLM_KINDS), got {kind!r}")
    return _frozen_on_engine(target, k.checkpoint)


def head_drafter(kind: str, head: Any, target: Llama) -> Any:
    """A fresh drafter of ``kind`` (its ``core.kinds`` drafter class) with ``head`` beside ``target``."""
    from lessonlib.core import kinds
    from lessonlib.decoding.drafters import MedusaDrafter

    classes = {"LlamaHeadDrafter": LlamaHeadDrafter, "MedusaDrafter": MedusaDrafter,
               "LlamaDraftDrafter": LlamaDraftDrafter}
    return classes[kinds.kind(kind).drafter](head, target)
