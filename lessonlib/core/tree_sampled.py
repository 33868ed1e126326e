"""Sampled draft trees and the recursive rejection rules that keep them exact (numpy).

``core.tree``'s drafting rules pick the *most likely* children of a node: deterministic
candidates, whose q is one-hot, so at T > 0 a child is accepted with probability p(child) only,
which heads for 1/|V| as T grows. Here the children of a node are *drawn* from the draft's q
at that node, and the rule that judges them uses that q:

* **with replacement** (SpecInfer's multi-step speculative sampling, Miao et al. 2024): the
  m children c_1..c_m are i.i.d. draws from q. Judge them in draw order against p' (first
  the target's p): accept c_i with probability min(1, p'(c_i) / q(c_i)); on a rejection
  p' <- norm(max(p' - q, 0)) and try the next; all rejected -> emit a sample of p'.
* **without replacement** (recursive speculative decoding, Jeon et al. 2024; drawn by
  Gumbel-top-k): c_i is drawn from q' = q with c_1..c_{i-1} removed and renormalised. The same
  rule with q' in place of q: after a rejection p' <- norm(max(p' - q', 0)), then c_i leaves q'.

Why exact: each judgement is one step of speculative sampling of p' against the law the
candidate was drawn from *given everything drawn before it*, so "accept, or continue with the
residual" emits a sample of p' (induction from the last sibling, whose continuation is a draw of
p'). Judging a without-replacement draw with the full q -- reusing a rejected candidate's
mass -- breaks this, and so does judging with a q other than the one sampled from (the draft's
q before top-k, transformers #47932); ``sampled_tree_law`` enumerates both, for the tests.

The tree's *shape* may depend on anything drawn before a node's children are drawn (its own
score, its siblings'), never on those children themselves: ``draft_sampled_dynamic`` chooses
which nodes to expand by cumulative draft log-probability before drawing their children, and
its node budget cuts children in draw order (a stopping rule), so it stays exact. EAGLE-2's
final re-ranking, which drops drawn nodes by their value, would not.

Every rule returns (parents, tokens, score, q_rows): ``q_rows[i]`` (V,) is the law node i was
drawn from (its parent's processed q, before any sibling was removed); siblings are numbered
in draw order.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from lessonlib.core import tree
from lessonlib.core.sampling import inverse_cdf, residual_rows
from lessonlib.core.tree import Expand, _check_tree, _children
from lessonlib.core.validate import check_int, check_probs, check_rng

# probs(log-prob rows (M, V)) -> the draft's sampling distributions (M, V) (temperature, top-k, ...)
Probs: TypeAlias = Callable[[np.ndarray], np.ndarray]
# parents (N,), tokens (N,), score (N,), q_rows (N, V)
SampledDraft: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def check_replacement(replacement: object, name: str = "replacement") -> bool:
    """True or False only: ``replacement='no'`` is truthy and would silently draw with replacement."""
    if not isinstance(replacement, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {replacement!r}")
    return bool(replacement)


def _q_of(probs: Probs, logp: np.ndarray, rows: int) -> np.ndarray:
    """``probs(logp)`` checked: (rows, V) probability rows. Log-probabilities, NaN or rows that do
    not sum to 1 would draw token 0 or give NaN scores, silently."""
    try:
        q = check_probs(probs(logp), "probs(...) (the draft's sampling law per node)", ndim=(2,))
    except ValueError as err:
        raise ValueError(f"{err}: probs must return probability rows, not log-probabilities") from None
    if len(q) != rows:
        raise ValueError(f"probs(...) must return one row per frontier node ({rows}), got {len(q)}")
    return q


def draw_children(q: np.ndarray, m: int, rng: np.random.Generator, replacement: bool) -> np.ndarray:
    """(n, m') token draws from each row of ``q`` (n, V), in draw order: i.i.d. with replacement
    (m' = m), else without (Gumbel-top-k: the largest of log q + Gumbel noise, in descending
    order, are sequential draws without replacement; m' = min(m, tokens with mass))."""
    if replacement:  # inverse CDF, one cumulative sum per row (what ``sampling.inverse_cdf`` computes)
        u = rng.random((len(q), m))
        out = np.empty((len(q), m), dtype=np.int64)
        for i, row in enumerate(q):
            cdf = np.cumsum(row)
            out[i] = np.minimum(np.searchsorted(cdf, u[i] * cdf[-1], side="right"), np.argmax(cdf >= cdf[-1]))
        return out
    m = min(m, int((q > 0).sum(1).min()))
    # Gumbel-top-k as an exponential race: the smallest E_x / q(x), E ~ Exp(1), in ascending order
    # are sequential draws without replacement (-log of the race is log q + Gumbel); q = 0 never wins
    with np.errstate(divide="ignore"):
        race = np.where(q > 0, rng.standard_exponential(q.shape) / q, np.inf)
    top = np.argpartition(race, m - 1, axis=1)[:, :m] if m < q.shape[1] else np.tile(np.arange(m), (len(q), 1))
    return np.take_along_axis(top, np.argsort(np.take_along_axis(race, top, 1), axis=1), 1)


def _grow(parents: list[np.ndarray], tokens: list[np.ndarray], score: list[np.ndarray], q_rows: list[np.ndarray],
          frontier: np.ndarray, frontier_score: np.ndarray, q: np.ndarray, drawn: np.ndarray,
          limit: int | None = None) -> np.ndarray:
    """Append ``drawn`` (len(frontier), m) as children of ``frontier``, row by row (at most
    ``limit`` nodes, cut in that order); returns the new nodes' scores."""
    rows = np.repeat(np.arange(len(frontier)), drawn.shape[1])[:limit]
    flat = drawn.ravel()[:limit]
    new_score = frontier_score[rows] + np.log(q[rows, flat])
    parents.append(frontier[rows])
    tokens.append(flat)
    score.append(new_score)
    q_rows.append(q[rows])
    return new_score


def _flat(parents: list[np.ndarray], tokens: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The tree drawn so far as (parents (N,), tokens (N,)), from the per-level pieces."""
    if not parents:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(parents), np.concatenate(tokens)


def _done(parents: list[np.ndarray], tokens: list[np.ndarray], score: list[np.ndarray],
          q_rows: list[np.ndarray], vocab: int) -> SampledDraft:
    if not parents:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros((0, vocab))
    return (np.concatenate(parents).astype(np.int64), np.concatenate(tokens).astype(np.int64),
            np.concatenate(score), np.concatenate(q_rows))


def draft_sampled(expand: Expand, probs: Probs, rng: np.random.Generator, branching: Sequence[int],
                  replacement: bool = True) -> SampledDraft:
    """A static sampled tree: every node at depth d gets ``branching[d]`` children drawn from
    the draft's q at it (``probs(expand(...))``), with or without replacement. (1,) * K is a
    chain sampled from q."""
    branching = [check_int(b, "branching", minimum=1) for b in branching]
    if not branching:
        raise ValueError("branching must be a non-empty list of ints >= 1")
    check_rng(rng)
    replacement = check_replacement(replacement)
    parents: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    score: list[np.ndarray] = []
    q_rows: list[np.ndarray] = []
    frontier, frontier_score, base, vocab = np.array([-1]), np.zeros(1), 0, 0
    for m in branching:
        q = _q_of(probs, expand(*_flat(parents, tokens), frontier), len(frontier))  # (len(frontier), V)
        vocab = q.shape[1]
        frontier_score = _grow(parents, tokens, score, q_rows, frontier, frontier_score, q,
                               draw_children(q, m, rng, replacement))
        n_new = len(frontier_score)
        frontier, base = np.arange(base, base + n_new), base + n_new
    return _done(parents, tokens, score, q_rows, vocab)


def draft_sampled_dynamic(expand: Expand, probs: Probs, rng: np.random.Generator, depth: int, top_k: int,
                          total: int, replacement: bool = False) -> SampledDraft:
    """EAGLE-2's dynamic tree, sampled: at every depth the ``top_k`` frontier nodes with the
    largest cumulative draft log-prob each draw ``top_k`` children from their q; at most
    ``total`` nodes, the last level cut in draw order. The choice of whom to expand reads only
    nodes drawn before (exact, see the module docstring)."""
    depth = check_int(depth, "depth", minimum=1)
    top_k = check_int(top_k, "top_k", minimum=1)
    total = check_int(total, "total", minimum=1)
    check_rng(rng)
    replacement = check_replacement(replacement)
    parents: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    score: list[np.ndarray] = []
    q_rows: list[np.ndarray] = []
    frontier, frontier_score, n, vocab = np.array([-1]), np.zeros(1), 0, 0
    for _ in range(depth):
        if n >= total:
            break
        q = _q_of(probs, expand(*_flat(parents, tokens), frontier), len(frontier))
        vocab = q.shape[1]
        new_score = _grow(parents, tokens, score, q_rows, frontier, frontier_score, q,
                          draw_children(q, top_k, rng, replacement), limit=total - n)
        best = np.argsort(-new_score, kind="stable")[:top_k]  # ties: the earlier draw
        frontier, frontier_score = n + best, new_score[best]
        n += len(new_score)
    return _done(parents, tokens, score, q_rows, vocab)


def verify_tree_sampled(parents: npt.ArrayLike, tokens: npt.ArrayLike, p_rows: npt.ArrayLike,
                        q_rows: npt.ArrayLike, rng: np.random.Generator, replacement: bool = True,
                        validate: bool = True) -> tuple[list[int], list[int]]:
    """Recursive rejection over a sampled tree (the module docstring's rule).

    ``p_rows`` (N + 1, V): the target after the context (row 0) and after each node;
    ``q_rows`` (N, V): the law each node was drawn from; ``replacement``: how siblings were
    drawn. Draws one uniform per judged child and one for the last token. Returns (path,
    emitted) like ``core.tree.verify_tree``. ``validate=False`` skips the input checks (rows
    straight from ``sampling.process``)."""
    if validate:
        p_rows = check_probs(p_rows, "p_rows", ndim=(2,))
        parents, tokens, p_rows = _check_tree(parents, tokens, p_rows, "p_rows", p_rows.shape[-1])
        q_rows = check_probs(q_rows, "q_rows", ndim=(2,))
        if q_rows.shape != (len(parents), p_rows.shape[1]):
            raise ValueError(f"q_rows must be (N, V) = {(len(parents), p_rows.shape[1])}, got {q_rows.shape}")
        if len(parents) and (q_rows[np.arange(len(parents)), tokens] <= 0).any():
            raise ValueError("every node's token must have mass under the q it was drawn from (q_rows)")
        check_rng(rng)
        replacement = check_replacement(replacement)
        _check_siblings(np.asarray(parents), np.asarray(tokens), q_rows, replacement)
    parents, tokens = np.asarray(parents, dtype=np.int64), np.asarray(tokens, dtype=np.int64)
    p_rows, q_rows = np.asarray(p_rows), np.asarray(q_rows)
    children = _children(parents)
    node, path = -1, []
    while True:
        p, kids = p_rows[node + 1], children[node + 1]
        q = q_rows[kids[0]].copy() if len(kids) else p  # siblings share their parent's q (a leaf: unused)
        for c in kids:
            x = tokens[c]
            if rng.random() * q[x] < p[x]:  # u < p'(x) / q'(x), without dividing by 0
                path.append(int(c))
                break
            p = residual_rows(p, q)
            if not replacement:
                q[x] = 0.0
                q /= max(q.sum(), 1e-300)
        else:
            return path, tokens[path].tolist() + [int(inverse_cdf(p, np.asarray(rng.random())))]
        node = path[-1]


def _check_siblings(parents: np.ndarray, tokens: np.ndarray, q_rows: np.ndarray, replacement: bool) -> None:
    """Siblings share their parent's one q row; without replacement no token is drawn twice under one parent."""
    for parent in np.unique(parents):
        kids = np.flatnonzero(parents == parent)
        if not np.array_equal(q_rows[kids], np.broadcast_to(q_rows[kids[0]], q_rows[kids].shape)):
            raise ValueError(f"q_rows: the children of node {int(parent)} carry different q rows; siblings are "
                             "drawn from their parent's one q")
        if not replacement and len(set(tokens[kids].tolist())) < len(kids):
            raise ValueError(f"tokens: node {int(parent)} has a token twice among its children, which a draw "
                             "without replacement (replacement=False) cannot give")


def _judge(p: np.ndarray, q: np.ndarray, jq: np.ndarray, m: int, replacement: bool, judge_replacement: bool,
           below: Callable[[int], dict[tuple[int, ...], float]]) -> dict[tuple[int, ...], float]:
    """Law of one node's emitted suffix: m siblings left to draw from q and judge with jq."""
    out: dict[tuple[int, ...], float] = {}
    if m == 0 or q.sum() <= 0:
        return {(int(x),): float(p[x]) for x in np.flatnonzero(p > 0)}
    for x in np.flatnonzero(q > 0):
        accept = min(1.0, p[x] / jq[x]) if jq[x] > 0 else 1.0
        for t, pr in below(int(x)).items():
            out[(int(x),) + t] = out.get((int(x),) + t, 0.0) + q[x] * accept * pr
        if accept < 1.0:
            q2, jq2 = q.copy(), jq.copy()
            if not replacement:
                q2[x] = 0.0
                q2 /= max(q2.sum(), 1e-300)
            if not judge_replacement:
                jq2[x] = 0.0
                jq2 /= max(jq2.sum(), 1e-300)
            rest = _judge(residual_rows(p, jq), q2, jq2, m - 1, replacement, judge_replacement, below)
            for t, pr in rest.items():
                out[t] = out.get(t, 0.0) + q[x] * (1.0 - accept) * pr
    return out


def sampled_tree_law(p_of: Callable[[tuple[int, ...]], np.ndarray], q_of: Callable[[tuple[int, ...]], np.ndarray],
                     branching: Sequence[int], replacement: bool = True, judge_replacement: bool | None = None,
                     judge_q_of: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> dict[tuple[int, ...], float]:
    """Exact law of the tokens a sampled static tree emits, over every draw and every accept
    test: {emitted tokens: probability}. ``p_of(path)`` / ``q_of(path)``: the target's and the
    draft's distributions (V,) after the context + ``path``; ``branching`` as in
    ``draft_sampled``. The rule judges with ``judge_q_of`` (default ``q_of``) and removes
    rejected candidates iff ``judge_replacement`` is False (default: as drawn) -- the
    defaults are ``verify_tree_sampled``; the others are the negative controls. Small
    vocabularies only (it sums over V^m draws per node)."""
    judge_q_of = judge_q_of or q_of
    judge_replacement = replacement if judge_replacement is None else judge_replacement

    def node(path: tuple[int, ...]) -> dict[tuple[int, ...], float]:
        m = branching[len(path)] if len(path) < len(branching) else 0
        q = np.asarray(q_of(path), dtype=np.float64)
        return _judge(np.asarray(p_of(path), dtype=np.float64), q, np.asarray(judge_q_of(path), dtype=np.float64),
                      m, replacement, judge_replacement, lambda x: node(path + (x,)))

    return node(())


def continued_law(law: dict[tuple[int, ...], float], p_of: Callable[[tuple[int, ...]], np.ndarray],
                  length: int) -> dict[tuple[int, ...], float]:
    """The law of ``length`` tokens: a rule's emitted tokens (``law``), continued by sampling the
    target (``p_of``). A rule is exact iff this equals the target's own law of ``length`` tokens
    (``continued_law({(): 1.0}, p_of, length)``) for every length its emissions reach."""
    out: dict[tuple[int, ...], float] = {}
    stack = list(law.items())
    while stack:
        seq, pr = stack.pop()
        if len(seq) >= length:
            out[seq[:length]] = out.get(seq[:length], 0.0) + pr
            continue
        p = np.asarray(p_of(seq), dtype=np.float64)
        stack += [(seq + (int(x),), pr * float(p[x])) for x in np.flatnonzero(p > 0)]
    return out


@dataclass(frozen=True)
class SampledRule:
    """A sampled drafting rule, ready for a drafter: ``rule(expand, probs, rng)``.

    ``branching`` gives a static tree (``draft_sampled``); ``dynamic = (depth, top_k, total)``
    EAGLE-2's shape (``draft_sampled_dynamic``). ``deterministic`` is its twin among
    ``core.tree``'s rules (the most likely children instead of drawn ones): what a drafter runs
    when the draft is greedy, where drawing means taking the argmax."""

    branching: tuple[int, ...] = ()
    dynamic: tuple[int, int, int] | None = None
    replacement: bool = True

    def __post_init__(self) -> None:
        if (self.dynamic is None) == (not self.branching):
            raise ValueError("give exactly one of branching (a static shape) or dynamic = (depth, top_k, total)")
        check_replacement(self.replacement)
        [check_int(b, "branching", minimum=1) for b in self.branching]  # refused when built, not when first used
        if self.dynamic is not None:
            if not isinstance(self.dynamic, (tuple, list)) or len(self.dynamic) != 3:
                raise ValueError(f"dynamic must be (depth, top_k, total), got {self.dynamic!r}")
            for value, what in zip(self.dynamic, ("depth", "top_k", "total")):
                check_int(value, f"dynamic's {what}", minimum=1)

    def __call__(self, expand: Expand, probs: Probs, rng: np.random.Generator) -> SampledDraft:
        if self.dynamic is not None:
            return draft_sampled_dynamic(expand, probs, rng, *self.dynamic, replacement=self.replacement)
        return draft_sampled(expand, probs, rng, self.branching, self.replacement)

    @property
    def deterministic(self) -> Callable[[Expand], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self.dynamic is not None:
            return functools.partial(tree.draft_dynamic, depth=self.dynamic[0], top_k=self.dynamic[1],
                                     total=self.dynamic[2])
        return functools.partial(tree.draft_topk, branching=self.branching)

    @property
    def name(self) -> str:
        """'with' or 'without' replacement: the rule's label in tables."""
        return "with" if self.replacement else "without"


def chain_length(rule: object) -> int | None:
    """K when ``rule`` drafts a chain of K nodes one draw (or one argmax) per level -- a
    ``SampledRule`` with branching (1,) * K and replacement, or ``core.tree.draft_topk`` with
    that branching (``functools.partial``) -- else None. A drafter may then run the chain as a
    plain loop (``drafters.TreeDrafter``): the same nodes, q rows and random draws as the rule."""
    if isinstance(rule, SampledRule):
        branching, ok = rule.branching, rule.dynamic is None and rule.replacement
    elif isinstance(rule, functools.partial) and rule.func is tree.draft_topk and not rule.args:
        branching, ok = tuple(rule.keywords.get("branching", ())), set(rule.keywords) == {"branching"}
    else:
        return None
    ones = all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b == 1 for b in branching)
    return len(branching) if ok and branching and ones else None

