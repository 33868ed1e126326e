"""Which target shape gives the CPU a real LLM's cost structure?

    python -m lessonlib.bench shapes [--threads 1]

Times random-weight targets of the same size class and different depth x width (packed, as
the benchmarks load them) inside the decoding loops, on 5 random 128-token prompts:
the one-token step, c of a one-layer 128-wide draft and of a one-block EAGLE head (both in
the loop, ``decoding.measures``), and the verify costs r(5) and r(16) (a forward over 5 or
16 new tokens after 128 cached ones / a one-token step, warm). Writes shapes.{json,md}.
Random weights: the timings, not the acceptance, are what this measures.
"""
from __future__ import annotations

import argparse
import functools

import numpy as np
import torch

from lessonlib import cli
from lessonlib.bench.common import PROMPTS, machine, markdown_table, parse, write_report
from lessonlib.core import tree
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.drafters import EagleDrafter
from lessonlib.decoding.timing import fastest, warm_seconds
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.engines.packing import pack_for_cpu
from lessonlib.models import GPT, GPTConfig
from lessonlib.models.heads import EagleHead

SHAPES = [(8, 256, 8), (12, 224, 7), (16, 192, 6), (24, 160, 5), (32, 128, 4)]  # (layers, width, heads): head dim 32
DRAFT = GPTConfig(n_layer=1, n_head=4, n_embd=128, block_size=512)


def _model(config, seed):
    torch.manual_seed(seed)
    return GPT(config).eval()


@torch.inference_mode()
def _forward_ratio(target, n, prefix=128, reps=30):
    """r(n), warm: a forward over n new tokens after ``prefix`` cached ones / a one-token forward."""
    cache = target.new_cache()
    target(torch.randint(0, 2048, (1, prefix)), cache=cache)

    def run(k):
        idx = torch.randint(0, 2048, (1, k))
        def step():
            target(idx, cache=cache)
            cache.truncate(prefix)
        return step
    return warm_seconds(run(n), reps) / warm_seconds(run(1), reps)


def measure(shape, n_prompts=5, prompt_len=128, new_tokens=48, repeats=2):
    layers, width, heads = shape
    config = GPTConfig(n_layer=layers, n_head=heads, n_embd=width, block_size=512)
    target = pack_for_cpu(_model(config, 0))
    draft = _model(DRAFT, 1)
    eagle = EagleHead(config).eval()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 2048, prompt_len).tolist() for _ in range(n_prompts)]
    rule = functools.partial(tree.draft_topk, branching=(1, 1, 1, 1))
    c_draft, c_eagle, steps = [], [], []
    for p in prompts:  # interleaved: plain, chain, EAGLE on each prompt
        _, plain = fastest(lambda: generate(target, p, new_tokens), repeats)
        _, chain = fastest(lambda: speculative_generate(target, draft, p, 4, new_tokens), repeats)
        _, eag = fastest(lambda: tree_generate(target, EagleDrafter(eagle, target), p, new_tokens, rule=rule), repeats)
        steps.append(plain.target_forward_seconds)
        c_draft.append(measures.compare(chain, plain)["c"])
        c_eagle.append(measures.cost_ratio(eag.draft_seconds_per_round / 4, plain.target_forward_seconds))
    return {"shape": f"{layers} x {width}", "layers": layers, "width": width, "heads": heads,
            "params": target.num_params(), "step_ms": measures.summary(1e3 * np.array(steps)),
            "c_draft": measures.summary(c_draft), "c_eagle": measures.summary(c_eagle),
            "r5_warm": _forward_ratio(target, 5), "r16_warm": _forward_ratio(target, 16)}


def markdown(rows) -> str:
    table = markdown_table(
        ["target shape", "params", "one-token step (ms)", "c, one-layer 128-wide draft", "c, EAGLE head", "r(5) warm",
         "r(16) warm"],
        [[r["shape"], f"{r['params'] / 1e6:.1f} M", measures.fmt_spread(r["step_ms"]),
          measures.fmt_spread(r["c_draft"], 3), measures.fmt_spread(r["c_eagle"], 3), f"{r['r5_warm']:.2f}",
          f"{r['r16_warm']:.2f}"] for r in rows])
    return table + ("\n\nMedians [IQR] over 5 random 128-token prompts, each the fastest of 2 runs; c in the "
                    "decoding loop (draft step / one-token target step); r warm. Random weights, packed target.\n")


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=cli.positive_int, default=1)
    parser.add_argument("--prompts", type=PROMPTS, default=measures.MIN_PROMPTS,
                        help=f"random prompts per shape (>= {measures.MIN_PROMPTS})")
    args = parse(parser, argv)
    torch.set_num_threads(args.threads)
    rows = [measure(s, args.prompts) for s in SHAPES]
    md = markdown(rows)
    write_report("shapes", {"machine": machine(), "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench shapes"))
