"""Real decoding with KV caches: the plain baseline and chain speculative decoding.

Both loops keep one invariant: a model's cache holds the committed sequence except the
tokens it has not been fed yet, and each forward feeds exactly those (plus the drafts). So a
rollback after a rejection is one ``cache.truncate`` and nothing is ever recomputed.
``speculative_round`` is one round; ``fallback.ModelStream`` reuses it.

Timing is split into draft, verify and overhead (everything else: sampling, the accept/reject
rule, bookkeeping); on CUDA the device is synchronised before every clock read.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib.core.chain import verify_chain, verify_greedy
from lessonlib.core.sampling import GREEDY_TEMPERATURE, inverse_cdf, sample, softmax
from lessonlib.core.validate import check_int, check_k, check_temperature, check_token_ids
from lessonlib.decoding import measures
from lessonlib.decoding.timing import Clock, untimed


def timing_stats(clock: Clock, seconds: float, max_new_tokens: int) -> dict:
    """The wall-time split every decoding loop reports: draft, verify, overhead and throughput."""
    draft_s, verify_s = clock.seconds.get("draft", 0.0), clock.seconds.get("verify", 0.0)
    return {
        "draft_seconds": draft_s,
        "verify_seconds": verify_s,
        "overhead_seconds": seconds - draft_s - verify_s,
        "seconds": seconds,
        "tokens_per_second": max_new_tokens / seconds,
        "seconds_per_token": seconds / max_new_tokens,
    }


def _check_budget(model, prompt_tokens, max_new_tokens, extra=0, name="the model"):
    """The prompt (token ids of ``model``'s vocabulary) and ``max_new_tokens`` (+ ``extra``
    positions a round scores beyond them) must fit the context: exactly filling it is fine."""
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


def feed(model, cache, tokens, rows=None):
    """Feed ``tokens`` after the cached prefix; return the logits of the last ``rows`` of them
    (default all) as a float64 numpy array."""
    idx = torch.as_tensor(tokens, dtype=torch.long, device=model.device)[None]
    logits = model(idx, cache=cache)[0]
    return (logits if rows is None else logits[-rows:]).double().cpu().numpy()


def _rng(rng):
    if rng is None:
        return np.random.default_rng(0)
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator")
    return rng


def next_token(logits_row, temperature, rng):
    """The token after a row of logits: argmax at T <= 1e-5, else a sample from softmax(z / T)."""
    if check_temperature(temperature) <= GREEDY_TEMPERATURE:  # a negative T raises, it is not greedy
        return int(np.argmax(logits_row))
    return int(sample(softmax(logits_row, temperature), rng))


@torch.inference_mode()
def generate(model, prompt_tokens, max_new_tokens, temperature=0.0, rng=None):
    """Plain autoregressive decoding: one target forward per new token (the baseline).

    Returns (new_tokens, stats) with stats: target_calls, seconds, tokens_per_second,
    seconds_per_token.
    """
    check_temperature(temperature)
    _check_budget(model, prompt_tokens, max_new_tokens)
    rng = _rng(rng)
    clock = Clock(model.device)
    cache = model.new_cache()
    logits = clock("prefill", feed, model, cache, list(prompt_tokens))[-1]
    new = []
    start = time.perf_counter()
    for i in range(max_new_tokens):
        new.append(next_token(logits, temperature, rng))
        if i + 1 < max_new_tokens:
            logits = clock("target", feed, model, cache, [new[-1]])[-1]
    seconds = time.perf_counter() - start
    return new, {
        "target_calls": clock.calls.get("target", 0) + 1,
        "seconds": seconds,
        "tokens_per_second": max_new_tokens / seconds,
        "seconds_per_token": seconds / max_new_tokens,
        "target_forward_seconds": clock.per_call("target"),  # one one-token step, in the loop
    }


def speculative_round(target, draft, t_cache, d_cache, seq, k, temperature, rng, draft_temperature=None, clock=untimed):
    """One round of chain speculative decoding on KV caches; appends the emitted tokens to
    ``seq`` (a list, changed in place), rolls both caches back, and returns the emitted tokens.

    The caches hold a prefix of ``seq`` (the tokens they lack are fed first, in the same
    forward). The draft samples at ``draft_temperature`` (default: the target's), greedily at
    T <= 1e-5; the target judges at ``temperature`` with ``verify_chain``, or ``verify_greedy``
    at T <= 1e-5. Rows straight from ``softmax`` are valid, so the rule skips its input checks.
    """
    # checked here, not only by the callers: the fallback stream calls this with a temperature
    # that may change at every position (a negative one must raise, not mean greedy)
    check_temperature(temperature)
    tq = temperature if draft_temperature is None else check_temperature(draft_temperature, "draft_temperature")
    greedy = temperature <= GREEDY_TEMPERATURE
    drafts, q_rows, pending = [], [], seq[d_cache.length :]
    for _ in range(k):
        logits = clock("draft", feed, draft, d_cache, pending, rows=1)[0]
        if tq <= GREEDY_TEMPERATURE:
            drafts.append(int(np.argmax(logits)))
            if not greedy:  # a sampled target needs the law the drafts came from: one-hot
                q_rows.append(softmax(logits, tq))
        else:
            q_rows.append(softmax(logits, tq))
            drafts.append(int(inverse_cdf(q_rows[-1], np.asarray(rng.random()))))
        pending = [drafts[-1]]
    # one target forward over the unfed committed tokens and all k drafts
    logits = clock("verify", feed, target, t_cache, seq[t_cache.length :] + drafts, rows=k + 1)
    if greedy:  # the greedy rule reads only argmaxes: the logits' are the one-hot softmax's
        emitted = verify_greedy(logits, drafts, validate=False)
    else:
        emitted = verify_chain(softmax(logits, temperature), np.stack(q_rows), drafts, rng, validate=False)
    seq += emitted
    # the caches keep the committed tokens minus the last one (fed next round)
    t_cache.truncate(len(seq) - 1)
    d_cache.truncate(min(d_cache.length, len(seq) - 1))
    return emitted


@torch.inference_mode()
def speculative_generate(target, draft, prompt_tokens, k, max_new_tokens, temperature=0.0, rng=None):
    """Chain speculative decoding: the draft proposes k tokens, the target verifies them in
    one forward, the exact rule (``verify_chain``; ``verify_greedy`` at T <= 1e-5) accepts
    a prefix and adds one token, and both caches roll back to the committed sequence.

    Returns (new_tokens, stats): tau and alpha (``measures``: alpha is measured while
    decoding), accepted / judged / drafted counts, target_calls, draft_calls,
    draft/verify/overhead seconds, tokens_per_second, and the in-loop seconds of one draft
    step and one verify forward. c and r need a one-token target step, which this loop never
    takes: ``measures.compare(stats, plain_stats)`` combines it with plain decoding's.
    """
    if not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    k = check_k(k)
    check_temperature(temperature)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"target and draft must share a vocabulary, got sizes {target.config.vocab_size} "
                         f"and {draft.config.vocab_size}")
    # the last round starts with at most prompt + max_new_tokens - 1 tokens and the target
    # scores k drafts past them: k - 1 positions beyond the output (the draft needs fewer)
    _check_budget(target, prompt_tokens, max_new_tokens, extra=k - 1, name="the target")
    _check_budget(draft, prompt_tokens, max_new_tokens, extra=k - 2, name="the draft")
    rng = _rng(rng)
    clock = Clock(target.device)
    seq = list(prompt_tokens)
    t_cache, d_cache = target.new_cache(), draft.new_cache()
    if len(seq) > 1:  # prefill all but the last token; the first round feeds it
        clock("prefill", feed, target, t_cache, seq[:-1])
        clock("prefill", feed, draft, d_cache, seq[:-1])
    goal = len(seq) + max_new_tokens
    drafted = accepted = rejected = rounds = 0
    start = time.perf_counter()
    while len(seq) < goal:
        emitted = speculative_round(target, draft, t_cache, d_cache, seq, k, temperature, rng, clock=clock)
        n_ok = len(emitted) - 1
        drafted, accepted, rounds = drafted + k, accepted + n_ok, rounds + 1
        rejected += n_ok < k
    seconds = time.perf_counter() - start
    new = seq[goal - max_new_tokens : goal]
    return new, {
        "k": int(k),
        "temperature": float(temperature),
        "tau": measures.tau(len(seq) - (goal - max_new_tokens), rounds),
        # per-token acceptance: every judged draft is a success or the round's one failure
        "alpha": measures.alpha(accepted, accepted + rejected),
        "accepted": accepted,
        "judged": accepted + rejected,
        "drafted": drafted,
        "accepted_fraction": accepted / drafted,
        "target_calls": rounds,
        "draft_calls": clock.calls.get("draft", 0),
        **timing_stats(clock, seconds, max_new_tokens),
        "draft_forward_seconds": clock.per_call("draft"),
        "verify_forward_seconds": clock.per_call("verify"),
    }
