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


def _tree_inputs(parents, tokens, nodes):
    """The nodes that must be fed to score ``nodes`` (the ancestor closure, index order), the
    closure's own parents array, and where each requested node sits in it."""
    closure = tree.ancestor_closure(parents, nodes)
    return closure, tree.subtree(parents, closure), np.searchsorted(closure, nodes)


class ModelDrafter:
    """A small GPT drafting with its own KV cache, which holds the committed sequence.

    Each ``expand`` feeds the requested nodes' ancestor closure after the cache with the tree
    mask and then truncates it, so the cache never keeps a speculative token.
    """

    def __init__(self, model):
        self.model, self.cache = model, model.new_cache()
        self.seq, self.root = [], None

    def commit(self, seq, features=None):
        self.seq, self.root = list(seq), None
        self.cache.truncate(min(self.cache.length, len(seq)))

    def _device_tensor(self, values):
        return torch.as_tensor(np.asarray(values), dtype=torch.long, device=self.model.device)

    def expand(self, parents, tokens, nodes):
        nodes = np.asarray(nodes)
        if self.root is None:  # feed the committed tokens the cache lacks; the last row is the root's
            logits = self.model(self._device_tensor(self.seq[self.cache.length :])[None], cache=self.cache)
            self.root = _log_probs(logits[0, -1])
        out = np.empty((len(nodes), self.model.config.vocab_size))
        out[nodes < 0] = self.root
        if (nodes >= 0).any():
            closure, sub, where = _tree_inputs(parents, tokens, nodes[nodes >= 0])
            start = self.cache.length
            logits = self.model(self._device_tensor(tokens[closure])[None],
                                positions=self._device_tensor(tree.tree_position_ids(sub, start)),
                                mask=torch.from_numpy(tree.tree_attention_mask(sub)), cache=self.cache)
            self.cache.truncate(start)
            out[nodes >= 0] = _log_probs(logits[0, where])
        return out


class EagleDrafter:
    """The EAGLE head: committed positions use the target's true features; a tree node uses
    the head's own output g at its parent. The head's cache holds committed positions only."""

    def __init__(self, head, target):
        self.head, self.target, self.cache = head, target, head.new_cache()

    def commit(self, seq, features):
        """``features``: the target's hidden states at the last ``n`` committed positions but
        the final one; each pairs with the token after it."""
        n = len(features)
        tokens = torch.as_tensor(seq[len(seq) - n :], dtype=torch.long, device=self.head.device)
        g = self.head(self.target, tokens[None], features[None], cache=self.cache)[0]
        self.root, self.g = _log_probs(self.target.lm_head(g[-1])), {-1: g[-1]}

    def expand(self, parents, tokens, nodes):
        nodes = np.asarray(nodes)
        out = np.empty((len(nodes), self.target.config.vocab_size))
        out[nodes < 0] = self.root
        if (nodes >= 0).any():
            closure, sub, where = _tree_inputs(parents, tokens, nodes[nodes >= 0])
            feats = torch.stack([self.g[int(parents[c])] for c in closure])  # each parent was fed before
            idx = torch.as_tensor(tokens[closure], dtype=torch.long, device=self.head.device)
            start = self.cache.length
            g = self.head(self.target, idx[None], feats[None], mask=torch.from_numpy(tree.tree_attention_mask(sub)),
                          cache=self.cache)[0]
            self.cache.truncate(start)
            self.g.update({int(c): g[i] for i, c in enumerate(closure)})
            out[nodes >= 0] = _log_probs(self.target.lm_head(g[where]))
        return out


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
