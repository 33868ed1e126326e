"""Whose rule judges a sampled chain: the course's exact rule, or one a notebook swaps in.

``decoding.round.accept`` asks ``judge_chain`` for the verdict of every sampled chain round. It is
``core.chain.verify_chain`` unless ``chain_rule(f)`` is active: then ``f(p_rows, q_rows,
draft_tokens, rng) -> emitted`` judges (exercise 1b's contract), so a student's own rule runs
inside the course's decoding loop on a real model (exercise 01's last cell), and what it emits is
checked to be an accepted prefix of the drafts followed by one token.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from lessonlib.core.chain import verify_chain

_CHAIN_RULES: list[Callable[..., Any]] = []  # the chain rules ``chain_rule`` swapped in, innermost last


@contextlib.contextmanager
def chain_rule(rule: Callable[..., Any]) -> Iterator[None]:
    """Within the block, every sampled chain round is judged by ``rule(p_rows, q_rows,
    draft_tokens, rng) -> emitted`` (``core.chain.verify_chain``'s contract: a student's exercise
    1b) instead of the course's; what it emits must be an accepted prefix of the drafts and one
    more token, or the round refuses it by name. The course's own rule is back after the block."""
    if not callable(rule):
        raise ValueError(f"rule must be a function (p_rows, q_rows, draft_tokens, rng) -> emitted, got {rule!r}")
    _CHAIN_RULES.append(rule)
    try:
        yield
    finally:
        _CHAIN_RULES.pop()


def judge_chain(p_rows: np.ndarray, q_rows: np.ndarray, tokens: np.ndarray, rng: np.random.Generator) -> list[int]:
    """The sampled chain's verdict: the course's ``verify_chain``, or the rule ``chain_rule`` swapped in."""
    if not _CHAIN_RULES:
        return verify_chain(p_rows, q_rows, tokens, rng, validate=False)
    emitted = [int(t) for t in _CHAIN_RULES[-1](p_rows, q_rows, tokens, rng)]
    n = len(emitted) - 1
    if not 0 <= n <= len(tokens) or emitted[:n] != [int(t) for t in tokens[:n]] \
            or not 0 <= emitted[-1] < p_rows.shape[1]:
        raise ValueError(f"the chain rule must emit an accepted prefix of the drafts {list(map(int, tokens))} and one "
                         f"more token id in [0, {p_rows.shape[1]}), got {emitted}")
    return emitted
