"""The real LLM's distilled draft model (``models.llm_draft``) beside a tiny random Llama (8 layers,
width 32, vocabulary 300, a 64-id draft vocabulary): the loss against a sum written out from the
target's own logits, the folded inference head against the training path, the KV cache and a tree
against recomputation, storage, bad input and exact decoding through ``LlamaDraftDrafter``. The
shipped model beside the real SmolLM2 is checked in ``test_llm_heads.test_shipped_heads_decode_exactly``.
"""
import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lessonlib.core import tree
from lessonlib.decoding.decode import generate
from lessonlib.decoding.llm_drafter import LlamaDraftDrafter, head_drafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import llm_store
from lessonlib.models.llama import Llama, LlamaConfig
from lessonlib.models.llm_draft import LlamaDraftModel, draft_losses

TINY = LlamaConfig(vocab_size=300, block_size=64, n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64)
IDS = np.random.default_rng(0).choice(TINY.vocab_size, 64, replace=False)
SHAPE = {"n_embd": 16, "n_layer": 2, "n_head": 2, "n_kv_head": 1, "n_hidden": 32}


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


def drafted(target, seed=0, scale=0.3):
    torch.manual_seed(seed)
    model = LlamaDraftModel(target, IDS, SHAPE)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    return model.eval()


def window(target, T=20, seed=1):
    tokens = torch.randint(0, TINY.vocab_size, (2, T), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits, final = target(tokens, return_hidden=True)
    return tokens, logits, final, logits.argmax(-1)


def test_loss_is_the_kl_to_the_next_tokens_distribution(target):
    """Position t (t >= 1) against the target's distribution of token t + 1 (its logits at t,
    renormalised over the draft vocabulary), positions whose argmax is outside it masked; alpha over
    every position t >= 1. A loss shifted by one position (a mutant) gives other numbers."""
    model = drafted(target)
    tokens, logits, final, top1 = window(target, 16)
    top1[0, 4] = int(torch.nonzero(~model.t2d)[0])  # one masked position
    with torch.no_grad():
        kls, alphas = draft_losses(model, target, tokens, final, top1)
        q_logits = model.draft_logits(model.hidden(tokens))  # (B, T, N)
    ids = model.draft_ids
    total, kept, agree, n = 0.0, 0, 0, 0
    for b in range(2):
        for t in range(1, 16):
            p = F.softmax(logits[b, t, ids].double(), -1)
            logq = F.log_softmax(q_logits[b, t].double(), -1)
            if bool(model.t2d[top1[b, t]]):
                total += float((p * (p.log() - logq)).sum())
                kept += 1
            agree += int(ids[int(logq.argmax())] == top1[b, t])
            n += 1
    assert len(kls) == len(alphas) == 1 and 5 <= kept < n
    assert abs(float(kls[0]) - total / kept) < 1e-4
    assert abs(float(alphas[0]) - agree / n) < 1e-6


def test_folded_head_equals_the_training_path_and_follows_its_weights(target):
    """Inference reads one (N, d) product folded from proj_out and the tied rows; training runs the
    two apart. Same logits; a change of proj_out in place is seen (a stale fold would draft from old
    weights); -inf outside the draft vocabulary."""
    model = drafted(target, 1)
    tokens = window(target, 10)[0][:1]
    with torch.no_grad():
        folded = model(tokens)
    model.train()
    apart = model.full_logits(model.draft_logits(model.hidden(tokens)))
    model.eval()
    keep = model.t2d
    assert torch.allclose(folded[..., keep], apart[..., keep].detach(), atol=1e-5)
    assert torch.isneginf(folded[..., ~keep]).all()
    with torch.no_grad():
        model.proj_out.weight.mul_(2.0)
        again = model(tokens)
    assert not torch.allclose(again[..., keep], folded[..., keep], atol=1e-3)


def test_cache_and_tree_equal_recomputation(target):
    """Logits fed in pieces through the KV cache = one pass; a tree's branch (mask, positions at
    prefix + depth) = the same tokens fed as a sequence; rollback keeps the prefix's logits."""
    model = drafted(target, 2)
    seq = window(target, 14)[0][:1]
    with torch.no_grad():
        full = model(seq)
        cache = model.new_cache()
        pieces = torch.cat([model(seq[:, :5], cache=cache), model(seq[:, 5:6], cache=cache),
                            model(seq[:, 6:], cache=cache)], 1)
        keep = model.t2d
        assert torch.allclose(pieces[..., keep], full[..., keep], atol=1e-5)
        cache.truncate(6)  # two sibling branches after the prefix of 6: [a, b] and [c]
        a, b, c = int(seq[0, 6]), int(seq[0, 7]), int(seq[0, 9])
        mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
        branch = model(torch.tensor([[a, b, c]]), positions=torch.tensor([6, 7, 6]), mask=mask, cache=cache)
        fresh = model(torch.cat([seq[:, :6], torch.tensor([[a, b]])], 1))
        other = model(torch.cat([seq[:, :6], torch.tensor([[c]])], 1))
    assert torch.allclose(branch[0, :2][..., keep], fresh[0, 6:8][..., keep], atol=1e-5)
    assert torch.allclose(branch[0, 2][keep], other[0, 6][keep], atol=1e-5)


def test_training_lowers_the_loss(target):
    torch.manual_seed(1)
    model = LlamaDraftModel(target, IDS, SHAPE)
    tokens, _, final, top1 = window(target, 24)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = draft_losses(model, target, tokens, final, top1)[0][0]
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.7 * losses[0]
    assert not any(p.grad is not None for p in target.parameters())  # the target stays frozen, never stored
    assert not any(k.startswith("target") or k.startswith("wte") for k in model.state_dict())


def test_bad_input_and_storage(target, tmp_path):
    with pytest.raises(ValueError, match="n_head"):
        LlamaDraftModel(target, IDS, {**SHAPE, "n_head": 3})
    with pytest.raises(ValueError, match="draft_ids"):
        LlamaDraftModel(target, [3, 3, 4], SHAPE)
    model = drafted(target, 4)
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[TINY.vocab_size]]))
    meta = {"kind": "draft", "draft_config": SHAPE, "target": target.source, "n_embd": 32}
    llm_store.save_head(model, meta, "d", tmp_path)
    back = llm_store.load_llm_head(target, "d", tmp_path)
    assert isinstance(back, LlamaDraftModel) and back.shape() == SHAPE
    assert torch.equal(back.draft_ids, model.draft_ids)
    tokens = window(target, 6)[0]
    with torch.no_grad():
        a, b = model(tokens), back(tokens)
    keep = model.t2d
    assert torch.allclose(a[..., keep], b[..., keep], rtol=5e-3, atol=5e-2)  # float16 storage
    other = Llama(TINY)
    other.source = {"name": "tiny.gguf", "gguf_sha256": "1" * 64}
    with pytest.raises(ValueError, match="gguf_sha256"):
        llm_store.load_llm_head(other, "d", tmp_path)
    small = Llama(TINY.__class__(**{**vars(TINY), "block_size": 32}))
    with pytest.raises(ValueError, match="context"):
        LlamaDraftDrafter(LlamaDraftModel(small, IDS, SHAPE), target)


@pytest.mark.parametrize("branching", [(1, 1, 1), (2, 1, 1), (3, 2)])
def test_drafter_decodes_exactly(target, branching):
    """Greedy speculative output equals plain greedy decoding (chains and trees); at T = 0.8 the
    round runs on q rows that are zero outside the draft vocabulary and sum to 1 (exactness of the
    rule itself: tests/core)."""
    model = drafted(target, 3, scale=0.5)
    prompt = [5, 17, 42, 99, 7]
    plain, _ = generate(target, prompt, 20)
    rule = functools.partial(tree.draft_topk, branching=branching)
    assert len(set(plain)) > 10  # a context-dependent target
    spec, stats = tree_generate(target, head_drafter("smollm2-draft", model, target), prompt, 20, rule=rule)
    assert spec == plain and stats.drafted > 0
    drafter = LlamaDraftDrafter(model, target)
    out, _ = tree_generate(target, drafter, prompt, 20, rule=rule, temperature=0.8, rng=np.random.default_rng(0))
    assert len(out) == 20 and all(0 <= t < TINY.vocab_size for t in out)
    q = np.exp(drafter.logq)
    assert np.allclose(q.sum(-1), 1.0) and (q[:, ~model.t2d.numpy()] == 0).all()


def test_a_commit_roots_the_round_at_the_last_committed_token(target):
    """The drafter's root row after a commit is the log-softmax of the model's logits at the last
    committed token (over the draft vocabulary), however the commit was fed: a prompt in one call,
    then the accepted tokens of a round."""
    model = drafted(target, 5)
    drafter = LlamaDraftDrafter(model, target)
    seq = [5, 17, 42, 99, 7, 3, 250]
    for upto in (4, 7):
        drafter.commit(seq[:upto])
        with torch.no_grad():
            want = F.log_softmax(model(torch.tensor([seq[:upto]]))[0, -1, model.draft_ids].double(), -1).numpy()
        assert np.allclose(drafter.logq[0][model.draft_ids.numpy()], want, atol=1e-6)
        assert np.isneginf(drafter.logq[0][~model.t2d.numpy()]).all()
