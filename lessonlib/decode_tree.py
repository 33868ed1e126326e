"""Tree speculative decoding with KV caches: draft a tree, verify it in ONE target forward.

One round (the target cache holds the committed sequence minus its last token, as in
``lessonlib.decode``; that last token is the tree's root):

1. a drafter grows a tree with one of the rules of ``lessonlib.tree`` (static top-k, top-p,
   EAGLE-2 dynamic) through its ``expand`` callback;
2. the target runs once over [root] + the N tree tokens, with the tree attention mask and
   positions ``prefix_len + depth``, so every node is scored as if it were the next token
   after its own root-to-node path;
3. the longest acceptable branch is kept: greedy at T <= 1e-5, else the exact sibling rule;
4. the cache keeps the root and the accepted nodes' keys/values, in order, and drops the
   rest (``KVCache.keep``) -- it then equals a fresh prefill of the committed tokens.

Drafters (each has ``commit(seq, features)`` after every round and ``expand(parents, tokens,
nodes)`` for the drafting rules): ``ModelDrafter`` (a small GPT with its own cache),
``EagleDrafter`` (the EAGLE head on the target's features), ``MedusaDrafter``.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
import torch.nn.functional as F

from . import tree
from .decode import Clock, _check_budget, _rng, timing_stats
from .sampling import GREEDY_TEMPERATURE, softmax

DEFAULT_RULE = functools.partial(tree.draft_topk, branching=(3, 2, 2))


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

    def __init__(self, head, target):
        self.head, self.target, self.cache, self.committed = head, target, head.new_cache(), 0

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


def verify_tree_forward(target, cache, root_token, parents, tokens):
    """One target forward over [root] + tree tokens after ``cache``: (logits, hidden) with
    N + 1 rows, row 0 for the root and row i + 1 for node i."""
    mask = tree.tree_attention_mask(tree.with_root(parents))
    start = cache.length
    if start + len(mask) > cache.capacity:
        raise ValueError(f"the tree ({len(parents)} nodes) does not fit the context: {start} + {len(mask)} > {cache.capacity}")
    idx = torch.as_tensor(np.concatenate([[root_token], tokens]), dtype=torch.long, device=target.device)
    positions = torch.as_tensor(start + mask.sum(1) - 1, device=target.device)  # prefix_len + depth (root at depth 0)
    logits, hidden = target(idx[None], positions=positions, mask=torch.from_numpy(mask), cache=cache, return_hidden=True)
    return logits[0], hidden[0]


def acceptance_by_depth(accepted_lengths, max_depth):
    """alpha_d = P(node at depth d accepted | depth d - 1 accepted), d = 0..max_depth-1."""
    lengths = np.asarray(accepted_lengths)
    reached = np.array([(lengths >= d).sum() for d in range(max_depth)])
    passed = np.array([(lengths > d).sum() for d in range(max_depth)])
    return [float(p / r) if r else None for p, r in zip(passed, reached)]


@torch.inference_mode()
def tree_generate(target, drafter, prompt_tokens, max_new_tokens, rule=DEFAULT_RULE, temperature=0.0, rng=None):
    """Tree speculative decoding. ``rule(expand) -> (parents, tokens, score)`` is a drafting
    rule of ``lessonlib.tree``, e.g. ``functools.partial(tree.draft_dynamic, depth=5,
    top_k=4, total=24)``. Greedy at T <= 1e-5 (output = the target's greedy output), else the
    exact sibling rule (output distributed as the target's sampling at ``temperature``).

    Returns (new_tokens, stats): tau (tokens per target forward), acceptance by depth,
    mean nodes per tree, target_calls, draft/verify/overhead seconds, tokens_per_second.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    _check_budget(target, prompt_tokens, max_new_tokens)
    if len(prompt_tokens) < 2 and not isinstance(drafter, ModelDrafter):
        raise ValueError("prompt_tokens must hold at least 2 tokens for a feature-based drafter")
    greedy = temperature <= GREEDY_TEMPERATURE
    rng = _rng(rng)
    clock = Clock(target.device)
    seq = list(prompt_tokens)
    cache = target.new_cache()
    features = torch.zeros(0, target.config.n_embd, device=target.device)
    if len(seq) > 1:  # prefill all but the last token; it is the first round's root
        idx = torch.as_tensor(seq[:-1], dtype=torch.long, device=target.device)[None]
        features = clock("prefill", target, idx, cache=cache, return_hidden=True)[1][0]
    clock("prefill", drafter.commit, seq, features)
    goal = len(seq) + max_new_tokens
    lengths, nodes, depth = [], [], 0
    start_time = time.perf_counter()
    while len(seq) < goal:
        parents, tokens, _ = clock("draft", rule, drafter.expand)
        start = cache.length
        logits, hidden = clock("verify", verify_tree_forward, target, cache, seq[-1], parents, tokens)
        if greedy:
            path, emitted = tree.verify_tree_greedy(parents, tokens, logits.argmax(-1).cpu().numpy())
        else:
            path, emitted = tree.verify_tree(parents, tokens, softmax(logits.double().cpu().numpy(), temperature), rng)
        keep = [0] + [a + 1 for a in path]
        cache.keep(start, keep)
        seq += emitted
        clock("draft", drafter.commit, seq, hidden[keep])
        lengths.append(len(path))
        nodes.append(len(parents))
        depth = max(depth, int(tree.tree_depth(parents).max()) + 1)
    seconds = time.perf_counter() - start_time
    draft_s, verify_s = clock.seconds["draft"], clock.seconds["verify"]
    rounds = len(lengths)
    return seq[goal - max_new_tokens : goal], {
        "temperature": float(temperature),
        "tau": (len(seq) - (goal - max_new_tokens)) / rounds,
        "rounds": rounds,
        "target_calls": rounds,
        "mean_nodes": float(np.mean(nodes)),
        "mean_accepted": float(np.mean(lengths)),
        "acceptance_by_depth": acceptance_by_depth(lengths, depth),
        "accepted_lengths": np.bincount(lengths).tolist(),
        **timing_stats(clock, seconds, max_new_tokens),
        "verify_forward_seconds": verify_s / rounds,
        "draft_seconds_per_round": draft_s / rounds,
    }
