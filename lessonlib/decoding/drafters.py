"""Drafters: everything that proposes draft tokens to the tree loop (``tree_decode``).

Every draft kind implements the ``Drafter`` protocol -- a separate draft model
(``ModelDrafter``), the EAGLE head on the target's features (``EagleDrafter``), Medusa heads
(``MedusaDrafter``), and the draft-free and MTP drafters of later modules. A chain of K drafts
is the tree whose branching is (1,) * K, so one loop runs them all.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

from lessonlib.core import tree


@runtime_checkable
class Drafter(Protocol):
    """What the tree loop asks of a draft.

    ``needs_features``: whether ``commit`` needs the target's hidden states (EAGLE, Medusa,
    MTP); such drafters need a prompt of at least 2 tokens. An optional ``feature_layers``
    (a tuple of block indices) asks for those blocks' outputs concatenated instead of the top
    block's (EAGLE-3).
    ``commit(seq, features)``: called once before the first round and after every round with
    the committed sequence (a list of token ids) and the target's hidden states at the
    positions committed in that round (all but the last token's).
    ``expand(parents, tokens, nodes) -> (len(nodes), V)``: draft log-probabilities after each
    node in ``nodes`` of the current tree (``parents``/``tokens`` as in ``core.tree``; node -1
    is the committed sequence). The drafting rules of ``core.tree`` call it.
    """

    needs_features: bool

    def commit(self, seq: list[int], features) -> None: ...

    def expand(self, parents, tokens, nodes) -> np.ndarray: ...


def _log_probs(logits) -> np.ndarray:
    return F.log_softmax(logits.double(), -1).cpu().numpy()


class TreeDrafter:
    """What the model-based drafters share: their cache holds the committed sequence, then the
    tree nodes fed so far this round (``fed``, in cache order).

    Drafting rules grow one tree between commits, so each ``expand`` feeds only the nodes its
    cache lacks -- each node once per round, not its whole ancestor chain at every depth --
    with a mask over [fed nodes, new nodes]. A call with a different tree (another caller)
    drops the fed nodes first, so any sequence of calls gets the right rows.
    Subclasses implement ``_feed(parents, tokens, new, mask, depth)`` -> log-prob rows of
    ``new`` (nodes of one depth whose parents are fed; ``mask`` over [fed, new]).
    """

    def _start_round(self, root_logq):
        self.committed = self.cache.length
        self.fed = np.zeros(0, dtype=np.int64)
        self.fed_tree = (self.fed, self.fed)  # (parents, tokens) of the fed nodes, to spot a new tree
        self.logq = root_logq[None]  # row 0: after the committed sequence; row 1 + i: after fed[i]

    def _forget_tree(self):
        self.cache.truncate(self.committed)
        self.logq = self.logq[:1]
        self.fed = np.zeros(0, dtype=np.int64)
        self.fed_tree = (self.fed, self.fed)

    def _fed_nodes_belong_to(self, parents, tokens) -> bool:
        """Whether every fed node is a node of this tree (same index, parent and token)."""
        return not len(self.fed) or (self.fed.max() < len(parents) and np.array_equal(parents[self.fed], self.fed_tree[0])
                                     and np.array_equal(tokens[self.fed], self.fed_tree[1]))

    def expand(self, parents, tokens, nodes):
        """(len(nodes), V) draft log-probs after each node of ``nodes`` (-1: after the committed sequence)."""
        parents, tokens, nodes = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64), np.asarray(nodes)
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
            mask = tree.tree_attention_mask(parents)
            depth = mask.sum(1) - 1
            for d in np.unique(depth[new]):  # one feed per depth: an EAGLE node's input is its parent's output
                group = new[depth[new] == d]
                cols = np.concatenate([self.fed, group])
                self.logq = np.concatenate([self.logq, self._feed(parents, tokens, group, mask[np.ix_(group, cols)], depth[group])])
                self.fed = cols
            self.fed_tree = (parents[self.fed], tokens[self.fed])
        return self.logq[self._rows(len(parents))[nodes]]

    def _rows(self, n_nodes):
        """node -> its row of ``logq`` (and of the EAGLE head's g); index -1 (the context) -> 0."""
        row = np.zeros(n_nodes + 1, dtype=np.int64)
        row[self.fed] = np.arange(1, len(self.fed) + 1)
        return row


class ModelDrafter(TreeDrafter):
    """A small GPT drafting with its own KV cache; tree nodes sit at ``committed + depth``."""

    needs_features = False

    def __init__(self, model):
        self.model, self.cache, self.committed = model, model.new_cache(), 0

    def commit(self, seq, features=None):
        """Drop last round's tree and feed the committed tokens the cache lacks (at least the
        last one: its logits are the root's row)."""
        self.cache.truncate(min(self.committed, len(seq) - 1))
        idx = torch.as_tensor(seq[self.cache.length :], dtype=torch.long, device=self.model.device)
        self._start_round(_log_probs(self.model(idx[None], cache=self.cache)[0, -1]))

    def _feed(self, parents, tokens, new, mask, depth):
        idx = torch.as_tensor(tokens[new], dtype=torch.long, device=self.model.device)
        positions = torch.as_tensor(self.committed + depth, device=self.model.device)
        return _log_probs(self.model(idx[None], positions=positions, mask=torch.from_numpy(mask), cache=self.cache)[0])


class EagleDrafter(TreeDrafter):
    """The EAGLE head: committed positions use the target's true features; a tree node uses
    the head's own output g at its parent (the root's g for depth 0)."""

    needs_features = True

    def __init__(self, head, target):
        self.head, self.target, self.cache, self.committed = head, target, head.new_cache(), 0
        self.feature_layers = getattr(head, "layers", None)  # EAGLE-3 reads fused low/middle/top features

    def commit(self, seq, features):
        """``features``: the target's hidden states at the last ``n`` committed positions but
        the final one; each pairs with the token after it."""
        self.cache.truncate(self.committed)
        n = len(features)
        tokens = torch.as_tensor(seq[len(seq) - n :], dtype=torch.long, device=self.head.device)
        g = self.head(self.target, tokens[None], features[None], cache=self.cache)[0]
        self.g = g[-1:]  # row 0: the root's g; row 1 + i: fed[i]'s, like self.logq
        self._start_round(_log_probs(self.target.lm_head(g[-1])))

    def _forget_tree(self):
        super()._forget_tree()
        self.g = self.g[:1]

    def _feed(self, parents, tokens, new, mask, depth):
        feats = self.g[torch.from_numpy(self._rows(len(parents))[parents[new]])]  # each parent was fed before
        idx = torch.as_tensor(tokens[new], dtype=torch.long, device=self.head.device)
        g = self.head(self.target, idx[None], feats[None], mask=torch.from_numpy(mask), cache=self.cache)[0]
        self.g = torch.cat([self.g, g])
        return _log_probs(self.target.lm_head(g))


class MedusaDrafter:
    """Medusa heads: depth d of the tree takes head d's top tokens at the last committed
    feature, whatever the tokens above it."""

    needs_features = True

    def __init__(self, heads, target):
        self.heads, self.target = heads, target

    def commit(self, seq, features):
        self.rows = _log_probs(self.heads(self.target, features[-1]))  # (K, V)

    def expand(self, parents, tokens, nodes):
        nodes = np.asarray(nodes)
        d = np.zeros(len(nodes), dtype=np.int64)  # head d drafts depth d; the context's children are depth 0
        d[nodes >= 0] = tree.tree_depth(parents)[nodes[nodes >= 0]] + 1
        if d.max() >= len(self.rows):
            raise ValueError(f"Medusa has {len(self.rows)} heads; the tree asks for depth {int(d.max()) + 1}")
        return self.rows[d]
