"""How far is a forward from the memory-traffic limit? (issue 27)

    python -m lessonlib.bench bandwidth [--prompts 5] [--new-tokens 128] [--repeats 3]

Measures this machine's read bandwidth with one thread (the fastest sum over a buffer the size
of the target's weights, and over a 256 MB one that no cache holds), prints the forward bound
(the target's weight bytes / bandwidth: a one-token step cannot be faster than reading every
weight once) beside the measured one-token step and 6- and 16-token verify passes after 128
cached tokens, for the readable packed GPT and the fast path (``models.fast``), the two
models taking turns. Then plain and chain (draft-kl, K = 4; the readable unpacked draft beside
the readable target, the fast one beside the fast target) greedy decoding with each, all
four interleaved on held-out code prompts; the fast path's tokens must equal the readable
model's. Writes bandwidth.{json,md}.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib.bench.common import machine, markdown_table, parse, parser, prompts, write_report
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.timing import interleaved, pass_times
from lessonlib.models import load

SIZES = (1, 6, 16)  # new tokens per forward: a step, a K = 5 chain verify, a 16-node tree


def read_bandwidth(n_bytes: int, repeats: int = 20) -> float:
    """Bytes per second of the fastest ``sum`` over a float32 buffer of ``n_bytes`` (one thread)."""
    x = torch.ones(max(1, n_bytes // 4))
    x.sum()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * 4 / best


def step_times(models: dict, rounds: int = 3) -> dict:
    """{name: {n: fastest seconds}}: ``pass_times`` of each model, the models taking turns."""
    best: dict = {name: {n: float("inf") for n in SIZES} for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            for n, s in pass_times(model, SIZES, context=128, repeats=20).items():
                best[name][n] = min(best[name][n], s)
    return best


def decode_rates(models: dict, drafts: dict, prompt_list, new_tokens: int, repeats: int) -> dict:
    """Plain and chain (K = 4, the draft of the same path) tokens/s of each model on each
    prompt, all interleaved."""
    runs = {}
    for name, model in models.items():
        runs[f"{name} plain"] = lambda i, m=model: generate(m, prompt_list[i], new_tokens)
        runs[f"{name} chain K=4"] = lambda i, m=model, d=drafts[name]: speculative_generate(
            m, d, prompt_list[i], 4, new_tokens)
    best = interleaved(runs, len(prompt_list), repeats)
    reference = [tokens for tokens, _ in best["readable plain"]]
    for name, results in best.items():
        if [tokens for tokens, _ in results] != reference:
            raise AssertionError(f"{name}: greedy tokens differ from the readable model's plain decoding")
    rates = {name: [stats.tokens_per_second for _, stats in results] for name, results in best.items()}
    out = {name: measures.summary(r) for name, r in rates.items()}
    for name in models:  # chain over plain of the same model, prompt by prompt
        out[f"{name} chain speedup"] = measures.summary(np.divide(rates[f"{name} chain K=4"], rates[f"{name} plain"]))
    return out


def main(argv=None) -> int:
    args = parse(parser(__doc__), argv)
    models = {"readable": load("target", "cpu", pack=True, fast=False), "fast": load("target", "cpu", pack=True)}
    weight_bytes = sum(p.numel() * p.element_size() for p in models["fast"].parameters()) \
        - models["fast"].wpe.weight.numel() * 4 + models["fast"].config.n_embd * 4  # one position row read
    bandwidth = {"weights-sized buffer": read_bandwidth(weight_bytes), "256 MB buffer": read_bandwidth(256 << 20)}
    steps = step_times(models)
    drafts = {"readable": load("draft-kl", "cpu"), "fast": load("draft-kl", "cpu", pack=True)}
    rates = decode_rates(models, drafts, prompts("code", args.prompts, args.prompt_len),
                         args.new_tokens, args.repeats)
    report = {"machine": machine(), "weight_bytes": weight_bytes,
              "read_bandwidth_gb_s": {k: v / 1e9 for k, v in bandwidth.items()},
              "bound_ms": {k: 1e3 * weight_bytes / v for k, v in bandwidth.items()},
              "forward_ms": {name: {n: 1e3 * s for n, s in by_n.items()} for name, by_n in steps.items()},
              "fast_gain": {n: steps["readable"][n] / steps["fast"][n] for n in SIZES},
              "tokens_per_second": rates, "prompts": args.prompts, "new_tokens": args.new_tokens}
    write_report("bandwidth", report, markdown(report))
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    bound = "; ".join(f"{v:.2f} ms at {report['read_bandwidth_gb_s'][k]:.1f} GB/s ({k})"
                      for k, v in report["bound_ms"].items())
    steps = markdown_table(["path"] + [f"forward over {n} new (ms)" for n in SIZES],
                           [[name] + [f"{by_n[n]:.2f}" for n in SIZES] for name, by_n in report["forward_ms"].items()])
    rates = markdown_table(["run", "tokens/s or speedup (median [IQR])"],
                           [[name, measures.fmt_spread(s, 2 if "speedup" in name else 0, count=False)]
                            for name, s in report["tokens_per_second"].items()])
    gain = ", ".join(f"{g:.2f}x ({n} new)" for n, g in report["fast_gain"].items())
    return (f"# Forward against the memory-traffic bound\n\nTarget weights read per forward: "
            f"{report['weight_bytes'] / 1e6:.1f} MB. Bound (weights / bandwidth): {bound}.\n\n"
            f"Fastest forward after 128 cached tokens, the models taking turns:\n\n{steps}\n\n"
            f"Fast path's gain: {gain}.\n\n{report['prompts']} held-out code prompts x "
            f"{report['new_tokens']} new tokens, greedy, all runs interleaved (same tokens checked):\n\n"
            f"{rates}\n")
