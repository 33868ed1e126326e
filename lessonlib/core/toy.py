"""Toy language models in the course's ``logits(tokens)`` protocol (numpy only).

A model is any object with ``logits(tokens) -> (len(tokens), V)``: row i holds the next-token
logits after ``tokens[: i + 1]`` (course-design.md). These are the small exact ones the
notebooks, checks and tests run the generic loops on:

* ``NgramLM`` -- the next token depends on the last ``order`` tokens through a probability
  table of shape (V,) * order + (V,). Order 1 is a Markov chain (``markov``); order 2 or more
  is the "context" model: its next token depends on more than the last token, so a loop that
  feeds a model the wrong context (or a cache the wrong keys) gives other tokens.
* ``random_ngram`` / ``mix`` -- a random target and a draft that is a noisy copy of it.
* ``continuation_law`` -- the exact law of the next ``length`` tokens of any such model at a
  temperature, by enumeration (for chi-square tests and the notebooks' exactness checks).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lessonlib.core.sampling import softmax
from lessonlib.core.validate import (
    check_int,
    check_interval,
    check_positive_number,
    check_probs,
    check_rng,
    check_temperature,
    check_token_ids,
    check_token_sequence,
)


class LanguageModel(Protocol):
    """The course's model protocol: row i of ``logits(tokens)`` (len(tokens), V) holds the
    next-token logits after ``tokens[: i + 1]``."""

    def logits(self, tokens: Sequence[int]) -> np.ndarray: ...


class NgramLM:
    """Next-token probabilities ``table[x_{t-order+1}, ..., x_t]`` (a (V,) * order + (V,) table,
    every last-axis row a distribution); logits are their logs (-inf where the table is 0).

    Positions with fewer than ``order`` tokens of context see ``pad`` (default token 0) before
    the first token, so an order-2 model's first row is ``table[pad, tokens[0]]``.
    """

    def __init__(self, table: npt.ArrayLike, pad: int = 0):
        table = np.asarray(table, dtype=np.float64)
        if table.ndim < 2 or len(set(table.shape)) != 1:
            raise ValueError(f"table must have shape (V,) * order + (V,) with order >= 1, got {table.shape}")
        check_probs(table.reshape(-1, table.shape[-1]), "table")
        self.table = table
        self.vocab_size = table.shape[-1]
        self.order = table.ndim - 1
        self.pad = int(check_token_ids([check_int(pad, "pad")], self.vocab_size, "pad")[0])
        with np.errstate(divide="ignore"):  # a zero-probability token has logit -inf
            self.log_table = np.log(table)

    def logits(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """(len(tokens), V) next-token logits, row i after ``tokens[: i + 1]``."""
        t = check_token_sequence(tokens, self.vocab_size, "tokens")
        padded = np.concatenate([np.full(self.order - 1, self.pad, dtype=np.int64), t])
        # row i's context: padded[i : i + order], the last ``order`` tokens up to tokens[i]
        context = np.stack([padded[j : j + len(t)] for j in range(self.order)])
        return self.log_table[tuple(context)]

    def __repr__(self) -> str:
        return f"NgramLM(vocab_size={self.vocab_size}, order={self.order})"


def markov(transition: npt.ArrayLike) -> NgramLM:
    """Order-1 model: ``transition[a, b]`` = P(next = b | last = a)."""
    return NgramLM(transition)


def random_ngram(vocab_size: int, order: int, rng: np.random.Generator, concentration: float = 1.0) -> NgramLM:
    """Every row drawn from Dirichlet(concentration): small concentration -> peaked rows."""
    V, n = check_int(vocab_size, "vocab_size", 2), check_int(order, "order", 1)
    rng = check_rng(rng)
    check_positive_number(concentration, "concentration")
    return NgramLM(rng.dirichlet(np.full(V, float(concentration)), size=(V,) * n))


def mix(a: NgramLM, b: NgramLM, weight: float) -> NgramLM:
    """The model with table (1 - weight) a + weight b (a draft: a noisy copy of a target)."""
    if a.table.shape != b.table.shape:
        raise ValueError(f"a and b must have the same table shape, got {a.table.shape} and {b.table.shape}")
    check_interval(weight, "weight", "[0, 1]")
    return NgramLM((1 - weight) * a.table + weight * b.table, pad=a.pad)


def continuation_law(model: LanguageModel, prompt: Sequence[int], length: int,
                     temperature: float = 1.0) -> np.ndarray:
    """P(next ``length`` tokens = s | prompt) under sampling at ``temperature``, for every s:
    an array of shape (V,) * length, from one ``model.logits`` call per prefix (V^d prefixes
    at depth d, so keep V and length small)."""
    length = check_int(length, "length", 1)
    check_temperature(temperature)
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    first = softmax(np.asarray(model.logits(prompt))[-1], temperature)
    V = first.size
    law = first
    for depth in range(1, length):
        rows = np.stack([softmax(np.asarray(model.logits(prompt + list(prefix)))[-1], temperature)
                         for prefix in itertools.product(range(V), repeat=depth)])
        law = law.reshape(-1, 1) * rows  # P(prefix) * P(next | prefix), prefixes in product order
    return law.reshape((V,) * length)
