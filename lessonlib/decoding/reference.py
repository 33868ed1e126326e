"""The generic reference loops over any model with ``logits(tokens) -> (len(tokens), V)``
(row i: next-token logits after ``tokens[: i + 1]``; course-design.md).

They recompute the whole context on every call, so they run on toy tables, Markov chains and
the tiny GPTs alike; ``decode`` has the KV-cached loops, which must produce the same tokens
for the same seed. numpy only (no torch).
"""
from __future__ import annotations

import numpy as np

from lessonlib.core.chain import verify_chain, verify_greedy
from lessonlib.core.sampling import GREEDY_TEMPERATURE, sample, softmax
from lessonlib.core.validate import check_int, check_k, check_rng, check_same_vocab, check_temperature
from lessonlib.decoding import measures


def _next_logits(model, tokens, name, rows=1):
    z = np.asarray(model.logits(tokens), dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < rows:
        raise ValueError(f"{name}.logits must return a (len(tokens), V) array, got shape {z.shape}")
    return z[-rows:]


def _check_decode_args(prompt, max_new_tokens, temperature, rng):
    check_temperature(temperature)
    prompt = [check_int(t, "prompt token", minimum=0) for t in prompt]  # the model checks the vocabulary
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    check_int(max_new_tokens, "max_new_tokens", minimum=1)
    greedy = temperature <= GREEDY_TEMPERATURE
    if not greedy:
        check_rng(rng, "rng (needed when temperature > 1e-5)")
    return prompt, greedy


def autoregressive_decode(model, prompt, max_new_tokens: int, temperature: float = 1.0, rng=None) -> list[int]:
    """Plain decoding, one ``model.logits`` call per token: x_t ~ softmax(z_t / T) (argmax at
    T <= 1e-5). The reference that ``speculative_decode`` must match in distribution."""
    seq, greedy = _check_decode_args(prompt, max_new_tokens, temperature, rng)
    start = len(seq)
    for _ in range(int(max_new_tokens)):
        z = _next_logits(model, seq, "model")[0]
        seq.append(int(np.argmax(z)) if greedy else sample(softmax(z, temperature), rng))
    return seq[start:]


def speculative_decode(target, draft, prompt, k: int, temperature: float = 1.0,
                       max_new_tokens: int = 32, rng=None):
    """Chain speculative decoding over two ``logits(tokens)`` models.

    Each round: draft k tokens x_j ~ q_j = softmax(draft logits / T), one ``target.logits``
    call over context + drafts gives p_0..p_k (same T), then ``verify_chain`` (or
    ``verify_greedy`` when T <= 1e-5) emits 1..k+1 tokens. Output has the law of sampling
    from the target alone. Returns (new_tokens, stats): target_calls (= rounds),
    draft_calls, drafted, accepted, accepted_per_round, alpha (accepted / judged drafts,
    a round judges its accepted drafts plus the one it rejects), tau (tokens emitted per target
    call, the last round's surplus included, as in every loop: ``measures.tau``). The
    returned tokens are cut to ``max_new_tokens``.
    """
    k = check_k(k)
    seq, greedy = _check_decode_args(prompt, max_new_tokens, temperature, rng)
    start, goal = len(seq), len(seq) + int(max_new_tokens)
    draft_calls, accepted_per_round, rejected = 0, [], 0
    while len(seq) < goal:
        drafts, q_rows = [], []
        for _ in range(k):
            q = softmax(_next_logits(draft, seq + drafts, "draft")[0], temperature)
            drafts.append(int(np.argmax(q)) if greedy else sample(q, rng))
            q_rows.append(q)
        draft_calls += k
        p_rows = softmax(_next_logits(target, seq + drafts, "target", rows=k + 1), temperature)
        check_same_vocab(p_rows, q_rows[0], "target logits", "draft logits")
        emitted = verify_greedy(p_rows, drafts) if greedy else verify_chain(p_rows, np.stack(q_rows), drafts, rng)
        accepted_per_round.append(len(emitted) - 1)
        rejected += len(emitted) - 1 < k
        seq += emitted
    new = seq[start:goal]
    rounds, accepted = len(accepted_per_round), sum(accepted_per_round)
    return new, {
        "target_calls": rounds,
        "draft_calls": draft_calls,
        "drafted": rounds * k,
        "accepted": accepted,
        "accepted_per_round": accepted_per_round,
        "alpha": measures.alpha(accepted, accepted + rejected),
        "tau": measures.tau(len(seq) - start, rounds),
    }

