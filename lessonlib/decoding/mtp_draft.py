"""Self-speculative decoding with the target's own MTP modules (``models.mtp``): no draft model.

After every round the target's hidden states h^0 at the newly committed positions are fed
through the modules, each on the positions whose token d ahead is known:

    module d at position j reads h^{d-1}_j and the token x_{j+d}; it is fed through L - d,
    where L is the index of the last committed token.

Drafting then reads module 1 at position L - 1 (it predicts x_{L+1}, the first token after the
committed sequence) and, for each drafted first token a, module 2 at position L - 1 with input
(h^1_{L-1}, a), which predicts the token after a. So a tree of depth <= 2 needs no
path-dependent feeding: siblings share every cached position and only see themselves.
Deeper drafts would need each branch's tokens fed at earlier positions; with D = 2 modules
(``train.MTP_DEPTH``) there is nothing deeper to draft.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from lessonlib.core import tree
from lessonlib.decoding.drafters import RuleDrafter, log_probs
from lessonlib.decoding.round import Ids

if TYPE_CHECKING:  # the types only: importing lessonlib.models applies the thread policy
    from lessonlib.models.gpt import GPT, KVCache
    from lessonlib.models.mtp import MTPModules


class MTPDrafter(RuleDrafter):
    """A ``Drafter`` (``decoding.drafters``) over ``mtp`` (``models.mtp.MTPModules``) for ``target``."""

    needs_features = True
    h1_last: torch.Tensor  # (C,): h^1 at position L - 1, set by every commit
    root_logq: np.ndarray  # (V,) float64: module 1's draft log-probs for x_{L+1}

    def __init__(self, mtp: MTPModules, target: GPT) -> None:
        self.mtp, self.target = mtp, target
        D = mtp.depth
        self.max_depth = min(D, 2)
        self.caches: list[KVCache] = [mtp[d].new_cache() for d in range(1, D + 1)]
        self.fed = [0] * D  # module d has been fed positions 0 .. fed[d-1] - 1
        # h^{d-1} rows waiting for module d: (first absolute position, rows (n, C))
        self.waiting: list[tuple[int, torch.Tensor]] = [
            (0, torch.zeros(0, target.config.n_embd, device=target.device)) for _ in range(D)]

    def _commit(self, seq: list[int], features: torch.Tensor | None) -> None:
        """Feed the modules the newly committed positions; ``features`` = h^0 ((n, C)) at the last
        n = len(features) positions but the final one (as for the EAGLE drafter)."""
        L = len(seq) - 1
        assert features is not None  # needs_features: the round always passes them
        first = L - len(features)
        start, rows = self.waiting[0]
        self.waiting[0] = (start if len(rows) else first, torch.cat([rows, features]))
        for d in range(1, self.mtp.depth + 1):
            cache = self.caches[d - 1]
            cache.truncate(self.fed[d - 1])  # drop last round's draft-time feeds
            start, rows = self.waiting[d - 1]
            end = L - d  # the last position whose token d ahead is committed
            n = end - self.fed[d - 1] + 1
            if n <= 0:
                continue
            skip = self.fed[d - 1] - start  # rows already fed
            h_in = rows[skip : skip + n]
            tokens = torch.as_tensor(seq[self.fed[d - 1] + d : end + d + 1], dtype=torch.long,
                                     device=self.target.device)  # (n,)
            h_out = self.mtp[d](self.target, tokens[None], h_in[None], cache=cache)[0]  # (n, C)
            self.fed[d - 1] = end + 1
            self.waiting[d - 1] = (end + 1, rows[skip + n :])
            if d < self.mtp.depth:
                nxt_start, nxt_rows = self.waiting[d]
                self.waiting[d] = (nxt_start if len(nxt_rows) else end + 1 - n, torch.cat([nxt_rows, h_out]))
            if d == 1:
                self.h1_last = h_out[-1]  # h^1 at position L - 1
        self.root_logq = log_probs(self.target.lm_head(self.h1_last))

    def expand(self, parents: Ids, tokens: Ids, nodes: Ids) -> np.ndarray:
        """(len(nodes), V) draft log-probs after each node (-1: after the committed sequence)."""
        parents, tokens = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64)  # (N,)
        nodes = np.asarray(nodes)  # (M,)
        depth = np.full(len(nodes), -1)
        depth[nodes >= 0] = tree.tree_depth(parents)[nodes[nodes >= 0]] if len(parents) else []
        if (depth + 2 > self.max_depth).any():
            raise ValueError(f"MTP with {self.mtp.depth} modules drafts trees of depth <= {self.max_depth}; "
                             f"node at depth {int(depth.max()) + 1} asked to expand")
        out = np.empty((len(nodes), self.target.config.vocab_size))
        out[depth < 0] = self.root_logq
        first = np.flatnonzero(depth == 0)
        if len(first):  # module 2 at position L - 1, one query per first-level token, each seeing only itself
            cache = self.caches[1]
            cache.truncate(self.fed[1])
            idx = torch.as_tensor(tokens[nodes[first]], dtype=torch.long, device=self.target.device)
            h1 = self.h1_last.expand(len(first), -1)
            mask = torch.eye(len(first), dtype=torch.bool)
            h2 = self.mtp[2](self.target, idx[None], h1[None], mask=mask, cache=cache)[0]
            cache.truncate(self.fed[1])
            out[first] = log_probs(self.target.lm_head(h2))
        return out
