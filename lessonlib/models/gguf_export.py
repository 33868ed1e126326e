"""Export a course GPT to GGUF, llama.cpp's model file, with the project's own code (``gguf``).

    python -m lessonlib.models.gguf_export NAME [--dir FOLDER] [--dtype f16|f32|both] [--out FOLDER]

The course's GPT is GPT-2's architecture (pre-LayerNorm blocks with biases, learned positions,
tanh GELU, tied embeddings, fused q/k/v in GPT-2's order), so it maps one to one onto
llama.cpp's ``gpt2`` architecture: no weight is changed, only renamed (``TENSORS``). Our
``nn.Linear`` weights are already (out, in), the layout GGUF writers take (GPT-2's own
``Conv1D`` weights are the ones llama.cpp's converter transposes). The LM head is written as its
own tensor (``output.weight``, a copy of the token embedding) so no llama.cpp version has to
guess the tie.

Two gaps of llama.cpp's own converter (``convert_hf_to_gguf.py``) on our checkpoints, handled here:

* **no ``n_ctx``**: the converter reads GPT-2's ``n_ctx`` from a Hugging Face config; ours is
  ``block_size`` in the checkpoint's metadata, written as ``gpt2.context_length``;
* **unknown pre-tokenizer hash**: the converter identifies a BPE pre-tokenizer by hashing how it
  splits a test string, and refuses hashes it has not listed -- ours, trained for the course, is
  not listed. It is a byte-level BPE with GPT-2's split regex (``tokenizer.json``:
  ``ByteLevel``, ``use_regex: true``), so we name llama.cpp's ``gpt-2`` pre-tokenizer directly
  (``check_tokenizer`` refuses a tokenizer that is not that).

``f16`` stores the matrices and embeddings as float16 (lossless for the shipped checkpoints,
which are stored as float16) and the LayerNorm weights and biases as float32, as llama.cpp's
converter does; ``f32`` stores everything as float32. A student's own distilled draft, saved with
``models.save(model, NAME, meta, FOLDER)``, exports with ``--dir FOLDER``. The peer benchmark
(``bench.peers``) and ``tests/models/test_gguf_export.py`` check the exported logits against ours.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
from collections.abc import Sequence

import numpy as np
import torch

from lessonlib import cli, paths
from lessonlib.models.gpt import GPT

TOKENIZER = paths.ASSETS / "tokenizer.json"
DTYPES = ("f32", "f16")
INSTALL = "pip install -r requirements-peers.txt"
# ours -> llama.cpp's gpt2 names, per block (blocks.{i}.X -> blk.{i}.Y), weight and bias each
TENSORS = {"ln_1": "attn_norm", "qkv": "attn_qkv", "proj": "attn_output", "ln_2": "ffn_norm",
           "fc": "ffn_up", "fc_out": "ffn_down"}
LAYER_NORM_EPS = 1e-5  # models.gpt's nn.LayerNorm default


def _gguf():
    try:
        import gguf
    except ImportError as err:
        raise ImportError(f"GGUF export needs the gguf package: {INSTALL}") from err
    return gguf


def check_tokenizer(spec: dict) -> tuple[list[str], list[str]]:
    """(tokens by id, merges as "a b") of a Hugging Face ``tokenizer.json`` dict; ValueError unless
    it is a byte-level BPE with GPT-2's split regex and ids 0..V-1 (what ``gpt-2`` means to llama.cpp)."""
    pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True) or pre.get("add_prefix_space"):
        raise ValueError(f"tokenizer must be a ByteLevel pre-tokenizer with GPT-2's regex and no prefix space "
                         f"(llama.cpp's 'gpt-2' pre-tokenizer), got {pre!r}")
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer model must be BPE, got {model.get('type')!r}")
    vocab = model["vocab"]
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError("tokenizer vocab ids must be 0..V-1 without gaps")
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, merges


def tensors(model: GPT, dtype: str) -> dict[str, np.ndarray]:
    """{GGUF name: array} of ``model``'s weights: 2-D tensors as ``dtype``, 1-D ones float32."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("packed_head.")}
    names = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight",
             "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias"}
    for i in range(model.config.n_layer):
        for ours, theirs in TENSORS.items():
            for part in ("weight", "bias"):
                names[f"blocks.{i}.{ours}.{part}"] = f"blk.{i}.{theirs}.{part}"
    if set(state) != set(names):
        raise ValueError(f"model must be a course GPT (models.GPT); unexpected weights "
                         f"{sorted(set(state) ^ set(names))[:4]}")
    out = {}
    for ours, theirs in names.items():
        w = state[ours].detach().to("cpu", torch.float32).contiguous()
        out[theirs] = w.numpy().astype(np.float16 if dtype == "f16" and w.ndim == 2 else np.float32)
    out["output.weight"] = out["token_embd.weight"].copy()  # the tied head, written out
    return out


def export(model: GPT, path: str | pathlib.Path, dtype: str = "f16", name: str = "lessonlib-gpt",
           tokenizer: str | pathlib.Path = TOKENIZER) -> pathlib.Path:
    """Write ``model`` as a GGUF file of llama.cpp's ``gpt2`` architecture at ``path`` (atomically:
    a temporary file renamed into place); returns the path."""
    gguf = _gguf()
    if not isinstance(model, GPT):
        raise ValueError(f"model must be a models.GPT, got {type(model).__name__}")
    tokens, merges = check_tokenizer(json.loads(pathlib.Path(tokenizer).read_text()))
    c = model.config
    if len(tokens) != c.vocab_size:
        raise ValueError(f"tokenizer has {len(tokens)} tokens, the model's vocab_size is {c.vocab_size}")
    arrays = tensors(model, dtype)  # validates dtype before anything is written
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "gpt2")
    writer.add_name(name)
    writer.add_context_length(c.block_size)  # the converter's missing n_ctx
    writer.add_embedding_length(c.n_embd)
    writer.add_feed_forward_length(4 * c.n_embd)
    writer.add_block_count(c.n_layer)
    writer.add_head_count(c.n_head)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # the converter's unknown pre-tokenizer hash: named, not hashed
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(merges)
    writer.add_add_bos_token(False)  # our models were trained without a start token
    for key, array in arrays.items():
        writer.add_tensor(key, array)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    from lessonlib.models.checkpoints import CHECKPOINTS, check_name, load

    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="checkpoint name, e.g. target, draft-kl, or your own draft's")
    parser.add_argument("--dir", type=pathlib.Path, default=CHECKPOINTS, help="folder holding NAME.safetensors")
    parser.add_argument("--dtype", choices=(*DTYPES, "both"), default="both")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="folder for NAME-f16.gguf / NAME-f32.gguf (default: gguf/ in LESSONLIB_OUTPUTS when "
                             "set, else exercises/my-outputs/gguf)")
    args = parser.parse_args(argv)
    try:  # the name stays inside --dir and the output folder; both checked before any work
        check_name(args.name)
        out = args.out if args.out is not None else (
            paths.outputs() / "gguf" if os.environ.get("LESSONLIB_OUTPUTS") is not None
            else paths.STUDENT_OUTPUTS / "gguf")
        cli.check_writable_folder(out, cli.outputs_name(args.out))
    except ValueError as err:
        parser.error(f"NAME {args.name!r}: {err}" if "checkpoint name" in str(err) else str(err))
    try:
        _gguf()
    except ImportError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    model = load(args.name, "cpu", directory=args.dir)
    for dtype in DTYPES if args.dtype == "both" else (args.dtype,):
        print(export(model, out / f"{args.name}-{dtype}.gguf", dtype, name=args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.gguf_export"))
