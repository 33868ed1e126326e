"""Self-distillation data for the real LLM's heads (``models.llm_selfdistill``, the replies of
``decoding.llm_replies``) and the trainer's
mix of it (``train_llm_heads``): the requests are fixed and never a benchmark prompt, a reply
stops at the end token or the cap, a cut JSON line is dropped on resume, and the feature store
holds the last chats' windows out, first."""
import json

import numpy as np
import pytest
import torch

from lessonlib.models import llm_features, llm_prompts, llm_selfdistill
from lessonlib.models.llama import Llama, LlamaConfig

TINY = LlamaConfig(vocab_size=300, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, n_hidden=64)


def test_requests_are_fixed_and_never_a_benchmark_prompt():
    asks = llm_selfdistill.requests()
    assert asks == llm_selfdistill.requests() and len(set(asks)) == len(asks) > 500
    benchmark = [m[0]["content"] for kind in llm_prompts.KINDS
                 for m in llm_prompts.messages(kind, 8 if kind == "chat" else 20)]
    held_out_sources = [source for _, source in llm_prompts._functions()]
    assert not set(asks) & set(benchmark)
    assert not any(source in ask for ask in asks for source in held_out_sources)
    assert any("```python" in a for a in asks) and any("```" not in a for a in asks)  # both kinds, interleaved


def test_a_reply_stops_at_the_end_token_or_the_cap():
    torch.manual_seed(0)
    model = Llama(TINY).eval()
    prompt = [5, 17, 99, 3]
    free = llm_selfdistill.reply(model, prompt, eos=-1, max_new=12)
    assert len(free) == 12
    with torch.inference_mode():  # the same tokens as the uncached model's greedy continuation
        seq = list(prompt)
        for _ in range(12):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    assert free == seq[len(prompt):]
    stop = free[4]
    first = free.index(stop)
    assert llm_selfdistill.reply(model, prompt, eos=stop, max_new=12) == free[: first + 1]
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="max_new"):
            llm_selfdistill.reply(model, prompt, eos=stop, max_new=bad)


def test_a_cut_line_is_dropped_and_the_store_holds_the_last_chats_out(tmp_path, monkeypatch):
    monkeypatch.setattr(llm_selfdistill, "folder", lambda root=None: tmp_path)
    W = llm_features.WINDOW
    rows = [{"i": i, "prompt": [i % 300] * 40, "reply": [(i + 1) % 300] * 60} for i in range(80)]
    (tmp_path / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"i": 80, "pro')
    assert llm_selfdistill.done_lines(tmp_path / "replies.jsonl") == rows
    path = llm_selfdistill.prepare_store()
    meta = json.loads((path / "meta.json").read_text())
    tokens = np.load(path / "tokens.npy")
    held = np.array([t for r in rows[-llm_selfdistill.HELDOUT_CHATS:] for t in r["prompt"] + r["reply"]])
    assert meta["heldout_windows"] == len(held) // W and meta["chats"] == 80
    assert (tokens[: meta["heldout_windows"]].ravel() == held[: meta["heldout_windows"] * W]).all()
    train = {int(t) for r in rows[: -llm_selfdistill.HELDOUT_CHATS] for t in r["prompt"] + r["reply"]}
    assert set(tokens[meta["heldout_windows"]:].ravel().tolist()) <= train  # no held-out chat in training
    assert llm_features.FeatureStore(path).done == 0
    monkeypatch.setattr(llm_selfdistill, "folder", lambda root=None: tmp_path / "empty")
    with pytest.raises(ValueError, match="chats answered"):
        llm_selfdistill.prepare_store()


def test_self_share_is_refused_out_of_range_or_without_its_store(tmp_path, monkeypatch):
    from lessonlib.models import train_llm_heads

    with pytest.raises(ValueError, match="self_share must be in"):
        train_llm_heads.train_eagle3(0.0, self_share=1.5)
    monkeypatch.setattr(llm_selfdistill, "folder", lambda root=None: tmp_path)
    with pytest.raises(ValueError, match="self-distilled features"):
        train_llm_heads._self_store(2)
