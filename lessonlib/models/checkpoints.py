"""Checkpoints: float16 safetensors (no pickle) beside a JSON metadata file, and the message
that says how to rebuild one that is missing or corrupt."""
from __future__ import annotations

import json
import os
import pathlib

import torch
import torch.nn as nn

from lessonlib import paths
from lessonlib.jsonio import write_atomic
from lessonlib.core import backend
from lessonlib.models.gpt import GPT, GPTConfig

CHECKPOINTS = paths.ASSETS


def default_device() -> str:
    """The one device policy for models: the device of ``lessonlib.core.backend.select()``, so
    models go where the batched maths goes -- CUDA when the installed torch sees a GPU, else the
    CPU; ``LESSONLIB_BACKEND`` overrides both (``numpy`` and ``torch-cpu`` mean the CPU)."""
    return backend.select().device or "cpu"


def checkpoint_paths(name: str, directory: pathlib.Path = CHECKPOINTS):
    return directory / f"{name}.safetensors", directory / f"{name}.json"


STORED_DTYPE = torch.float16  # halves the repository size; the weights are |w| << 1, fp16 is lossless enough


def round_trip(state: dict) -> dict:
    """The state as it will be after saving and loading (float16 storage, float32 compute)."""
    return {k: v.detach().to("cpu", STORED_DTYPE).float() for k, v in state.items()}


def save(model: nn.Module, name: str, meta: dict, directory: pathlib.Path = CHECKPOINTS) -> None:
    """Weights as float16 safetensors (no pickle) plus a JSON metadata file, as one unit: both
    are written to temporary files in the folder first, then the old metadata is removed and
    both renamed into place, so a failure leaves the old pair or no pair (the metadata is
    missing: ``load`` names the rebuild command), never new weights beside old metadata."""
    from safetensors.torch import save_file

    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict (the checkpoint's JSON metadata), got {type(meta).__name__}")
    try:
        text = json.dumps(meta, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as err:
        raise ValueError(f"meta of checkpoint {name!r} must be JSON-serialisable with finite numbers ({err}); "
                         "nothing was written") from None
    state = {k: v.detach().to("cpu", STORED_DTYPE).contiguous() for k, v in model.state_dict().items()}
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:  # float16 also overflows to inf beyond 65504
        raise ValueError(f"model {name!r} holds NaN or inf weights (as float16) in {bad[0]}; nothing was written")
    weights, meta_path = checkpoint_paths(name, directory)
    weights.parent.mkdir(parents=True, exist_ok=True)
    tmp_weights, tmp_meta = (p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in (weights, meta_path))
    try:
        save_file(state, str(tmp_weights))
        write_atomic(tmp_meta, text)
        meta_path.unlink(missing_ok=True)  # from here until the last rename there is no pair
        os.replace(tmp_weights, weights)
        os.replace(tmp_meta, meta_path)
    finally:
        tmp_weights.unlink(missing_ok=True)
        tmp_meta.unlink(missing_ok=True)


def check_beside(meta: dict, name: str, target: GPT, kinds: tuple[str, ...]) -> str:
    """What a head's or MTP modules' metadata must say to run beside ``target``: a ``kind`` among
    ``kinds`` (returned), the target's width and vocabulary, and (when ``target`` came from
    ``load``) the target's checkpoint name. ValueError naming both sides otherwise."""
    kind = meta.get("kind")
    if kind not in kinds:
        raise ValueError(f"checkpoint {name!r} metadata must name a kind among {kinds}, got {kind!r}; "
                         f"rebuild it with: {rebuild_command(name)}")
    config = config_from_meta(meta, name)
    for field, what in (("n_embd", "width"), ("vocab_size", "vocabulary")):
        mine, theirs = getattr(config, field), getattr(target.config, field)
        if mine != theirs:
            raise ValueError(f"checkpoint {name!r} was trained for a target of {what} {mine} ({field}), "
                             f"this target has {theirs}")
    loaded_as, trained_for = getattr(target, "checkpoint_name", None), meta.get("target")
    if loaded_as is not None and trained_for is not None and loaded_as != trained_for:
        raise ValueError(f"checkpoint {name!r} was trained for target {trained_for!r}, not {loaded_as!r}: "
                         f"load it beside models.load({trained_for!r})")
    return kind


def read_meta(name: str, directory: pathlib.Path = CHECKPOINTS) -> dict:
    """The checkpoint's metadata: a JSON object (a truncated or non-JSON file raises ValueError
    with the rebuild command, not a bare JSONDecodeError)."""
    _, meta_path = checkpoint_paths(name, directory)
    if not meta_path.exists():
        raise FileNotFoundError(f"checkpoint {name!r} is missing ({meta_path}); "
                                f"rebuild it with: {rebuild_command(name)}")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"checkpoint metadata {meta_path} is corrupt ({err}); "
                         f"rebuild it with: {rebuild_command(name)}") from err
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint metadata {meta_path} must be a JSON object, got {type(meta).__name__}; "
                         f"rebuild it with: {rebuild_command(name)}")
    return meta


def config_from_meta(meta: dict, name: str) -> GPTConfig:
    """The ``GPTConfig`` of a checkpoint's metadata; an incomplete or mistyped ``config``
    raises ValueError naming the rebuild command (not a KeyError or TypeError)."""
    config = meta.get("config")
    fields = set(GPTConfig.__dataclass_fields__)
    if not isinstance(config, dict) or set(config) != fields \
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in config.values()):
        raise ValueError(f"checkpoint {name!r} metadata must hold a config with positive integers {sorted(fields)}, "
                         f"got {config!r}; rebuild it with: {rebuild_command(name)}")
    return GPTConfig(**config)


def scaled_name(name: str, scale: str = "cpu") -> str:
    """Checkpoint name at a scale: ``target`` on the CPU scale, ``target-gpu`` on the GPU scale."""
    return name if scale == "cpu" else f"{name}-{scale}"


# the shipped heads' variants that bench calibration compares: suffix -> their train_heads options
HEAD_VARIANTS = {"top1": " --objective top1",  # the target's argmax alone
                 "alone": "",  # forward KL at T = 1, trained alone: the baseline of "multi"
                 "multi": " --temperatures 0.7 1"}  # forward KL averaged over T = 0.7 and 1


def rebuild_command(name: str) -> str:
    if name.startswith(("eagle", "medusa")):  # the shipped heads train together on one target forward per batch
        kind, _, suffix = name.partition("-")
        return (f"python -m lessonlib.models.train_heads {kind if suffix else 'all'}"
                + HEAD_VARIANTS.get(suffix, "") + (f" --suffix=-{suffix}" if suffix else ""))
    if name.endswith("-mtp"):  # MTP modules train with their target and ship beside it
        return rebuild_command(name.removesuffix("-mtp"))
    if name.endswith("-gpu"):
        return f"python -m lessonlib.models.train {name.removesuffix('-gpu')} --scale gpu"
    return f"python -m lessonlib.models.train {name}"


def load_state(name: str, directory: pathlib.Path = CHECKPOINTS) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights, _ = checkpoint_paths(name, directory)
    if not weights.exists():
        raise FileNotFoundError(f"checkpoint {name!r} is missing ({weights}); rebuild it with: {rebuild_command(name)}")
    try:
        state = {k: v.float() for k, v in load_file(str(weights)).items()}
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"checkpoint {weights} is corrupt ({err}); rebuild it with: {rebuild_command(name)}") from err
    bad = [k for k, v in state.items() if not bool(torch.isfinite(v).all())]
    if bad:  # a NaN weight loads silently, then greedy decoding emits token 0 forever
        raise ValueError(f"checkpoint {weights} holds NaN or inf weights (in {bad[0]}); "
                         f"rebuild it with: {rebuild_command(name)}")
    return state


def load(name: str, device: str | None = None, directory: pathlib.Path = CHECKPOINTS) -> GPT:
    """A shipped model, the readable ``GPT``, in eval mode on ``device`` (default: CUDA if
    present), its weights trainable. For decoding, ``engines.load(name, engine=...)`` gives the
    same weights on a fast engine."""
    model = GPT(config_from_meta(read_meta(name, directory), name))
    return fill(model, name, device, directory)


def fill(model: GPT, name: str, device: str | None = None, directory: pathlib.Path = CHECKPOINTS) -> GPT:
    """``model`` (a ``GPT`` or an engine's subclass of it, built from ``name``'s config) holding
    ``name``'s weights, in eval mode on ``device``; a mismatch names the rebuild command."""
    try:
        model.load_state_dict(load_state(name, directory))
    except RuntimeError as err:
        raise ValueError(f"checkpoint {name!r} does not match its config; "
                         f"rebuild it with: {rebuild_command(name)}") from err
    model = to_device(model, device or default_device())
    model.checkpoint_name = name  # heads and MTP modules check that they were trained for it (check_beside)
    return model


def to_device(model: nn.Module, device) -> nn.Module:
    """``model`` on ``device`` in eval mode; a device torch does not know or this machine lacks
    is a ValueError naming it (not torch's RuntimeError)."""
    try:
        return model.to(torch.device(device)).eval()
    except (RuntimeError, TypeError, AssertionError) as err:
        raise ValueError(f"device must be one this machine has (cpu, cuda, cuda:N when torch sees a GPU), "
                         f"got {device!r} ({str(err).splitlines()[0]})") from None


def load_beside(model: nn.Module, name: str, target: GPT, directory: pathlib.Path, rebuild: str) -> nn.Module:
    """Load ``name``'s weights into ``model`` (a head or MTP modules that run beside ``target``)
    and put it on the target's device in eval mode."""
    try:
        model.load_state_dict(load_state(name, directory))
    except RuntimeError as err:
        raise ValueError(f"checkpoint {name!r} does not match its config; rebuild it with: {rebuild}") from err
    return model.to(target.device).eval()
