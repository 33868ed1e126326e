"""``ModelStream``: real models behind ``fallback.drive`` (``fallback`` re-exports it).

Plain steps and chain speculative rounds on one shared sequence, both ``round.speculative_round``,
so a ``fallback`` policy can switch between them at any step.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lessonlib.core.validate import check_k, check_temperature, check_token_sequence
from lessonlib.decoding.decode import ChainDrafter
from lessonlib.decoding.drafters import NoDraft
from lessonlib.decoding.round import Ids, Sampling, check_sampling_rng, feed, speculative_round

if TYPE_CHECKING:  # the type only: importing lessonlib.models applies the thread policy
    from lessonlib.models.gpt import GPT


class ModelStream:
    """Real models behind ``drive``: plain steps and speculative rounds on one shared sequence.

    Both are ``round.speculative_round``: a speculative round with a ``decode.ChainDrafter``, a
    plain step with ``drafters.NoDraft`` (an empty proposal: the one-token forward, then the
    target's own sampling). The target's cache holds the committed sequence except its last
    token and the draft's a prefix of it, as in ``decode``, so plain steps and rounds can
    interleave and the policy can switch at any step. ``temperature`` is a number, a function
    of the output position (a stream whose temperature changes), or a ``round.Sampling`` (its top-k /
    top-p / min-p then apply to target and draft at every step); ``draft_temperature``
    (default: the target's) sets the draft's own sampling temperature: 0 gives a deterministic
    greedy draft, whose q is one-hot, so the exact rule accepts its token x with probability
    p_T(x). ``rng``: a numpy Generator, needed unless every temperature is greedy. A prompt
    must leave room for one round (at most ``block_size - k - 1`` tokens; longer raises
    ValueError: pass ``prompt[-n:]`` to keep the newest). When the context fills while
    generating, the last ``block_size // 2`` tokens are kept and both caches re-filled
    (counted in that step's time). ``requests``: optional [(output position, prompt tokens),
    ...] -- a stream of requests: the first step at or after each position starts over from
    that prompt (its prefill is counted).
    """

    def __init__(self, target: GPT, draft: GPT, prompt_tokens: Ids, k: int,
                 temperature: float | Callable[[int], float] | Sampling,
                 draft_temperature: float | None = None, rng: np.random.Generator | None = None,
                 requests: Iterable[tuple[int, Ids]] = ()) -> None:
        k = check_k(k)
        self.truncation: dict[str, Any] = {}  # top-k / top-p / min-p of a Sampling, applied at every temperature
        if isinstance(temperature, Sampling):
            base = Sampling.of(temperature, draft_temperature)
            temperature, draft_temperature = base.temperature, base.draft_temperature
            self.truncation = {"top_k": base.top_k, "top_p": base.top_p, "min_p": base.min_p}
        if target.config.vocab_size != draft.config.vocab_size:
            raise ValueError("target and draft must share a vocabulary")
        if len(prompt_tokens) < 1:
            raise ValueError("prompt_tokens must hold at least one token")
        check_temperature(0.0 if draft_temperature is None else draft_temperature, "draft_temperature")
        check_temperature(0.0 if callable(temperature) else temperature)  # a function of the position: at every step
        self.target, self.draft, self.k = target, draft, int(k)
        self.temperature: Callable[[int], float] = (temperature if callable(temperature)
                                                    else (lambda position: temperature))
        self.draft_temperature = draft_temperature
        self.rng = rng if callable(temperature) else check_sampling_rng(Sampling(temperature, draft_temperature),
                                                                        rng)
        self.block = min(target.config.block_size, draft.config.block_size)
        if self.k > self.block - 2:
            raise ValueError(f"k must be <= {self.block - 2} (a round of k + 1 tokens after a prompt token "
                             f"within the context of {self.block}), got {k}")
        self.requests: list[tuple[int, list[int]]] = sorted((int(at), list(tokens)) for at, tokens in requests)
        if any(len(tokens) < 1 for _, tokens in self.requests):
            raise ValueError("every request's prompt must hold at least one token")
        for i, (_, tokens) in enumerate(self.requests):
            self._check_prompt(tokens, f"requests[{i}] prompt")
        self.new_tokens: list[int] = []
        self.no_draft = NoDraft()
        self.restart(prompt_tokens)

    def restart(self, prompt_tokens: Ids) -> None:
        """Start over from a new prompt (a new request): fresh caches, prefilled."""
        self.seq: list[int] = self._check_prompt(prompt_tokens, "prompt_tokens")
        self._refill()

    def _check_prompt(self, prompt_tokens: Ids, name: str) -> list[int]:
        """A prompt that leaves room for one round, as a list; never cut silently."""
        tokens = check_token_sequence(list(prompt_tokens), self.target.config.vocab_size, name).tolist()
        room = self.block - self.k  # a round scores the root and k drafts after len(seq) - 1 cached tokens
        if len(tokens) > room:
            raise ValueError(f"{name} must hold at most {room} tokens (the context of {self.block} less the "
                             f"k = {self.k} drafts of a round), got {len(tokens)}; "
                             f"pass {name}[-{room}:] to keep the newest")
        return tokens

    def _next_request(self, position: int) -> None:
        while self.requests and self.requests[0][0] <= position:
            self.restart(self.requests.pop(0)[1])

    @torch.inference_mode()
    def _refill(self) -> None:
        self.t_cache, self.drafter = self.target.new_cache(), ChainDrafter(self.draft, self.k)
        if len(self.seq) > 1:
            feed(self.target, self.t_cache, self.seq[:-1], rows=1)
        self.drafter.commit(self.seq)  # prefills the draft's fresh cache

    def _make_room(self, extra: int) -> None:
        if len(self.seq) + extra > self.block:
            self.seq = self.seq[-(self.block // 2) :]
            self._refill()

    def _sampling(self, position: int) -> Sampling:
        """This position's sampling; a temperature that changes is checked, with the rng, at every step."""
        sampling = Sampling(self.temperature(position), self.draft_temperature, **self.truncation)
        check_sampling_rng(sampling, self.rng)
        return sampling

    @torch.inference_mode()
    def plain(self, position: int) -> None:
        """One target forward, one token sampled at T(position)."""
        self._next_request(position)
        self._make_room(0)  # a plain step feeds the root at len(seq) - 1
        result = speculative_round(self.target, self.t_cache, self.no_draft, None, self.seq, self._sampling(position),
                                   self.rng)
        self.drafter.commit(self.seq)
        self.new_tokens += result.emitted

    @torch.inference_mode()
    def speculate(self, position: int) -> tuple[int, int]:
        """One round: k draft forwards, one target forward, the exact rule. Returns (accepted, k)."""
        self._next_request(position)
        self._make_room(self.k)  # the root and k drafts after len(seq) - 1 cached tokens
        result = speculative_round(self.target, self.t_cache, self.drafter, None, self.seq, self._sampling(position),
                                   self.rng)
        self.new_tokens += result.emitted
        return len(result.path), self.k
