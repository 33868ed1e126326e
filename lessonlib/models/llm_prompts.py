"""Prompts for the real LLM, built offline from what the course ships: where draft-free
speculation should pay, and where it should not.

* ``edit``: a held-out function of the standard library (``data.documents("code")``, held-out
  documents only) with one instruction that asks for the whole function back, changed a little
  (``EDITS``: comments on every line, clearer names, type hints). The reply copies long runs of
  the prompt, which is what prompt lookup drafts from.
* ``chat``: open questions the course wrote (a recipe, a plan, an explanation): the reply copies
  little of the prompt, so lookup finds few matches and its rounds cost more than they return.

Each prompt is a chat (``llama_tokenizer.encode_chat``: the model's own template) with the
default system message. The sets are deterministic: the same functions in the same order on every
machine with the same Python (the standard library is the corpus; ``data.is_heldout`` splits it by
the hash of each file's name).
"""
from __future__ import annotations

import ast
import functools

from lessonlib.models import data

KINDS = ("edit", "chat")
# asks the 135M model follows by copying the code back (tried on this model: a request for a short
# summary or a renamed function gets a short reply of new text, which is the chat regime)
EDITS = (
    "Add a short comment to every line of this Python code. Show the full code.",
    "Rewrite this function with clearer variable names. Show the full rewritten function.",
    "Add type hints to every argument of this function. Show the full function.",
)
CHATS = (
    "What are three good ways to spend a rainy Sunday afternoon? Explain each one.",
    "Give me a simple recipe for a vegetable soup, with the steps in order.",
    "How does a bicycle stay upright when it moves? Explain it to a twelve-year-old.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What should I pack for a three-day hiking trip in the mountains, and why?",
    "Explain the difference between weather and climate with a few examples.",
    "Plan a week of healthy breakfasts for a busy student.",
    "Why do leaves change colour in autumn? Describe what happens inside the leaf.",
)
MIN_LINES, MAX_LINES = 18, 40  # long enough that the reply runs past 128 tokens, short enough to fit twice


@functools.lru_cache(maxsize=2)
def _functions(heldout: bool = True) -> tuple[tuple[str, str], ...]:
    """(name, source) of the held-out (else the training) standard library's top-level functions
    of MIN_LINES to MAX_LINES lines, in the corpus's order."""
    out = []
    for name, source in data.documents("code"):
        if data.is_heldout(name) != heldout:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES:
                text = "\n".join(lines[node.lineno - 1: node.end_lineno])
                if text.isascii():
                    out.append((f"{name}:{node.name}", text))
    return tuple(out)


def messages(kind: str, n: int) -> list[list[dict[str, str]]]:
    """``n`` chats of ``kind`` (``KINDS``), each a list of one user message; ValueError when the
    set has fewer than ``n`` or ``kind`` is not a set."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if kind == "chat":
        if n > len(CHATS):
            raise ValueError(f"n must be at most {len(CHATS)} for the chat set, got {n}")
        return [[{"role": "user", "content": q}] for q in CHATS[:n]]
    functions = _functions()
    if n > len(functions):
        raise ValueError(f"n must be at most {len(functions)} for the edit set here, got {n}")
    step = max(1, len(functions) // n)  # spread over the corpus, not the first file's functions
    out = []
    for i in range(n):
        _, source = functions[i * step]
        out.append([{"role": "user", "content": f"{EDITS[i % len(EDITS)]}\n\n```python\n{source}\n```"}])
    return out


def prompts(tokenizer, kind: str, n: int) -> list[list[int]]:
    """The token ids of ``messages(kind, n)`` in the model's chat template, ready to decode."""
    from lessonlib.models import llama_tokenizer

    return [llama_tokenizer.encode_chat(tokenizer, m) for m in messages(kind, n)]
