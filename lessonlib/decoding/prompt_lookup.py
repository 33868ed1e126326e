"""Draft-free drafting: n-gram prompt lookup, and prompt lookup combined with a draft model.

Prompt lookup (Saxena 2023; Hugging Face ``prompt_lookup_num_tokens``, vLLM ``"method":
"ngram"``) needs no draft model: it finds the last n committed tokens earlier in the prompt
or in what was generated so far and proposes what followed them there. Code, edits and
retrieval answers repeat themselves, so the guess is often right and costs microseconds.

* ``PromptLookupDrafter`` -- a ``drafters.Drafter``: the longest n-gram first (n from
  ``max_ngram`` down to ``min_ngram``), the ``matches`` best distinct continuations of ``k``
  tokens merged into a trie (one match: a chain of k; several: a tree).
* ``draft_support`` (in ``lookup_trie``, with the trie, importable from here) -- the drafting
  rule for such drafters: every child with non-zero draft probability, most likely first. A
  lookup row is -inf except on the trie's children, so the rule reproduces the trie exactly
  and drafts nothing when nothing matched.
* ``CombinedDrafter`` -- prompt lookup when the last n-gram matches, the draft model's greedy
  chain of ``k_model`` otherwise.
* ``lookup_generate`` -- prompt lookup decoding (alone or combined) through the tree loop.

Why this is exact at every temperature: the candidates are a deterministic function of the
committed tokens, i.e. a one-hot q. Greedy verification (T = 0) keeps the target's argmax
path; at T > 0 the tree loop's sibling rule (``core.tree.verify_tree``: accept a child with
probability p(child), otherwise zero it and renormalise) is the chain rule min(1, p/q) with
a one-hot q, whose residual norm(max(p - q, 0)) is p with the child zeroed. So the emitted
tokens follow the target's own sampling law exactly, however good or bad the guess.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from lessonlib.core import tree
from lessonlib.core.validate import check_int
from lessonlib.decoding.drafters import ModelDrafter, RuleDrafter

# the trie and draft_support live in lookup_trie; importable from here as before (noqa: F401)
from lessonlib.decoding.lookup_trie import Trie, _breadth_first, _build_trie, draft_support, trie_arrays  # noqa: F401
from lessonlib.decoding.round import Ids, Proposal
from lessonlib.decoding.stats import DecodeStats
from lessonlib.decoding.timing import Timer, untimed
from lessonlib.decoding.tree_decode import tree_generate

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    import torch

    from lessonlib.decoding.drafters import Rule
    from lessonlib.decoding.round import Sampling
    from lessonlib.models.gpt import GPT


LIMIT = 4096  # the largest k, n-gram length or match count a lookup drafter takes

class PromptLookupDrafter(RuleDrafter):
    """n-gram prompt lookup as a ``Drafter`` (no model, no features).

    ``vocab_size``: the target's vocabulary (the width of ``expand``'s rows).
    ``k``: tokens proposed per continuation. A match close to the end runs into the
    proposal itself (in "abcabc" the continuation of "c" is "abc", then again "abc", ...),
    which is what a repeating pattern predicts, so every continuation has k tokens.
    ``max_ngram``/``min_ngram``: the n-gram sizes tried, longest first.
    ``matches``: distinct continuations kept (1: a chain; more: a trie, longest n first).
    ``prefer``: "recent" (the latest occurrences first) or "first" (the earliest first, as
    Hugging Face's prompt lookup does).
    """

    needs_features = False

    def __init__(self, vocab_size: int, k: int = 10, max_ngram: int = 3, min_ngram: int = 1, matches: int = 1,
                 prefer: str = "recent") -> None:
        self.vocab_size = check_int(vocab_size, "vocab_size", 2)
        # bounded: a huge k, n-gram or match count would allocate rows for every node it proposes
        self.k = check_int(k, "k", 1, LIMIT)
        self.max_ngram = check_int(max_ngram, "max_ngram", 1, LIMIT)
        self.min_ngram = check_int(min_ngram, "min_ngram", 1, LIMIT)
        self.matches = check_int(matches, "matches", 1, LIMIT)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")
        if prefer not in ("recent", "first"):
            raise ValueError(f"prefer must be 'recent' or 'first', got {prefer!r}")
        self.prefer = prefer
        # index[n][ngram] = start of the continuation after each occurrence, ascending
        self.index: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(self.min_ngram, self.max_ngram + 1)}
        self.seen: list[int] = []
        self.counts = {"rounds": 0, "matched_rounds": 0, "accepted": 0, "judged": 0}
        self._trie: Trie | None = None

    # ------------------------------------------------------------------ the lookup
    def _index(self, seq: Sequence[int]) -> None:
        """Index the n-grams of the tokens added since the last call (rebuild if ``seq`` is
        not an extension of what was seen: another caller)."""
        if len(seq) < len(self.seen) or seq[: len(self.seen)] != self.seen:
            self.index = {n: {} for n in self.index}
            self.seen = []
        for j in range(max(1, len(self.seen)), len(seq)):  # the n-grams ending at j - 1, continued at j
            for n in self.index:
                if j >= n:
                    self.index[n].setdefault(tuple(seq[j - n : j]), []).append(j)
        self.seen = list(seq)

    def continuations(self, seq: Sequence[int]) -> list[list[int]]:
        """The distinct continuations of ``seq``'s last n-gram, best first (longest n, then
        ``prefer``); empty when nothing matches. Indexes ``seq`` first."""
        self._index(seq)
        out: list[list[int]]
        found: set[tuple[int, ...]]
        out, found = [], set()
        for n in range(min(self.max_ngram, len(seq) - 1), self.min_ngram - 1, -1):
            starts = self.index[n].get(tuple(seq[-n:]), ())
            for start in (reversed(starts) if self.prefer == "recent" else starts):
                ext = list(seq[start : start + self.k])
                while len(ext) < self.k:  # the match runs into the proposal: keep copying it
                    ext.append(ext[len(ext) - (len(seq) - start)])
                if tuple(ext) not in found:
                    found.add(tuple(ext))
                    out.append(ext)
                    if len(out) == self.matches:
                        return out
        return out

    # ------------------------------------------------------------------ the Drafter protocol
    def _commit(self, seq: list[int], features: torch.Tensor | None = None) -> None:
        """Score last round's proposal (for ``alpha``), then look the new suffix up."""
        if self._trie is not None and len(seq) > self._trie["length"]:
            self._score(seq[self._trie["length"] :])
        conts = self.continuations(seq)
        self._trie = _build_trie(conts)
        self._trie["length"], self._trie["served"] = len(seq), set()
        self.counts["rounds"] += 1
        self.counts["matched_rounds"] += bool(conts)

    def propose(self, rule: Rule | None, sampling: Sampling | None = None, rng: np.random.Generator | None = None,
                clock: Timer = untimed) -> Proposal:
        """The round's draft: the lookup's own trie when ``rule`` is None (``proposal``), else
        the tree ``rule(self.expand)`` drafts (e.g. ``draft_support``)."""
        if rule is None:
            rule = self.proposal
        return super().propose(rule, sampling, rng, clock)

    def proposal(self, expand: tree.Expand | None = None) -> tuple[np.ndarray, ...]:
        """The lookup's own drafting rule: its whole trie as (parents, tokens, score) ((N,) each), exactly
        what ``draft_support(self.expand, k)`` drafts, without a dense row per node (a rule's
        signature: ``expand`` is not needed)."""
        trie = self._trie
        if trie is None:
            raise ValueError("commit(seq) must be called before proposal")
        if "arrays" not in trie:
            trie["arrays"] = _breadth_first(trie)
        trie["served"] = set(range(len(trie["children"])))  # every node's children are drafted
        return tuple(a.copy() for a in trie["arrays"])

    @property
    def matched(self) -> bool:
        """Whether the last commit found a continuation."""
        return self._trie is not None and len(self._trie["children"][0]) > 0

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V) log-probabilities: on the trie's children of each node, weighted
        so that better continuations rank first; -inf elsewhere (and everywhere below a node
        that is not on the trie)."""
        trie = self._trie
        if trie is None:
            raise ValueError("commit(seq) must be called before expand")
        parents, tokens = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64)  # (N,)
        assert self.vocab_size is not None  # set by __init__
        rows = np.full((len(nodes), self.vocab_size), -np.inf)  # (M, V)
        where: dict[int, int | None] = {-1: 0}  # caller's node -> trie node (None: off the trie)

        def trie_node(i: int) -> int | None:
            if i not in where:
                up = trie_node(int(parents[i]))
                where[i] = None if up is None else trie["children"][up].get(int(tokens[i]))
            return where[i]

        for r, node in enumerate(nodes):
            t = trie_node(int(node))
            if t is not None and trie["children"][t]:
                trie["served"].add(t)
                kids = trie["children"][t]
                rows[r, list(kids)] = trie["logq"][list(kids.values())]
        return rows

    # ------------------------------------------------------------------ acceptance
    def _score(self, emitted: list[int]) -> None:
        """Walk last round's trie along the emitted tokens: the accepted drafts, and one
        rejection when the path ended at a node whose children were drafted."""
        trie, node, accepted = self._trie, 0, 0
        assert trie is not None  # _commit scores only when a trie was built
        for token in emitted[:-1]:  # the last token is the target's own (bonus or correction)
            nxt = trie["children"][node].get(int(token))
            if nxt is None:
                break
            node, accepted = nxt, accepted + 1
        rejected = node in trie["served"] and bool(trie["children"][node])
        self.counts["accepted"] += accepted
        self.counts["judged"] += accepted + rejected

    def stats(self) -> dict[str, float]:
        """Rounds, rounds with a match, accepted and judged drafts, alpha (accepted / judged,
        measured while decoding) over the drafter's life."""
        c: dict[str, float] = dict(self.counts)
        c["alpha"] = c["accepted"] / c["judged"] if c["judged"] else float("nan")
        c["match_rate"] = c["matched_rounds"] / c["rounds"] if c["rounds"] else float("nan")
        return c


class CombinedDrafter(RuleDrafter):
    """Prompt lookup when the last n-gram matches, else the draft model's greedy chain.

    ``lookup``: a ``PromptLookupDrafter``; ``fallback``: a ``drafters.ModelDrafter`` (any
    drafter whose rows are a model's log-probabilities); ``k_model``: the model chain's
    length. The model is fed only in rounds that need it (its cache catches up in one
    forward), so a round that lookup serves costs no draft-model step. Use with
    ``draft_support``: the model's rows are reduced to their argmax (a one-hot, as exact
    as any deterministic candidate) down to depth ``k_model``.
    """

    needs_features = False
    use_lookup: bool  # set by every commit: whether the lookup matched

    def __init__(self, lookup: PromptLookupDrafter, fallback: RuleDrafter, k_model: int = 3) -> None:
        self.lookup, self.fallback = lookup, fallback
        self.k_model = check_int(k_model, "k_model", 1)
        self.model_rounds = 0
        fallback_vocab = getattr(fallback, "vocab_size", None)
        if fallback_vocab is not None and fallback_vocab != lookup.vocab_size:
            raise ValueError(f"the fallback drafter's vocabulary ({fallback_vocab}) must be the lookup's "
                             f"({lookup.vocab_size}, the target's)")
        self.vocab_size = lookup.vocab_size

    def _commit(self, seq: list[int], features: torch.Tensor | None = None) -> None:
        self.lookup.commit(seq)
        self.use_lookup = self.lookup.matched
        if not self.use_lookup:
            self.fallback.commit(seq)
            self.model_rounds += 1

    def propose(self, rule: Rule | None, sampling: Sampling | None = None, rng: np.random.Generator | None = None,
                clock: Timer = untimed) -> Proposal:
        """The combined rule (``proposal``) when ``rule`` is None, else ``rule(self.expand)``."""
        return super().propose(self.proposal if rule is None else rule, sampling, rng, clock)

    def proposal(self, expand: tree.Expand | None = None) -> tuple[np.ndarray, ...]:
        """The combined drafting rule: the lookup's trie, else the model's greedy chain --
        what ``draft_support(self.expand, depth)`` drafts, faster: (parents, tokens, score)."""
        if self.use_lookup:
            return self.lookup.proposal()
        return draft_support(self.fallback.expand, self.k_model, max_children=1)

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V): the lookup's rows, else the model's rows reduced to their argmax."""
        if self.use_lookup:
            return self.lookup.expand(parents, tokens, nodes)
        nodes = np.asarray(nodes)  # (M,)
        rows = self.fallback.expand(parents, tokens, nodes)  # (M, V)
        depth = np.zeros(len(nodes), dtype=np.int64)  # depth of the children drafted under each node
        if (nodes >= 0).any():
            depth[nodes >= 0] = tree.tree_depth(parents)[nodes[nodes >= 0]] + 1
        out = np.full(rows.shape, -np.inf)
        live = np.flatnonzero(depth < self.k_model)
        best = rows[live].argmax(1)
        out[live, best] = rows[live, best]  # the model's own log-prob: the support is one token
        return out


def lookup_generate(target: GPT, prompt_tokens: Ids, max_new_tokens: int, k: int = 10, max_ngram: int = 3,
                    min_ngram: int = 1, matches: int = 1, prefer: str = "recent", draft: GPT | None = None,
                    k_model: int = 3, temperature: float = 0.0, rng: np.random.Generator | None = None,
                    stop: int | None = None) -> tuple[list[int], DecodeStats]:
    """Prompt lookup decoding: the tree loop (``tree_decode.tree_generate``) with a fresh
    ``PromptLookupDrafter`` and ``draft_support``; with a ``draft`` model, the
    ``CombinedDrafter`` (its greedy chain of ``k_model`` where nothing matches). Exact at every
    temperature (greedy at T <= 1e-5).

    The drafting rule is the drafter's own (``proposal``: the same trees as ``draft_support``).
    Returns (new_tokens, ``DecodeStats``): the tree loop's, whose ``alpha`` counts the lookup's
    drafts (and the model's when combined), plus in ``extra`` the lookup's own counts --
    ``lookup_alpha`` when combined, ``match_rate`` (rounds with a match) and ``model_rounds``
    (rounds the draft model served).
    """
    context = target.config.block_size
    check_int(k, "k", 1, context - 1)  # a round verifies k drafts and one more token within the context
    if draft is not None and draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft and target must share a vocabulary, got sizes {draft.config.vocab_size} "
                         f"and {target.config.vocab_size}")
    lookup = PromptLookupDrafter(target.config.vocab_size, k, max_ngram, min_ngram, matches, prefer)
    drafter = lookup if draft is None else CombinedDrafter(lookup, ModelDrafter(draft), k_model)
    out, stats = tree_generate(target, drafter, prompt_tokens, max_new_tokens, None, temperature, rng, stop)
    counts = lookup.stats()
    # the lookup's own count of its drafts (the loop's alpha counts the model's rounds too)
    stats.extra |= {"match_rate": counts["match_rate"], "lookup_accepted": counts["accepted"],
                    "lookup_judged": counts["judged"],
                    "model_rounds": 0 if draft is None else cast(CombinedDrafter, drafter).model_rounds, "k": k}
    if draft is not None:
        stats.extra["lookup_alpha"] = counts["alpha"]
    return out, stats
