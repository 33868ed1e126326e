"""Calibration of the real LLM's drafters (``models.llm_calibration``) beside a tiny random Llama:
α_T = Σ_x min(p_T, q_T) against a sum over the full vocabulary written out, its T = 0 form against the
trainer's held-out α (another code path), and a draft that is the target's own distribution
renormalised over the draft vocabulary, whose α_T is p_T's mass there (a known answer)."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lessonlib.models.llama import Llama, LlamaConfig
from lessonlib.models.llm_calibration import alpha_at, calibrate, depth1_logits
from lessonlib.models.llm_draft import LlamaDraftModel
from lessonlib.models.llm_heads import LlamaEagle3Head, eagle3_reference_layers
from lessonlib.models.llm_medusa import LlamaMedusaHeads

TINY = LlamaConfig(vocab_size=304, block_size=64, n_layer=8, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64)
IDS = np.random.default_rng(0).choice(TINY.vocab_size, 64, replace=False)


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    model = Llama(TINY).eval().requires_grad_(False)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(5)
    return model


def store(target, tmp_path, n=2, L=16):
    """A feature store on disk holding ``n`` held-out windows of random tokens (float16 features)."""
    from lessonlib.models.llm_features import FeatureStore

    tokens = torch.randint(0, TINY.vocab_size, (n, L), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, h = target(tokens, return_hidden=eagle3_reference_layers(TINY.n_layer) + (TINY.n_layer - 1,))
    C = TINY.n_embd
    np.save(tmp_path / "tokens.npy", tokens.numpy().astype(np.int32))
    for name, arr, dt in (("fused.f16", h[..., :-C], np.float16), ("final.f16", h[..., -C:], np.float16),
                          ("top1.i32", logits.argmax(-1), np.int32)):
        m = np.memmap(tmp_path / name, dt, "w+", shape=tuple(arr.shape))
        m[:] = arr.numpy().astype(dt)
        m.flush()
    (tmp_path / "meta.json").write_text(json.dumps({"windows": n, "window": L, "heldout_windows": n, "n_embd": C,
                                                    "layers": list(eagle3_reference_layers(TINY.n_layer))}))
    return FeatureStore(tmp_path)


def heads(target):
    torch.manual_seed(3)
    out = {"eagle3": LlamaEagle3Head(TINY, IDS), "medusa": LlamaMedusaHeads(TINY, IDS, 2),
           "draft": LlamaDraftModel(target, IDS, {"n_embd": 16, "n_layer": 1, "n_head": 1, "n_kv_head": 1,
                                                  "n_hidden": 32})}
    with torch.no_grad():
        for h in out.values():
            for p in h.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return {k: h.eval() for k, h in out.items()}


def window_logits(fs, w, head, target):
    """(q, p): the drafter's depth-1 logits and the target's on held-out window ``w``, row s guessing token s + 2."""
    tokens = torch.from_numpy(fs.tokens[w : w + 1].astype(np.int64))
    final = torch.from_numpy(fs.final[w : w + 1].astype(np.float32))
    fused = torch.from_numpy(fs.fused[w : w + 1].astype(np.float32))
    with torch.no_grad():
        return depth1_logits(head, target, tokens, fused, final), target.lm_head(final[:, 1:])


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0, 2.5])
def test_alpha_is_the_overlap_over_the_full_vocabulary(temperature):
    g = torch.Generator().manual_seed(2)
    p_logits, q_logits = 3 * torch.randn(5, TINY.vocab_size, generator=g), 3 * torch.randn(5, 64, generator=g)
    ids = torch.as_tensor(IDS)
    got = alpha_at(p_logits, q_logits, ids, temperature)
    for row in range(5):
        if temperature == 0.0:
            want = float(ids[q_logits[row].argmax()] == p_logits[row].argmax())
        else:
            p = F.softmax(p_logits[row].double() / temperature, -1).numpy()
            q = np.zeros(TINY.vocab_size)
            q[IDS] = F.softmax(q_logits[row].double() / temperature, -1).numpy()
            want = sum(min(a, b) for a, b in zip(p, q, strict=True))
        assert abs(float(got[row]) - want) < 1e-12


def test_a_draft_equal_to_the_targets_renormalised_law_gets_its_mass_on_the_draft_vocabulary():
    g = torch.Generator().manual_seed(4)
    p_logits = 2 * torch.randn(7, TINY.vocab_size, generator=g)
    ids = torch.as_tensor(IDS)
    for t in (0.7, 1.0):
        mass = F.softmax(p_logits.double() / t, -1)[:, ids].sum(-1)
        assert torch.allclose(alpha_at(p_logits, p_logits[:, ids], ids, t), mass, atol=1e-12)
        assert bool((mass < 1).all())  # a negative control: not every draft reaches 1


def test_calibrate_averages_every_held_out_position_and_agrees_with_the_trainer_at_t0(target, tmp_path):
    """Per drafter, the mean over both windows' positions of α_T (written out here from
    ``depth1_logits``), and at T = 0 the trainer's held-out depth-1 α, computed by its own losses."""
    from lessonlib.models.train_llm_heads import heldout_alpha

    fs, drafters = store(target, tmp_path), heads(target)
    found = calibrate(drafters, target, fs)
    for name, head in drafters.items():
        rows = []
        for w in range(2):
            q, p = window_logits(fs, w, head, target)
            rows.append(torch.stack([alpha_at(p, q, head.draft_ids, t) for t in (0.0, 0.7, 1.0)]))
        want = torch.cat(rows, -1).mean((-2, -1))
        assert [found[name][k] for k in ("0", "0.7", "1")] == pytest.approx(want.tolist(), abs=1e-4)
        trainer = heldout_alpha(head, target, fs, depths=1)["alpha_by_depth"][0]
        assert found[name]["0"] == pytest.approx(trainer, abs=2e-3), name  # float16 features on both paths
    assert found["eagle3"] != found["draft"]
    with pytest.raises(ValueError, match="head must be"):
        depth1_logits(target, target, None, None, None)


def test_reply_mask_marks_the_assistants_turns_only():
    """Header ids (1, 2, 3), end 9: a reply's tokens through its end are kept; the system's and the
    user's turns, a header itself, and a window's start inside a turn of unknown role are not."""
    from lessonlib.models.llm_calibration import reply_mask

    tokens = [7, 7, 9, 1, 5, 6, 9, 1, 2, 3, 4, 4, 9, 8, 1, 2, 3, 4]
    want = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1]
    assert reply_mask(np.array(tokens), (1, 2, 3), 9).astype(int).tolist() == want
    assert not reply_mask(np.array([1, 2, 1, 2, 4, 9]), (1, 2, 3), 9).any()  # a header cut short is no header


def test_calibrate_counts_the_rows_that_predict_a_kept_token(target, tmp_path):
    """With ``keep``, the mean runs over the rows s whose predicted token s + 2 is kept (the last row,
    whose token lies past the window, never), written out here; keeping none gives no number; a
    mask of the wrong length is refused by name."""
    fs, drafters = store(target, tmp_path), heads(target)
    rng = np.random.default_rng(5)
    keep = [rng.random(fs.tokens.shape[1]) < 0.5 for _ in range(2)]
    found = calibrate(drafters, target, fs, keep=keep)
    for name, head in drafters.items():
        sums = np.zeros(3)
        n = 0
        for w in range(2):
            q, p = window_logits(fs, w, head, target)
            for s in range(p.shape[1] - 1):
                if keep[w][s + 2]:
                    sums += [float(alpha_at(p[0, s], q[0, s], head.draft_ids, t)) for t in (0.0, 0.7, 1.0)]
                    n += 1
        assert [found[name][k] for k in ("0", "0.7", "1")] == pytest.approx((sums / n).tolist(), abs=1e-4)
    assert found != calibrate(drafters, target, fs)
    assert calibrate(drafters, target, fs, keep=[np.zeros(16, bool)] * 2) == {}
    with pytest.raises(ValueError, match="one mask per held-out window"):
        calibrate(drafters, target, fs, keep=keep[:1])
    with pytest.raises(ValueError, match=r"keep\[1\] must hold one flag per token"):
        calibrate(drafters, target, fs, keep=[keep[0], keep[1][:-1]])


def test_bench_replies_keep_the_reply_and_carry_the_stores_features(target):
    """Each sequence is the prompt then the target's greedy reply (plain decoding's tokens), kept from
    the reply's first token on, with the features a ``FeatureStore`` holds for it."""
    from lessonlib.decoding.decode import generate
    from lessonlib.models import llm_prompts
    from lessonlib.models.llm_calibration import bench_replies

    prompts = [[5, 17, 42, 99, 7], [8, 1, 200]]
    free, _ = generate(target, prompts[0], 6)
    stop = next(t for i, t in enumerate(free) if i >= 2 and t not in free[:i])  # the first reply ends there

    class Tok:  # only its end-of-turn id is read
        def token_to_id(self, text):
            return stop

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(llm_prompts, "prompts", lambda tokenizer, kind, n: prompts[:n])
        got = bench_replies(target, Tok(), "edit", n=2, new_tokens=6)
    assert got.heldout == 2
    layers = eagle3_reference_layers(TINY.n_layer) + (TINY.n_layer - 1,)
    for prompt, tokens, keep, fused, final in zip(prompts, got.tokens, got.keep, got.fused, got.final, strict=True):
        reply, _ = generate(target, prompt, 6, stop=stop)
        assert tokens.tolist() == prompt + reply and keep.tolist() == [False] * len(prompt) + [True] * len(reply)
        with torch.no_grad():
            _, h = target(torch.tensor([tokens.tolist()]), return_hidden=layers)
        assert np.allclose(np.concatenate([fused, final], -1), h[0].numpy(), atol=1e-6)
    assert got.tokens[0][-1] == stop and len(got.tokens[0]) < len(prompts[0]) + 6  # stopped at the end of turn
