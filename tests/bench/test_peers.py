"""The peer benchmark (lessonlib.bench.peers): the exact conversion of lessonlib's GPT to
Hugging Face's GPT-2, llama.cpp's rows (lossless, the draft-model adapter speculating), what a
step reads, and the issue's targets as ratios (the optional engines' tests skip without
them, requirements-peers.txt)."""
import numpy as np
import pytest
import torch
from loop_support import context_gpt

from lessonlib import engines, models
from lessonlib.decoding import decode
from lessonlib.models import data


@torch.inference_mode()
def test_conversion_to_hugging_face_gpt2_is_exact():
    """Same logits from transformers' GPT2LMHeadModel as from lessonlib's GPT: a float64 tiny
    model to 1e-10, the shipped float32 target to 1e-4 (measured 1.2e-5 on logits up to 14);
    one square weight left untransposed is caught. Greedy generate agrees too."""
    pytest.importorskip("transformers", reason="the peer benchmark's optional install (requirements-peers.txt)")
    from lessonlib.bench.peers import hf_run, to_hf

    small = context_gpt(4)
    idx = torch.randint(0, 16, (1, 40), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(to_hf(small)(idx).logits, small(idx), atol=1e-10, rtol=0)
    target = models.load("target")
    hf = to_hf(target)
    idx = torch.randint(0, 2048, (1, 120), generator=torch.Generator().manual_seed(1))
    assert (hf(idx).logits - target(idx)).abs().max() < 1e-4
    prompt = data.heldout_prompts("code", 5, 64)[0]
    assert hf_run(hf, prompt, 24)[0] == decode.generate(target, prompt, 24)[0]
    w = hf.transformer.h[0].attn.c_proj.weight
    w.copy_(w.t().clone())  # negative control: the Conv1D transpose forgotten on one layer
    assert (hf(idx).logits - target(idx)).abs().max() > 1e-2
    with pytest.raises(ValueError, match="unpacked"):
        to_hf(engines.load("target"))


def _row(method, engine, tps, speedup=1.0, threads=1):
    return {"method": method, "engine": engine, "threads": threads, "plain": method.endswith("plain"),
            "tokens_per_second": {"median": tps}, "speedup": {"median": speedup}}


def test_issue_targets_are_ratios_of_median_tokens_per_second():
    """Each target is the stated ratio, the best speculative row chosen by tokens/s, and 'holds'
    follows the goal; a thread count without llama.cpp rows gets no target."""
    from lessonlib.bench.peer_limits import targets

    rows = [_row("lessonlib plain", "lessonlib", 100), _row("lessonlib chain", "lessonlib", 150, 1.5),
            _row("lessonlib prompt lookup", "lessonlib", 200, 2.0), _row("llama.cpp f16 plain", "llama.cpp f16", 400),
            _row("llama.cpp f16 draft", "llama.cpp f16", 300, 0.75), _row("llama.cpp f32 plain", "llama.cpp f32", 250),
            _row("lessonlib plain", "lessonlib", 90, threads=2)]
    got = {t["target"]: t for t in targets(rows)}
    assert {t["threads"] for t in got.values()} == {1} and len(got) == 3
    assert got["plain vs llama.cpp f16 plain"]["measured"] == pytest.approx(0.25)
    assert got["best speculative vs best llama.cpp row"]["measured"] == pytest.approx(0.5)
    assert got["best speculative vs own plain"]["measured"] == pytest.approx(2.0)
    assert [t["holds"] for t in got.values()] == [False, False, True]
    assert got["best speculative vs own plain"]["best_speculative"] == "lessonlib prompt lookup"


def test_weight_bytes_count_what_a_step_reads():
    """f32: every parameter but the embeddings, the tied head once more, one row of each
    embedding, 4 bytes each; f16: the matrices at 2 bytes, the vectors still at 4."""
    pytest.importorskip("gguf", reason="the GGUF export's optional install (requirements-peers.txt)")
    from lessonlib.bench.peer_limits import weight_bytes

    target = models.load("target")
    params = {k: v for k, v in target.state_dict().items()}
    c = target.config.n_embd
    matrices = sum(v.numel() for k, v in params.items() if v.ndim == 2 and k.startswith("blocks."))
    vectors = sum(v.numel() for v in params.values() if v.ndim == 1)
    head = target.config.vocab_size * c
    assert weight_bytes("f32") == 4 * (matrices + vectors + head + 2 * c)
    assert weight_bytes("f16") == 2 * (matrices + head + 2 * c) + 4 * vectors


@torch.inference_mode()
def test_llama_cpp_rows_are_lossless_and_the_draft_adapter_speculates(tmp_path):
    """Greedy llama.cpp with the draft-kl adapter (K = 3) and with its prompt lookup gives the
    tokens of plain llama.cpp, in fewer target forwards; a proposer of wrong tokens gives the
    same tokens at one forward per token (tau 1: the count responds)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python, an optional peer (requirements-peers.txt)")
    from llama_cpp.llama_speculative import LlamaDraftModel

    from lessonlib.bench import peer_llama
    from lessonlib.models import gguf_export

    paths = {name: gguf_export.export(models.load(name, "cpu"), tmp_path / f"{name}.gguf", "f32")
             for name in ("target", "draft-kl")}
    prompt, n = data.heldout_prompts("code", 5, 64)[2], 48
    plain, plain_stats = peer_llama.run(peer_llama.engine(paths["target"], 1, 256), prompt, n)
    assert plain_stats["target_forwards"] == n  # the prefill gives the first token, n - 1 steps the rest

    class Wrong(LlamaDraftModel):
        def __call__(self, input_ids, /, **kwargs):
            return np.array([(int(input_ids[-1]) + 1) % 2048] * 3, dtype=np.intc)

    draft = peer_llama.draft_model(paths["draft-kl"], 1, 256, k=3)
    for proposer, fewer in ((draft, True), (peer_llama.lookup(10), True), (Wrong(), False)):
        out, stats = peer_llama.run(peer_llama.engine(paths["target"], 1, 256, draft=proposer), prompt, n)
        assert out == plain
        assert (stats["target_forwards"] < 0.8 * n) == fewer, stats
    assert draft.steps > 0


def test_without_any_peer_engine_the_benchmark_says_what_to_install(monkeypatch, capsys):
    from lessonlib.bench import peers

    monkeypatch.setattr(peers, "installed", lambda: {"HF": False, "llama.cpp": False})
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--prompts", "5"])
    assert exit_.value.code == 2 and "requirements-peers.txt" in capsys.readouterr().err
