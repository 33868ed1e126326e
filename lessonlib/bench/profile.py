"""What limits speculative decoding on this machine: ``python -m lessonlib.bench profile``.

One run on held-out ``code`` prompts at T = 0, writing ``outputs/benchmarks/profile.{json,md}``:

1. **Forward costs.** Each forward timed warm (the same call repeated, so its weights stay in
   the CPU caches) and inside the decoding loop, where every model runs right after another
   one has streamed its own weights through the caches.
2. **Operators.** ``torch.profiler`` over whole decodes: how many operators Python dispatches
   per target step, per draft step and per round, the mean time of one, and the share of the
   wall time spent inside operators at all (the rest is Python: sampling, the accept rule,
   tree bookkeeping).
3. **Ceilings.** From the measured alpha, c and verify cost of every K: the speedup a round
   would reach if it cost only its forwards, the best measured / predicted ratio that allows,
   and the alpha a 1.6x speedup would need at the measured costs.

Chain decoding with ``draft-kl`` (K = 1..6) and EAGLE trees are profiled side by side.
"""
from __future__ import annotations

import functools
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from lessonlib import cli, threads
from lessonlib.bench import common
from lessonlib.bench.decode import bench_decode
from lessonlib.core import tree
from lessonlib.core.theory import alpha_for_speedup
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.drafters import EagleDrafter
from lessonlib.decoding.timing import warm_seconds
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.engines import load, load_head
from lessonlib.models import CHECKPOINTS

EAGLE_CALL = "EAGLE head + LM head, 1 node (loop: drafting time per head call, tree bookkeeping included)"
STEP, VERIFY, DRAFT_STEP = "target step (1 token)", "target verify ({n} tokens)", "draft-kl step (1 token)"
NAMES = (STEP, VERIFY, DRAFT_STEP, EAGLE_CALL)  # the forwards' names a notebook prints (translated: message_catalogue)
TREES = {"EAGLE chain K=4": (1, 1, 1, 1), "EAGLE tree 2-1-1-1": (2, 1, 1, 1)}


@torch.inference_mode()
def warm_forwards(target, draft, eagle, prefix_len=100, k=3):
    """Warm cost of each forward the decoders make, after ``prefix_len`` cached tokens."""
    idx = torch.randint(0, target.config.vocab_size, (1, prefix_len))
    t_cache, d_cache, e_cache = target.new_cache(), draft.new_cache(), eagle.new_cache()
    hidden = target(idx, cache=t_cache, return_hidden=True)[1]
    draft(idx, cache=d_cache)
    eagle(target, idx, hidden, cache=e_cache)

    def step(forward, cache, n):
        forward(n, cache)
        cache.truncate(prefix_len)

    def gpt(model):
        return lambda n, cache: model(idx[:, :n], cache=cache)

    def eagle_call(n, cache):
        return target.lm_head(eagle(target, idx[:, :n], hidden[:, :n], cache=cache))

    return {
        STEP: warm_seconds(lambda: step(gpt(target), t_cache, 1)),
        VERIFY.format(n=k + 1): warm_seconds(lambda: step(gpt(target), t_cache, k + 1)),
        DRAFT_STEP: warm_seconds(lambda: step(gpt(draft), d_cache, 1)),
        EAGLE_CALL: warm_seconds(lambda: step(eagle_call, e_cache, 1)),
    }


def operator_profile(run):
    """Run a decoder ``run() -> (tokens, stats)`` under torch.profiler: the top-level operators
    (those Python dispatched), their inclusive time, and the wall time, per target forward."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        result = run()
        wall = time.perf_counter() - start
    events = [e for e in prof.events() if e.name.startswith(("aten::", "mkldnn::")) and e.cpu_parent is None]
    op_seconds = sum(e.cpu_time_total for e in events) / 1e6  # inclusive time of top-level ops
    rounds = result[1].target_calls
    return {"rounds": rounds, "ops_per_round": len(events) / rounds, "op_seconds_per_round": op_seconds / rounds,
            "wall_seconds_per_round_profiled": wall / rounds, "us_per_op": 1e6 * op_seconds / len(events),
            "share_in_operators": op_seconds / wall}


def eagle_trees(target, eagle, prompts, new_tokens, repeats):
    """The EAGLE shapes of ``TREES`` against plain decoding, interleaved per prompt (bench.common)."""
    def tree_run(branching):
        rule = functools.partial(tree.draft_topk, branching=branching)
        return lambda prompt, i: tree_generate(target, EagleDrafter(eagle, target), prompt, new_tokens, rule=rule)

    runs = common.against_plain(lambda prompt, i: generate(target, prompt, new_tokens),
                                {name: tree_run(b) for name, b in TREES.items()}, prompts, repeats, same_tokens=True)
    out = {}
    for name, branching in TREES.items():
        spread = measures.summarise(runs[name])
        out[name] = {**common.medians(spread), "spread": spread, "head_calls_per_round": len(branching),
                     "draft_ms_per_round": 1e3 * float(np.median([r["draft_seconds_per_round"] for r in runs[name]])),
                     "verify_ms_per_round": 1e3 * spread["verify_forward_seconds"]["median"]}
    return out


def run(n_prompts=common.DEFAULTS["prompts"], prompt_len=common.DEFAULTS["prompt_len"],
        new_tokens=common.DEFAULTS["new_tokens"], repeats=common.DEFAULTS["repeats"], ks=range(1, 7),
        directory=CHECKPOINTS):
    # the chain sweep is the decode benchmark's, restricted to draft-kl on code at T = 0: same c, r
    chain, plain_rows = bench_decode(drafts=("draft-kl",), ks=ks, temperatures=(0.0,), corpora=("code",),
                                     n_prompts=n_prompts, prompt_len=prompt_len, new_tokens=new_tokens,
                                     device="cpu", repeats=repeats)
    for row in chain:
        # measured / predicted at zero loop overhead
        row["ratio_ceiling"] = row["forward_bound_speedup"] / row["predicted_speedup"]
        row["alpha_for_1.6x"] = float(alpha_for_speedup(1.6, row["k"], row["c"], row["r"]))  # the one inverse of E
    step_s = plain_rows[0]["target_forward_seconds"]
    target, draft = load("target", "cpu", directory), load("draft-kl", "cpu", directory)
    eagle = load_head("eagle", target, directory)
    prompts = common.prompts("code", n_prompts, prompt_len)  # the sweep's prompts
    trees = eagle_trees(target, eagle, prompts, new_tokens, repeats)
    best = max(chain, key=lambda r: r["speedup"])
    best_tree = max(trees, key=lambda n: trees[n]["speedup"])
    profiles = {
        "plain": operator_profile(lambda: generate(target, prompts[0], new_tokens)),
        f"chain draft-kl K={best['k']}": operator_profile(
            lambda: speculative_generate(target, draft, prompts[0], best["k"], new_tokens)),
        best_tree: operator_profile(
            lambda: tree_generate(target, EagleDrafter(eagle, target), prompts[0], new_tokens,
                                  rule=functools.partial(tree.draft_topk, branching=TREES[best_tree]))),
    }
    in_loop = {STEP: step_s, VERIFY.format(n=best["k"] + 1): best["r"] * step_s, DRAFT_STEP: best["c"] * step_s,
               EAGLE_CALL: trees["EAGLE chain K=4"]["draft_ms_per_round"] / 4e3}
    return {"warm_seconds": warm_forwards(target, draft, eagle, k=best["k"]), "in_loop_seconds": in_loop,
            "chain": chain, "best_k": best["k"], "trees": trees, "operators": profiles}


def markdown(report) -> str:
    lines = ["| forward | warm (ms) | in the decoding loop (ms) | loop / warm |", "|---|---|---|---|"]
    for name, warm in report["warm_seconds"].items():
        loop = report["in_loop_seconds"][name]
        lines.append(f"| {name} | {1e3 * warm:.3f} | {1e3 * loop:.3f} | {loop / warm:.2f} |")
    lines += ["", "| run (under torch.profiler) | operators per round | µs per operator | ms in operators per round "
              "| share of wall time in operators |", "|---|---|---|---|---|"]
    for name, p in report["operators"].items():
        lines.append(f"| {name} | {p['ops_per_round']:.0f} | {p['us_per_op']:.1f} "
                     f"| {1e3 * p['op_seconds_per_round']:.2f} | {p['share_in_operators']:.2f} |")
    lines += ["", "| K | tau | alpha (decoding) | c | r | loop overhead (ms/round) | predicted | forward-bound "
              "| measured [IQR] | measured / predicted | ceiling of measured / predicted | alpha for 1.6x |",
              "|" + "---|" * 12]
    for r in report["chain"]:
        lines.append(f"| {r['k']} | {r['tau']:.2f} | {r['alpha']:.3f} | {r['c']:.3f} | {r['r']:.2f} | "
                     f"{1e3 * r['overhead_seconds_per_round']:.2f} | {r['predicted_speedup']:.2f}x | "
                     f"{r['forward_bound_speedup']:.2f}x | {common.cell(r['spread'], 'speedup', unit='x')} | "
                     f"{r['measured_over_predicted']:.2f} | {r['ratio_ceiling']:.2f} | {r['alpha_for_1.6x']:.3f} |")
    lines += ["", "| EAGLE (T = 0) | tau | speedup [IQR] | drafting ms / round | verify ms / round |",
              "|---|---|---|---|---|"]
    for name, t in report["trees"].items():
        lines.append(f"| {name} | {t['tau']:.2f} | {common.cell(t['spread'], 'speedup', unit='x')} | "
                     f"{t['draft_ms_per_round']:.2f} | {t['verify_ms_per_round']:.2f} |")
    lines += ["", "Medians over prompts, plain and speculative runs interleaved per prompt. c = draft step / one-token "
              "target step and r = verify forward / one-token step, measured in the loop (lessonlib.decoding.measures, "
              "the decode benchmark's sweep); predicted = E(alpha, K) / (K c + 1) "
              "(verify priced as one step); forward-bound = tau / (K c + r); ceiling of measured / predicted = "
              "forward-bound / predicted (what a loop with no overhead at all would score); alpha for 1.6x = the alpha "
              "at which E(alpha, K) / (K c + r) = 1.6 at these costs."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__, "time every run this many times, keep the fastest")
    parser.add_argument("--out", default=None)
    args = common.parse(parser, argv)
    started = time.time()
    n_threads = threads.apply()
    report = run(args.prompts, new_tokens=args.new_tokens, repeats=args.repeats)
    report["setup"] = {"corpus": "code (held-out)", "temperature": 0.0, "prompts": args.prompts,
                       "prompt_tokens": common.DEFAULTS["prompt_len"], "new_tokens": args.new_tokens,
                       "repeats": args.repeats, "threads": n_threads, "seconds": round(time.time() - started, 1)}
    report["machine"] = common.machine()
    md = markdown(report)
    common.write_report("profile", report, md, args.out)
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench profile"))
