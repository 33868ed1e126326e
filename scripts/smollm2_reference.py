"""Write tests/data/smollm2_reference.npz: what Hugging Face transformers computes from the same GGUF
file that ``lessonlib.models.llama.load_smollm2`` reads, so tests/models/test_llama.py can check the
readable model against an independent implementation without transformers installed.

    .venv/bin/pip install transformers==5.24.0 accelerate   # transformers needs accelerate to load a GGUF
    .venv/bin/python scripts/smollm2_reference.py

Everything here comes from transformers alone (its GGUF tokenizer, its chat template, its model in
float32); nothing from lessonlib except where the GGUF file lies. Stored, per prompt: the token ids
(prompt, then ``NEW`` greedy tokens), the top-``TOP`` logits and their ids at every position, and the
smallest top-1 minus top-2 gap (a tie would make greedy equality fragile); for one prompt the first
``DIMS`` dimensions of ``output_hidden_states`` at ``HIDDEN``; the tokenizer's ids for ``STRINGS``; the
chat template's ids for ``CHATS``. Greedy decoding is a plain loop over full forwards with an
explicit attention mask of ones: ``generate`` with pad = eos = ``<|im_end|>`` and no attention mask
would mask the template's own ``<|im_end|>`` tokens.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "smollm2_reference.npz"
NEW, TOP, DIMS, HIDDEN = 24, 20, 16, (2, 15, 27)
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "user", "content": "Rewrite in the passive voice: The cat chased the mouse."}],
         [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name three colours."},
          {"role": "assistant", "content": "Red, green, blue."}, {"role": "user", "content": "Two more?"}]]
RAW = ["def fibonacci(n):\n    ", "The quick brown fox jumps over the lazy dog. The quick brown",
       "سلام! حال شما چطور است؟ "]
STRINGS = ["Hello, world!", "def add(a, b):\n    return a + b\n", "for i in range(10):\n\tprint(i**2)  # squares",
           "The year 2024 had 366 days.", "1234567890", "x  1 and  22", "سلام، حال شما چطور است؟",
           "نیم‌فاصله و اعداد ۱۲۳", "日本語のテキスト 😀 emoji", "naïve café résumé", "  leading spaces\n\n\ttabs",
           "a'll b's c're", "<|im_start|>user\nhi<|im_end|>\n", "", " ", "\u200b zero width"]


@torch.inference_mode()
def main() -> None:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sys.path.insert(0, str(ROOT))
    from lessonlib.models.gguf_load import FILENAME, file_sha256, gguf_path

    torch.set_num_threads(1)
    folder = str(gguf_path().parent)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=FILENAME)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=FILENAME, dtype=torch.float32).eval()
    arrays: dict[str, np.ndarray] = {}
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in CHATS] + RAW
    for i, text in enumerate(prompts):
        ids = tok.encode(text, add_special_tokens=False)
        n_prompt = len(ids)
        for _ in range(NEW):  # greedy, one full forward per token (no cache to get wrong)
            x = torch.tensor([ids])
            ids.append(int(model(x, attention_mask=torch.ones_like(x)).logits[0, -1].argmax()))
        x = torch.tensor([ids[:-1]])
        out = model(x, attention_mask=torch.ones_like(x), output_hidden_states=True)
        top = out.logits[0].topk(TOP, dim=-1)  # (T, TOP)
        arrays[f"p{i}_ids"] = np.array(ids, dtype=np.int32)
        arrays[f"p{i}_n_prompt"] = np.array(n_prompt, dtype=np.int32)
        arrays[f"p{i}_top_ids"] = top.indices.numpy().astype(np.int32)
        arrays[f"p{i}_top_values"] = top.values.numpy().astype(np.float32)
        arrays[f"p{i}_min_gap"] = np.array(float((top.values[:, 0] - top.values[:, 1]).min()), dtype=np.float32)
        if i == 0:
            arrays["hidden"] = np.stack([out.hidden_states[k][0, :, :DIMS].numpy() for k in HIDDEN]).astype(np.float32)
    for j, s in enumerate(STRINGS):
        arrays[f"s{j}_ids"] = np.array(tok.encode(s, add_special_tokens=False), dtype=np.int32)
    for j, chat in enumerate(CHATS):
        arrays[f"c{j}_ids"] = np.array(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                                               return_dict=False), dtype=np.int32).ravel()
    meta = {"prompts": prompts, "chats": CHATS, "strings": STRINGS, "new_tokens": NEW, "top": TOP,
            "hidden_states_index": list(HIDDEN), "hidden_dims": DIMS, "transformers": transformers.__version__,
            "torch": torch.__version__, "dtype": "float32", "gguf": FILENAME, "gguf_sha256": file_sha256(gguf_path())}
    arrays["meta"] = np.array(json.dumps(meta, ensure_ascii=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(OUT)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes): {len(prompts)} prompts, "
          f"smallest top-1 gap {min(float(arrays[f'p{i}_min_gap']) for i in range(len(prompts))):.4f}")


if __name__ == "__main__":
    main()
