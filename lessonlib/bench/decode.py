"""The decode benchmark: ``python -m lessonlib.bench decode`` writes outputs/benchmarks/decode.{json,md}.

Everything is measured in one run on one machine: plain decoding and chain speculative
decoding with each shipped draft, K = 1..8, T in {0, 1}, on held-out code and prose prompts,
batch 1. Every timed run is the fastest of ``--repeats`` identical runs. Per configuration we
report medians over prompts of tau, alpha, the measured cost ratio c, the speedup predicted by
Leviathan et al. Thm 3.8 from that alpha and c, the measured speedup over plain decoding of
the same prompt, and their ratio.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from lessonlib.models import data
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.timing import fastest
from lessonlib.models import default_device, load, scaled_name
from lessonlib.core.theory import expected_speedup
from lessonlib import paths



def bench_decode(drafts=("draft-ce", "draft-kl"), ks=range(1, 9), temperatures=(0.0, 1.0), corpora=data.CORPORA,
                 n_prompts=5, prompt_len=64, new_tokens=128, device=None, seed=0, scale="cpu", repeats=3):
    """Run the decode benchmark; returns the rows (one per corpus, T, draft, K) and context.

    Every run is the fastest of ``repeats``. Plain decoding gets the same number of tries, split
    between before and after its configuration's speculative runs, so a slow spell at either
    end cannot bias all the speedups of that configuration.
    """
    device = device or default_device()
    target = load(scaled_name("target", scale), device, pack=True)  # packed: see GPT.pack_for_cpu
    draft_models = {name: load(scaled_name(name, scale), device) for name in drafts}
    rows, plain_rows = [], []
    configs = [(c, t) for c in corpora for t in temperatures]
    bar = tqdm(total=len(configs) * n_prompts * (1 + (repeats > 1) + len(drafts) * len(ks)), desc="bench decode")

    def plain_runs(prompts, temperature, tries):
        out = []
        for i, prompt in enumerate(prompts):
            out.append(fastest(lambda: generate(target, prompt, new_tokens, temperature, np.random.default_rng(seed + i)),
                               tries)[1])
            bar.update()
        return out

    for corpus, temperature in configs:
        prompts = data.heldout_prompts(corpus, n_prompts, prompt_len)
        generate(target, prompts[0], 8)  # warm-up: first calls allocate
        before = plain_runs(prompts, temperature, (repeats + 1) // 2)
        sweep = {}
        for name, draft in draft_models.items():
            for k in ks:
                sweep[name, k] = []
                for i, prompt in enumerate(prompts):
                    sweep[name, k].append(fastest(lambda: speculative_generate(
                        target, draft, prompt, k, new_tokens, temperature, np.random.default_rng(seed + i)), repeats)[1])
                    bar.update()
        after = plain_runs(prompts, temperature, repeats // 2) if repeats > 1 else before
        plain = [min(a, b, key=lambda stats: stats["seconds"]) for a, b in zip(before, after)]
        plain_tps = np.array([s["tokens_per_second"] for s in plain])
        plain_rows.append({"corpus": corpus, "temperature": temperature,
                           "prompt_seconds": [s["seconds"] for s in plain],
                           "tokens_per_second": float(np.median(plain_tps)),
                           "target_forward_seconds": float(np.median([s["target_forward_seconds"] for s in plain]))})
        step_s = plain_rows[-1]["target_forward_seconds"]
        for (name, k), runs in sweep.items():
            for i, stats in enumerate(runs):
                stats["speedup"] = stats["tokens_per_second"] / plain_tps[i]
                stats["overhead_seconds_per_round"] = stats["overhead_seconds"] / stats["target_calls"]
            med = {key: float(np.median([r[key] for r in runs]))
                   for key in ("tau", "alpha", "speedup", "tokens_per_second", "draft_forward_seconds",
                               "verify_forward_seconds", "overhead_seconds_per_round")}
            # c against one plain target step (Leviathan's definition); the verify pass of
            # k + 1 tokens costs more than one step, and that shows up in measured/predicted
            c = med["draft_forward_seconds"] / step_s
            predicted = float(expected_speedup(med["alpha"], k, c))
            row = {"corpus": corpus, "temperature": temperature, "draft": name, "k": k, **med,
                   "c": c, "verify_cost": med["verify_forward_seconds"] / step_s,
                   "predicted_speedup": predicted, "measured_over_predicted": med["speedup"] / predicted}
            rows.append(row | {"forward_bound_speedup": forward_bound(row)})
    bar.close()
    return rows, plain_rows


def forward_bound(row) -> float:
    """tau / (k c + verify cost): the speedup if a round cost nothing but its k draft forwards and
    its verify forward (all in plain target steps). Measured / this is what the loop keeps."""
    return row["tau"] / (row["k"] * row["c"] + row["verify_cost"])


def best_rows(rows):
    """The best K (highest measured speedup) per corpus, temperature and draft."""
    best = {}
    for r in rows:
        key = (r["corpus"], r["temperature"], r["draft"])
        if key not in best or r["speedup"] > best[key]["speedup"]:
            best[key] = r
    return list(best.values())


def markdown(rows, plain_rows) -> str:
    lines = ["| corpus | T | draft | best K | tau | alpha | c | verify cost | predicted | measured | measured/predicted "
             "| forward-bound | measured/forward-bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in best_rows(rows):
        lines.append(f"| {r['corpus']} | {r['temperature']:g} | {r['draft']} | {r['k']} | {r['tau']:.2f} | "
                     f"{r['alpha']:.3f} | {r['c']:.3f} | {r['verify_cost']:.2f} | {r['predicted_speedup']:.2f}x | "
                     f"{r['speedup']:.2f}x | {r['measured_over_predicted']:.2f} | {forward_bound(r):.2f}x | "
                     f"{r['speedup'] / forward_bound(r):.2f} |")
    lines.append("")
    lines.append("Plain decoding: " + ", ".join(
        f"{p['corpus']} T={p['temperature']:g}: {p['tokens_per_second']:.0f} tok/s" for p in plain_rows))
    lines.append("c = draft forward / plain target step; verify cost = target forward over k + 1 tokens / plain step;")
    lines.append("predicted = E(alpha, k) / (k c + 1) (Leviathan et al. Thm 3.8, verify priced as one step); "
                 "forward-bound = tau / (k c + verify cost), the speedup if a round cost only its model forwards.")
    lines.append("")
    lines.append("alpha, mean over K: " + "; ".join(
        f"{corpus} T={t:g}: " + ", ".join(f"{d} {a:.3f}" for d, a in sorted(by_draft.items()))
        for (corpus, t), by_draft in mean_alpha(rows).items()))
    return "\n".join(lines) + "\n"


def mean_alpha(rows):
    """{(corpus, T): {draft: alpha averaged over K}}: one alpha per draft, less noisy than the best-K row's."""
    groups = {}
    for r in rows:
        groups.setdefault((r["corpus"], r["temperature"]), {}).setdefault(r["draft"], []).append(r["alpha"])
    return {key: {d: float(np.mean(a)) for d, a in by_draft.items()} for key, by_draft in groups.items()}


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="time every run this many times, keep the fastest")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--scale", choices=("cpu", "gpu"), default="cpu", help="gpu: the NAME-gpu checkpoints")
    args = parser.parse_args(argv)
    args.out = args.out or paths.benchmarks()
    started = time.time()
    rows, plain_rows = bench_decode(n_prompts=args.prompts, new_tokens=args.new_tokens, device=args.device,
                                    scale=args.scale, repeats=args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine(), "scale": args.scale, "seconds": round(time.time() - started, 1), "new_tokens": args.new_tokens,
              "prompts_per_corpus": args.prompts, "repeats": args.repeats, "plain": plain_rows, "rows": rows, "best": best_rows(rows),
              "alpha_mean_over_k": {f"{c} T={t:g}": a for (c, t), a in mean_alpha(rows).items()}}
    stem = "decode" if args.scale == "cpu" else f"decode-{args.scale}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(rows, plain_rows)
    (args.out / f"{stem}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
