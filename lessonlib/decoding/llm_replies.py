"""The real LLM answers the self-distillation requests (``models.llm_selfdistill``): its own greedy
replies, the training text its heads draft while decoding.

    python -m lessonlib.decoding.llm_replies [--limit N] [--until HH:MM]   # resumable; then
    python -m lessonlib.models.llm_selfdistill features --until HH:MM    # their features

Each request is answered by the fastest engine here (``engines.load_llm("auto")``) with plain
greedy decoding, one cached step a token, stopped after ``<|im_end|>`` or ``MAX_NEW`` tokens.
Each chat is one JSON line ({"i", "prompt", "reply"}) appended to ``replies.jsonl`` as soon as
it is done; a rerun drops a line an interrupt cut and continues after the last whole one.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models import llm_selfdistill
from lessonlib.models.provenance import where


def make_replies(deadline: float, limit: int | None = None) -> int:
    """Answer the requests after the last one done until ``deadline`` or ``limit`` chats; returns
    the chats done."""
    from tqdm import tqdm

    from lessonlib.engines.llama import load_llm
    from lessonlib.models.llama_tokenizer import encode_chat, end_of_turn, load_tokenizer

    path = llm_selfdistill.folder() / "replies.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = llm_selfdistill.done_lines(path)
    write_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))  # drop a cut last line
    asks = llm_selfdistill.requests()
    stop = len(asks) if limit is None else min(limit, len(asks))
    if len(rows) >= stop:
        return len(rows)
    tok = load_tokenizer()
    eos = end_of_turn(tok)
    model = load_llm("auto", block_size=1024)
    began = time.time()
    with open(path, "a") as f, tqdm(total=stop, initial=len(rows), unit="chat", desc="replies") as bar:
        for i in range(len(rows), stop):
            if time.time() > deadline:
                break
            prompt = encode_chat(tok, [{"role": "user", "content": asks[i]}])
            out = llm_selfdistill.reply(model, prompt, eos)
            f.write(json.dumps({"i": i, "prompt": prompt, "reply": out}) + "\n")
            f.flush()
            bar.update(1)
    meta_path = llm_selfdistill.folder() / "replies-meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"runs": []}
    done = len(llm_selfdistill.done_lines(path))
    meta.update(requests=len(asks), max_new=llm_selfdistill.MAX_NEW, engine=model.engine,
                decoding="greedy, stopped at <|im_end|>")
    meta["runs"].append({"chats": [len(rows), done], "seconds": round(time.time() - began, 1), **where("cpu")})
    write_atomic(meta_path, json.dumps(meta, indent=1) + "\n")
    return done


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=cli.positive_int, default=None, help="stop after this many chats in all")
    parser.add_argument("--until", type=cli.clock_time, default=None, help="stop at this UTC time, HH:MM")
    args = parser.parse_args(argv)
    deadline = args.until or float("inf")
    print(f"{make_replies(deadline, args.limit)} chats answered")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.decoding.llm_replies"))
