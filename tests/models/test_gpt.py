"""The tiny GPT: KV cache against full recomputation, CPU packing and checkpoints (the training
loop is in test_train.py)."""
import copy
import json

import numpy as np
import pytest
import torch

from lessonlib import engines, models
from lessonlib.engines import packing
from lessonlib.models import GPT, GPTConfig

ATOL = 1e-4  # float32 logits of order 1; cached and full forwards differ only by summation order


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=97, block_size=64, n_layer=2, n_head=4, n_embd=32)).eval()


def full_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens]))[0]


def test_cache_prefill_append_truncate_matches_full_recomputation(model):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 97, size=30).tolist()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.tensor([tokens[:10]]), cache=cache)            # prefill
        for t in tokens[10:14]:                                       # append one at a time
            model(torch.tensor([[t]]), cache=cache)
        model(torch.tensor([tokens[14:20]]), cache=cache)            # append several (verification)
        cache.truncate(16)                                            # reject the last four
        replay = tokens[16:25]
        got = model(torch.tensor([replay]), cache=cache)[0]          # re-append different history
    want = full_logits(model, tokens[:25])[16:25]
    assert cache.length == 25
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@pytest.mark.skipif(not packing.can_pack(GPT(GPTConfig(vocab_size=8, block_size=4, n_layer=1, n_head=1, n_embd=4))),
                    reason="packing needs a CPU with oneDNN")
def test_packed_weights_give_the_same_logits(model):
    packed = packing.pack_for_cpu(copy.deepcopy(model))
    assert packed.packed and not model.packed and packed.num_params() == model.num_params()
    tokens = np.random.default_rng(1).integers(0, 97, size=20).tolist()
    torch.testing.assert_close(full_logits(packed, tokens), full_logits(model, tokens), atol=ATOL, rtol=0)
    # cached steps of one token and of a verify-sized block, as the decoding loops feed them
    cache = packed.new_cache()
    with torch.no_grad():
        packed(torch.tensor([tokens[:10]]), cache=cache)
        one = packed(torch.tensor([tokens[10:11]]), cache=cache)[0]
        block = packed(torch.tensor([tokens[11:17]]), cache=cache)[0]
    want = full_logits(model, tokens[:17])
    torch.testing.assert_close(one, want[10:11], atol=ATOL, rtol=0)
    torch.testing.assert_close(block, want[11:17], atol=ATOL, rtol=0)
    assert not any(p.requires_grad for p in packed.parameters())  # inference only
    with pytest.raises(ValueError, match="packing needs a float32"):
        packing.pack_linears(copy.deepcopy(model).double())
    # a model packing cannot serve (float64 here) keeps its plain nn.Linear layers
    plain = packing.pack_for_cpu(copy.deepcopy(model).double())
    assert not plain.packed and not any(isinstance(m, packing.PackedLinear) for m in plain.modules())


def test_packing_falls_back_to_plain_linear_without_onednn(model, monkeypatch):
    """Where the private oneDNN ops are missing, pack_for_cpu and engines.load keep the
    plain nn.Linear layers and give the same logits."""
    monkeypatch.setattr(packing, "onednn_available", lambda: False)
    assert not packing.can_pack(model)
    fallback = packing.pack_for_cpu(copy.deepcopy(model))
    assert not fallback.packed and not any(isinstance(m, packing.PackedLinear) for m in fallback.modules())
    tokens = np.random.default_rng(2).integers(0, 97, size=12).tolist()
    torch.testing.assert_close(full_logits(fallback, tokens), full_logits(model, tokens), atol=0, rtol=0)
    assert not engines.load("draft-kl", "cpu", engine="packed").packed


def test_cache_changes_with_the_prefix(model):
    """Negative control: a cache holding another prefix must give other logits."""
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4]]), cache=cache)
        cache.truncate(2)
        model(torch.tensor([[9, 9]]), cache=cache)
        got = model(torch.tensor([[5]]), cache=cache)[0, -1]
    assert not torch.allclose(got, full_logits(model, [1, 2, 3, 4, 5])[-1], atol=1e-3)


def test_keep_compacts_cache_like_a_fresh_prefill(model):
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.tensor([[5, 6, 7]]), cache=cache)
        model(torch.tensor([[11, 12, 13, 14]]), cache=cache)   # four candidates, as a chain
        cache.keep(3, [0, 1])                                   # keep the first two
        got = model(torch.tensor([[20]]), cache=cache)[0, -1]
    torch.testing.assert_close(got, full_logits(model, [5, 6, 7, 11, 12, 20])[-1], atol=ATOL, rtol=0)


def test_logits_protocol_rows_are_next_token_logits(model):
    tokens = [3, 1, 4, 1, 5]
    rows = model.logits(tokens)
    assert rows.shape == (5, 97) and rows.dtype == np.float64
    np.testing.assert_allclose(rows[2], model.logits(tokens[:3])[-1], atol=ATOL)


def test_hidden_states_feed_the_lm_head(model):
    with torch.no_grad():
        logits, hidden = model(torch.tensor([[1, 2, 3]]), return_hidden=True)
        torch.testing.assert_close(model.lm_head(hidden), logits)


def test_forward_rejects_overflow(model):
    cache = model.new_cache()
    with pytest.raises(ValueError, match="cache"):
        model(torch.zeros(1, 65, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="length"):
        cache.truncate(3)


def test_checkpoint_round_trip(model, tmp_path):
    """What loads is exactly the float16-rounded model, and that rounding is harmless."""
    models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    loaded = models.load("tiny", "cpu", tmp_path)
    rounded = GPT(model.config).eval()
    rounded.load_state_dict(models.round_trip(model.state_dict()))
    np.testing.assert_array_equal(loaded.logits([1, 2, 3]), rounded.logits([1, 2, 3]))
    np.testing.assert_allclose(loaded.logits([1, 2, 3]), model.logits([1, 2, 3]), atol=1e-3)


def test_missing_checkpoint_says_how_to_rebuild(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m lessonlib.models.train target"):
        models.load("target", "cpu", tmp_path)


def test_corrupt_checkpoint_raises_clear_error(model, tmp_path):
    models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    (tmp_path / "tiny.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt"):
        models.load("tiny", "cpu", tmp_path)


def test_the_shipped_set_fits_its_budget_and_every_checkpoint_is_finished():
    """The shipped checkpoints: ≤ 40 MB in all, each JSON names its own weights, no run left
    unfinished, and every head and MTP module reads the shipped target."""
    assets = models.CHECKPOINTS
    assert sum(p.stat().st_size for p in assets.iterdir()) <= 40e6
    metas = {p.stem: json.loads(p.read_text()) for p in assets.glob("*.json") if p.name != "tokenizer.json"}
    assert {"target", "target-mtp", "draft-base", "draft-ce", "draft-kl", "eagle", "eagle3", "medusa"} <= set(metas)
    for name, meta in metas.items():
        assert meta["name"] == name and (assets / f"{name}.safetensors").exists(), name
        assert "unfinished" not in meta, name
        if meta.get("kind") in ("eagle", "eagle3", "medusa", "mtp") and not name.startswith("smollm2-"):
            assert meta["target"] == "target", name
        elif name.startswith("smollm2-"):  # a head of the real LLM names the GGUF file it was trained beside
            assert meta["target"]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf", name
    assert metas["draft-kl"]["teacher"] == "target"
