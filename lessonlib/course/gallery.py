"""Real bugs from real engines, each reproduced in miniature on the course's own round.

Every sampler here has one interface, a batch of speculative rounds on fixed rows::

    step(target_logits, draft_logits, temperature, top_k, rng) -> list of emitted token lists

``target_logits`` (B, K+1, V) and ``draft_logits`` (B, K, V): each row of the batch becomes p and
q by softmax at ``temperature`` and the same top-k (``dists``); the draft samples K tokens from
q, the target judges them (``exact_rule``, ``chain.verify_chain`` written out; ``chain.verify_greedy``
at T <= 1e-5) and
a list of 1 to K+1 emitted tokens comes back per row. ``correct_step`` is that round; every
``Sampler`` in ``GALLERY`` changes one line of it, as a bug in a public engine did (its thread is
``source``, what went wrong ``symptom``). The last entry is not a bug: the rule "accept a draft
only when it equals a fresh target sample" is exact and only accepts less often (the two-sided
case). ``CASES`` are the inputs a detector runs them on; ``gallery_detect`` holds the reference
detector, the table and that measurement.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lessonlib.core import chain, sampling
from lessonlib.core.sampling import GREEDY_TEMPERATURE


def dists(logits, temperature: float, top_k: int | None = None) -> np.ndarray:
    """softmax(logits / T) on the last axis, then the ``top_k`` most likely tokens kept and renormalised
    (one-hot at the argmax for T <= 1e-5): the processing the target's rows and the draft's rows both
    go through. The same numbers as ``sampling.softmax`` then ``sampling.top_k_filter`` (ties aside),
    without their input checks (a detector calls it some 10⁵ times)."""
    z = np.asarray(logits, dtype=np.float64)
    if temperature <= GREEDY_TEMPERATURE:
        return np.eye(z.shape[-1])[z.argmax(axis=-1)]
    e = np.exp((z - z.max(axis=-1, keepdims=True)) / temperature)
    if top_k is not None and top_k < z.shape[-1]:
        e = np.where(e >= np.sort(e, axis=-1)[..., -top_k:-top_k + 1], e, 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def draw(row: np.ndarray, rng: np.random.Generator) -> int:
    """One token from a probability row, by inverse CDF (one uniform)."""
    return int(sampling.inverse_cdf(row, np.asarray(rng.random())))


def _draft(q_rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """K draft tokens, x_j ~ q_j (K,)."""
    return sampling.inverse_cdf(q_rows, rng.random(len(q_rows)))


def exact_rule(p, q, x, rng) -> list[int]:
    """``chain.verify_chain``'s rule, written out: accept x_j while u < p_j(x_j)/q_j(x_j), else one token
    from residual(p_j, q_j) and stop; a bonus from p_K after K acceptances."""
    for j, token in enumerate(x):
        with np.errstate(divide="ignore", invalid="ignore"):  # a buggy caller's q(x) = 0: p/0 accepts, 0/0 rejects
            ratio = p[j, token] / q[j, token]
        if not rng.random() < ratio:
            return [int(t) for t in x[:j]] + [draw(sampling.residual_rows(p[j], q[j]), rng)]
    return [int(t) for t in x] + [draw(p[-1], rng)]


def _verify(p, q, x, temperature, rng) -> list[int]:
    if temperature <= GREEDY_TEMPERATURE:
        return chain.verify_greedy(p, x, validate=False)
    return exact_rule(p, q, x, rng)


def _each(one: Callable) -> Callable:
    """A batched ``step`` from a one-row round ``one(tl, dl, temperature, top_k, rng)``."""
    def step(target_logits, draft_logits, temperature, top_k, rng):
        return [one(tl, dl, temperature, top_k, rng) for tl, dl in zip(target_logits, draft_logits)]
    step.__doc__, step.__name__, step.__wrapped__ = one.__doc__, one.__name__.lstrip("_"), one  # type: ignore[attr-defined]
    return step


# ----------------------------------------------------------------------------- the correct round

def _correct(tl, dl, temperature, top_k, rng):
    """The course's round: p and q through the same processing, x ~ q, then the exact rule."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    return _verify(p, q, _draft(q, rng), temperature, rng)


correct_step = _each(_correct)


# ----------------------------------------------------------------------------- the bugs, one line each

def _q_before_top_k(tl, dl, temperature, top_k, rng):
    """transformers #47932: the draft samples from its top-k q but the rule is handed the q from before."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    return _verify(p, dists(dl, temperature), _draft(q, rng), temperature, rng)  # BUG: q without top-k


def _draft_ignores_temperature(tl, dl, temperature, top_k, rng):
    """dflash #74: the draft samples at its default temperature 0 (its argmax) whatever the request says."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    return _verify(p, q, np.argmax(dl, axis=-1), temperature, rng)  # BUG: argmax, not x ~ q


def bf16(x) -> np.ndarray:
    """``x`` rounded to bfloat16 (8 significant bits, round to nearest even), returned as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def _draft_in_bf16(tl, dl, temperature, top_k, rng):
    """DeepSpec #31: the draft samples from its bf16 logits, the rule judges with the fp32 (here fp64) q."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    return _verify(p, q, _draft(dists(bf16(dl), temperature, top_k), rng), temperature, rng)  # BUG


def _ngram_residual_in_place(tl, dl, temperature, top_k, rng):
    """vllm-ascend #2881: the n-gram path removes the draft token from the target's own logits, in place."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    x = _draft(q, rng)
    if temperature > GREEDY_TEMPERATURE and np.all(q.max(axis=-1) == 1.0):  # a one-hot (n-gram) draft
        for j, token in enumerate(x):
            tl[j, token] = -np.inf  # BUG: the caller's array (the fix edits a copy)
        rest = dists(tl, temperature, top_k)  # p without the draft token: that path's residual
        for j, token in enumerate(x):
            if rng.random() >= p[j, token]:
                return [int(t) for t in x[:j]] + [draw(rest[j], rng)]
        return [int(t) for t in x] + [draw(p[-1], rng)]
    return _verify(p, q, x, temperature, rng)


def _rejection_one_step_late(tl, dl, temperature, top_k, rng):
    """openvino.genai #4190: a rejection is handled one position late: the rejected draft stays."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    x = _draft(q, rng)
    for j, token in enumerate(x):
        if (token == p[j].argmax()) if temperature <= GREEDY_TEMPERATURE else rng.random() < p[j, token] / q[j, token]:
            continue
        nxt = j + 1  # BUG: the correction goes to the next position and x_j is kept
        fix = p[nxt] if nxt == len(x) else sampling.residual_rows(p[nxt], q[nxt])
        token_fix = int(fix.argmax()) if temperature <= GREEDY_TEMPERATURE else draw(fix, rng)
        return [int(t) for t in x[: j + 1]] + [token_fix]
    return [int(t) for t in x] + [int(p[-1].argmax()) if temperature <= GREEDY_TEMPERATURE
                                  else draw(p[-1], rng)]


def _first_draft_unverified(tl, dl, temperature, top_k, rng):
    """lattice #243: the first draft token is committed without being checked."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    x = _draft(q, rng)
    return [int(x[0])] + _verify(p[1:], q[1:], x[1:], temperature, rng)  # BUG: x_0 never judged


def _greedy_with_softmax(tl, dl, temperature, top_k, rng):
    """jaymody/speculative-sampling #3: greedy mode drafts the argmax but judges with softmax (T = 1) rows."""
    if temperature > GREEDY_TEMPERATURE:
        return _correct(tl, dl, temperature, top_k, rng)
    p, q = dists(tl, 1.0), dists(dl, 1.0)  # BUG: probabilities of another distribution than the argmax
    return exact_rule(p, q, np.argmax(dl, axis=-1), rng)


def _verify_logits_rounded(tl, dl, temperature, top_k, rng):
    """vLLM #41758 / llama.cpp #25618: the verify pass's logits are not the one-token pass's (here: fp16)."""
    p, q = dists(np.float16(tl), temperature, top_k), dists(dl, temperature, top_k)  # BUG: another precision
    return _verify(p, q, _draft(q, rng), temperature, rng)


def _batched_rows_overwrite(target_logits, draft_logits, temperature, top_k, rng):
    """flash-attention #2779: rows packed into one buffer with a stride of K, not K + 1."""
    B, K1, V = np.shape(target_logits)
    buffer = np.zeros((B * K1, V))
    for b in range(B):
        buffer[b * (K1 - 1): b * (K1 - 1) + K1] = target_logits[b]  # BUG: row b + 1 overwrites row b's last
    rows = [buffer[b * (K1 - 1): b * (K1 - 1) + K1] for b in range(B)]
    return [_correct(tl, dl, temperature, top_k, rng) for tl, dl in zip(rows, draft_logits)]


def _sampler_match(tl, dl, temperature, top_k, rng):
    """mlx-swift-lm #459 / mlxcel #992: accept x_j only when it equals a fresh sample y ~ p_j, else emit y."""
    p, q = dists(tl, temperature, top_k), dists(dl, temperature, top_k)
    x = _draft(q, rng)
    for j, token in enumerate(x):
        y = draw(p[j], rng)
        if y != token:
            return [int(t) for t in x[:j]] + [y]
    return [int(t) for t in x] + [draw(p[-1], rng)]


# ----------------------------------------------------------------------------- exact first-token laws
# (what enumeration gives where the rule's arithmetic is known: Σ_x s(x) [a(x) δ_x + (1 − a(x)) ρ_x])

def first_token_law(sampled, judged, p) -> np.ndarray:
    """Law of the first emitted token when x ~ ``sampled`` is judged with min(1, p/``judged``) and a
    rejection draws from residual(p, ``judged``) (V,); the exact rule is sampled == judged. (A token the
    buggy draft samples where ``judged`` is 0 is accepted when p > 0, as p/0 = inf is in ``exact_rule``.)"""
    with np.errstate(divide="ignore", invalid="ignore"):  # as in exact_rule: p/0 accepts, 0/0 rejects
        accept = np.nan_to_num(np.minimum(1.0, p / judged), nan=0.0)
    rejected = float((sampled * (1 - accept)).sum())
    return sampled * accept + rejected * sampling.residual_rows(p, judged)


def _law_correct(case):
    return chain.exact_output_distribution(case.p[0], case.q[0])[0]


def _law_q_before_top_k(case):
    return first_token_law(case.q[0, 0], dists(case.draft_logits[0, 0], case.temperature), case.p[0, 0])


def _law_sampler_match(case):
    p0, q0 = case.p[0, 0], case.q[0, 0]
    return q0 * p0 + (1 - q0) * p0  # y accepted (x = y) or emitted after a mismatch (x != y): p0 either way


# ----------------------------------------------------------------------------- the cases a detector runs

@dataclass(frozen=True)
class Case:
    """One input of ``step``: logits (B, K+1, V) and (B, K, V), a temperature and a top-k."""

    name: str
    target_logits: np.ndarray
    draft_logits: np.ndarray
    temperature: float
    top_k: int | None = None

    @property
    def p(self) -> np.ndarray:
        """The target's rows as the exact round sees them (B, K+1, V)."""
        return dists(self.target_logits, self.temperature, self.top_k)

    @property
    def q(self) -> np.ndarray:
        """The draft's rows (B, K, V)."""
        return dists(self.draft_logits, self.temperature, self.top_k)

    @property
    def greedy(self) -> bool:
        return self.temperature <= GREEDY_TEMPERATURE


def _frozen(x) -> np.ndarray:
    x = np.array(x, dtype=np.float64)
    x.setflags(write=False)
    return x


def _cases(V: int = 6, K: int = 2) -> list[Case]:
    """Greedy: a batch of three rows whose drafts match the target's argmax 2, 1 and 0 times, and a
    near-tie (two target logits 0.004 apart, as in large vocabularies); sampled at T = 0.7 (not 1): a
    dense draft with top-k 4 and an n-gram (one-hot) draft. Logits are of size 30-45, as LLMs' can be."""
    rng = np.random.default_rng(32)
    target = 38 + 2.5 * rng.standard_normal((3, K + 1, V))
    draft = 38 + 2.5 * rng.standard_normal((3, K, V))
    best = target.argmax(-1)
    for b, matches in enumerate((2, 1, 0)):
        for j in range(K):
            token = best[b, j] if j < matches else (best[b, j] + 1) % V
            draft[b, j, token] = draft[b, j].max() + 3.0
    tie = 30 + rng.standard_normal((1, K + 1, V)) - 3.0
    tie[0, 0, [1, 4]] = 30.001, 30.005  # token 4 wins, by less than float16's spacing at 30 (1/64)
    tie_draft = 30 + rng.standard_normal((1, K, V))
    tie_draft[0, 0, 4] = 40.0
    near = np.random.default_rng(0)  # a draft that is a noisy copy of the target (α = 0.54 at position 0)
    dense_target = 40 + near.standard_normal((1, K + 1, V))
    dense = dense_target, dense_target[:, :K] + 0.8 * near.standard_normal((1, K, V))
    ngram = np.full((1, K, V), -np.inf)
    ngram[0, np.arange(K), rng.integers(V, size=K)] = 0.0
    return [Case("greedy, batch of 3", _frozen(target), _frozen(draft), 0.0),
            Case("greedy, near-tie", _frozen(tie), _frozen(tie_draft), 0.0),
            Case("T = 0.7, top-k 4", _frozen(dense[0]), _frozen(dense[1]), 0.7, top_k=4),
            Case("T = 0.7, n-gram draft", _frozen(38 + 1.2 * rng.standard_normal((1, K + 1, V))), _frozen(ngram), 0.7)]


CASES = _cases()


# ----------------------------------------------------------------------------- the gallery

@dataclass(frozen=True)
class Sampler:
    """One gallery entry: ``step`` has ``correct_step``'s interface; ``law`` (or None) is the exact law
    of the first emitted token of row 0 of a sampled ``Case``, by enumeration."""

    name: str
    step: Callable
    source: str  # the public thread
    symptom: str  # one line: what a user saw
    bug: bool = True
    law: Callable | None = None


GITHUB = "https://github.com/"
GALLERY = [
    Sampler("correct round", correct_step, "lessonlib.core.chain.verify_chain",
            "none: the output follows the target exactly", bug=False, law=_law_correct),
    Sampler("q from before top-k", _each(_q_before_top_k), GITHUB + "huggingface/transformers/issues/47932",
            "output drifted from the target by a total variation up to 0.31 at top_k=50", law=_law_q_before_top_k),
    Sampler("draft ignores temperature", _each(_draft_ignores_temperature), GITHUB + "z-lab/dflash/issues/74",
            "at T > 0 the draft proposed its argmax while the rule treated it as a sample"),
    Sampler("draft samples in bf16", _each(_draft_in_bf16), GITHUB + "deepseek-ai/DeepSpec/issues/31",
            "draft sampled from bf16 logits but was judged with the fp32 distribution"),
    Sampler("residual in place", _each(_ngram_residual_in_place), GITHUB + "vllm-project/vllm-ascend/pull/2881",
            "n-gram path corrupted the target's probabilities for everything that read them later"),
    Sampler("rejection one step late", _each(_rejection_one_step_late),
            GITHUB + "openvinotoolkit/openvino.genai/issues/4190",
            "a word dropped and the rejected continuation kept in its place"),
    Sampler("first draft unverified", _each(_first_draft_unverified), GITHUB + "ohdearquant/lattice/issues/243",
            "n-gram speculation diverged from plain greedy decoding"),
    Sampler("greedy draft, softmax rule", _each(_greedy_with_softmax), GITHUB + "jaymody/speculative-sampling/issues/3",
            "greedy speculative output was not the target's greedy output"),
    Sampler("verify logits in another precision", _each(_verify_logits_rounded),
            GITHUB + "ggml-org/llama.cpp/issues/25618",
            "greedy output diverged from the non-speculative baseline (also vLLM #41758, PR #41768)"),
    Sampler("batched rows overwrite", _batched_rows_overwrite, GITHUB + "Dao-AILab/flash-attention/pull/2779",
            "with a batch, one request's rows overwrote another's"),
    Sampler("accept only on a sample match", _each(_sampler_match), GITHUB + "lablup/mlxcel/pull/992",
            "claimed biased (mlx-swift-lm #459); exact, but accepts Σ p·q instead of Σ min(p, q)",
            bug=False, law=_law_sampler_match),
]
BY_NAME = {s.name: s for s in GALLERY}
