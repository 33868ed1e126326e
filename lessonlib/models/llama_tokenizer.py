"""The real LLM's tokenizer and chat format, built from the GGUF file's own metadata.

* ``build_tokenizer(spec)``: a ``tokenizers.Tokenizer`` from ``tokenizer.ggml.tokens`` / ``merges`` /
  ``token_type`` (``gguf_load.read_tokenizer_spec``): byte-level BPE (GPT-2's byte alphabet and
  split regex), the control tokens (``<|im_start|>``, ``<|im_end|>``, ...) as special tokens that
  are matched whole in the text, no BOS added (``tokenizer.ggml.add_bos_token`` is false).
* The pre-tokenizer is llama.cpp's ``smollm`` one (``tokenizer.ggml.pre``; ``llama-vocab.cpp``
  splits every digit off first, ``\\p{N}``, then applies GPT-2's regex) -- the split the model was
  trained with. transformers' GGUF converter (5.24) leaves the digit split out; the two agree on
  every string except whitespace before a digit ("x  1": ours "ĠĠ" "1", transformers' "Ġ" "Ġ" "1"),
  since no merge joins an ASCII digit to anything (the tests check both facts).
* ``chat_prompt(messages)``: SmolLM2's template (the GGUF's ``tokenizer.chat_template``, ChatML):
  ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, a default system message when the first
  is not one, and ``<|im_start|>assistant\\n`` to ask for the reply. ``encode_chat`` tokenizes it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3  # llama.cpp's token type of control tokens (special: never produced by BPE)
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
ROLES = ("system", "user", "assistant")


def build_tokenizer(spec: Mapping[str, Any]) -> Tokenizer:
    """The byte-level BPE tokenizer the tables describe; ValueError when they disagree in length
    or use a pre-tokenizer other than llama.cpp's ``smollm``."""
    tokens, merges, types = spec["tokens"], spec["merges"], spec["token_types"]
    if len(tokens) != len(types) or not tokens:
        raise ValueError(f"spec must hold one token type per token, got {len(tokens)} tokens, {len(types)} types")
    if spec.get("pre") != "smollm":
        raise ValueError(f"spec['pre'] must be llama.cpp's 'smollm' pre-tokenizer, got {spec.get('pre')!r}")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]  # "Ġ t" -> ("Ġ", "t")
    tok = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),  # llama.cpp's first regex, "\p{N}"
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),  # GPT-2's regex and byte alphabet
    ])
    tok.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types) if kind == CONTROL]
    tok.add_special_tokens(control)  # already in the vocabulary: keeps their ids, matched whole in text
    return tok


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` (control tokens written in the text are parsed as themselves)."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return tokenizer.encode(text, add_special_tokens=False).ids


def decode(tokenizer: Tokenizer, ids: Sequence[int], skip_special: bool = False) -> str:
    """The text of ``ids`` (byte-level BPE: a round trip of ``encode`` gives the text back)."""
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special)


def chat_prompt(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """SmolLM2's chat template applied to ``messages`` (each {"role": ..., "content": ...}, role one
    of ``ROLES``): the same text the GGUF's jinja template renders."""
    if isinstance(messages, (str, bytes)) or not messages:
        raise ValueError("messages must be a non-empty sequence of {'role': ..., 'content': ...} dicts")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}] must be {{'role': one of {ROLES}, 'content': str}}, got {m!r}")
        if i == 0 and m["role"] != "system":
            parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def encode_chat(tokenizer: Tokenizer, messages: Sequence[Mapping[str, str]],
                add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``chat_prompt(messages)``: the prompt a chat reply is generated from."""
    return encode(tokenizer, chat_prompt(messages, add_generation_prompt))


END_OF_TURN = "<|im_end|>"  # the chat template ends every turn with it: a reply is over when the model emits it


def end_of_turn(tokenizer: Tokenizer) -> int:
    """The id of ``END_OF_TURN``, where a reply stops (the decoding loops' ``stop``); ValueError
    when the tokenizer has none (not SmolLM2's)."""
    found = tokenizer.token_to_id(END_OF_TURN)
    if found is None:
        raise ValueError(f"the tokenizer has no {END_OF_TURN} token: not SmolLM2's")
    return int(found)


def load_tokenizer() -> Tokenizer:
    """SmolLM2's tokenizer from the installed GGUF file (its tables cached by ``gguf_load``)."""
    from lessonlib.models.gguf_load import load_tokenizer_spec
    return build_tokenizer(load_tokenizer_spec())
