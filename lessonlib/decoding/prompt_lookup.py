"""Draft-free drafting: n-gram prompt lookup, and prompt lookup combined with a draft model.

Prompt lookup (Saxena 2023; Hugging Face ``prompt_lookup_num_tokens``, vLLM ``"method":
"ngram"``) needs no draft model: it finds the last n committed tokens earlier in the prompt
or in what was generated so far and proposes what followed them there. Code, edits and
retrieval answers repeat themselves, so the guess is often right and costs microseconds.

* ``PromptLookupDrafter`` -- a ``drafters.Drafter``: the longest n-gram first (n from
  ``max_ngram`` down to ``min_ngram``), the ``matches`` best distinct continuations of ``k``
  tokens merged into a trie (one match: a chain of k; several: a tree).
* ``draft_support`` -- the drafting rule for such drafters: every child with non-zero draft
  probability, most likely first. A lookup row is -inf except on the trie's children, so the
  rule reproduces the trie exactly and drafts nothing when nothing matched.
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

import numpy as np

from lessonlib.core import tree
from lessonlib.core.validate import check_int
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.tree_decode import tree_generate


class PromptLookupDrafter:
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

    def __init__(self, vocab_size, k=10, max_ngram=3, min_ngram=1, matches=1, prefer="recent"):
        self.vocab_size = check_int(vocab_size, "vocab_size", 2)
        self.k = check_int(k, "k", 1)
        self.max_ngram = check_int(max_ngram, "max_ngram", 1)
        self.min_ngram = check_int(min_ngram, "min_ngram", 1)
        self.matches = check_int(matches, "matches", 1)
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")
        if prefer not in ("recent", "first"):
            raise ValueError(f"prefer must be 'recent' or 'first', got {prefer!r}")
        self.prefer = prefer
        # index[n][ngram] = start of the continuation after each occurrence, ascending
        self.index = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}
        self.seen: list[int] = []
        self.counts = {"rounds": 0, "matched_rounds": 0, "accepted": 0, "judged": 0}
        self._trie = None

    # ------------------------------------------------------------------ the lookup
    def _index(self, seq):
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

    def continuations(self, seq) -> list[list[int]]:
        """The distinct continuations of ``seq``'s last n-gram, best first (longest n, then
        ``prefer``); empty when nothing matches. Indexes ``seq`` first."""
        self._index(seq)
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
    def commit(self, seq, features=None):
        """Score last round's proposal (for ``alpha``), then look the new suffix up."""
        if self._trie is not None and len(seq) > self._trie["length"]:
            self._score(seq[self._trie["length"] :])
        conts = self.continuations(seq)
        self._trie = _build_trie(conts)
        self._trie["length"], self._trie["served"] = len(seq), set()
        self.counts["rounds"] += 1
        self.counts["matched_rounds"] += bool(conts)

    def proposal(self, expand=None):
        """The lookup's own drafting rule: its whole trie as (parents, tokens, score), exactly
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

    def expand(self, parents, tokens, nodes):
        """(len(nodes), V) log-probabilities: on the trie's children of each node, weighted
        so that better continuations rank first; -inf elsewhere (and everywhere below a node
        that is not on the trie)."""
        trie = self._trie
        if trie is None:
            raise ValueError("commit(seq) must be called before expand")
        parents, tokens = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64)
        rows = np.full((len(nodes), self.vocab_size), -np.inf)
        where = {-1: 0}  # caller's node -> trie node (None: off the trie)

        def trie_node(i):
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
    def _score(self, emitted):
        """Walk last round's trie along the emitted tokens: the accepted drafts, and one
        rejection when the path ended at a node whose children were drafted."""
        trie, node, accepted = self._trie, 0, 0
        for token in emitted[:-1]:  # the last token is the target's own (bonus or correction)
            nxt = trie["children"][node].get(int(token))
            if nxt is None:
                break
            node, accepted = nxt, accepted + 1
        rejected = node in trie["served"] and bool(trie["children"][node])
        self.counts["accepted"] += accepted
        self.counts["judged"] += accepted + rejected

    def stats(self) -> dict:
        """Rounds, rounds with a match, accepted and judged drafts, alpha (accepted / judged,
        measured while decoding) over the drafter's life."""
        c = dict(self.counts)
        c["alpha"] = c["accepted"] / c["judged"] if c["judged"] else float("nan")
        c["match_rate"] = c["matched_rounds"] / c["rounds"] if c["rounds"] else float("nan")
        return c


def _build_trie(continuations):
    """The continuations merged into a trie: children[node] = {token: child} in priority
    order (node 0 = the committed sequence), logq[child] = log of the share of weight
    through it, with weights 2^-i for the i-th continuation so that a child reached by an
    earlier continuation always outranks one reached only by later ones."""
    children, weight = [{}], [0.0]
    for i, cont in enumerate(continuations):
        w, node = 0.5 ** (i + 1), 0
        weight[0] += w
        for token in cont:
            if token not in children[node]:
                children[node][token] = len(children)
                children.append({})
                weight.append(0.0)
            node = children[node][token]
            weight[node] += w
    weight = np.array(weight)
    logq = np.zeros(len(children))
    for node, kids in enumerate(children):
        for child in kids.values():
            logq[child] = np.log(weight[child] / weight[node])
    return {"children": children, "logq": logq}


def _breadth_first(trie):
    """(parents, tokens, score) of a trie in the order the drafting rules of ``core.tree``
    (and ``draft_support``) use: depth by depth, then by parent, siblings in priority order;
    score = the cumulative log-probability of the node's path."""
    children, logq = trie["children"], trie["logq"]
    parents, tokens, score, level = [], [], [], [(0, -1, 0.0)]  # (trie node, output index, score)
    while level:
        nxt = []
        for node, out, base in level:
            for token, child in children[node].items():
                nxt.append((child, len(parents), base + logq[child]))
                parents.append(out)
                tokens.append(token)
                score.append(nxt[-1][2])
        level = nxt
    return np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64), np.array(score)


def trie_arrays(continuations):
    """(parents, tokens) of the continuations merged into a trie, in ``core.tree``'s order."""
    return _breadth_first(_build_trie(continuations))[:2]


def draft_support(expand, depth, max_children=None):
    """Drafting rule: under every node, every token with non-zero draft probability (finite
    log-prob), most likely first (ties: lower token id), ``depth`` levels at most, at most
    ``max_children`` per node (needed for a model's dense rows). A node with no such token
    gets no children, so an empty row drafts nothing. Returns (parents, tokens, score)."""
    depth = check_int(depth, "depth", 1)
    if max_children is not None:
        max_children = check_int(max_children, "max_children", 1)
    parents, tokens, score = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    frontier, frontier_score = np.array([-1]), np.zeros(1)
    for _ in range(depth):
        logq = expand(parents, tokens, frontier)
        rows, toks = np.nonzero(np.isfinite(logq))
        vals = logq[rows, toks]
        order = np.lexsort((toks, -vals, rows))  # by row, then most likely first, then token id
        rows, toks, vals = rows[order], toks[order], vals[order]
        if max_children is not None:
            rank = np.arange(len(rows)) - np.searchsorted(rows, rows)
            keep = rank < max_children
            rows, toks, vals = rows[keep], toks[keep], vals[keep]
        if not len(rows):
            break
        base = len(parents)
        parents = np.concatenate([parents, frontier[rows]])
        tokens = np.concatenate([tokens, toks])
        score = np.concatenate([score, frontier_score[rows] + vals])
        frontier, frontier_score = np.arange(base, len(parents)), score[base:]
    return parents, tokens, score


class CombinedDrafter:
    """Prompt lookup when the last n-gram matches, else the draft model's greedy chain.

    ``lookup``: a ``PromptLookupDrafter``; ``fallback``: a ``drafters.ModelDrafter`` (any
    drafter whose rows are a model's log-probabilities); ``k_model``: the model chain's
    length. The model is fed only in rounds that need it (its cache catches up in one
    forward), so a round that lookup serves costs no draft-model step. Use with
    ``draft_support``: the model's rows are reduced to their argmax (a one-hot, as exact
    as any deterministic candidate) down to depth ``k_model``.
    """

    needs_features = False

    def __init__(self, lookup, fallback, k_model=3):
        self.lookup, self.fallback = lookup, fallback
        self.k_model = check_int(k_model, "k_model", 1)
        self.model_rounds = 0

    def commit(self, seq, features=None):
        self.lookup.commit(seq)
        self.use_lookup = self.lookup.matched
        if not self.use_lookup:
            self.fallback.commit(seq)
            self.model_rounds += 1

    def proposal(self, expand=None):
        """The combined drafting rule: the lookup's trie, else the model's greedy chain --
        what ``draft_support(self.expand, depth)`` drafts, faster."""
        if self.use_lookup:
            return self.lookup.proposal()
        return draft_support(self.fallback.expand, self.k_model, max_children=1)

    def expand(self, parents, tokens, nodes):
        if self.use_lookup:
            return self.lookup.expand(parents, tokens, nodes)
        nodes = np.asarray(nodes)
        rows = self.fallback.expand(parents, tokens, nodes)
        depth = np.zeros(len(nodes), dtype=np.int64)  # depth of the children drafted under each node
        if (nodes >= 0).any():
            depth[nodes >= 0] = tree.tree_depth(parents)[nodes[nodes >= 0]] + 1
        out = np.full(rows.shape, -np.inf)
        live = np.flatnonzero(depth < self.k_model)
        best = rows[live].argmax(1)
        out[live, best] = rows[live, best]  # the model's own log-prob: the support is one token
        return out


def lookup_generate(target, prompt_tokens, max_new_tokens, k=10, max_ngram=3, min_ngram=1, matches=1, prefer="recent",
                    draft=None, k_model=3, temperature=0.0, rng=None):
    """Prompt lookup decoding: the tree loop (``tree_decode.tree_generate``) with a fresh
    ``PromptLookupDrafter`` and ``draft_support``; with a ``draft`` model, the
    ``CombinedDrafter`` (its greedy chain of ``k_model`` where nothing matches). Exact at every
    temperature (greedy at T <= 1e-5).

    The drafting rule is the drafter's ``proposal`` (the same trees as ``draft_support``).
    Returns (new_tokens, stats): the tree loop's stats plus the lookup's counts -- ``alpha``
    (accepted / judged lookup drafts, while decoding; ``lookup_alpha`` when combined, where
    the model's rounds judge drafts too), ``match_rate`` (rounds with a match) and
    ``model_rounds`` (rounds the draft model served).
    """
    lookup = PromptLookupDrafter(target.config.vocab_size, k, max_ngram, min_ngram, matches, prefer)
    drafter = lookup if draft is None else CombinedDrafter(lookup, ModelDrafter(draft), k_model)
    out, stats = tree_generate(target, drafter, prompt_tokens, max_new_tokens, drafter.proposal, temperature, rng)
    counts = lookup.stats()
    stats.update({"alpha" if draft is None else "lookup_alpha": counts["alpha"], "match_rate": counts["match_rate"],
                  "lookup_accepted": counts["accepted"], "lookup_judged": counts["judged"],
                  "model_rounds": 0 if draft is None else drafter.model_rounds, "k": k})
    return out, stats
