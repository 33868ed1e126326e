"""Self-distillation data for the real LLM's heads: the target's own greedy replies to requests
the course builds offline from its training split.

    python -m lessonlib.decoding.llm_replies --until HH:MM               # the target answers (resumable)
    python -m lessonlib.models.llm_selfdistill features --until HH:MM   # then their features

Why: a head trained on the course's corpora (``llm_features``: library code, docstrings, and those
documents as chat replies) drafts text it has seen, but the target's replies read differently.
Measured on the shipped head: teacher-forced depth-1 alpha 0.38-0.43 on the chat prompts' own text,
0.13-0.22 on the target's replies to them -- the same ~0.14 it reaches while decoding. EAGLE's
follow-ups (Medusa-2, HASS, EAGLE-3's SpecForge) train on the target's own replies for this reason.

* ``requests()``: deterministic chat requests, none of them a benchmark prompt: open questions
  (``FORMS`` x ``SUBJECTS``, written for the course), and the edit and explain requests of
  ``llm_prompts`` on *training-split* functions of the standard library (the benchmarks' edit
  prompts use held-out ones).
* replies (``decoding.llm_replies``, which can load the native engine): each request answered
  greedily (T = 0, the setting the benchmarks decode at), at most ``MAX_NEW`` tokens, stopped at
  ``<|im_end|>``; one JSON line per chat in ``folder()``, appended as each is done (a rerun
  continues after the last whole line, ``done_lines``).
* ``features``: the chats concatenated into one stream, cut into ``llm_features.WINDOW``-token
  windows (the last ``HELDOUT_CHATS`` chats' windows held out), and their features extracted into a
  ``llm_features.FeatureStore`` of their own (``folder()``), which ``train_llm_heads --self-share``
  mixes into the training batches.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models import data, llm_features, llm_prompts

MAX_NEW = 160  # reply tokens at most: the benchmarks decode 128
HELDOUT_CHATS = 24  # the last requests' chats: the held-out windows
FORMS = (
    "Explain {s} to a beginner.",
    "Give me three practical tips about {s}.",
    "Write a short story about {s}.",
    "What are the advantages and disadvantages of {s}?",
    "Describe {s} step by step.",
    "Write a short poem about {s}.",
)
SUBJECTS = (
    "learning a new language", "a small garden on a balcony", "saving money each month", "a train journey",
    "baking bread at home", "the water cycle", "a first day at a new job", "keeping a diary", "the night sky",
    "cooking rice", "a museum visit", "public libraries", "the history of the bicycle", "a rainy day in the city",
    "writing a good email", "volcanoes", "a friendly robot", "how bees make honey", "running a marathon",
    "sleeping well", "the moon's phases", "a family dinner", "recycling plastic", "a mountain village",
    "learning to play the guitar", "time management for students", "an old map", "how rainbows form",
    "a lost cat", "the invention of paper", "solar panels", "a chess tournament", "making tea",
    "the life of a tree", "a long winter", "planning a birthday party", "how computers store numbers",
    "the ocean's tides", "a street market", "teaching a child to read", "electric cars", "a snowy forest",
    "a bakery at dawn", "how vaccines work", "painting with watercolours", "a desert journey", "friendship",
    "the first airplane", "a quiet morning", "choosing a good book", "how a compass works", "a summer festival",
    "the human heart", "walking in the park", "a kitchen experiment", "clouds", "a lighthouse in a storm",
    "studying for an exam", "a village well", "the speed of light",
)
EXPLAIN = "Explain what this Python function does, then show how to call it.\n\n```python\n{source}\n```"


def reply(model: Any, prompt: list[int], eos: int, max_new: int = MAX_NEW) -> list[int]:
    """The greedy reply to ``prompt`` (cached one-token steps; ``decoding.decode.generate`` at T = 0,
    here so that the models layer can answer too), at most ``max_new`` tokens, stopped after ``eos``."""
    import torch

    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new must be an integer >= 1, got {max_new!r}")
    cache = model.new_cache()
    out: list[int] = []
    with torch.inference_mode():
        logits = model(torch.tensor([prompt]), cache=cache)[0, -1]
        while True:
            out.append(int(logits.argmax()))
            if len(out) >= max_new or out[-1] == eos:
                return out
            logits = model(torch.tensor([[out[-1]]]), cache=cache)[0, -1]


def folder(root: pathlib.Path | None = None) -> pathlib.Path:
    """The replies and the feature store (``llm_features.FeatureStore``) of the self-distilled chats."""
    return (root or data.CACHE_DIR) / f"smollm2-selfdistill-w{llm_features.WINDOW}"


def requests(n_functions: int = 240) -> list[str]:
    """The user turns, in a fixed interleaved order: open questions and, on ``n_functions``
    training-split functions, the edit and explain requests alternately."""
    questions = [f.format(s=s) for s in SUBJECTS for f in FORMS]
    functions = [source for _, source in llm_prompts._functions(heldout=False)]
    step = max(1, len(functions) // n_functions)
    code = [(llm_prompts.EDITS[i % len(llm_prompts.EDITS)] + f"\n\n```python\n{src}\n```") if i % 2 == 0
            else EXPLAIN.format(source=src) for i, src in enumerate(functions[::step][:n_functions])]
    order = np.random.default_rng(llm_features.SEED).permutation(len(questions) + len(code))
    both = questions + code
    return [both[i] for i in order]


def done_lines(path: pathlib.Path) -> list[dict]:
    """The whole JSON lines of ``path`` (a line cut by an interrupt ends the list: it is rewritten)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def prepare_store() -> pathlib.Path:
    """The feature store of the chats done so far (made once; ``replies`` first): the held-out
    chats' windows first, then the training ones, each stream cut into whole windows."""
    from lessonlib.models.llama import LlamaConfig, eagle3_reference_layers

    path = folder() / "features"
    if (path / "meta.json").exists():
        return path
    rows = done_lines(folder() / "replies.jsonl")
    if len(rows) <= 2 * HELDOUT_CHATS:
        raise ValueError(f"only {len(rows)} chats answered: run `python -m lessonlib.decoding.llm_replies` first")
    W = llm_features.WINDOW
    stream = lambda rs: np.array([t for r in rs for t in r["prompt"] + r["reply"]], np.int32)  # noqa: E731
    held, train = stream(rows[-HELDOUT_CHATS:]), stream(rows[:-HELDOUT_CHATS])
    held_w, train_w = held[: len(held) // W * W].reshape(-1, W), train[: len(train) // W * W].reshape(-1, W)
    rng = np.random.default_rng(llm_features.SEED)
    tokens = np.concatenate([held_w, train_w[rng.permutation(len(train_w))]])
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "tokens.npy", tokens)
    config = LlamaConfig()
    layers = eagle3_reference_layers(config.n_layer)
    n, C = len(tokens), config.n_embd
    for name, shape, dtype in (("fused.f16", (n, W, len(layers) * C), np.float16),
                               ("final.f16", (n, W, C), np.float16), ("top1.i32", (n, W), np.int32)):
        np.memmap(path / name, dtype, "w+", shape=shape).flush()
    meta = {"windows": n, "window": W, "heldout_windows": len(held_w), "n_embd": C, "layers": list(layers),
            "final": "last block's output before norm_f", "mix": {"self": 1.0}, "seed": llm_features.SEED,
            "chats": len(rows), "heldout_chats": HELDOUT_CHATS,
            "corpora": "the target's own greedy replies to requests.py's training requests (self-distillation)",
            "dtype": "float32 forward, float16 storage", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(path / "meta.json", json.dumps(meta, indent=1) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["features"], help="the features of the chats answered so far")
    parser.add_argument("--limit", type=cli.positive_int, default=None, help="stop after this many windows")
    parser.add_argument("--until", type=cli.clock_time, default=None, help="stop at this UTC time, HH:MM")
    args = parser.parse_args(argv)
    deadline = args.until or float("inf")
    path = prepare_store()
    print(f"{llm_features.extract(path, args.limit, deadline)} windows of features in {path}")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.llm_selfdistill"))
