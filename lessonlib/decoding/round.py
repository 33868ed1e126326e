"""One speculative round, the shape every loop shares: draft -> verify -> accept -> commit.

Vocabulary (``stats`` has the measured quantities):

* the **committed sequence** ``seq``: prompt + emitted tokens. The target's KV cache holds all of
  it but the last token, the **root**, which the next forward feeds first.
* **sampling** (``Sampling``): temperature, top-k, top-p and min-p, applied by one function
  (``core.sampling.process``) to the target's rows (p) and the draft's (q) alike.
* a **proposal** (``Proposal``): N draft nodes as a tree in ``core.tree``'s arrays -- ``parents``
  (node -1 is the root) and ``tokens`` -- and ``q``, the draft distributions the nodes were
  *sampled* from (a chain sampled by a draft model or a head, a sampled tree of
  ``core.tree_sampled``, drawn with or without replacement), or None for **deterministic
  candidates** (a drafting rule's top-k tree, prompt lookup, lookahead), whose q is one-hot.
* **verify**: ONE target forward over [root] + the N nodes, with the tree attention mask and
  positions ``len(seq) - 1 + depth`` (a chain needs no mask: its tree mask is the causal one).
* **accept**: at T <= 1e-5 the greedy rule (the longest branch that equals the target's
  argmax); with q rows the chain rule min(1, p/q) with the residual norm(max(p - q, 0))
  (``core.chain.verify_chain``); a sampled tree the recursive rejection rule of its draws
  (``core.tree_sampled.verify_tree_sampled``); without q the sibling rule for deterministic candidates
  (``core.tree.verify_tree``: accept a child with probability p(child), else zero it and
  renormalise). Each keeps the output distributed exactly as the target's own sampling.
* **commit**: the target cache keeps the root and the accepted nodes' keys/values in order
  (``KVCache.keep``: it then equals a fresh prefill), ``seq`` grows by the emitted tokens, and
  the drafter is told (``Drafter.commit``), with the target's features at the kept positions
  when it reads them.

``run_rounds`` is every ``*_generate``: a prefill, then rounds until the requested length, with
an optional hook after each round (lookahead's window update). Random numbers: every loop
that samples (T > 1e-5) needs an explicit ``numpy.random.Generator``; greedy decoding needs none.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import torch

from lessonlib.core import tree
from lessonlib.core.chain import verify_greedy
from lessonlib.core.sampling import GREEDY_TEMPERATURE, check_truncation, process
from lessonlib.core.tree_sampled import verify_tree_sampled
from lessonlib.core.validate import (
    SAMPLING_RNG,
    check_finite_logits,
    check_rng,
    check_temperature,
    check_token_ids,
)
from lessonlib.decoding.budget import check_budget, check_drafter, check_stop  # noqa: F401 (the loops' names)
from lessonlib.decoding.chain_rule import judge_chain
from lessonlib.decoding.stats import DecodeStats
from lessonlib.decoding.timing import Clock, Timer, untimed

if TYPE_CHECKING:  # the types only (drafters imports this module; lessonlib.models sets the thread policy)
    from lessonlib.decoding.drafters import Drafter, Rule
    from lessonlib.models.gpt import GPT, KVCache

# token ids or node indices: a list of ints or an (n,) int array
Ids: TypeAlias = "Sequence[int] | np.ndarray"
# which target features a forward returns: False (none), True (the top block's output) or block indices (EAGLE-3)
Features: TypeAlias = "bool | tuple[int, ...]"


@dataclass(frozen=True)
class Sampling:
    """How a loop samples: the target's temperature and the draft's (None: the target's), and
    the truncation both go through (None: off). Every loop takes a ``Sampling`` wherever it
    takes a temperature."""

    temperature: float = 0.0  # <= 1e-5 means greedy (argmax)
    draft_temperature: float | None = None  # a draft model's own sampling temperature
    top_k: int | None = None  # keep the k most likely tokens
    top_p: float | None = None  # keep the nucleus of this mass, in (0, 1]
    min_p: float | None = None  # drop tokens below min_p * the largest probability, in [0, 1)

    def __post_init__(self) -> None:
        check_temperature(self.temperature)  # a negative T raises, it is not greedy
        if self.draft_temperature is not None:
            check_temperature(self.draft_temperature, "draft_temperature")
        check_truncation(self.top_k, self.top_p, self.min_p)

    @classmethod
    def of(cls, temperature: float | Sampling, draft_temperature: float | None = None) -> Sampling:
        """A loop's ``temperature`` argument as a ``Sampling``: a number, or a ``Sampling`` as is."""
        if isinstance(temperature, Sampling):
            if draft_temperature is not None:
                raise ValueError("draft_temperature must be None when temperature is a Sampling (set it there)")
            return temperature
        return cls(temperature, draft_temperature)

    @property
    def greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE

    @property
    def draft_t(self) -> float:
        return self.temperature if self.draft_temperature is None else self.draft_temperature

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The target distribution the rules judge with, row by row: softmax(logits / T), then
        the truncation (logits (N + 1, V) -> probabilities (N + 1, V) float64)."""
        return process(logits, self.temperature, self.top_k, self.top_p, self.min_p)

    def draft_probs(self, logits: np.ndarray) -> np.ndarray:
        """The draft's q the same way, at the draft temperature ((M, V) logits or log-probs)."""
        return process(logits, self.draft_t, self.top_k, self.top_p, self.min_p)


def check_sampling_rng(sampling: Sampling, rng: object) -> np.random.Generator | None:
    """The one rng rule: sampling (T > 1e-5) needs an explicit Generator; greedy needs none."""
    if sampling.greedy and (sampling.draft_temperature is None or sampling.draft_temperature <= GREEDY_TEMPERATURE):
        return None if rng is None else check_rng(rng)
    return check_rng(rng, SAMPLING_RNG)


@dataclass(frozen=True)
class Proposal:
    """A round's draft: N nodes of a tree (a chain is the tree whose node i hangs under i - 1)."""

    parents: np.ndarray  # (N,) int64: each node's parent, -1 for the root (the last committed token)
    tokens: np.ndarray  # (N,) int64: each node's token
    q: np.ndarray | None = None  # (N, V) float64: the law each node was sampled from; None: deterministic
    replacement: bool = True  # a sampled tree's siblings: i.i.d. draws (True) or without replacement

    @classmethod
    def chain(cls, tokens: Ids, q: np.ndarray | None = None) -> Proposal:
        """The chain of ``tokens`` ((N,)) with node i under node i - 1; ``q``: (N, V) or None."""
        n = len(tokens)
        return cls(np.arange(-1, n - 1, dtype=np.int64), np.asarray(tokens, dtype=np.int64).reshape(n), q)

    @functools.cached_property
    def is_chain(self) -> bool:
        return bool(np.array_equal(self.parents, np.arange(-1, len(self.parents) - 1)))

    @property
    def depth(self) -> int:
        """Levels drafted below the root (0 for an empty proposal)."""
        return len(self.parents) if self.is_chain else int(tree.tree_depth(self.parents).max(initial=-1)) + 1


@dataclass
class RoundResult:
    """What a round did: its proposal, the accepted path (node indices) and emitted tokens, and
    the target's logits over [root] + nodes ((N + 1, V) float64: row 0 after the root)."""

    proposal: Proposal
    path: list[int]  # the accepted nodes (indices into the proposal), root to leaf
    emitted: list[int]  # the tokens the round emitted: the path's tokens plus one more
    logits: np.ndarray  # (N + 1, V) float64

    @property
    def judged_one_more(self) -> bool:
        """Whether a drafted child of the deepest accepted node was judged and rejected."""
        last = self.path[-1] if self.path else -1
        return bool((self.proposal.parents == last).any())


def feed(model: GPT, cache: KVCache, tokens: Ids, rows: int | None = None,
         return_hidden: Features = False) -> np.ndarray | tuple[np.ndarray, torch.Tensor]:
    """Feed ``tokens`` ((T,)) after the cached prefix; the logits of the last ``rows`` of them
    (default all) as float64 numpy ((rows, V)), and with ``return_hidden`` the features too
    (torch (T, C), or (T, len(layers) * C) for a tuple of block indices). Call it under
    ``torch.inference_mode()``, as every loop runs (a draft step's forward is too short to enter
    the mode on every call)."""
    idx = torch.as_tensor(tokens, dtype=torch.long, device=model.device)[None]  # (1, T)
    out = model(idx, cache=cache, return_hidden=return_hidden)
    logits: Any  # (1, T, V) torch, then (rows, V) float64 numpy
    hidden: Any  # (1, T, C) torch or None
    logits, hidden = out if return_hidden else (out, None)
    logits = logits[0] if rows is None else logits[0, -rows:]
    logits = check_finite_logits(logits.double().cpu().numpy())
    return (logits, hidden[0]) if return_hidden else logits



def tree_forward(target: GPT, cache: KVCache, root: int, parents: Ids, tokens: Ids,
                 return_hidden: Features = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over [root] + tree tokens after ``cache``, with the tree attention
    mask and positions ``cache.length + depth``: (logits, hidden) torch tensors with N + 1 rows
    (``parents``, ``tokens``: (N,); logits (N + 1, V), hidden (N + 1, C) or None), row 0 for the
    root and row i + 1 for node i. ``return_hidden``: True for the top feature, a
    tuple of block indices for fused features (EAGLE-3); False gives (logits, None)."""
    mask = tree.tree_attention_mask(tree.with_root(parents))  # (N + 1, N + 1) bool
    check_token_ids(tokens, target.config.vocab_size, "tokens (the drafted tree)")
    if cache.length + len(mask) > cache.capacity:
        raise ValueError(f"the tree ({len(parents)} nodes) does not fit the context: "
                         f"{cache.length} + {len(mask)} > {cache.capacity}")
    idx = torch.as_tensor(np.concatenate([[root], tokens]), dtype=torch.long, device=target.device)  # (N + 1,)
    positions = torch.as_tensor(cache.length + mask.sum(1) - 1, device=target.device)  # prefix_len + depth
    out = target(idx[None], positions=positions, mask=torch.from_numpy(mask), cache=cache, return_hidden=return_hidden)
    logits, hidden = out if return_hidden else (out, None)
    return logits[0], None if hidden is None else hidden[0]


def verify(target: GPT, cache: KVCache, root: int, proposal: Proposal,
           features: Features = False, vocab_checked: bool = False) -> tuple[np.ndarray, torch.Tensor | None]:
    """Step 2: one target forward over [root] + the proposal's nodes after ``cache``:
    (logits (N + 1, V) float64 numpy, hidden (N + 1, C) or None). ``features``: False, True (the
    top block's output) or a tuple of block indices (EAGLE-3's fused features).
    ``vocab_checked``: the drafter's vocabulary was checked against the target's (``check_drafter``),
    so its tokens need no check here; any other drafter's are checked, naming the tree."""
    n, tokens, vocab = len(proposal.parents), proposal.tokens, target.config.vocab_size
    # a checked vocabulary still leaves the rule's own ids (a custom rule, a chain of them): one
    # min/max keeps an id out of range from reaching the forward, whose error would say ``idx``
    if not vocab_checked or (tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab)):
        check_token_ids(tokens, vocab, "tokens (the drafted tree)")
    if proposal.is_chain:  # the chain's tree mask is the causal mask: the plain forward
        if cache.length + n + 1 > cache.capacity:
            raise ValueError(f"the chain ({n} drafts) does not fit the context: "
                             f"{cache.length} + {n + 1} > {cache.capacity}")
        out: Any = feed(target, cache, [root, *proposal.tokens.tolist()], return_hidden=features)
        return out if features else (out, None)
    logits, hidden = tree_forward(target, cache, root, proposal.parents, proposal.tokens, features)
    return check_finite_logits(logits.double().cpu().numpy()), hidden


def accept(proposal: Proposal, logits: np.ndarray, sampling: Sampling,
           rng: np.random.Generator | None) -> tuple[list[int], list[int]]:
    """Step 3: (path, emitted) -- the accepted nodes and the tokens they emit plus one more.
    ``logits``: (N + 1, V), row 0 after the root; ``rng``: needed unless ``sampling.greedy``."""
    if sampling.greedy:  # the greedy rules read only argmaxes: the logits' are the softmax's
        if proposal.is_chain:
            emitted = verify_greedy(logits, proposal.tokens, validate=False)
            return list(range(len(emitted) - 1)), emitted
        path, emitted = tree.verify_tree_greedy(proposal.parents, proposal.tokens, logits.argmax(-1))
        return list(path), list(emitted)
    if proposal.q is not None:  # sampled drafts: the rule of the q they came from
        # rows straight from softmax are valid, so the rules skip their input checks
        if proposal.is_chain:
            emitted = judge_chain(sampling.probs(logits), proposal.q, proposal.tokens, cast(np.random.Generator, rng))
            return list(range(len(emitted) - 1)), emitted
        path, emitted = verify_tree_sampled(proposal.parents, proposal.tokens, sampling.probs(logits), proposal.q,
                                            cast(np.random.Generator, rng), proposal.replacement, validate=False)
        return list(path), list(emitted)
    path, emitted = tree.verify_tree(proposal.parents, proposal.tokens, sampling.probs(logits),
                                     cast(np.random.Generator, rng))  # verify_tree checks it
    return list(path), list(emitted)


def features_wanted(drafter: Drafter) -> bool | tuple[int, ...]:
    """What the target's forward returns for ``drafter``: False (no features), True (the top
    block's output) or its ``feature_layers`` (EAGLE-3's fused blocks)."""
    return (drafter.feature_layers or True) if drafter.needs_features else False


def fit_to_room(proposal: Proposal, room: int) -> Proposal:
    """The proposal cut to its first ``room`` nodes (>= 0), so that [root] + nodes fit the
    context left: near the end of the context a round verifies what fits instead of failing.
    Parents precede children, so a prefix is a tree; for sampled nodes the cut follows index
    (draw) order, a stopping rule that reads no drawn value, so every rule stays exact."""
    n = len(proposal.parents)
    if n <= room:
        return proposal
    q = None if proposal.q is None else proposal.q[:room]
    return Proposal(proposal.parents[:room], proposal.tokens[:room], q, proposal.replacement)


@torch.inference_mode()
def speculative_round(target: GPT, cache: KVCache, drafter: Drafter, rule: Rule | None, seq: list[int],
                      sampling: Sampling, rng: np.random.Generator | None, clock: Timer = untimed) -> RoundResult:
    """One round on ``seq`` (changed in place): draft, verify, accept, commit.

    ``cache``: the target's, holding ``seq`` but its last token. ``drafter``: a
    ``drafters.Drafter``; ``rule``: its drafting rule (``core.tree``'s ``rule(expand)``, or None
    for a drafter with a rule of its own). The drafter times its own work as "draft"; the
    target's forward is timed as "verify".
    """
    proposal = drafter.propose(rule, sampling, rng, clock)  # 1. draft
    start = cache.length
    proposal = fit_to_room(proposal, cache.capacity - start - 1)  # the root takes one position
    wants = features_wanted(drafter)
    logits, hidden = clock("verify", verify, target, cache, seq[-1], proposal, wants,  # 2. verify
                           drafter.vocab_size is not None)
    path, emitted = accept(proposal, logits, sampling, rng)  # 3. accept
    keep = [0] + [a + 1 for a in path]  # 4. commit: the root and the accepted nodes, in order
    if proposal.is_chain:  # the accepted nodes are a prefix: nothing moves
        cache.truncate(start + len(keep))
    else:
        cache.keep(start, keep)
    seq += emitted
    drafter.commit(seq, None if hidden is None else hidden[keep], clock)
    return RoundResult(proposal, path, emitted, logits)


def run_rounds(target: GPT, drafter: Drafter, rule: Rule | None, prompt_tokens: Ids, max_new_tokens: int,
               sampling: Sampling, rng: np.random.Generator | None, loop: str, k: int | None = None,
               after_round: Callable[[RoundResult, Clock], None] | None = None,
               stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """A prefill, then ``speculative_round`` until ``max_new_tokens`` are emitted (the budget and
    the drafter are the caller's to check), or until a round emits ``stop`` (``check_stop``: the
    output then ends with it, the tokens a round drafted past it dropped, and the stats count the
    tokens delivered). Returns (new tokens, ``DecodeStats``).

    The target is prefilled with all but the prompt's last token (the first round's root), the
    drafter committed to the prompt (both timed as "prefill"); ``after_round(result, clock)``
    runs after every round (e.g. lookahead's window update, timed by the hook itself).
    """
    stop = check_stop(stop, target.config.vocab_size)
    clock = Clock(target.device)
    seq = list(prompt_tokens)
    cache = target.new_cache()
    wants = features_wanted(drafter)
    features: torch.Tensor | None = None  # (len(seq) - 1, C): the target's at the prefilled positions
    if len(seq) > 1:
        out = clock("prefill", feed, target, cache, seq[:-1], rows=1, return_hidden=wants)
        features = out[1] if wants else None
    elif wants:
        width = target.config.n_embd * (len(wants) if isinstance(wants, tuple) else 1)
        features = torch.zeros(0, width, device=target.device)
    drafter.commit(seq, features, clock.as_phase("prefill"))
    goal = len(seq) + max_new_tokens
    stats = DecodeStats(loop, sampling.temperature, max_new_tokens, k=k)
    start = time.perf_counter()
    while len(seq) < goal:
        result = speculative_round(target, cache, drafter, rule, seq, sampling, rng, clock)
        stats.record_round(len(result.proposal.parents), len(result.path), result.judged_one_more,
                           result.proposal.depth)
        if after_round is not None:
            after_round(result, clock)
        if stop is not None and stop in result.emitted:
            break
    stats.finish(time.perf_counter() - start, clock)
    new = seq[goal - max_new_tokens : goal]
    if stop is not None and stop in new:
        new = new[: new.index(stop) + 1]
        stats.new_tokens = len(new)  # tokens per second count the tokens delivered
    return new, stats
