"""Shared by the decoding-loop tests: tiny GPTs whose next token depends on the context, a
tiny GPT whose next token depends on the last token only (its law is known exactly), and a
chi-square test of "these tokens were sampled from the target at temperature T" that works on
long generated sequences (one run gives hundreds of samples, so the tests stay fast).

Why not random tiny GPTs as they come: with the usual 0.02 init (and its embeddings scaled up
to sharpen it) a tied-embedding GPT mostly predicts its own last token again (greedy output
``[8] * 40``), so a loop that feeds the wrong context or keeps the wrong cache rows still
gives the right tokens. Scaling the blocks' weights instead makes attention and the MLP
matter: the greedy continuation changes when an early prompt token changes.
"""
import copy

import numpy as np
import torch

from lessonlib.core.sampling import softmax
from lessonlib.core.stats import chi_square
from lessonlib.models import GPT, GPTConfig

LEVEL = 1e-3  # false-alarm rate of every chi-square test of the loop tests


def context_gpt(seed, vocab=16, n_layer=2, n_embd=32, n_head=2, block_size=160, blocks=30.0, gain=5.0,
                dtype=torch.float64):
    """A random tiny GPT whose next token depends on the whole context: the blocks' weights
    scaled by ``blocks`` (attention and MLP outweigh the token's own embedding), the final
    LayerNorm gain by ``gain`` (sharper next-token rows)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd))
    model = model.to(dtype).eval()
    with torch.no_grad():
        for block in model.blocks:
            for layer in (block.qkv, block.proj, block.fc, block.fc_out):
                layer.weight.mul_(blocks)
        model.ln_f.weight.mul_(gain)
    return model


def noisy_copy(model, seed, noise=0.3):
    """A draft for ``model``: the same weights with relative Gaussian noise (alpha well inside (0, 1))."""
    torch.manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.abs().mean() * torch.randn_like(p))
    return draft


def context_counts(logits_fn, runs, temperature, order=1):
    """(observed, expected) counts of (context, sampled token), the context being the last
    ``order`` tokens before the sampled one: (V ** order, V) arrays. expected sums the
    target's p_T(. | everything before) over the positions that share a context.

    Pearson's statistic on these, against expected / expected.sum(), is a valid chi-square
    test of "every token was drawn from p_T given the past" for any model (positions sharing a
    context need not share p, which only makes the test conservative), and an exact one for
    a model whose next token depends on nothing but that context (``markov_gpt``, order 1).
    """
    obs, exp = 0, 0
    for prompt, new in runs:
        seq = np.asarray(list(prompt) + list(new))
        if len(prompt) < order:
            raise ValueError(f"prompts must hold at least order={order} tokens")
        rows = logits_fn(seq[:-1].tolist())[len(prompt) - 1 :]
        # a number, or a decoding.round.Sampling (its truncation too: the law the loop must follow)
        p = temperature.probs(rows) if hasattr(temperature, "probs") else softmax(rows, temperature)
        V, n = p.shape[1], len(new)
        ctx = np.zeros(n, dtype=np.int64)
        for j in range(order):  # context id in base V, oldest token first
            ctx = ctx * V + seq[len(prompt) - order + j : len(prompt) - order + j + n]
        obs = obs + np.bincount(ctx * V + seq[len(prompt):], minlength=V ** (order + 1)).reshape(V ** order, V)
        exp = exp + np.eye(V ** order)[ctx].T @ p
    return obs, exp


def context_p_value(logits_fn, runs, temperature, order=1):
    obs, exp = context_counts(logits_fn, runs, temperature, order)
    return chi_square(obs, exp / exp.sum())[1]


def markov_gpt(seed, vocab=6, sharpen=3.0, block_size=512, dtype=torch.float64):
    """A real GPT (KV cache and all) whose next token depends on the last token only: no
    position embedding and blocks whose outputs are zeroed (the residual stream is the token's
    embedding). The transition law is then known exactly (``markov_table``), so a long run
    gives thousands of samples from a handful of (previous, next) distributions: a chi-square
    test with full power for the sampled loops."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=1, n_head=1, n_embd=16)).to(dtype).eval()
    with torch.no_grad():
        model.wpe.weight.zero_()
        for block in model.blocks:
            for layer in (block.proj, block.fc_out):
                layer.weight.zero_()
                layer.bias.zero_()
        model.wte.weight.mul_(sharpen)
    return model


class Cycle:
    """A fallback policy that repeats a fixed cycle of actions ("speculate", "plain", "probe"),
    so a stream runs both kinds of step in a known order."""

    switches = []

    def __init__(self, actions):
        self.actions, self.i = list(actions), -1

    def action(self):
        self.i += 1
        return self.actions[self.i % len(self.actions)]

    def record(self, accepted, drafted):
        pass

    def record_plain(self, n=1):
        pass
