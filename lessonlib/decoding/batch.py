"""Batched decoding: plain decoding and chain speculation over B sequences at once.

What serving does: B requests share every target forward. Each sequence keeps its own
committed tokens and accepts its own number of drafts per round, so after the first round the
rows sit at different lengths: the caches keep one length per row and each forward feeds every
row at its own positions with the mask that implies (``engines.batched``). A sequence that has
its tokens leaves the batch; the others go on at the smaller batch (a static batch, no new
requests joining: the simplest serving loop that shows the effect).

A batched round is the round of ``round.speculative_round``, row by row in one pass:

1. **draft** -- ``BatchChainDrafter.propose``: K batched draft forwards; row b samples x_j ~ q_j
   at the draft temperature (greedy: argmax), exactly as ``decode.ChainDrafter`` does;
2. **verify** -- ONE target forward over B x (K + 1) tokens: each row's root and its drafts;
3. **accept** -- the course's rules, never a new one: greedy rows through ``chain.verify_greedy``,
   sampled rows through ``core.batched.verify_rounds`` (the arithmetic ``chain.verify_chain``
   runs for one round), all B rows in one call; with no draft (plain decoding, K = 0) a
   sample from each row's p (``core.sampling.inverse_cdf``);
4. **commit** -- each row's cache keeps its root and its accepted drafts (a per-row
   truncation), its sequence grows, the drafter rolls back to it.

``batch_generate`` (plain) and ``batch_speculative_generate`` (chain with a draft model) return
(new tokens per prompt, one ``DecodeStats`` for the whole batch): counts summed over the rows
(tau is tokens per row-forward), ``seconds`` the batch's wall time, so ``tokens_per_second`` is
the batch's throughput; ``extra["emit_seconds"]`` holds, per sequence, when each of its tokens
was emitted (seconds after the first round started): the inter-token latencies.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from lessonlib.core.batched import verify_rounds
from lessonlib.core.chain import verify_greedy
from lessonlib.core.sampling import GREEDY_TEMPERATURE, inverse_cdf
from lessonlib.core.validate import check_finite_logits, check_k
from lessonlib.decoding.round import Ids, Sampling, check_budget, check_drafter, check_sampling_rng
from lessonlib.decoding.stats import DecodeStats
from lessonlib.decoding.timing import Clock, Timer, untimed
from lessonlib.engines.batched import BatchCache, batched_forward

if TYPE_CHECKING:
    from lessonlib.models.gpt import GPT

__all__ = ["BatchChainDrafter", "batch_generate", "batch_speculative_generate"]


def _padded(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], np.ndarray]:
    """Token rows right-padded with 0 to the longest (at least 1): (tokens (B, T), counts (B,))."""
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    T = max(1, int(counts.max()))
    return [list(r) + [0] * (T - len(r)) for r in rows], counts


def _numpy(logits: torch.Tensor, whose: str = "the model's") -> np.ndarray:
    return check_finite_logits(logits.double().cpu().numpy(), whose)


class BatchChainDrafter:
    """A small GPT drafting a chain of ``k`` tokens for each of B rows, with a ``BatchCache``:
    row b's cache holds its committed sequence except ``pending[b]`` (1 token, or 2 after a
    round that accepted every draft), which the first draft step feeds."""

    needs_features = False
    feature_layers: tuple[int, ...] | None = None

    def __init__(self, model: GPT, k: int, batch: int) -> None:
        self.model, self.k = model, check_k(k)
        self.vocab_size: int | None = model.config.vocab_size
        self.cache = BatchCache(model, batch)
        self.pending: list[list[int]] = []

    def commit(self, seqs: Sequence[list[int]], clock: Timer = untimed) -> None:
        """Roll every row back to its committed sequence; an empty cache is prefilled with all
        of each row but its last token."""
        if not self.cache.lengths.any():
            tokens, counts = _padded([s[:-1] for s in seqs])
            if counts.any():
                clock("draft", batched_forward, self.model, self.cache, tokens, counts, True)
        self.cache.truncate(np.minimum(self.cache.lengths, [len(s) - 1 for s in seqs]))
        self.pending = [s[n:] for s, n in zip(seqs, self.cache.lengths.tolist())]

    def select(self, rows: Sequence[int]) -> None:
        self.cache.select(rows)
        self.pending = [self.pending[r] for r in rows]

    def propose(self, sampling: Sampling, rng: np.random.Generator | None,
                clock: Timer = untimed) -> tuple[np.ndarray, np.ndarray | None]:
        """k batched draft steps (each timed as "draft"): (drafts (B, k) int64, q (B, k, V) or
        None when target and draft are both greedy)."""
        tq, B = sampling.draft_t, self.cache.batch
        tokens, counts = _padded(self.pending)
        drafts = np.zeros((B, self.k), dtype=np.int64)
        q_rows: list[np.ndarray] = []  # (B, V) each
        for j in range(self.k):
            fed = (tokens, counts) if j == 0 else (drafts[:, j - 1 : j], None)
            z = _numpy(clock("draft", batched_forward, self.model, self.cache, *fed, True), "the draft's")  # (B, V)
            if tq <= GREEDY_TEMPERATURE:
                drafts[:, j] = z.argmax(-1)
                if not sampling.greedy:  # a sampling target needs the law the drafts came from: one-hot
                    q_rows.append(sampling.draft_probs(z))
            else:
                q_rows.append(sampling.draft_probs(z))  # the same truncation as the target's p
                drafts[:, j] = inverse_cdf(q_rows[-1], cast(np.random.Generator, rng).random(B))
        return drafts, np.stack(q_rows, 1) if q_rows else None


def accept_rows(logits: np.ndarray, drafts: np.ndarray, q: np.ndarray | None, sampling: Sampling,
                rng: np.random.Generator | None) -> list[list[int]]:
    """Step 3 for B rows: the tokens each row emits (its accepted drafts plus one more).
    ``logits`` (B, K + 1, V), row b's position 0 after its root; ``drafts`` (B, K); ``q``
    (B, K, V), the laws the drafts were sampled from (None: greedy)."""
    B, K = drafts.shape
    if sampling.greedy:  # the greedy rule reads only argmaxes: the logits' are the softmax's
        return [verify_greedy(logits[b], drafts[b], validate=False) for b in range(B)]
    p = sampling.probs(logits)  # (B, K + 1, V)
    gen = cast(np.random.Generator, rng)
    if K == 0:  # plain decoding: a sample from each row's p
        return [[int(t)] for t in inverse_cdf(p[:, 0], gen.random((B,)))]
    u = gen.random((B, K + 1))  # per row: K accept tests, then the final token, as verify_chain draws them
    tokens, n_acc = verify_rounds(p, cast(np.ndarray, q), drafts, u[:, :K], u[:, K], validate=False)
    return [tokens[b, : n_acc[b] + 1].tolist() for b in range(B)]


def _round(target: GPT, cache: BatchCache, drafter: BatchChainDrafter | None, seqs: list[list[int]],
           sampling: Sampling, rng: np.random.Generator | None, clock: Timer) -> list[list[int]]:
    """One batched round on ``seqs`` (changed in place): draft, verify, accept, commit; returns
    each row's emitted tokens."""
    B = len(seqs)
    drafts, q = drafter.propose(sampling, rng, clock) if drafter else (np.zeros((B, 0), np.int64), None)  # 1.
    start = cache.lengths.copy()
    fed = np.concatenate([np.array([[s[-1]] for s in seqs]), drafts], 1)  # (B, K + 1): root, drafts
    phase = "verify" if drafter else "target"  # plain decoding's forward is the one-token step
    logits = _numpy(clock(phase, batched_forward, target, cache, fed))  # 2. verify: (B, K + 1, V)
    emitted = accept_rows(logits, drafts, q, sampling, rng)  # 3. accept
    cache.truncate(start + [len(e) for e in emitted])  # 4. commit: the root and the accepted drafts
    for s, e in zip(seqs, emitted):
        s += e
    if drafter:
        drafter.commit(seqs, clock)
    return emitted


def _check_prompts(target: GPT, prompts: Sequence[Ids], max_new_tokens: int, extra: int,
                   draft: GPT | None = None) -> list[list[int]]:
    if isinstance(prompts, (str, bytes)) or not len(prompts if isinstance(prompts, Sequence) or isinstance(
            prompts, np.ndarray) and prompts.ndim == 2 else ()):
        raise ValueError(f"prompts must be a non-empty list of token-id prompts (one per sequence of the batch), "
                         f"got {type(prompts).__name__}")
    for b, p in enumerate(prompts):  # a flat [1, 2, 3] is three prompts of one int each: refused, not read as one
        if isinstance(p, (str, bytes)) or not (isinstance(p, Sequence) or isinstance(p, np.ndarray) and p.ndim == 1):
            raise ValueError(f"prompts[{b}] must be a list of token ids (prompts is a list of prompts: "
                             f"[[1, 2, 3]] for one), got {type(p).__name__}")
    for p in prompts:
        check_budget(target, p, max_new_tokens, extra=extra, name="the target")
        if draft is not None:
            check_budget(draft, p, max_new_tokens, extra=extra - 1, name="the draft")
    return [[int(t) for t in p] for p in prompts]


@torch.inference_mode()
def _run(target: GPT, drafter: BatchChainDrafter | None, prompts: list[list[int]], max_new_tokens: int,
         sampling: Sampling, rng: np.random.Generator | None, loop: str,
         k: int | None = None) -> tuple[list[list[int]], DecodeStats]:
    """A batched prefill, then ``_round`` until every row has ``max_new_tokens``; a finished row
    leaves the batch (both caches drop it). Plain decoding prefills the whole prompt and takes
    its first token from the prefill, as ``decode.generate`` (so both time n - 1 steps)."""
    clock = Clock(target.device)
    seqs = [list(p) for p in prompts]
    cache = BatchCache(target, len(seqs))
    stats = DecodeStats(loop, sampling.temperature, max_new_tokens * len(seqs), k=k)
    emit: list[list[float]] = [[] for _ in seqs]  # per sequence: when each token was emitted
    if drafter:  # the prefill: all but each prompt's last token, the first round's root
        tokens, counts = _padded([s[:-1] for s in seqs])
        if counts.any():
            clock("prefill", batched_forward, target, cache, tokens, counts, True)
        drafter.commit(seqs, clock.as_phase("prefill"))
    else:  # plain decoding as ``decode.generate``: the whole prompt, whose last row gives the first token
        tokens, counts = _padded(seqs)
        first = _numpy(clock("prefill", batched_forward, target, cache, tokens, counts, True))  # (B, V)
        for s, e, times in zip(seqs, accept_rows(first[:, None], np.zeros((len(seqs), 0), np.int64), None,
                                                 sampling, rng), emit):
            s += e
            times.append(0.0)
            stats.record_round(0, 0, False, 0)
    live = [i for i, (s, p) in enumerate(zip(seqs, prompts)) if len(s) - len(p) < max_new_tokens]
    start = time.perf_counter()
    while live:  # each round feeds every live row its root (the last committed token) and its drafts
        emitted = _round(target, cache, drafter, [seqs[i] for i in live], sampling, rng, clock)  # grows seqs[i]
        now = time.perf_counter() - start
        for i, e in zip(live, emitted):
            stats.record_round(k or 0, len(e) - 1, len(e) - 1 < (k or 0), k or 0)
            emit[i] += [now] * len(e)
        done = [b for b, i in enumerate(live) if len(seqs[i]) - len(prompts[i]) >= max_new_tokens]
        if done:
            keep = [b for b in range(len(live)) if b not in done]
            live = [live[b] for b in keep]
            if live:
                cache.select(keep)
                if drafter:
                    drafter.select(keep)
    stats.finish(time.perf_counter() - start, clock)
    out = [s[len(p) : len(p) + max_new_tokens] for s, p in zip(seqs, prompts)]
    stats.extra = {"batch": len(seqs), "emit_seconds": [e[:max_new_tokens] for e in emit]}
    return out, stats


def batch_generate(target: GPT, prompts: Sequence[Ids], max_new_tokens: int, temperature: float | Sampling = 0.0,
                   rng: np.random.Generator | None = None) -> tuple[list[list[int]], DecodeStats]:
    """Plain decoding of every prompt at once (one forward per round feeds each row one token).
    ``rng``: needed when temperature > 1e-5. Returns (new tokens per prompt, ``DecodeStats``);
    row b's greedy tokens are ``decode.generate``'s for prompt b."""
    sampling = Sampling.of(temperature)
    rows = _check_prompts(target, prompts, max_new_tokens, 0)
    return _run(target, None, rows, max_new_tokens, sampling, check_sampling_rng(sampling, rng), "plain")


def batch_speculative_generate(target: GPT, draft: GPT, prompts: Sequence[Ids], k: int, max_new_tokens: int,
                               temperature: float | Sampling = 0.0, rng: np.random.Generator | None = None
                               ) -> tuple[list[list[int]], DecodeStats]:
    """Chain speculative decoding of every prompt at once: the draft proposes k tokens per row,
    one target forward verifies all B x (k + 1), each row accepts its own prefix. ``rng``:
    needed when temperature > 1e-5. Row b's greedy tokens are ``decode.speculative_generate``'s
    (and ``generate``'s) for prompt b; sampled, each row follows the target's law."""
    k = check_k(k)  # the one integer rule (core.validate.check_int): 3 and 3.0 pass, True and 3.5 do not
    if not isinstance(draft, torch.nn.Module) or not hasattr(draft, "config"):  # None: an AttributeError later
        raise ValueError(f"draft must be a GPT (the draft model: models.load('draft-kl')), got {type(draft).__name__}")
    sampling = Sampling.of(temperature)
    rows = _check_prompts(target, prompts, max_new_tokens, k - 1, draft)
    drafter = BatchChainDrafter(draft, k, len(rows))
    for p in rows:
        check_drafter(target, drafter, p)  # type: ignore[arg-type]  # it reads vocab_size and needs_features
    rng = check_sampling_rng(sampling, rng)
    return _run(target, drafter, rows, max_new_tokens, sampling, rng, "chain", k=int(k))
