"""Drafters: everything that proposes draft tokens to a speculative round (``round``).

Every draft kind implements the ``Drafter`` protocol -- a separate draft model sampling a
chain (``decode.ChainDrafter``) or drafting a tree (``ModelDrafter``), the EAGLE head on the target's
features (``EagleDrafter``), Medusa heads (``MedusaDrafter``), and the draft-free and MTP
drafters of later modules. Tree drafters share ``RuleDrafter``: a drafting rule of
``core.tree`` grows their tree through ``expand``; a chain of K is the tree whose branching is
(1,) * K, which ``TreeDrafter`` runs as a plain loop (``chain``) with the same result.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from lessonlib.core import tree, tree_sampled
from lessonlib.core.sampling import GREEDY_TEMPERATURE
from lessonlib.core.tree_sampled import SampledRule, chain_length
from lessonlib.core.validate import check_finite_logits, check_head_fits
from lessonlib.decoding.round import Ids, Proposal, Sampling
from lessonlib.decoding.timing import Timer, untimed

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    from lessonlib.models.gpt import GPT, KVCache
    from lessonlib.models.heads import EagleHead, MedusaHeads
    from lessonlib.models.llm_medusa import LlamaMedusaHeads

# a drafting rule: rule(expand) -> (parents, tokens, score), e.g. functools.partial(tree.draft_topk, branching=...),
# or a core.tree_sampled.SampledRule: rule(expand, probs, rng) -> (parents, tokens, score, q rows)
Rule = Callable[..., tuple]


@runtime_checkable
class Drafter(Protocol):
    """Everything a speculative round reads of a draft.

    ``needs_features``: whether ``commit`` needs the target's hidden states (EAGLE, Medusa,
    MTP); such drafters need a prompt of at least 2 tokens. ``feature_layers``: None for the
    top block's output, or a tuple of block indices whose outputs are concatenated (EAGLE-3).
    ``vocab_size``: the vocabulary its tokens come from (checked against the target's once,
    before the first round), or None when its tokens are the target's by construction.
    ``commit(seq, features, clock)``: called once after the prefill and after every round with
    the committed sequence (a list of token ids) and the target's hidden states at the
    positions committed in that round (all but the last token's; None unless
    ``needs_features``).
    ``propose(rule, sampling, rng, clock) -> Proposal``: the round's draft (``rule``: a drafting
    rule of ``core.tree`` for tree drafters; None for a drafter with a rule of its own). A
    drafter times its own work on ``clock`` as "draft".
    """

    needs_features: bool
    feature_layers: tuple[int, ...] | None
    vocab_size: int | None

    def commit(self, seq: list[int], features: torch.Tensor | None, clock: Timer = untimed) -> None: ...

    def propose(self, rule: Rule | None, sampling: Sampling, rng: np.random.Generator | None,
                clock: Timer = untimed) -> Proposal: ...


def log_probs(logits: torch.Tensor, support: np.ndarray | None = None) -> np.ndarray:
    """log softmax of draft logits ((..., V) torch) as float64 numpy (``expand``'s rows), non-finite ones refused;
    ``support``: the ids outside which every logit is -inf (a draft vocabulary): the softmax skips the rest."""
    if support is None:
        return check_finite_logits(F.log_softmax(logits.double(), -1).cpu().numpy(), "the draft's")
    out = np.full(logits.shape, -np.inf)
    out[..., support] = check_finite_logits(F.log_softmax(logits[..., support].detach().double(), -1).numpy(),
                                            "the draft's")
    return out


def draws_from_q(rule: Rule | None, sampling: Sampling | None) -> bool:
    """Whether ``rule`` draws its nodes from the draft's q under ``sampling``: a ``SampledRule``
    with a draft temperature above 1e-5 (a greedy draft runs the rule's deterministic twin)."""
    return isinstance(rule, SampledRule) and sampling is not None and sampling.draft_t > GREEDY_TEMPERATURE


class RuleDrafter:
    """A drafter whose tree a drafting rule of ``core.tree`` grows through ``expand``.

    Subclasses implement ``_commit(seq, features)`` and ``expand(parents, tokens, nodes) ->
    (len(nodes), V)`` draft log-probabilities after each node (node -1 is the committed
    sequence); the rule and the commit are timed as "draft".
    """

    needs_features = False
    feature_layers: tuple[int, ...] | None = None
    vocab_size: int | None = None

    def commit(self, seq: list[int], features: torch.Tensor | None = None, clock: Timer = untimed) -> None:
        clock("draft", self._commit, seq, features)

    def _commit(self, seq: list[int], features: torch.Tensor | None) -> None:
        raise NotImplementedError

    def propose(self, rule: Rule | None, sampling: Sampling | None, rng: np.random.Generator | None,
                clock: Timer = untimed) -> Proposal:
        """The tree ``rule`` drafts: a rule of ``core.tree`` gives deterministic candidates (no
        q); a ``SampledRule`` draws every node from the draft's q at ``sampling``'s draft
        temperature and truncation (``sampling.draft_probs``) and hands the round those q rows
        -- or, with a greedy draft, runs its deterministic twin."""
        if rule is None:
            raise ValueError("rule must be a drafting rule of core.tree, e.g. "
                             "functools.partial(tree.draft_topk, branching=(3, 2, 2))")
        if isinstance(rule, SampledRule):
            if draws_from_q(rule, sampling):
                parents, tokens, _, q = clock("draft", rule, self.expand, cast(Sampling, sampling).draft_probs,
                                              cast(np.random.Generator, rng))
                return Proposal(parents, tokens, q, rule.replacement)
            rule = rule.deterministic
        parents, tokens, _ = clock("draft", rule, self.expand)
        return Proposal(np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64))

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V) draft log-probs after each node (``parents``, ``tokens``: (N,); ``nodes``: (M,))."""
        raise NotImplementedError


class NoDraft(RuleDrafter):
    """Proposes nothing: a round with it is one plain decoding step (the one-token forward,
    then the greedy token or a sample from the target's own p)."""

    def _commit(self, seq: list[int], features: torch.Tensor | None = None) -> None: ...  # nothing to feed

    def propose(self, rule: Rule | None = None, sampling: Sampling | None = None,
                rng: np.random.Generator | None = None, clock: Timer = untimed) -> Proposal:
        return Proposal.chain([])


class TreeDrafter(RuleDrafter):
    """What the model-based drafters share: their cache holds the committed sequence, then the
    tree nodes fed so far this round (``fed``, in cache order).

    Drafting rules grow one tree between commits, so each ``expand`` feeds only the nodes its
    cache lacks -- each node once per round, not its whole ancestor chain at every depth --
    with a mask over [fed nodes, new nodes]. A call with a different tree (another caller)
    drops the fed nodes first, so any sequence of calls gets the right rows. Subclasses
    implement ``_feed`` (below): the log-prob rows of new nodes of one depth whose parents are fed.
    """

    # set by the subclass (cache) and by ``_start_round`` at every commit
    cache: KVCache
    committed: int  # the cache's length after the commit: the committed sequence
    fed: np.ndarray  # (n_fed,) int64: the tree nodes in the cache, in cache order
    fed_tree: tuple[np.ndarray, np.ndarray]  # (parents, tokens) of the fed nodes, (n_fed,) each
    logq: np.ndarray  # (1 + n_fed, V) float64
    # _feed(parents (N,), tokens (N,), new (M,), mask (M, n_fed + M) bool over [fed, new], depth (M,)) -> (M, V)
    _feed: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

    def commit(self, seq: list[int], features: torch.Tensor | None = None, clock: Timer = untimed) -> None:
        """As ``RuleDrafter.commit``; a round whose bonus token lies past the context ends the
        loop (its budget fits the context), so there is nothing left to feed."""
        if len(seq) <= self.cache.capacity:
            super().commit(seq, features, clock)

    def propose(self, rule: Rule | None, sampling: Sampling | None, rng: np.random.Generator | None,
                clock: Timer = untimed) -> Proposal:
        """As ``RuleDrafter.propose``; a chain rule (``core.tree_sampled.chain_length``) runs as
        ``chain``, a plain loop: the rule's own nodes, q rows and draws, without its tree
        bookkeeping, which cost more than the draft's forward on every draft step."""
        k = chain_length(rule)
        if k is None:
            return super().propose(rule, sampling, rng, clock)
        return clock("draft", self.chain, k, sampling if draws_from_q(rule, sampling) else None, rng)

    def chain(self, k: int, sampling: Sampling | None, rng: np.random.Generator | None) -> Proposal:
        """A chain of ``k`` nodes, node i under node i - 1: each token drawn from q at its parent
        (``sampling.draft_probs``, the draw of ``draw_children``) or, with ``sampling`` None, its
        argmax (``core.tree._top``'s first index on ties). The drafter's state is left as the
        rule's ``expand`` calls leave it: nodes 0..k-2 fed, their rows in ``logq``."""
        self._forget_tree()
        parents = np.arange(-1, k - 1, dtype=np.int64)  # (k,)
        tokens = np.zeros(k, dtype=np.int64)  # (k,): filled level by level
        q_rows: list[np.ndarray] = []  # (1, V) each
        rows, row = [self.logq], self.logq[0]
        for i in range(k):
            if sampling is None:
                tokens[i] = int(row.argmax())
            else:
                q_rows.append(sampling.draft_probs(row[None]))  # (1, V)
                tokens[i] = tree_sampled.draw_children(q_rows[-1], 1, cast(np.random.Generator, rng), True)[0, 0]
            if i + 1 == k:
                break
            new = np.array([i])  # node i: its parent (i - 1, or the root) is fed; it sees all fed nodes
            if self.cache.length < self.cache.capacity:
                rows.append(self._feed(parents, tokens, new, np.ones((1, i + 1), dtype=bool), new))
            else:  # past the draft cache's room: the round cuts the proposal to it (``round.fit_to_room``)
                rows.append(self._unfed(1))
            self.fed = np.arange(i + 1)
            row = rows[-1][0]
        self.logq = np.concatenate(rows)
        self.fed_tree = (parents[self.fed], tokens[self.fed])
        if sampling is None:
            return Proposal(parents, tokens)
        return Proposal(parents, tokens, np.concatenate(q_rows), True)

    def _start_round(self, root_logq: np.ndarray) -> None:
        """``root_logq``: (V,) draft log-probs after the committed sequence."""
        self.committed = self.cache.length
        self.fed = np.zeros(0, dtype=np.int64)
        self.fed_tree = (self.fed, self.fed)  # (parents, tokens) of the fed nodes, to spot a new tree
        self.logq = root_logq[None]  # row 0: after the committed sequence; row 1 + i: after fed[i]

    def _forget_tree(self) -> None:
        self.cache.truncate(self.committed)
        self.logq = self.logq[:1]
        self.fed = np.zeros(0, dtype=np.int64)
        self.fed_tree = (self.fed, self.fed)

    def _fed_nodes_belong_to(self, parents: np.ndarray, tokens: np.ndarray) -> bool:
        """Whether every fed node is a node of this tree (same index, parent and token)."""
        return not len(self.fed) or (self.fed.max() < len(parents)
                                     and np.array_equal(parents[self.fed], self.fed_tree[0])
                                     and np.array_equal(tokens[self.fed], self.fed_tree[1]))

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V) draft log-probs after each node of ``nodes`` (-1: after the committed sequence)."""
        parents, tokens = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64)  # (N,)
        nodes = np.asarray(nodes)  # (M,)
        if not self._fed_nodes_belong_to(parents, tokens):
            self._forget_tree()
        fed = np.zeros(len(parents), dtype=bool)
        fed[self.fed] = True
        need, up = np.zeros(len(parents), dtype=bool), nodes[nodes >= 0]
        while up.size:  # the nodes and their ancestors the cache lacks (a rule growing the tree: the nodes)
            up = up[~fed[up] & ~need[up]]
            need[up] = True
            up = parents[up]
            up = up[up >= 0]
        new = np.flatnonzero(need)
        if len(new):
            mask = tree.tree_attention_mask(parents)  # (N, N) bool
            depth = mask.sum(1) - 1  # (N,)
            for d in np.unique(depth[new]):  # one feed per depth: an EAGLE node's input is its parent's output
                group = new[depth[new] == d]
                cols = np.concatenate([self.fed, group])
                # at the end of the context the cache holds only the first nodes; the round cuts the
                # proposal to the same room (``round.fit_to_room``), so the others' rows are never used
                fit = min(len(group), self.cache.capacity - self.cache.length)
                rows = [self._feed(parents, tokens, group[:fit], mask[np.ix_(group[:fit], cols[: len(self.fed) + fit])],
                                   depth[group[:fit]])] if fit > 0 else []
                self.logq = np.concatenate([self.logq, *rows, self._unfed(len(group) - fit)])
                self.fed = cols
            self.fed_tree = (parents[self.fed], tokens[self.fed])
        return self.logq[self._rows(len(parents))[nodes]]

    def _unfed(self, n: int) -> np.ndarray:
        """(n, V) placeholder rows (uniform log-probs) for nodes past the draft cache's room."""
        V = self.logq.shape[1]
        return np.full((n, V), -np.log(V))

    def _rows(self, n_nodes: int) -> np.ndarray:
        """node -> its row of ``logq`` (and of the EAGLE head's g); index -1 (the context) -> 0:
        (n_nodes + 1,) int64."""
        row = np.zeros(n_nodes + 1, dtype=np.int64)
        row[self.fed] = np.arange(1, len(self.fed) + 1)
        return row


class ModelDrafter(TreeDrafter):
    """A small GPT drafting with its own KV cache; tree nodes sit at ``committed + depth``."""

    needs_features = False
    root_call: dict[str, Any] = {}  # keywords of the commit's call (the real LLM's draft model: last=True, one row)

    def __init__(self, model: GPT) -> None:
        self.model, self.cache, self.committed = model, model.new_cache(), 0
        self.vocab_size, self.support = model.config.vocab_size, getattr(model, "support", None)  # draft vocabulary

    def _commit(self, seq: list[int], features: torch.Tensor | None = None) -> None:
        """Drop last round's tree and feed the committed tokens the cache lacks (at least the
        last one: its logits are the root's row)."""
        self.cache.truncate(min(self.committed, len(seq) - 1))
        idx = torch.as_tensor(seq[self.cache.length :], dtype=torch.long, device=self.model.device)
        self._start_round(log_probs(self.model(idx[None], cache=self.cache, **self.root_call)[0, -1], self.support))

    def _feed(self, parents: np.ndarray, tokens: np.ndarray, new: np.ndarray, mask: np.ndarray,
              depth: np.ndarray) -> np.ndarray:
        idx = torch.as_tensor(tokens[new], dtype=torch.long, device=self.model.device)  # (M,)
        positions = torch.as_tensor(self.committed + depth, device=self.model.device)
        logits = self.model(idx[None], positions=positions, mask=torch.from_numpy(mask), cache=self.cache)[0]
        return log_probs(logits, self.support)


class EagleDrafter(TreeDrafter):
    """The EAGLE head: committed positions use the target's true features; a tree node uses
    the head's own output g at its parent (the root's g for depth 0)."""

    needs_features = True
    g: torch.Tensor  # (1 + n_fed, C): the head's output at the root, then at each fed node

    def __init__(self, head: EagleHead, target: GPT) -> None:
        check_head_fits(head.config.n_embd, head.config.vocab_size, target.config.n_embd, target.config.vocab_size,
                        "head")
        self.head, self.target, self.cache, self.committed = head, target, head.new_cache(), 0
        self.feature_layers = getattr(head, "layers", None)  # EAGLE-3 reads fused low/middle/top features

    def _commit(self, seq: list[int], features: torch.Tensor | None) -> None:
        """``features``: the target's hidden states ((n, C), or (n, len(layers) * C) for EAGLE-3)
        at the last ``n`` committed positions but the final one; each pairs with the token after it."""
        self.cache.truncate(self.committed)
        assert features is not None  # needs_features: the round always passes them
        g, logits = self.head.step(self.target, np.asarray(seq[len(seq) - len(features) :]), features, self.cache,
                                   last=True)
        self.g = g[-1:]  # row 0: the root's g; row 1 + i: fed[i]'s, like self.logq
        self._start_round(log_probs(logits[0], getattr(self.head, "support", None)))

    def _forget_tree(self) -> None:
        super()._forget_tree()
        self.g = self.g[:1]

    def _unfed(self, n: int) -> np.ndarray:
        self.g = torch.cat([self.g, self.g[:1].expand(n, -1)])  # rows kept aligned with logq's
        return super()._unfed(n)

    def _feed(self, parents: np.ndarray, tokens: np.ndarray, new: np.ndarray, mask: np.ndarray,
              depth: np.ndarray) -> np.ndarray:
        feats = self.g[torch.from_numpy(self._rows(len(parents))[parents[new]])]  # each parent was fed before
        g, logits = self.head.step(self.target, tokens[new], feats, self.cache, mask)
        self.g = torch.cat([self.g, g])
        return log_probs(logits, getattr(self.head, "support", None))


class MedusaDrafter(RuleDrafter):
    """Medusa heads: depth d of the tree takes head d's top tokens at the last committed
    feature, whatever the tokens above it."""

    needs_features = True
    rows: np.ndarray  # (K, V) float64: head d's log-probs at the last committed feature

    def __init__(self, heads: MedusaHeads | LlamaMedusaHeads, target: GPT) -> None:
        check_head_fits(heads.config.n_embd, heads.config.vocab_size, target.config.n_embd,
                        target.config.vocab_size, "heads")
        self.heads, self.target = heads, target

    def _commit(self, seq: list[int], features: torch.Tensor | None) -> None:
        assert features is not None  # needs_features: the round always passes them
        self.rows = log_probs(self.heads(self.target, features[-1]), getattr(self.heads, "support", None))

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V): for each node, the rows of the head that drafts its children."""
        nodes = np.asarray(nodes)  # (M,)
        d = np.zeros(len(nodes), dtype=np.int64)  # head d drafts depth d; the context's children are depth 0
        d[nodes >= 0] = tree.tree_depth(parents)[nodes[nodes >= 0]] + 1
        if d.max() >= len(self.rows):
            raise ValueError(f"Medusa has {len(self.rows)} heads; the tree asks for depth {int(d.max()) + 1}")
        return self.rows[d]
