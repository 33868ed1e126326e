"""Real decoding with KV caches: the plain baseline and chain speculative decoding.

Both loops keep one invariant: a model's cache holds the committed sequence except the
tokens it has not been fed yet, and each forward feeds exactly those (plus the drafts). So a
rollback after a rejection is one ``cache.truncate`` and nothing is ever recomputed. A chain
round is ``round.speculative_round`` with a ``ChainDrafter`` (below); ``fallback.ModelStream``
runs the same round.

Timing is split into draft, verify and overhead (everything else: sampling, the accept/reject
rule, bookkeeping); on CUDA the device is synchronised before every clock read.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from lessonlib.core.sampling import GREEDY_TEMPERATURE, inverse_cdf, sample
from lessonlib.core.validate import check_finite_logits, check_k
from lessonlib.decoding.round import (
    Ids,
    Proposal,
    Sampling,
    check_budget,
    check_drafter,
    check_sampling_rng,
    check_stop,
    feed,
    run_rounds,
)
from lessonlib.decoding.stats import DecodeStats
from lessonlib.decoding.timing import Clock, Timer, untimed

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    from lessonlib.decoding.drafters import Rule
    from lessonlib.models.gpt import GPT

__all__ = ["ChainDrafter", "feed", "generate", "next_token", "speculative_generate"]


class ChainDrafter:
    """A small GPT sampling a chain of ``k`` drafts from its own q, with its own KV cache
    (Leviathan et al. 2023, Chen et al. 2023). The cache holds the committed sequence except
    the tokens it has not been fed (``pending``), which the first draft step feeds.

    ``propose`` samples at the sampling's draft temperature (default: the target's), greedily
    at T <= 1e-5, and hands the round the q rows it sampled from (one-hot rows for a greedy
    draft judged by a sampling target; none when both are greedy).
    """

    needs_features = False
    feature_layers: tuple[int, ...] | None = None

    def __init__(self, model: GPT, k: int) -> None:
        self.model, self.k = model, check_k(k)
        self.vocab_size: int | None = model.config.vocab_size  # typed as Drafter's: a settable member must match
        self.cache = model.new_cache()
        self.pending: list[int] = []

    def commit(self, seq: list[int], features: torch.Tensor | None = None, clock: Timer = untimed) -> None:
        """Roll the cache back to the committed sequence (it keeps what it was fed of it); an
        empty cache is prefilled with all but the last token."""
        self.cache.truncate(min(self.cache.length, len(seq) - 1))
        if self.cache.length == 0 and len(seq) > 1:
            clock("draft", feed, self.model, self.cache, seq[:-1], rows=1)
        self.pending = list(seq[self.cache.length :])

    def propose(self, rule: Rule | None, sampling: Sampling, rng: np.random.Generator | None,
                clock: Timer = untimed) -> Proposal:
        """k draft steps, each one forward of the draft (timed as "draft") and one token; the
        proposal's q is (k, V) (or None: see the class)."""
        if rule is not None:
            raise ValueError("rule must be None for a ChainDrafter: its rule is k samples from q")
        drafts: list[int]
        q_rows: list[np.ndarray]  # (V,) each
        tq, drafts, q_rows, pending = sampling.draft_t, [], [], self.pending
        for _ in range(self.k):
            logits = clock("draft", feed, self.model, self.cache, pending, rows=1)[0]  # (V,) float64
            if tq <= GREEDY_TEMPERATURE:
                drafts.append(int(np.argmax(logits)))
                if not sampling.greedy:  # a sampling target needs the law the drafts came from: one-hot
                    q_rows.append(sampling.draft_probs(logits))
            else:
                q_rows.append(sampling.draft_probs(logits))  # the same truncation as the target's p
                drafts.append(int(inverse_cdf(q_rows[-1], np.asarray(cast(np.random.Generator, rng).random()))))
            pending = [drafts[-1]]
        return Proposal.chain(drafts, np.stack(q_rows) if q_rows else None)


def next_token(logits_row: np.ndarray, temperature: float | Sampling, rng: np.random.Generator | None) -> int:
    """The token after a row of logits ((V,)): argmax at T <= 1e-5, else a sample from
    softmax(z / T) after the sampling's truncation (``Sampling.probs``)."""
    sampling = Sampling.of(temperature)  # a negative T raises, it is not greedy
    if sampling.greedy:  # argmax of a NaN row is the NaN's index (token 0 for an all-NaN row): refuse it
        return int(np.argmax(check_finite_logits(np.asarray(logits_row, dtype=np.float64))))
    return int(sample(sampling.probs(logits_row), cast(np.random.Generator, rng)))  # sample checks rng


@torch.inference_mode()
def generate(model: GPT, prompt_tokens: Ids, max_new_tokens: int, temperature: float | Sampling = 0.0,
             rng: np.random.Generator | None = None, stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """Plain autoregressive decoding: one target forward per new token (the baseline).

    ``rng``: a numpy Generator, needed when temperature > 1e-5. ``stop``: a token id after which
    decoding ends (an end-of-turn token; the output ends with it). Returns (new_tokens,
    ``DecodeStats``): its ``target_forward_seconds`` is one one-token step in the loop.
    """
    sampling = Sampling.of(temperature)
    max_new_tokens = check_budget(model, prompt_tokens, max_new_tokens)
    rng = check_sampling_rng(sampling, rng)
    stop = check_stop(stop, model.config.vocab_size)
    clock = Clock(model.device)
    cache = model.new_cache()
    logits = clock("prefill", feed, model, cache, list(prompt_tokens), rows=1)[-1]  # (V,) float64
    new: list[int] = []
    start = time.perf_counter()
    for i in range(max_new_tokens):
        new.append(next_token(logits, sampling, rng))
        if new[-1] == stop:
            break
        if i + 1 < max_new_tokens:
            logits = clock("target", feed, model, cache, [new[-1]])[-1]
    stats = DecodeStats("plain", sampling.temperature, len(new), rounds=len(new), emitted=len(new))
    return new, stats.finish(time.perf_counter() - start, clock)


@torch.inference_mode()
def speculative_generate(target: GPT, draft: GPT, prompt_tokens: Ids, k: int, max_new_tokens: int,
                         temperature: float | Sampling = 0.0, rng: np.random.Generator | None = None,
                         stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """Chain speculative decoding: the draft proposes k tokens (sampled from its q at T > 0),
    the target verifies them in one forward, the exact rule (``verify_chain``;
    ``verify_greedy`` at T <= 1e-5) accepts a prefix and adds one token, and both caches roll
    back to the committed sequence.

    ``rng``: a numpy Generator, needed when temperature > 1e-5. Returns (new_tokens,
    ``DecodeStats``): tau, alpha (measured while decoding), the counts, and the in-loop seconds
    of one draft step and one verify forward. c and r need a one-token target step, which this
    loop never takes: ``measures.compare(stats, plain_stats)`` combines it with plain decoding's.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    k = check_k(k)
    sampling = Sampling.of(temperature)
    drafter = ChainDrafter(draft, k)
    check_drafter(target, drafter, prompt_tokens)
    # the last round starts with at most prompt + max_new_tokens - 1 tokens and the target
    # scores k drafts past them: k - 1 positions beyond the output (the draft needs fewer)
    max_new_tokens = check_budget(target, prompt_tokens, max_new_tokens, extra=k - 1, name="the target")
    check_budget(draft, prompt_tokens, max_new_tokens, extra=k - 2, name="the draft")
    rng = check_sampling_rng(sampling, rng)
    return run_rounds(target, drafter, None, prompt_tokens, max_new_tokens, sampling, rng, "chain", k=k, stop=stop)
