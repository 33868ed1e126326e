"""Checkpoints: float16 safetensors (no pickle) beside a JSON metadata file, and the message
that says how to rebuild one that is missing or corrupt."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re

import torch
import torch.nn as nn

from lessonlib import paths
from lessonlib.core import backend
from lessonlib.jsonio import write_atomic
from lessonlib.models.gpt import GPT, GPTConfig

CHECKPOINTS = paths.ASSETS


def default_device() -> str:
    """The one device policy for models: the device of ``lessonlib.core.backend.select()``, so
    models go where the batched maths goes -- CUDA when the installed torch sees a GPU, else the
    CPU; ``LESSONLIB_BACKEND`` overrides both (``numpy`` and ``torch-cpu`` mean the CPU)."""
    return backend.select().device or "cpu"


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+-]*(\.[A-Za-z0-9_+-]+)*")  # a file stem: no folder, no '..'


def check_name(name) -> str:
    """A checkpoint name is a plain file stem inside its folder (``../assets/target`` or ``a/b``
    would read or write outside it): ValueError naming the name otherwise."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"a checkpoint name must be a file stem of letters, digits and _.+- with no folder "
                         f"(it is looked up inside its folder), got {name!r}")
    return name


def checkpoint_paths(name: str, directory: pathlib.Path = CHECKPOINTS):
    check_name(name)
    return pathlib.Path(directory) / f"{name}.safetensors", pathlib.Path(directory) / f"{name}.json"


STORED_DTYPE = torch.float16  # halves the repository size; the weights are |w| << 1, fp16 is lossless enough


def round_trip(state: dict) -> dict:
    """The state as it will be after saving and loading (float16 storage, float32 compute)."""
    return {k: v.detach().to("cpu", STORED_DTYPE).float() for k, v in state.items()}


def save(model: nn.Module, name: str, meta: dict, directory: pathlib.Path = CHECKPOINTS) -> dict:
    """Weights as float16 safetensors (no pickle) plus a JSON metadata file, as one unit: both
    are written to temporary files in the folder first, then the old metadata is removed and
    both renamed into place, so a failure leaves the old pair or no pair (the metadata is
    missing: ``load`` names the rebuild command), never new weights beside old metadata.
    The metadata gains the weights' ``sha256`` and its config's ``config_sha256`` (``stamp``);
    returns the metadata as written. A head or MTP modules' ``meta`` carries its target's
    ``target_fingerprint`` (``fingerprint``), which ``check_beside`` requires."""

    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict (the checkpoint's JSON metadata), got {type(meta).__name__}")
    try:
        json.dumps(meta, allow_nan=False)  # refused before anything is written
    except (TypeError, ValueError) as err:
        raise ValueError(f"meta of checkpoint {name!r} must be JSON-serialisable with finite numbers ({err}); "
                         "nothing was written") from None
    state = {k: v.detach().to("cpu", STORED_DTYPE).contiguous() for k, v in model.state_dict().items()}
    written: list[dict] = []

    def text(tmp_weights: pathlib.Path) -> str:  # the checksum of exactly the bytes renamed into place
        written.append(stamp(meta, tmp_weights))
        return json.dumps(written[0], indent=2, sort_keys=True, allow_nan=False) + "\n"

    write_pair(state, *checkpoint_paths(name, directory), text, f"model {name!r}")
    meta = written[0]
    return meta


def write_pair(state: dict, weights: pathlib.Path, meta_path: pathlib.Path, text, what: str) -> None:
    """Write ``state`` (safetensors) and the metadata ``text(temporary weights path)`` as one unit:
    both to temporary files in the folder first, then the old metadata removed and both renamed into
    place, so a failure leaves the old pair or no pair. NaN or inf weights are refused first."""
    from safetensors.torch import save_file

    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:  # float16 also overflows to inf beyond 65504
        raise ValueError(f"{what} holds NaN or inf weights (as float16) in {bad[0]}; nothing was written")
    weights.parent.mkdir(parents=True, exist_ok=True)
    tmp_weights, tmp_meta = (p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in (weights, meta_path))
    try:
        save_file(state, str(tmp_weights))
        write_atomic(tmp_meta, text(tmp_weights))
        meta_path.unlink(missing_ok=True)  # from here until the last rename there is no pair
        os.replace(tmp_weights, weights)
        os.replace(tmp_meta, meta_path)
    finally:
        tmp_weights.unlink(missing_ok=True)
        tmp_meta.unlink(missing_ok=True)


# ---------------------------------------------------------------- integrity: checksum, config hash, fingerprint
# Why: shapes alone do not say which weights these are. A flipped byte in a float16 weight loads
# and decodes wrong text; a head loads onto any target of its width (another, or an untrained
# one); a metadata ``n_head`` edited with the same shapes loads and splits the width wrongly.
# So the metadata records the sha256 of the weights' bytes, of its config, and (heads, MTP
# modules) of the target's checkpoint, and loading checks all three. The helpers are general:
# any checkpoint format with JSON metadata can ``stamp`` and ``verify`` the same way.

_FILE_SHA: dict[tuple, str] = {}  # (path, size, mtime_ns, inode) -> sha256: a file is hashed once per process


def sha256_file(path: pathlib.Path) -> str:
    """The sha256 (hex) of a file's bytes."""
    path = pathlib.Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _FILE_SHA:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _FILE_SHA[key] = digest.hexdigest()
    return _FILE_SHA[key]


def config_sha256(config: dict) -> str:
    """The sha256 of a config dict written canonically (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def fingerprint(model: nn.Module) -> str:
    """Which weights ``model`` holds: the sha256 its checkpoint file has (set by ``fill`` from
    the verified metadata), or for a model built in memory the sha256 of the bytes ``save``
    would write for it -- so a target trained, saved and loaded again keeps one fingerprint."""
    known = getattr(model, "fingerprint", None)
    if isinstance(known, str):
        return known
    from safetensors.torch import save as to_bytes

    state = {k: v.detach().to("cpu", STORED_DTYPE).contiguous() for k, v in model.state_dict().items()
             if not k.startswith("packed_")}  # the fast engines' packed copies are not weights of their own
    return hashlib.sha256(to_bytes(state)).hexdigest()


def stamp(meta: dict, weights: pathlib.Path) -> dict:
    """``meta`` with the ``sha256`` of ``weights`` and (when it holds a config) its ``config_sha256``."""
    out = dict(meta) | {"sha256": sha256_file(weights)}
    if isinstance(meta.get("config"), dict):
        out["config_sha256"] = config_sha256(meta["config"])
    return out


def verify(meta: dict, weights: pathlib.Path, rebuild: str) -> None:
    """The weights' bytes are the ones their metadata records (``stamp``): ValueError naming the
    file and ``rebuild`` when the metadata records no checksum or another one (a corrupt or
    replaced file)."""
    want = meta.get("sha256")
    if not isinstance(want, str):
        raise ValueError(f"checkpoint metadata for {weights} records no sha256 checksum of its weights, so a "
                         f"corrupt or replaced file would load unnoticed; rebuild it with: {rebuild}")
    have = sha256_file(weights)
    if have != want:
        raise ValueError(f"checkpoint {weights} is corrupt or was replaced: its sha256 is {have[:16]}..., its "
                         f"metadata records {want[:16]}...; rebuild it with: {rebuild}")


def check_beside(meta: dict, name: str, target: GPT, kinds: tuple[str, ...]) -> str:
    """What a head's or MTP modules' metadata must say to run beside ``target``: a ``kind`` among
    ``kinds`` (returned), the target's width and vocabulary, (when ``target`` came from
    ``load``) the target's checkpoint name, and the target's ``fingerprint``. ValueError naming
    both sides otherwise."""
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
    want = meta.get("target_fingerprint")
    if not isinstance(want, str):
        raise ValueError(f"checkpoint {name!r} metadata records no target_fingerprint (the sha256 of the target it "
                         f"was trained on), so it would run beside any target of its shape; "
                         f"rebuild it with: {rebuild_command(name)}")
    have = fingerprint(target)
    if have != want:
        raise ValueError(f"checkpoint {name!r} was trained on the target with fingerprint {want[:16]}..., this "
                         f"target's is {have[:16]}... (another or untrained target of the same shape): load it "
                         f"beside the target it was trained on, or rebuild it with: {rebuild_command(name)}")
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
    """The ``GPTConfig`` of a checkpoint's metadata; an incomplete or mistyped ``config``, or
    one other than its recorded ``config_sha256`` says, raises ValueError naming the rebuild
    command (not a KeyError or TypeError, nor a model that loads and decodes wrong text)."""
    config = meta.get("config")
    fields = set(GPTConfig.__dataclass_fields__)
    if not isinstance(config, dict) or set(config) != fields \
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in config.values()):
        raise ValueError(f"checkpoint {name!r} metadata must hold a config with positive integers {sorted(fields)}, "
                         f"got {config!r}; rebuild it with: {rebuild_command(name)}")
    recorded = meta.get("config_sha256")
    if not isinstance(recorded, str):
        raise ValueError(f"checkpoint {name!r} metadata records no config_sha256, so an edited config (n_head, "
                         f"same shapes) would load unnoticed; rebuild it with: {rebuild_command(name)}")
    if recorded != config_sha256(config):  # e.g. n_head edited: same shapes, the width split into other heads
        raise ValueError(f"checkpoint {name!r} metadata's config {config!r} is not the one it was saved with "
                         f"(its config_sha256 does not match); rebuild it with: {rebuild_command(name)}")
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


def load_state(name: str, directory: pathlib.Path = CHECKPOINTS, rebuild: str | None = None) -> dict:
    """``name``'s weights (float32), checked: readable, finite, and the bytes its metadata's
    checksum records (``verify``); ValueError naming the file and the rebuild command otherwise."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    rebuild = rebuild or rebuild_command(name)
    weights, _ = checkpoint_paths(name, directory)
    if not weights.exists():
        raise FileNotFoundError(f"checkpoint {name!r} is missing ({weights}); rebuild it with: {rebuild}")
    meta = read_meta(name, directory)
    try:
        state = {k: v.float() for k, v in load_file(str(weights)).items()}
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"checkpoint {weights} is corrupt ({err}); rebuild it with: {rebuild}") from err
    bad = [k for k, v in state.items() if not bool(torch.isfinite(v).all())]
    if bad:  # a NaN weight loads silently, then greedy decoding emits token 0 forever
        raise ValueError(f"checkpoint {weights} holds NaN or inf weights (in {bad[0]}); "
                         f"rebuild it with: {rebuild}")
    verify(meta, weights, rebuild)  # a flipped byte that stays finite: only the checksum sees it
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
    model.fingerprint = read_meta(name, directory)["sha256"]  # verified by load_state: these are its bytes
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
        model.load_state_dict(load_state(name, directory, rebuild))
    except RuntimeError as err:
        raise ValueError(f"checkpoint {name!r} does not match its config; rebuild it with: {rebuild}") from err
    return model.to(target.device).eval()
