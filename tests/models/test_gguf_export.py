"""The GGUF export (``models.gguf_export``): every weight lands under llama.cpp's gpt2 name with
its value (f32 exactly; f16 exactly too, the shipped weights being float16), the metadata fills
the converter's two gaps (context length, pre-tokenizer), bad input is refused; and, with
llama-cpp-python installed, llama.cpp's logits on the exported target match lessonlib's and its
greedy tokens are the same, while an export with one block's q and k swapped is caught.
Skipped without gguf / llama-cpp-python (requirements-peers.txt; CI does not install them)."""
import json

import numpy as np
import pytest
import torch
from loop_support import context_gpt

from lessonlib import engines, models
from lessonlib.decoding import decode
from lessonlib.models import data

gguf = pytest.importorskip("gguf", reason="the GGUF export's optional install (requirements-peers.txt)")
from lessonlib.models import gguf_export  # noqa: E402  (after the skip: it names gguf in its errors)

# llama.cpp against lessonlib, the shipped target over 120 held-out tokens (logits up to about
# 14): measured with llama-cpp-python 0.3.36, max |diff| 5.8e-3 for the float32 GGUF (ggml's own
# kernels and summation order) and 8.8e-3 for float16 (weights exact, activations rounded
# inside the products); the tolerances leave room for other CPUs' kernels
ATOL = {"f32": 2e-2, "f16": 5e-2}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(name, dtype): path} of the target and draft-kl exported both ways."""
    folder = tmp_path_factory.mktemp("gguf")
    out = {}
    for name in ("target", "draft-kl"):
        model = models.load(name, "cpu")
        for dtype in gguf_export.DTYPES:
            out[name, dtype] = gguf_export.export(model, folder / f"{name}-{dtype}.gguf", dtype, name)
    return out


def _fields(reader):
    def value(field):
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            return len(field.data)
        part = field.parts[field.data[0]]
        return bytes(part).decode() if field.types[0] == gguf.GGUFValueType.STRING else part[0].item()
    return {k: value(f) for k, f in reader.fields.items()}


@pytest.mark.parametrize("dtype", gguf_export.DTYPES)
def test_every_weight_and_the_metadata_round_trip(exported, dtype):
    model = models.load("draft-kl", "cpu")
    reader = gguf.GGUFReader(exported["draft-kl", dtype])
    meta = _fields(reader)
    assert meta["general.architecture"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert meta["gpt2.context_length"] == model.config.block_size == 256  # the converter's missing n_ctx
    assert (meta["gpt2.block_count"], meta["gpt2.embedding_length"], meta["gpt2.attention.head_count"]) == (
        model.config.n_layer, model.config.n_embd, model.config.n_head)
    spec = json.loads(gguf_export.TOKENIZER.read_text())
    assert meta["tokenizer.ggml.tokens"] == 2048 and meta["tokenizer.ggml.merges"] == len(spec["model"]["merges"])
    got = {t.name: np.asarray(t.data) for t in reader.tensors}
    state = model.state_dict()
    want = {"token_embd.weight": state["wte.weight"], "output.weight": state["wte.weight"],
            "position_embd.weight": state["wpe.weight"], "blk.0.attn_qkv.weight": state["blocks.0.qkv.weight"],
            "blk.0.ffn_down.weight": state["blocks.0.fc_out.weight"],
            "blk.0.ffn_norm.bias": state["blocks.0.ln_2.bias"]}
    assert len(got) == 4 + 1 + 12 * model.config.n_layer
    for name, w in want.items():
        assert got[name].dtype == (np.float16 if dtype == "f16" and w.ndim == 2 else np.float32), name
        np.testing.assert_array_equal(got[name].astype(np.float32), w.numpy(), err_msg=name)  # (out, in), exact
    assert not np.array_equal(got["blk.0.attn_qkv.weight"][:160], got["blk.0.attn_qkv.weight"][160:320])


def test_bad_input_is_refused_by_name(tmp_path):
    model = models.load("draft-kl", "cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        gguf_export.export(model, tmp_path / "x.gguf", "q4")
    with pytest.raises(ValueError, match="vocab_size"):
        gguf_export.export(context_gpt(0), tmp_path / "x.gguf")  # 16 tokens, the tokenizer has 2048
    with pytest.raises(ValueError, match="model must be a models.GPT"):
        gguf_export.export(torch.nn.Linear(2, 2), tmp_path / "x.gguf")
    spec = json.loads(gguf_export.TOKENIZER.read_text())
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    with pytest.raises(ValueError, match="ByteLevel"):
        gguf_export.check_tokenizer(spec)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_command_line_exports_a_checkpoint_and_refuses_a_bad_flag(tmp_path, capsys):
    assert gguf_export.main(["draft-kl", "--dtype", "f16", "--out", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["draft-kl-f16.gguf"]
    with pytest.raises(SystemExit) as exit_:
        gguf_export.main(["draft-kl", "--dtype", "q4"])
    assert exit_.value.code == 2 and "--dtype" in capsys.readouterr().err


@torch.inference_mode()
@pytest.mark.parametrize("dtype", gguf_export.DTYPES)
def test_llama_cpp_on_the_export_gives_lessonlibs_logits_and_greedy_tokens(exported, dtype, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python, an optional peer (requirements-peers.txt)")
    from lessonlib.bench import peer_llama

    target = models.load("target", "cpu")
    tokens = data.heldout_prompts("code", 5, 120)[0]
    want = target(torch.tensor([tokens]))[0].double().numpy()  # (120, V)
    llm = peer_llama.engine(exported["target", dtype], 1, 256, logits_all=True)
    diff = np.abs(peer_llama.logits(llm, tokens) - want).max()
    assert diff < ATOL[dtype], diff
    prompt = data.heldout_prompts("code", 5, 64)[1]
    ours = decode.generate(engines.load("target", "cpu"), prompt, 32)[0]
    assert peer_llama.run(peer_llama.engine(exported["target", dtype], 1, 256), prompt, 32)[0] == ours
    # negative control: q and k of block 3 swapped in the export -- the logits must move far past ATOL
    broken = models.load("target", "cpu")
    w = broken.blocks[3].qkv.weight
    w.copy_(torch.cat([w[160:320], w[:160], w[320:]]))
    path = gguf_export.export(broken, tmp_path / "broken.gguf", dtype)
    off = np.abs(peer_llama.logits(peer_llama.engine(path, 1, 256, logits_all=True), tokens) - want).max()
    assert off > 10 * ATOL[dtype], off
