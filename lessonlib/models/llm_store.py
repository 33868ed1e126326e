"""The real LLM's shipped EAGLE-3 head: float16 safetensors beside JSON metadata (``checkpoints.save``'s
atomic pair), with its draft vocabulary kept exact (``d2t`` int64, ``t2d`` bool: ``checkpoints.save``
would store every tensor as float16, which holds integers exactly only up to 2048), and the loader
that refuses a head trained for another target.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

import torch

from lessonlib.core import kinds
from lessonlib.models.checkpoints import CHECKPOINTS, write_pair
from lessonlib.models.llama import Llama
from lessonlib.models.llm_draft import LlamaDraftModel
from lessonlib.models.llm_eagle import LlamaEagleHead
from lessonlib.models.llm_heads import LlamaEagle3Head, ids_from_d2t
from lessonlib.models.llm_medusa import LlamaMedusaHeads

NAME = "smollm2-eagle3"
# training kind -> checkpoint name: the real LLM's kinds of core.kinds ("eagle3", "medusa"), and EAGLE, the
# control, which is no kind of the course (kept in the cache folder only)
NAMES = {**{k.name.removeprefix("smollm2-"): k.checkpoint for k in kinds.LLM_KINDS}, "eagle": "smollm2-eagle"}
LlmHead = LlamaEagle3Head | LlamaEagleHead | LlamaMedusaHeads | LlamaDraftModel  # a drafter of the real LLM, any kind
REBUILD = "python -m lessonlib.models.llm_features && python -m lessonlib.models.train_llm_heads eagle3"


def paths(name: str = NAME, directory: pathlib.Path = CHECKPOINTS) -> tuple[pathlib.Path, pathlib.Path]:
    return directory / f"{name}.safetensors", directory / f"{name}.json"


def save_head(head: LlmHead, meta: dict[str, Any], name: str = NAME,
              directory: pathlib.Path = CHECKPOINTS) -> None:
    """Weights (float16; ``d2t``/``t2d`` as they are) and metadata, renamed into place as one unit:
    the old metadata goes first, so a failure leaves the old pair or no metadata, never a mix."""
    text = json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n"
    state = {k: (v.detach().to("cpu", torch.float16) if v.is_floating_point() else v.detach().cpu()).contiguous()
             for k, v in head.state_dict().items()}
    write_pair(state, *paths(name, directory), lambda _: text, f"head {name!r}")


def read_head_meta(name: str = NAME, directory: pathlib.Path = CHECKPOINTS) -> dict[str, Any]:
    weights, meta_path = paths(name, directory)
    if not (weights.exists() and meta_path.exists()):
        raise FileNotFoundError(f"{weights.name} or {meta_path.name} is missing in {directory}; "
                                f"rebuild with: {REBUILD}")
    meta = json.loads(meta_path.read_text())
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path} must hold a JSON object")
    return meta


def check_target(meta: dict[str, Any], target: Llama, name: str) -> None:
    """The head's recorded target (GGUF file name and sha256, width, vocabulary) must be ``target``'s."""
    want, have = meta.get("target") or {}, getattr(target, "source", {}) or {}
    for key in ("name", "gguf_sha256"):
        if want.get(key) != have.get(key):
            raise ValueError(f"head {name!r} was trained for target {key}={want.get(key)!r}, "
                             f"this target has {key}={have.get(key)!r}")
    if meta.get("n_embd") != target.config.n_embd:
        raise ValueError(f"head {name!r} has width {meta.get('n_embd')}, the target {target.config.n_embd}")


def load_llm_head(target: Llama, name: str = NAME,
                  directory: pathlib.Path = CHECKPOINTS) -> LlmHead:
    """The shipped EAGLE-3 head (the Medusa heads, ``name`` "smollm2-medusa"; the distilled draft model,
    "smollm2-draft"; a saved EAGLE control, kind "eagle") beside ``target``
    (``llama.load_smollm2``), float32, eval mode, on the target's device; ValueError when it was
    trained for another target."""
    from safetensors.torch import load_file

    meta = read_head_meta(name, directory)
    if meta.get("kind") not in NAMES:
        raise ValueError(f"head {name!r} must be of a kind in {tuple(NAMES)}, got {meta.get('kind')!r}")
    check_target(meta, target, name)
    state = load_file(str(paths(name, directory)[0]))
    head: LlmHead
    if meta["kind"] == "eagle":
        head = LlamaEagleHead(target.config, target_name=name)
    elif meta["kind"] == "draft":
        head = LlamaDraftModel(target, ids_from_d2t(state["d2t"]), meta["draft_config"], target_name=name)
    elif meta["kind"] == "medusa":
        head = LlamaMedusaHeads(target.config, ids_from_d2t(state["d2t"]), int(meta["n_heads"]), target_name=name)
    else:
        head = LlamaEagle3Head(target.config, ids_from_d2t(state["d2t"]), target_name=name)
    head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True)
    return head.to(target.device).eval()
