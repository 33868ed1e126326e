"""Training data for the real LLM's heads: token windows and the target's features, cached on disk.

    python -m lessonlib.models.llm_features [--chunks N] [--minutes M] [--until HH:MM]

Text: the course's own corpora (``data``: the standard library's code and its docstrings and
help topics), plus a chat stream in which those documents are the assistant's reply to a short
request, in SmolLM2's chat template (``llama_tokenizer.chat_prompt``), so the head also sees the
chat regime it drafts in. Not the target's own responses: decoding on this CPU makes ~15 tokens/s
against ~200 tokens/s for teacher-forced feature extraction, so self-distillation would cost 10x
the hours for the same token count (the issue's Build 1 asks for it; left for a faster engine).

Windows of ``WINDOW`` tokens are cut from each stream at seeded random offsets (a fixed mix of
streams), the held-out split's windows first. For each window the readable ``Llama`` in float32
stores, per token, as float16 memmaps in the cache folder (``data.CACHE_DIR``):

* ``fused``  (n, L, 3C): the outputs of blocks ``eagle3_reference_layers`` (= inputs of layers
  {2, N//2, N-3}, EAGLE-3's reference choice);
* ``final``  (n, L, C): the last block's output *before* ``norm_f`` (``target.lm_head`` applies it);
* ``top1``   (n, L) int32: the target's argmax, the token the loss mask and alpha are measured on.

Soft labels are not stored (49,152 floats a token): the trainer recomputes them from ``final``.
Resumable: ``progress.json`` counts the windows done; a rerun continues (same seed, same windows).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models import data
from lessonlib.models.provenance import where

WINDOW = 512  # tokens per window: long enough for the head's attention to matter, short for the cache
HELDOUT_WINDOWS = 24  # 12k held-out tokens for alpha
MIX = {"code": 0.45, "prose": 0.3, "chat": 0.25}  # share of windows per stream
SEED = 0
CHAT_REQUESTS = {  # the user's turn for a document of each corpus; the document is the reply
    "code": "Show me the Python source of `{name}`.",
    "prose": "Explain what the Python documentation of `{name}` says.",
}


def folder(root: pathlib.Path | None = None) -> pathlib.Path:
    return (root or data.CACHE_DIR) / f"smollm2-features-w{WINDOW}-s{SEED}"


def streams(split: str, tokenizer: Any) -> dict[str, np.ndarray]:
    """Each stream of ``split`` as one int32 token array (documents separated by a blank line, or
    one chat per document)."""
    from lessonlib.models.llama_tokenizer import chat_prompt

    out = {}
    for corpus in ("code", "prose"):
        docs = data.split_documents(corpus, split)
        enc = tokenizer.encode_batch([t + "\n\n" for _, t in docs], add_special_tokens=False)
        out[corpus] = np.fromiter((i for e in enc for i in e.ids), dtype=np.int32)
    chats = [chat_prompt([{"role": "user", "content": CHAT_REQUESTS[c].format(name=n)},
                          {"role": "assistant", "content": t}], add_generation_prompt=False)
             for c in ("code", "prose") for n, t in data.split_documents(c, split)]
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(chats))  # interleave code and prose replies
    enc = tokenizer.encode_batch([chats[i] for i in order], add_special_tokens=False)
    out["chat"] = np.fromiter((i for e in enc for i in e.ids), dtype=np.int32)
    return out


def cut_windows(arrays: dict[str, np.ndarray], n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``n`` windows (n, WINDOW) drawn from the streams in ``MIX`` proportions, each a distinct
    window-aligned slice at a random offset; returns them and each one's stream."""
    rng = np.random.default_rng(seed)
    counts = {s: int(round(n * w)) for s, w in MIX.items()}
    counts["code"] += n - sum(counts.values())
    windows, names = [], []
    for s, k in counts.items():
        a = arrays[s]
        available = len(a) // WINDOW
        if k > available:
            raise ValueError(f"stream {s!r} holds {available} windows of {WINDOW} tokens, {k} asked")
        shift = int(rng.integers(0, WINDOW))  # offsets not aligned to document starts
        slots = rng.choice(available - 1, size=k, replace=False)
        windows += [a[shift + i * WINDOW : shift + (i + 1) * WINDOW] for i in slots]
        names += [s] * k
    order = rng.permutation(n)  # streams interleaved: any prefix of the windows keeps the mix
    return np.stack([windows[i] for i in order]), [names[i] for i in order]


class FeatureStore:
    """The memmaps of one folder: tokens (n, L) int32, fused (n, L, 3C) and final (n, L, C)
    float16, top1 (n, L) int32; ``done`` windows of ``n`` are filled (``progress.json``)."""

    def __init__(self, path: pathlib.Path, mode: Literal["r", "r+"] = "r"):
        self.path = path
        self.meta = json.loads((path / "meta.json").read_text())
        n, L, C, k = self.meta["windows"], self.meta["window"], self.meta["n_embd"], len(self.meta["layers"])
        self.tokens = np.load(path / "tokens.npy", mmap_mode="r")  # (n, L)
        self.fused = np.memmap(path / "fused.f16", np.float16, mode, shape=(n, L, k * C))
        self.final = np.memmap(path / "final.f16", np.float16, mode, shape=(n, L, C))
        self.top1 = np.memmap(path / "top1.i32", np.int32, mode, shape=(n, L))

    @property
    def done(self) -> int:
        p = self.path / "progress.json"
        return json.loads(p.read_text())["done"] if p.exists() else 0

    @property
    def heldout(self) -> int:
        return int(self.meta["heldout_windows"])


def prepare(path: pathlib.Path, n_train: int) -> None:
    """Cut the windows and allocate the memmaps (once: an existing folder is kept)."""
    if (path / "meta.json").exists():
        return
    from lessonlib.models.llama import LlamaConfig, eagle3_reference_layers
    from lessonlib.models.llama_tokenizer import load_tokenizer

    tok = load_tokenizer()
    config = LlamaConfig()
    held, held_src = cut_windows(streams("heldout", tok), HELDOUT_WINDOWS, SEED + 1)
    train, train_src = cut_windows(streams("train", tok), n_train, SEED)
    tokens = np.concatenate([held, train])  # (n, L): held-out first
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "tokens.npy", tokens)
    n, L, C = len(tokens), WINDOW, config.n_embd
    layers = eagle3_reference_layers(config.n_layer)
    for name, shape, dtype in (("fused.f16", (n, L, len(layers) * C), np.float16),
                               ("final.f16", (n, L, C), np.float16), ("top1.i32", (n, L), np.int32)):
        np.memmap(path / name, dtype, "w+", shape=shape).flush()  # sparse until written
    meta = {"windows": n, "window": L, "heldout_windows": HELDOUT_WINDOWS, "n_embd": C, "layers": list(layers),
            "final": "last block's output before norm_f", "mix": MIX, "seed": SEED,
            "streams": {"heldout": held_src, "train_counts": {s: train_src.count(s) for s in MIX}},
            "corpora": "Python standard library code, docstrings and help topics (lessonlib.models.data), "
                       "plus the same documents as chat replies in SmolLM2's template",
            "dtype": "float32 forward, float16 storage", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(path / "meta.json", json.dumps(meta, indent=1) + "\n")


def extract(path: pathlib.Path, limit: int | None = None, deadline: float | None = None) -> int:
    """Fill windows after the last one done, until ``limit`` windows or the ``deadline`` (epoch
    seconds); returns the windows done. Progress is saved after every window (memmaps flushed first)."""
    from tqdm import tqdm

    from lessonlib.models.llama import load_smollm2

    store = FeatureStore(path, "r+")
    stop = store.meta["windows"] if limit is None else min(limit, store.meta["windows"])
    start = store.done
    if start >= stop:
        return start
    target = load_smollm2(torch.float32, block_size=WINDOW)
    layers = tuple(store.meta["layers"]) + (target.config.n_layer - 1,)  # + the last block (before norm_f)
    C = target.config.n_embd
    log = json.loads((path / "progress.json").read_text()) if start else {"runs": []}
    began = time.time()
    with torch.inference_mode(), tqdm(total=stop, initial=start, unit="win", desc="features") as bar:
        for w in range(start, stop):
            if deadline is not None and time.time() > deadline:
                break
            idx = torch.from_numpy(store.tokens[w].astype(np.int64))[None]  # (1, L)
            logits, h = target(idx, return_hidden=layers)  # (1, L, V), (1, L, 4C)
            store.fused[w] = h[0, :, :-C].numpy().astype(np.float16)
            store.final[w] = h[0, :, -C:].numpy().astype(np.float16)
            store.top1[w] = logits[0].argmax(-1).numpy().astype(np.int32)
            for m in (store.fused, store.final, store.top1):
                m.flush()
            log["done"] = w + 1
            write_atomic(path / "progress.json", json.dumps(log) + "\n")
            bar.update(1)
    done = store.done
    log["runs"].append({"windows": [start, done], "tokens": (done - start) * WINDOW,
                        "seconds": round(time.time() - began, 1), **where("cpu")})
    log["done"] = done
    write_atomic(path / "progress.json", json.dumps(log, indent=1) + "\n")
    return done


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-windows", type=cli.positive_int, default=2000,
                        help="training windows cut (allocated once; extraction may stop earlier)")
    parser.add_argument("--windows", type=cli.positive_int, default=None, help="stop after this many windows in all")
    parser.add_argument("--minutes", type=cli.number(0, low_open=True), default=None)
    parser.add_argument("--until", type=cli.clock_time, default=None, help="stop at this UTC time, HH:MM")
    args = parser.parse_args(argv)
    path = folder()
    prepare(path, args.train_windows)
    deadline = time.time() + 60 * args.minutes if args.minutes else None
    if args.until:
        deadline = min(deadline or float("inf"), args.until)
    done = extract(path, args.windows, deadline)
    print(f"{done} windows ({done * WINDOW} tokens) in {path}")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.llm_features"))
