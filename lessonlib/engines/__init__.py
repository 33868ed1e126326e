"""Engines: fast paths that run the readable models' weights for decoding, behind one contract.

The contract is the one the decoding round already uses -- ``GPT.forward``'s: a cached forward
over new tokens (batch 1) with explicit positions, an optional tree mask (bool (T, S), new
tokens always see the older cached prefix) and the hidden states the heads need
(``return_hidden``: the last block's output, or a tuple of blocks' outputs fused), plus
``lm_head``, ``new_cache`` and the ``logits(tokens)`` protocol. Every engine gives the readable
model's logits within a stated tolerance (``tests/engines/test_agreement.py``).

=========  ================================================================  ===================
engine     what runs a cached batch-1 call                                    module
=========  ================================================================  ===================
readable   ``models.gpt.GPT`` itself: the model a student reads                ``models.gpt``
packed     the same modules, large matrices packed for oneDNN                  ``engines.packing``
fast       PyTorch, one ``addmm`` per product on gathered weights               ``engines.fast``
native     every block in one call to ``native.c`` (16-bit weights read once)  ``engines.native``
=========  ================================================================  ===================

The real LLM (``models.llama``, SmolLM2-135M) has two engines, loaded by ``load_llm(engine=
"auto" | "readable" | "native", precision="f16" | "f32")`` (``engines.llama``): readable, and
native -- ``NativeLlama``, every block, the final norm and the tied head in one call to
``native_llama.c`` (16-bit or float32 weights read once per forward, batch-invariant logits).

``load(name, engine="auto")`` picks native where it builds here, else fast, and the model
says which it got (``engine_of``). An engine that cannot run here says why in one line.
"""
from __future__ import annotations

import pathlib

from lessonlib.engines import native
from lessonlib.engines.fast import FastGPT
from lessonlib.engines.heads import accelerate
from lessonlib.engines.llama import NativeLlama
from lessonlib.engines.llama import load_llm as load_llm  # the real LLM's loader
from lessonlib.engines.packing import pack_for_cpu
from lessonlib.models import heads as _heads
from lessonlib.models import mtp as _mtp
from lessonlib.models.checkpoints import CHECKPOINTS, config_from_meta, fill, read_meta
from lessonlib.models.gpt import GPT

ENGINES = ("readable", "packed", "fast", "native")  # slowest to fastest on the course's CPU
CHOICES = ENGINES + ("auto",)
PREFERRED = "native"  # what "auto" picks wherever native.c builds: the engine every committed report is measured on


def check_engine(engine) -> str:
    """``engine`` if it names one (``CHOICES``), else a ValueError naming the choices."""
    if not isinstance(engine, str) or engine not in CHOICES:
        raise ValueError(f"engine must be one of {', '.join(CHOICES)}, got {engine!r}")
    return engine


def unavailable(engine: str, device: str = "cpu") -> str | None:
    """Why ``engine`` cannot run a model on ``device`` here, in one line, or None when it can."""
    if check_engine(engine) == "native":
        if str(device).startswith("cuda"):
            return "engine 'native' runs on the CPU only (native.c); use engine='fast' on a GPU"
        if native.library() is None or not native.enabled():
            return f"engine 'native' is not available here: native forward {native.status()}"
    return None


def resolve(engine: str, device: str = "cpu") -> str:
    """The engine ``engine`` means here: "auto" is native where it runs, else fast."""
    if check_engine(engine) == "auto":
        return PREFERRED if unavailable(PREFERRED, device) is None else "fast"
    why = unavailable(engine, device)
    if why is not None:
        raise ValueError(why)
    return engine


def load(name: str, device: str | None = None, directory: pathlib.Path = CHECKPOINTS,
         engine: str = "auto") -> GPT:
    """A shipped model on ``engine``, ready to decode: eval mode, inference only (no gradients).
    The readable model with trainable weights is ``models.load(name)``."""
    from lessonlib.models.checkpoints import default_device

    device = device or default_device()
    chosen = resolve(engine, device)
    config = config_from_meta(read_meta(name, directory), name)
    model = fill((FastGPT if chosen in ("fast", "native") else GPT)(config), name, device, directory)
    model.requires_grad_(False)
    if chosen != "readable":  # the fast engines keep the packed modules for batched, uncached calls
        pack_for_cpu(model)
    if isinstance(model, FastGPT):
        model.use_native = chosen == "native"
        model.prepare()
    model.engine = chosen
    return model


def on_engine(model: GPT, engine: str = "auto") -> GPT:
    """``model``'s weights on ``engine`` ("auto": the one ``load`` picks here), ready to decode:
    for a model that is not shipped, e.g. random weights in a shipped shape (a pass's time does
    not depend on the values). The readable engine returns ``model`` itself; the others a copy."""
    if not isinstance(model, GPT):
        raise ValueError(f"model must be a models.GPT, got {type(model).__name__}")
    chosen = resolve(engine, str(model.device))
    model = model.eval().requires_grad_(False)
    if chosen in ("packed", "fast", "native"):
        model = pack_for_cpu(model)
    if chosen in ("fast", "native"):
        fast = FastGPT.from_gpt(model)
        fast.use_native = chosen == "native"
        model = fast.prepare()  # again: from_gpt prepared it before use_native was set
    model.engine = chosen
    return model


def engine_of(model) -> str:
    """Which engine runs ``model``'s cached calls: native, fast, packed or readable."""
    if isinstance(model, NativeLlama):
        return "native" if model.native is not None else "readable"
    if isinstance(model, FastGPT):
        return "native" if model.native is not None or (model.fast_layers is None and model.use_native
                                                          and unavailable("native") is None) else "fast"
    return "packed" if getattr(model, "packed", False) else "readable"


def load_head(name, target: GPT, directory=CHECKPOINTS):
    """A trained EAGLE head or Medusa heads for ``target`` (``models.heads.load_head``) on the
    target's engine (``accelerate``)."""
    return accelerate(_heads.load_head(name, target, directory), target)


def load_mtp(name: str, target: GPT, directory=None):
    """Trained MTP modules for ``target`` (``models.mtp.load_mtp``) on the target's engine."""
    return accelerate(_mtp.load_mtp(name, target, directory), target)
