"""Draft distillation, measured: how well does a draft imitate the target on held-out text?

At one position the chance that a sampled draft token is accepted is

    alpha = sum_x min(p_T(x), q_T(x)) = 1 - TV(p_T, q_T)        (Leviathan et al. 2023, Thm 3.5)

with p = target, q = draft, both softmax(logits / T). At T = 0 both are one-hot on their argmax,
so the same formula gives the greedy agreement rate [argmax p == argmax q]. Everything here is
teacher-forced: both models read the same held-out tokens, and we compare their next-token
distributions at every position.

* ``sequence_logits`` / ``alpha_from_logits`` / ``measure_alpha`` -- alpha per position.
* ``NgramDraft`` -- unigram and bigram "drafts" fitted by counting; they follow the same
  ``logits(tokens)`` protocol, so they go through the same measurement as the GPTs.
* ``Heldout`` / ``table_markdown`` -- alpha at T = 1, greedy agreement at T = 0 and bits per
  byte of several drafts on held-out code and prose, the target's side computed once.
* ``alpha_strip_html`` / ``alpha_by_token_class`` -- where on the text the draft fails.
* ``storage_bytes`` / ``topk_mass`` -- what storing the target's distributions would cost.
* ``flops_per_token`` / ``scale_up_seconds`` -- what the same recipe costs at GPT-2 scale,
  extrapolated from a measured tokens/s.
"""
from __future__ import annotations

import html
import keyword
import math

import numpy as np

from lessonlib.core.sampling import acceptance_rate, softmax
from lessonlib.core.validate import check_int
from lessonlib.models import GPTConfig, data

WINDOW = 256  # tokens of context per teacher-forced window (the shipped models' block size)


# ----------------------------------------------------------------------------- alpha

def as_tokens(tokens_or_text) -> np.ndarray:
    """A 1-D int64 token array from a string (BPE-encoded) or a sequence of token ids."""
    if isinstance(tokens_or_text, str):
        tokens_or_text = data.to_tokens(tokens_or_text)
    tokens = np.asarray(tokens_or_text)
    if tokens.ndim != 1 or tokens.size < 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens_or_text must be a str or a 1-D sequence of >= 2 ints, got shape {tokens.shape} "
                         f"dtype {tokens.dtype}")
    return tokens.astype(np.int64)


def sequence_logits(model, tokens, window: int = WINDOW) -> np.ndarray:
    """Teacher-forced logits (n - 1, V): row i is the model's next-token logits for ``tokens[i + 1]``.

    The text is cut into non-overlapping windows of ``window`` tokens and each window goes through
    the model's ``logits(tokens)`` protocol, so a position sees at most ``window`` tokens of
    context (the same for every model, which keeps the comparison fair).
    """
    tokens = as_tokens(tokens)
    window = check_int(window, "window", minimum=1)
    block = getattr(getattr(model, "config", None), "block_size", None)  # GPT.logits raises past its context
    if block is not None and min(window, len(tokens)) > block:
        raise ValueError(f"window={window} is larger than the model's context ({block} tokens)")
    n = len(tokens)
    rows = []
    for start in range(0, n - 1, window):
        chunk = tokens[start : start + window]
        logits = np.asarray(model.logits(chunk))
        if logits.shape[0] != len(chunk):
            raise ValueError(f"model returned {logits.shape[0]} rows for a window of {len(chunk)} tokens; "
                             f"is window={window} larger than the model's context?")
        rows.append(logits[: n - 1 - start])  # the last window has no label for its last row
    return np.concatenate(rows)


def alpha_from_logits(target_logits, draft_logits, temperature: float) -> np.ndarray:
    """Per-position alpha = sum_x min(p_T(x), q_T(x)); at T <= 1e-5 both are one-hot (``sampling.softmax``),
    so it is [argmax p == argmax q]."""
    target_logits, draft_logits = np.asarray(target_logits), np.asarray(draft_logits)
    if target_logits.shape != draft_logits.shape:
        raise ValueError(f"target and draft logits must have the same shape (positions, vocabulary), "
                         f"got {target_logits.shape} and {draft_logits.shape}")
    return acceptance_rate(softmax(target_logits, temperature), softmax(draft_logits, temperature))


def measure_alpha(target, draft, tokens_or_text, temperature: float = 1.0, window: int = WINDOW):
    """Mean and per-position acceptance rate of ``draft`` against ``target`` on teacher-forced text.

    Returns ``(mean_alpha, alpha)`` with ``alpha[i]`` the acceptance rate when predicting token
    ``i + 1``. At ``temperature`` 0 this is the greedy agreement rate.
    """
    tokens = as_tokens(tokens_or_text)
    alpha = alpha_from_logits(sequence_logits(target, tokens, window), sequence_logits(draft, tokens, window),
                              temperature)
    return float(alpha.mean()), alpha


def bits_per_byte_from_logits(logits, tokens) -> float:
    """Cross-entropy of the next tokens ``tokens[1:]`` under ``logits`` (n - 1, V), in bits per UTF-8 byte."""
    tokens = as_tokens(tokens)
    logits = np.asarray(logits, dtype=np.float64)
    if logits.shape[0] != len(tokens) - 1:
        raise ValueError(f"logits must have len(tokens) - 1 = {len(tokens) - 1} rows, got {logits.shape[0]}")
    top = logits.max(-1)
    log_z = top + np.log(np.exp(logits - top[:, None]).sum(-1))
    nll = log_z - logits[np.arange(len(logits)), tokens[1:]]
    return float(nll.sum() / math.log(2) / len(data.to_text(tokens[1:]).encode()))


# ----------------------------------------------------------------------------- baselines

class NgramDraft:
    """A unigram (order 1) or bigram (order 2) next-token model; follows ``logits(tokens)``.

    Unigram: q(x) = (C(x) + 1) / (N + V)  (add-one smoothing, every token possible).
    Bigram:  q(x | a) = (C(a, x) + s * u(x)) / (C(a) + s), u the unigram above: unseen pairs
    fall back to the unigram, with ``s`` pseudo-counts of weight (default 100: the best held-out
    bits per byte among s in 0.3 ... 3000 on both corpora).
    """

    def __init__(self, log_probs: np.ndarray, order: int):
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {order}")
        self.log_probs, self.order = np.asarray(log_probs, dtype=np.float32), order

    @classmethod
    def fit(cls, tokens, order: int, vocab_size: int = data.VOCAB_SIZE, smoothing: float = 100.0) -> NgramDraft:
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
            raise ValueError(f"tokens must lie in [0, vocab_size={vocab_size})")
        if smoothing <= 0:
            raise ValueError(f"smoothing must be > 0, got {smoothing}")
        unigram = (np.bincount(tokens, minlength=vocab_size) + 1.0) / (len(tokens) + vocab_size)
        if order == 1:
            return cls(np.log(unigram), 1)
        pairs = np.bincount(tokens[:-1] * vocab_size + tokens[1:], minlength=vocab_size**2)
        pairs = pairs.reshape(vocab_size, vocab_size).astype(np.float64)
        table = (pairs + smoothing * unigram) / (pairs.sum(1, keepdims=True) + smoothing)
        return cls(np.log(table), order)

    @classmethod
    def from_corpora(cls, order: int, corpora=data.CORPORA, split: str = "train") -> NgramDraft:
        """Fitted on the (train) split of the given corpora; documents are concatenated."""
        return cls.fit(np.concatenate([data.token_array(c, split) for c in corpora]), order)

    def logits(self, tokens) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError(f"tokens must be a 1-D sequence of at least one token id, got shape {tokens.shape}")
        if self.order == 1:
            return np.broadcast_to(self.log_probs, (len(tokens), len(self.log_probs))).copy()
        return self.log_probs[tokens]


# ----------------------------------------------------------------------------- comparison

def heldout_tokens(corpus: str, n_tokens: int) -> np.ndarray:
    """The first ``n_tokens`` tokens of a corpus's held-out split."""
    tokens = data.token_array(corpus, "heldout")
    if not 2 <= n_tokens <= len(tokens):
        raise ValueError(f"n_tokens must be in [2, {len(tokens)}] for {corpus!r}, got {n_tokens}")
    return tokens[:n_tokens].astype(np.int64)


class Heldout:
    """The target's teacher-forced distributions on held-out text, computed once per corpus, and
    drafts measured against them: alpha at T = 1, greedy agreement at T = 0, bits per byte.

    Greedy agreement is computed as [argmax p == argmax q] directly: the same number as
    ``alpha_from_logits(..., temperature=0)`` without building one-hot rows.
    """

    def __init__(self, target, corpora=data.CORPORA, n_tokens: int = 2048, window: int = WINDOW):
        self.target, self.window = target, window
        self.tokens = {c: heldout_tokens(c, n_tokens) for c in corpora}
        logits = {c: sequence_logits(target, t, window) for c, t in self.tokens.items()}
        self.p = {c: softmax(x, 1.0) for c, x in logits.items()}
        self.argmax = {c: x.argmax(-1) for c, x in logits.items()}
        self.target_bits_per_byte = {c: bits_per_byte_from_logits(x, self.tokens[c]) for c, x in logits.items()}

    def measure(self, name: str, draft) -> list[dict]:
        """One row per corpus for ``draft``; ``alpha_positions`` holds the per-position alpha at T = 1."""
        rows = []
        for corpus, tokens in self.tokens.items():
            q_logits = sequence_logits(draft, tokens, self.window)
            alpha = acceptance_rate(self.p[corpus], softmax(q_logits, 1.0))
            rows.append({"draft": name, "corpus": corpus, "alpha_T1": float(alpha.mean()),
                         "greedy_T0": float((q_logits.argmax(-1) == self.argmax[corpus]).mean()),
                         "bits_per_byte": bits_per_byte_from_logits(q_logits, tokens), "alpha_positions": alpha})
        return rows

    def compare(self, drafts: dict) -> list[dict]:
        """Rows for the target itself (alpha 1 by definition, its bits per byte) and every draft."""
        rows = [{"draft": "target (itself)", "corpus": c, "alpha_T1": 1.0, "greedy_T0": 1.0, "bits_per_byte": b,
                 "alpha_positions": np.ones(len(self.tokens[c]) - 1)} for c, b in self.target_bits_per_byte.items()]
        for name, draft in drafts.items():
            rows += self.measure(name, draft)
        return rows


def table_markdown(rows: list[dict]) -> str:
    """The comparison rows as a Markdown table, one line per model, code and prose side by side."""
    corpora = list(dict.fromkeys(r["corpus"] for r in rows))
    names = list(dict.fromkeys(r["draft"] for r in rows))
    cell = {(r["draft"], r["corpus"]): r for r in rows}  # rows may come in any order
    head = "| model | " + " | ".join(f"α T=1 {c} | greedy T=0 {c} | bits/byte {c}" for c in corpora) + " |"
    lines = [head, "|---" * (1 + 3 * len(corpora)) + "|"]
    for name in names:
        vals = [f"{cell[name, c]['alpha_T1']:.3f} | {cell[name, c]['greedy_T0']:.3f} "
                f"| {cell[name, c]['bits_per_byte']:.3f}" for c in corpora]
        lines.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- where alpha fails

def _token_texts(tokens) -> list[str]:
    table = data.token_bytes()
    return [table[t].decode("utf-8", errors="replace") for t in tokens]


def _tint(alpha: float) -> str:
    """CSS for one token: background red (alpha 0) through yellow to green (alpha 1), text readable on it."""
    from matplotlib import colormaps, colors

    text = "#fff" if not 0.15 <= alpha <= 0.85 else "#000"  # the ends of the colour map are dark
    return f"background:{colors.to_hex(colormaps['RdYlGn'](float(alpha)))};color:{text}"


def alpha_strip_html(tokens, alpha, max_tokens: int = 400) -> str:
    """HTML of the text with each predicted token's bytes tinted by its alpha (hover shows the value).

    ``alpha[i]`` belongs to ``tokens[i + 1]`` (as returned by ``measure_alpha``); the first token
    has no prediction and stays untinted.
    """
    tokens, alpha = as_tokens(tokens), np.asarray(alpha, dtype=float)
    if alpha.shape != (len(tokens) - 1,):
        raise ValueError(f"alpha must have len(tokens) - 1 = {len(tokens) - 1} entries, got shape {alpha.shape}")
    texts = _token_texts(tokens[:max_tokens])
    spans = [html.escape(texts[0])] + [
        f'<span style="{_tint(a)}" title="α={a:.2f}">{html.escape(t)}</span>'
        for t, a in zip(texts[1:], alpha[: max_tokens - 1])
    ]
    legend = " ".join(f'<span style="{_tint(a)}">&nbsp;α={a:.1f}&nbsp;</span>' for a in (0, .25, .5, .75, 1))
    return (f'<div style="font-family:monospace;font-size:12px;line-height:1.5;white-space:pre-wrap;color:#000">'
            f'{"".join(spans)}</div><div style="font-size:11px;margin-top:4px">{legend}</div>')


TOKEN_CLASSES = ("whitespace", "keyword", "identifier", "number", "punctuation", "other")


def token_class(text: str) -> str:
    """Coarse kind of a token's text, ignoring surrounding spaces: whitespace, a Python keyword, ..."""
    word = text.strip()
    if not word:
        return "whitespace"
    if keyword.iskeyword(word):
        return "keyword"
    if word.isidentifier():
        return "identifier"
    if word.isdigit():
        return "number"
    if not any(ch.isalnum() for ch in word):
        return "punctuation"
    return "other"


def alpha_by_token_class(tokens, alpha) -> dict[str, tuple[int, float]]:
    """``{class: (count, mean alpha)}`` over the predicted tokens ``tokens[1:]``."""
    tokens, alpha = as_tokens(tokens), np.asarray(alpha, dtype=float)
    if alpha.shape != (len(tokens) - 1,):
        raise ValueError(f"alpha must have len(tokens) - 1 = {len(tokens) - 1} entries, got shape {alpha.shape}")
    kinds = np.array([token_class(t) for t in _token_texts(tokens[1:])])
    return {k: (int((kinds == k).sum()), float(alpha[kinds == k].mean())) for k in TOKEN_CLASSES if (kinds == k).any()}


# ----------------------------------------------------------------------------- storing p

def storage_bytes(n_tokens: int, vocab_size: int, top_k: int | None = None, value_bytes: int = 2) -> int:
    """Bytes to store the target's next-token distribution at ``n_tokens`` positions.

    Full: n * V * value_bytes. Top-k: n * k * (value_bytes + index_bytes), with 2-byte indices
    when V <= 65,536 and 4-byte ones otherwise.
    """
    if n_tokens < 0 or vocab_size < 1 or value_bytes < 1:
        raise ValueError("n_tokens must be >= 0, vocab_size and value_bytes >= 1")
    if top_k is None:
        return n_tokens * vocab_size * value_bytes
    if not 1 <= top_k <= vocab_size:
        raise ValueError(f"top_k must be in [1, vocab_size={vocab_size}], got {top_k}")
    return n_tokens * top_k * (value_bytes + (2 if vocab_size <= 2**16 else 4))


def topk_mass(p: np.ndarray, k: int) -> np.ndarray:
    """Per row, the probability mass of the k most likely tokens (what top-k storage keeps)."""
    p = np.asarray(p, dtype=np.float64)
    if not 1 <= k <= p.shape[-1]:
        raise ValueError(f"k must be in [1, {p.shape[-1]}], got {k}")
    return np.partition(p, p.shape[-1] - k, axis=-1)[..., -k:].sum(-1)


# ----------------------------------------------------------------------------- scale it up

# The lesson's recipe: GPT-2 small (124 M) as the target, a ~30 M draft, 100 M tokens.
GPT2_TARGET = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
GPT2_DRAFT = GPTConfig(vocab_size=50257, block_size=1024, n_layer=6, n_head=6, n_embd=384)
GPT2_TOKENS = 100_000_000


def num_params(config: GPTConfig) -> int:
    """Parameters of ``models.GPT(config)`` without position embeddings (as ``GPT.num_params``)."""
    d, L = config.n_embd, config.n_layer
    return config.vocab_size * d + L * (12 * d * d + 13 * d) + 2 * d


def flops_per_token(config: GPTConfig, backward: bool) -> float:
    """Forward FLOPs per token: 2 * (12 L d^2 + d V) for the matmuls + 2 L T d for causal attention.

    Training (``backward``) costs three forwards (Kaplan et al. 2020's 6N rule, plus attention).
    """
    d, L, T = config.n_embd, config.n_layer, config.block_size
    forward = 2 * (12 * L * d * d + d * config.vocab_size) + 2 * L * T * d
    return 3 * forward if backward else forward


def distill_flops_per_token(draft: GPTConfig, teacher: GPTConfig | None) -> float:
    """One distillation step per token: draft forward + backward, plus a teacher forward."""
    return flops_per_token(draft, True) + (flops_per_token(teacher, False) if teacher is not None else 0.0)


def scale_up_seconds(measured_tokens_per_s: float, measured_draft: GPTConfig, measured_teacher: GPTConfig | None,
                     draft: GPTConfig = GPT2_DRAFT, teacher: GPTConfig | None = GPT2_TARGET,
                     tokens: int = GPT2_TOKENS) -> float:
    """Seconds to distil ``draft`` from ``teacher`` on ``tokens`` tokens on the machine that measured
    ``measured_tokens_per_s`` for the small pair: the same FLOP/s, scaled by FLOPs per token."""
    if measured_tokens_per_s <= 0 or tokens < 0:
        raise ValueError("measured_tokens_per_s must be > 0 and tokens >= 0")
    flop_rate = measured_tokens_per_s * distill_flops_per_token(measured_draft, measured_teacher)
    return tokens * distill_flops_per_token(draft, teacher) / flop_rate
