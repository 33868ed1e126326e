"""The real LLM's EAGLE-3 head (``models.llm_heads``), its storage, exporter and drafter.

Fast tests run on a tiny random Llama (8 layers, width 32, vocabulary 300; the head's draft
vocabulary is 64 ids): shapes, d2t/t2d, the cached step against the unrolled training forward
(the training-time test sees what drafting sees), the loss mask and normalisation, storage
and export round trips, the target check. One test decodes with the shipped head beside the
real SmolLM2 (readable model, float32) and checks T = 0 output = the target's greedy tokens.
"""
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lessonlib.core import kinds, tree
from lessonlib.models import llm_heads, llm_store
from lessonlib.models.eagle3_export import NAMES, export, hf_config, read_back
from lessonlib.models.llama import Llama, LlamaConfig, load_smollm2
from lessonlib.models.llm_heads import LlamaEagle3Head, draft_vocabulary, losses, unroll

ATOL = 1e-4
TINY = LlamaConfig(vocab_size=300, block_size=64, n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    target = Llama(TINY).eval()
    target.source = {"name": "tiny.gguf", "gguf_sha256": "0" * 64}
    for p in target.parameters():
        p.requires_grad_(False)
    ids = np.random.default_rng(0).choice(TINY.vocab_size, 64, replace=False)
    head = LlamaEagle3Head(TINY, ids)
    with torch.no_grad():  # outputs of a visible size: the random init's o/down are tiny
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, head.eval()


def window(target, T=20, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, TINY.vocab_size, (2, T), generator=g)
    with torch.no_grad():
        logits, h = target(tokens, return_hidden=llm_heads.eagle3_reference_layers(TINY.n_layer) + (TINY.n_layer - 1,))
    C = TINY.n_embd
    return tokens, h[..., :-C], h[..., -C:], logits.argmax(-1)


def test_draft_vocabulary_maps(tiny):
    _, head = tiny
    ids = head.draft_ids
    assert torch.equal(ids, torch.sort(ids).values) and len(torch.unique(ids)) == 64
    assert torch.equal(torch.arange(64) + head.d2t, ids)  # the reference's offset form
    assert int(head.t2d.sum()) == 64 and bool(head.t2d[ids].all())
    counts = np.array([5, 1, 7, 7, 0, 3])
    picked = draft_vocabulary(np.repeat(np.arange(6), counts), 3, 6)
    assert picked.tolist() == [0, 2, 3]  # 7, 7, then 5; not the 3 of id 5 nor 1 of id 1
    with pytest.raises(ValueError, match="draft_ids"):
        LlamaEagle3Head(TINY, [1, 1, 2])


def test_step_logits_zero_outside_draft_vocab(tiny):
    target, head = tiny
    tokens, fused, _, _ = window(target, 8)
    with torch.no_grad():
        g, logits = head.step(target, tokens[0].numpy(), fused[0], head.new_cache())
    assert g.shape == (8, TINY.n_embd) and logits.shape == (8, TINY.vocab_size)
    q = F.softmax(logits.double(), -1)
    assert torch.allclose(q.sum(-1), torch.ones(8, dtype=torch.float64))
    assert bool((q[:, ~head.t2d] == 0).all()) and bool((q[:, head.t2d] > 0).all())


def test_cached_chain_equals_unrolled_training(tiny):
    """Unroll step j at pair s = a draft node at depth j under committed pair s - j, fed with the
    head's own g through the cache at position s - j + j: the training-time test computes what
    drafting computes (positions, masks and feature hand-off)."""
    target, head = tiny
    tokens, fused, _, _ = window(target, 16)
    with torch.no_grad():
        steps = unroll(head, target, tokens[:1], fused[:1], 3)  # [(1, 15, N)]
        s = 9
        for j in range(3):
            cache = head.new_cache()
            base = s - j  # committed pairs 0..base
            g, _ = head.step(target, tokens[0, 1 : base + 2].numpy(), fused[0, : base + 1], cache)
            feat = g[-1:]
            for d in range(1, j + 1):  # the chain of drafted nodes; node d pairs x_{base+1+d} with g
                mask = np.ones((1, d), dtype=bool)  # sees its d - 1 ancestors and itself
                g, _ = head.step(target, tokens[0, base + 1 + d : base + 2 + d].numpy(), feat, cache, mask)
                feat = g
            assert torch.allclose(head.draft_logits(target, feat[0]), steps[j][0, s], atol=ATOL), j
        # negative control: the same node at another position (RoPE relative to the cache) differs
        for pos, same in ((s, True), (s + 2, False)):
            cache = head.new_cache()
            g, _ = head.step(target, tokens[0, 1 : s + 1].numpy(), fused[0, :s], cache)  # pairs 0..s-1
            node = head(target, tokens[:1, s + 1 : s + 2], g[-1:][None], torch.tensor([pos]),
                        torch.ones(1, 1, dtype=torch.bool), cache)[0]
            assert torch.allclose(head.draft_logits(target, node[0]), steps[1][0, s], atol=ATOL) == same


def test_loss_masks_positions_outside_draft_vocab(tiny):
    target, head = tiny
    tokens, fused, final, top1 = window(target, 20)
    top1 = top1.clone()
    top1[0, 5] = int(torch.nonzero(~head.t2d)[0])  # the target's argmax at 5 lies outside: pair 4 masked
    top1[0, 6] = int(head.draft_ids[0])  # ... and inside at 6: pair 5 kept
    with torch.no_grad():
        kl, _ = losses(head, target, tokens, fused, final, top1, 2)
        p, keep = llm_heads.teacher(head, target, final, top1)
        assert torch.allclose(p.sum(-1), torch.ones_like(p[..., 0]))  # renormalised over the draft vocabulary
        assert not bool(keep[0, 4]) and bool(keep[0, 5])
        masked, kept = final.clone(), final.clone()
        masked[0, 5] += 3 * torch.randn(TINY.n_embd)  # changes the teacher at pair 4 only
        kept[0, 6] += 3 * torch.randn(TINY.n_embd)  # changes the teacher at pair 5
        kl_masked, _ = losses(head, target, tokens, fused, masked, top1, 2)
        kl_kept, _ = losses(head, target, tokens, fused, kept, top1, 2)
    assert torch.allclose(kl_masked[0], kl[0]) and torch.allclose(kl_masked[1], kl[1])
    assert not torch.allclose(kl_kept[0], kl[0])  # negative control


def test_training_lowers_the_loss(tiny):
    target, _ = tiny
    torch.manual_seed(1)
    head = LlamaEagle3Head(TINY, np.arange(0, 300, 3))
    tokens, fused, final, top1 = window(target, 24)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        kl, _ = losses(head, target, tokens, fused, final, top1, 3)
        loss = llm_heads.weighted(kl)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.7 * first


def test_store_round_trip_and_target_check(tiny, tmp_path):
    target, head = tiny
    big = LlamaEagle3Head(LlamaConfig(vocab_size=5000, n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64),
                          [3, 2049, 4097, 4999])  # ids float16 cannot hold exactly
    big_target = Llama(big.config.__class__(**{**vars(TINY), "vocab_size": 5000}))
    big_target.source = target.source
    llm_store.save_head(big, {"kind": "eagle3", "target": target.source, "n_embd": 32}, "h", tmp_path)
    back = llm_store.load_llm_head(big_target, "h", tmp_path)
    assert back.draft_ids.tolist() == [3, 2049, 4097, 4999]
    llm_store.save_head(head, {"kind": "eagle3", "target": target.source, "n_embd": 32}, "h", tmp_path)
    back = llm_store.load_llm_head(target, "h", tmp_path)
    for k, v in head.state_dict().items():
        assert torch.allclose(back.state_dict()[k].float(), v.float(), atol=1e-3), k
    other = Llama(TINY)
    other.source = {"name": "tiny.gguf", "gguf_sha256": "1" * 64}
    with pytest.raises(ValueError, match="gguf_sha256"):
        llm_store.load_llm_head(other, "h", tmp_path)
    with pytest.raises(FileNotFoundError, match="train_llm_heads"):
        llm_store.load_llm_head(target, "missing", tmp_path)


def test_export_round_trip(tiny, tmp_path):
    target, head = tiny
    export(head, target, tmp_path)
    from safetensors.torch import load_file
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert set(tensors) == set(NAMES.values()) | {"lm_head.weight"}
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (TINY.n_embd, 2 * TINY.n_embd)
    assert tensors["fc.weight"].shape == (TINY.n_embd, 3 * TINY.n_embd)
    assert tensors["lm_head.weight"].shape == (64, TINY.n_embd) and tensors["d2t"].dtype == torch.int64
    config = hf_config(head, target)
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 64
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # inputs of layers 2, N//2, N-3 (N = 8)
    back = read_back(tmp_path, target)
    tokens, fused, _, _ = window(target, 8)
    with torch.no_grad():
        a = head.step(target, tokens[0].numpy(), fused[0], head.new_cache())[1]
        b = back.step(target, tokens[0].numpy(), fused[0], back.new_cache())[1]
    assert torch.allclose(a, b, atol=5e-2, equal_nan=True)  # float16 storage
    tensors["lm_head.weight"][0] += 1  # rows that are not the target's draft rows: refused
    from safetensors.torch import save_file
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="lm_head"):
        read_back(tmp_path, target)


@pytest.fixture(scope="module")
def smollm2():
    return load_smollm2(torch.float32, block_size=256)


@pytest.mark.parametrize("kind", [k.name for k in kinds.LLM_KINDS])
def test_shipped_heads_decode_exactly(smollm2, kind):
    """Each shipped head of the real target (EAGLE-3, Medusa) beside it: greedy T = 0 output =
    plain greedy decoding (a chain and a tree), q rows zero outside the draft vocabulary and
    summing to 1."""
    from lessonlib.decoding.decode import generate
    from lessonlib.decoding.llm_drafter import head_drafter, load_head
    from lessonlib.decoding.tree_decode import tree_generate
    from lessonlib.models.llama_tokenizer import encode_chat, load_tokenizer

    if not llm_store.paths(kinds.kind(kind).checkpoint)[0].exists():
        pytest.skip(f"{kind} is not built yet: python -m lessonlib.models.train_llm_heads")
    tok = load_tokenizer()
    prompts = [encode_chat(tok, [{"role": "user", "content": "Write a Python function that reverses a list."}]),
               encode_chat(tok, [{"role": "user", "content": "What is the capital of France?"}])]
    head = load_head(smollm2, kind)
    for p in prompts:
        plain, _ = generate(smollm2, p, 12)
        for rule in (functools.partial(tree.draft_topk, branching=(1, 1, 1)),
                     functools.partial(tree.draft_topk, branching=(2, 2, 1))):
            drafter = head_drafter(kind, head, smollm2)
            spec, _ = tree_generate(smollm2, drafter, p, 12, rule=rule)
            assert spec == plain
    q = np.exp(drafter.logq if hasattr(drafter, "logq") else drafter.rows)  # the last round's rows
    assert np.allclose(q.sum(-1), 1.0)
    assert (q[:, ~head.t2d.numpy()] == 0).all()


def test_windows_keep_the_mix_and_are_seeded():
    from lessonlib.models.llm_features import MIX, WINDOW, cut_windows
    arrays = {s: np.arange(i * 10**6, i * 10**6 + 40 * WINDOW, dtype=np.int32) for i, s in enumerate(MIX)}
    w, names = cut_windows(arrays, 20, seed=3)
    assert w.shape == (20, WINDOW) and {s: names.count(s) for s in MIX} == {"code": 9, "prose": 6, "chat": 5}
    for row, s in zip(w, names):  # each window is one contiguous slice of its own stream
        assert row[0] // 10**6 == list(MIX).index(s) and (np.diff(row) == 1).all()
    assert len({int(r[0]) for r in w}) == 20  # distinct
    again, _ = cut_windows(arrays, 20, seed=3)
    other, _ = cut_windows(arrays, 20, seed=4)
    assert np.array_equal(w, again) and not np.array_equal(w, other)
    with pytest.raises(ValueError, match="stream"):
        cut_windows({s: a[: 3 * WINDOW] for s, a in arrays.items()}, 20, seed=3)


def test_lr_schedule_warms_up_then_anneals():
    from lessonlib.models.train_llm_heads import WARMUP, lr_scale
    assert lr_scale(0, 0.0) == pytest.approx(1 / WARMUP) and lr_scale(WARMUP - 1, 0.0) == 1.0
    assert lr_scale(10**6, 0.5) == pytest.approx(0.55) and lr_scale(10**6, 1.0) == pytest.approx(0.1)
    assert lr_scale(10**6, 2.0) == pytest.approx(0.1)  # past the deadline: the floor


def test_heldout_alpha_on_a_feature_store(tiny, tmp_path):
    """The trainer's alpha reads the store's held-out windows (float16 memmaps) and gives by depth
    the share of positions where the head's argmax, mapped through d2t, is the target's argmax."""
    import json

    from lessonlib.models.llm_features import FeatureStore
    from lessonlib.models.train_llm_heads import heldout_alpha
    target, head = tiny
    tokens, fused, final, top1 = window(target, 16)
    n, L, C = 2, 16, TINY.n_embd
    np.save(tmp_path / "tokens.npy", tokens.numpy().astype(np.int32))
    arrays = (("fused.f16", fused, np.float16), ("final.f16", final, np.float16), ("top1.i32", top1, np.int32))
    for name, arr, dt in arrays:
        m = np.memmap(tmp_path / name, dt, "w+", shape=tuple(arr.shape))
        m[:] = arr.numpy().astype(dt)
        m.flush()
    (tmp_path / "meta.json").write_text(json.dumps({"windows": n, "window": L, "heldout_windows": 2, "n_embd": C,
                                                    "layers": [1, 3, 4]}))
    store = FeatureStore(tmp_path)
    result = heldout_alpha(head, target, store, depths=2)
    with torch.no_grad():
        steps = unroll(head, target, tokens, fused, 2)
    want = [float((head.draft_ids[s[:, j:].argmax(-1)] == top1[:, 1 + j :]).float().mean())
            for j, s in enumerate(steps)]
    assert result["alpha_by_depth"] == pytest.approx(want, abs=2e-3)  # float16 storage of the features
    assert result["draft_vocab_coverage"] == pytest.approx(float(head.t2d[top1[:, 1:]].float().mean()), abs=1e-4)
    assert result["positions"] == 2 * (L - 1)


def test_eagle_top_feature_head_chain_equals_unroll(tiny):
    """EAGLE (top feature, full LM head): the cached draft chain computes what its training unroll
    computes (a node at depth d of pair s - d), its rows cover the whole vocabulary, and training
    lowers its loss."""
    from lessonlib.models.llm_eagle import LlamaEagleHead, eagle_losses
    from lessonlib.models.llm_eagle import unroll as eagle_unroll
    target, _ = tiny
    torch.manual_seed(2)
    head = LlamaEagleHead(TINY)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    tokens, _, final, top1 = window(target, 16)
    s = 9
    with torch.no_grad():
        steps = eagle_unroll(head, target, tokens[:1], final[:1], 3)
        for j in range(3):
            cache = head.new_cache()
            g, logits = head.step(target, tokens[0, 1 : s - j + 2].numpy(), final[0, : s - j + 1], cache)
            assert logits.shape == (s - j + 1, TINY.vocab_size) and bool(torch.isfinite(logits).all())
            for d in range(1, j + 1):
                g, _ = head.step(target, tokens[0, s - j + 1 + d : s - j + 2 + d].numpy(), g[-1:], cache,
                                 np.ones((1, d), dtype=bool))
            assert torch.allclose(g[-1], steps[j][0, s], atol=ATOL), j
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for _ in range(20):
        kls, _ = eagle_losses(head, target, tokens, final, top1, 2)
        loss = sum(kls)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.8 * first
