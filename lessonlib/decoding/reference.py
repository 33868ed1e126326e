"""The generic reference loops over any model with ``logits(tokens) -> (len(tokens), V)``
(row i: next-token logits after ``tokens[: i + 1]``; course-design.md).

They recompute the whole context on every call, so they run on toy tables, Markov chains and
the tiny GPTs alike; ``decode`` has the KV-cached loops, which must produce the same tokens
for the same seed. numpy only (no torch).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from lessonlib.core.chain import verify_chain, verify_greedy
from lessonlib.core.sampling import GREEDY_TEMPERATURE, sample, softmax
from lessonlib.core.validate import SAMPLING_RNG, check_int, check_k, check_rng, check_same_vocab, check_temperature
from lessonlib.decoding.stats import DecodeStats

if TYPE_CHECKING:
    from lessonlib.core.toy import LanguageModel


def _next_logits(model: LanguageModel, tokens: list[int], name: str, rows: int = 1) -> np.ndarray:
    """The last ``rows`` rows of ``model.logits(tokens)``: (rows, V) float64."""
    z = np.asarray(model.logits(tokens), dtype=np.float64)  # (len(tokens), V)
    if z.ndim != 2 or z.shape[0] < rows:
        raise ValueError(f"{name}.logits must return a (len(tokens), V) array, got shape {z.shape}")
    return z[-rows:]


Law: TypeAlias = Callable[[np.ndarray], np.ndarray]  # logits (..., V) -> sampling distributions (..., V)


def _laws(temperature: Any) -> tuple[float, Law, Law]:
    """(T, the target's law, the draft's law) of a temperature or a ``decoding.round.Sampling``
    (read by its attributes: importing ``round`` would import torch), truncation included."""
    if hasattr(temperature, "probs") and hasattr(temperature, "draft_probs"):
        return float(temperature.temperature), temperature.probs, temperature.draft_probs
    t = check_temperature(temperature)
    law: Law = lambda z: softmax(z, t)  # noqa: E731  (softmax looked up at call time)
    return t, law, law


def _check_decode_args(prompt: Iterable[int], max_new_tokens: int, temperature: float,
                       rng: np.random.Generator | None) -> tuple[list[int], bool]:
    check_temperature(temperature)
    prompt = [check_int(t, "prompt token", minimum=0) for t in prompt]  # the model checks the vocabulary
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    check_int(max_new_tokens, "max_new_tokens", minimum=1)
    greedy = temperature <= GREEDY_TEMPERATURE
    if not greedy:
        check_rng(rng, SAMPLING_RNG)
    return prompt, greedy


def autoregressive_decode(model: LanguageModel, prompt: Iterable[int], max_new_tokens: int,
                          temperature: Any = 1.0, rng: np.random.Generator | None = None) -> list[int]:
    """Plain decoding, one ``model.logits`` call per token: x_t ~ softmax(z_t / T) (argmax at
    T <= 1e-5; ``temperature`` may be a ``Sampling``, whose truncation then applies). The
    reference that ``speculative_decode`` must match in distribution."""
    t, law, _ = _laws(temperature)
    seq, greedy = _check_decode_args(prompt, max_new_tokens, t, rng)
    start = len(seq)
    for _ in range(int(max_new_tokens)):
        z = _next_logits(model, seq, "model")[0]  # (V,)
        # sample: an int for a (V,) row; rng: checked above unless greedy
        seq.append(int(np.argmax(z)) if greedy
                   else cast(int, sample(law(z), cast(np.random.Generator, rng))))
    return seq[start:]


def speculative_decode(target: LanguageModel, draft: LanguageModel, prompt: Iterable[int], k: int,
                       temperature: Any = 1.0, max_new_tokens: int = 32,
                       rng: np.random.Generator | None = None) -> tuple[list[int], DecodeStats]:
    """Chain speculative decoding over two ``logits(tokens)`` models.

    Each round: draft k tokens x_j ~ q_j = softmax(draft logits / T) (a ``Sampling``'s truncation
    applied to p and q alike), one ``target.logits``
    call over context + drafts gives p_0..p_k (same T), then ``verify_chain`` (or
    ``verify_greedy`` when T <= 1e-5) emits 1..k+1 tokens. Output has the law of sampling
    from the target alone. Returns (new_tokens, ``DecodeStats``) -- target_calls (= rounds),
    draft_calls, drafted, accepted, ``lengths`` (accepted per round), alpha (accepted / judged
    drafts, a round judges its accepted drafts plus the one it rejects), tau (tokens emitted per
    target call, the last round's surplus included, as in every loop) -- untimed. The returned
    tokens are cut to ``max_new_tokens``.
    """
    k = check_k(k)
    t, law, draft_law = _laws(temperature)
    seq, greedy = _check_decode_args(prompt, max_new_tokens, t, rng)
    start, goal = len(seq), len(seq) + int(max_new_tokens)
    stats = DecodeStats("chain", t, int(max_new_tokens), k=k)
    drafts: list[int]
    q_rows: list[np.ndarray]  # (V,) each
    while len(seq) < goal:
        drafts, q_rows = [], []
        for _ in range(k):
            q = draft_law(_next_logits(draft, seq + drafts, "draft")[0])  # (V,)
            # sample: an int for a (V,) row; rng: checked above unless greedy
            drafts.append(int(np.argmax(q)) if greedy else cast(int, sample(q, cast(np.random.Generator, rng))))
            q_rows.append(q)
        p_rows = law(_next_logits(target, seq + drafts, "target", rows=k + 1))  # (k + 1, V)
        check_same_vocab(p_rows, q_rows[0], "target logits", "draft logits")
        emitted = (verify_greedy(p_rows, drafts) if greedy
                   else verify_chain(p_rows, np.stack(q_rows), drafts, cast(np.random.Generator, rng)))
        n_ok = len(emitted) - 1
        stats.record_round(k, n_ok, n_ok < k, k)
        seq += emitted
    stats.phase_calls["draft"] = k * stats.rounds
    return seq[start:goal], stats
