"""The real LLM's Medusa heads (``models.llm_medusa``) on a tiny random Llama (8 layers, width 32,
vocabulary 300, a 64-id draft vocabulary): the zero start, the per-head loss against a sum
written out from the target's own logits (which token each head predicts), storage, bad input,
and exact decoding through ``MedusaDrafter``. The shipped heads beside the real SmolLM2 are
checked in ``test_llm_heads.test_shipped_heads_decode_exactly``.
"""
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lessonlib.core import tree
from lessonlib.decoding.decode import generate
from lessonlib.decoding.drafters import MedusaDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import llm_store
from lessonlib.models.llama import Llama, LlamaConfig
from lessonlib.models.llm_medusa import LlamaMedusaHeads, medusa_losses

TINY = LlamaConfig(vocab_size=300, block_size=64, n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64)
IDS = np.random.default_rng(0).choice(TINY.vocab_size, 64, replace=False)


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    model = Llama(TINY).eval()
    with torch.no_grad():  # weights 5x the init: greedy output then depends on the context (at 1x it repeats a token)
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(5)
    model.source = {"name": "tiny.gguf", "gguf_sha256": "0" * 64}
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def trained(seed=0, scale=0.3):
    torch.manual_seed(seed)
    heads = LlamaMedusaHeads(TINY, IDS, 3)
    with torch.no_grad():
        for p in heads.parameters():
            p.add_(scale * torch.randn_like(p))
    return heads.eval()


def window(target, T=20, seed=1):
    tokens = torch.randint(0, TINY.vocab_size, (2, T), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits, final = target(tokens, return_hidden=True)
    return tokens, logits, final, logits.argmax(-1)


def test_zero_heads_start_as_the_targets_own_head(target):
    heads = LlamaMedusaHeads(TINY, IDS, 3)
    _, logits, final, _ = window(target)
    full = heads(target, final)  # (K, B, T, V)
    ids = torch.as_tensor(np.sort(IDS))
    for k in range(3):
        assert torch.allclose(full[k][..., ids], logits[..., ids], atol=1e-5)
    outside = torch.ones(TINY.vocab_size, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(full[..., outside]).all()


def test_each_head_is_judged_against_the_token_it_predicts(target):
    """Head k at s against the target's distribution of token s + 2 + k (its logits at s + 1 + k,
    renormalised over the draft vocabulary), positions whose argmax is outside masked: the sum
    written out. A head shifted by one position (a mutant) gives other numbers."""
    heads = trained()
    tokens, logits, final, top1 = window(target, 16)
    top1[0, 4] = int(torch.nonzero(~heads.t2d)[0])  # one masked position
    with torch.no_grad():
        kls, alphas = medusa_losses(heads, target, final, top1)
        q_logits = heads.draft_logits(target, final)  # (K, B, T, N)
    ids = heads.draft_ids
    B, T = tokens.shape
    for k in range(3):
        total, kept, agree, n = 0.0, 0, 0, 0
        for b in range(B):
            for s in range(T - 1 - k):
                p = F.softmax(logits[b, s + 1 + k, ids].double(), -1)
                logq = F.log_softmax(q_logits[k, b, s].double(), -1)
                if bool(heads.t2d[top1[b, s + 1 + k]]):
                    total += float((p * (p.log() - logq)).sum())
                    kept += 1
                agree += int(ids[int(logq.argmax())] == top1[b, s + 1 + k])
                n += 1
        assert abs(float(kls[k]) - total / kept) < 1e-4, k
        assert abs(float(alphas[k]) - agree / n) < 1e-6, k


def test_training_lowers_the_loss(target):
    torch.manual_seed(1)
    heads = LlamaMedusaHeads(TINY, IDS, 2)
    _, _, final, top1 = window(target, 24)
    opt = torch.optim.AdamW(heads.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        kls, _ = medusa_losses(heads, target, final, top1)
        loss = kls[0] + 0.8 * kls[1]
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.7 * losses[0]


def test_bad_input_and_storage(target, tmp_path):
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="n_heads"):
            LlamaMedusaHeads(TINY, IDS, bad)
    with pytest.raises(ValueError, match="draft_ids"):
        LlamaMedusaHeads(TINY, [3, 3, 4])
    heads = trained(2)
    llm_store.save_head(heads, {"kind": "medusa", "n_heads": 3, "target": target.source, "n_embd": 32}, "m", tmp_path)
    back = llm_store.load_llm_head(target, "m", tmp_path)
    assert isinstance(back, LlamaMedusaHeads) and back.n_heads == 3
    assert torch.equal(back.draft_ids, heads.draft_ids)
    _, _, final, _ = window(target, 6)
    with torch.no_grad():
        a, b = heads.draft_logits(target, final), back.draft_logits(target, final)
    assert torch.allclose(a, b, atol=5e-2)  # float16 storage


@pytest.mark.parametrize("branching", [(1, 1), (2, 1, 1), (3, 2)])
def test_drafter_decodes_exactly(target, branching):
    """Greedy speculative output equals plain greedy decoding; at T = 0.8 the round runs on rows
    that are -inf outside the draft vocabulary (exactness of the rule itself: tests/core)."""
    heads = trained(3, scale=0.5)
    prompt = [5, 17, 42, 99, 7]
    plain, _ = generate(target, prompt, 20)
    rule = functools.partial(tree.draft_topk, branching=branching)
    assert len(set(plain)) > 10  # a context-dependent target
    spec, _ = tree_generate(target, MedusaDrafter(heads, target), prompt, 20, rule=rule)
    assert spec == plain
    out, _ = tree_generate(target, MedusaDrafter(heads, target), prompt, 20, rule=rule, temperature=0.8,
                           rng=np.random.default_rng(0))
    assert len(out) == 20 and all(0 <= t < TINY.vocab_size for t in out)


def test_the_tied_rows_follow_the_embedding(target):
    """The cached (N, C) rows and their (C, N) copy are the embedding's draft rows, and both are
    gathered again when the embedding changes in place (a stale cache would draft from old weights)."""
    heads = LlamaMedusaHeads(TINY, IDS, 2)
    ids = heads.draft_ids
    assert torch.equal(heads.draft_head(target), target.wte.weight[ids])
    assert torch.equal(heads.draft_head(target, transposed=True), target.wte.weight[ids].T)
    assert heads.draft_head(target, transposed=True).is_contiguous()
    old = target.wte.weight.clone()
    try:
        with torch.no_grad():
            target.wte.weight.mul_(2.0)
        assert torch.equal(heads.draft_head(target, transposed=True), target.wte.weight[ids].T)
        assert torch.equal(heads.draft_head(target), target.wte.weight[ids])
    finally:
        with torch.no_grad():
            target.wte.weight.copy_(old)


def test_the_real_llms_loaders_refuse_a_kind_of_the_tiny_target(target):
    from lessonlib.decoding.llm_drafter import head_drafter, load_head

    with pytest.raises(ValueError, match="kind must be a kind of the real LLM"):
        load_head(target, "medusa")  # the tiny target's Medusa, not SmolLM2's
    with pytest.raises(ValueError, match="kind must be one of"):
        head_drafter("medusa-llm", trained(), target)
    assert isinstance(head_drafter("smollm2-medusa", trained(), target), MedusaDrafter)
