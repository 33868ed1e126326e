"""What a decoding loop checks before any work: the prompt and the budget fit the model's context,
the drafter fits the target, the stop token is a token. ``decoding.round`` re-exports them (every
loop imports them from there).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lessonlib.core.validate import check_int, check_token_ids

if TYPE_CHECKING:  # the types only
    from lessonlib.decoding.drafters import Drafter
    from lessonlib.models.gpt import GPT

Ids = Any  # token ids: a list, array or tensor of ints (``decoding.round.Ids``)


def check_budget(model: GPT, prompt_tokens: Ids, max_new_tokens: int, extra: int = 0,
                 name: str = "the model") -> int:
    """The prompt (token ids of ``model``'s vocabulary) and ``max_new_tokens`` (+ ``extra``
    positions a round scores beyond them) must fit the context: exactly filling it is fine.
    Returns max_new_tokens."""
    if len(prompt_tokens) < 1:
        raise ValueError("prompt_tokens must hold at least one token")
    check_token_ids(prompt_tokens, model.config.vocab_size, "prompt_tokens")
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
    need = len(prompt_tokens) + max_new_tokens + extra
    if need > model.config.block_size:
        ahead = f" + lookahead ({extra})" if extra > 0 else f" - {-extra}" if extra < 0 else ""
        raise ValueError(
            f"prompt ({len(prompt_tokens)}) + max_new_tokens ({max_new_tokens}){ahead} = {need} positions "
            f"must fit the context of {name} ({model.config.block_size} tokens)"
        )
    return max_new_tokens


def check_drafter(target: GPT, drafter: Drafter, prompt_tokens: Ids) -> None:
    """What the round reads of a drafter, checked once: its vocabulary and its prompt needs."""
    vocab = drafter.vocab_size
    if vocab is not None and vocab != target.config.vocab_size:
        raise ValueError(f"drafter and target must share a vocabulary, got sizes {vocab} "
                         f"and {target.config.vocab_size}")
    if len(prompt_tokens) < 2 and drafter.needs_features:
        raise ValueError("prompt_tokens must hold at least 2 tokens for a feature-based drafter")


def check_stop(stop: Any, vocab_size: int) -> int | None:
    """``stop``: None, or the token id a loop stops after (an end-of-turn token), in [0, vocab_size)."""
    return None if stop is None else check_int(stop, "stop", 0, vocab_size - 1)
