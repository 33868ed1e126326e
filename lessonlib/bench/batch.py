"""Serving under load: plain and chain speculative decoding over B sequences at once.

    python -m lessonlib.bench batch [--prompts 5] [--batches 1 2 4 8 16 32] [--ks 1 2 3] [--quick]

For each batch size B, plain decoding and chain speculation with ``draft-kl`` at each K decode a
set of B held-out code prompts of different lengths at once (``decoding.batch``), greedy by
default. Every (B, method) takes turns on each prompt set (``timing.interleaved``: a busy spell
hits them all alike), each kept as the fastest of ``--repeats``; the batch-1 loops
(``decode.generate``, ``decode.speculative_generate``) join the turns at B = 1 on each set's
first prompt. Per B, over the prompt sets: total tokens/s, the speedup against plain decoding
at the same B, tau, alpha, c = draft step / one-token target step at that B, and the measured
r = (verify forward over B (K + 1) tokens) / (one-token step at batch B), which the skill
file's model calls r(B (K + 1)) / r(B).

The model the measurement checks is the skill file's (``course.skill``, which reads this report:
bench sits below course, so the prediction is made there): S = E(alpha, K) / (K c + f(B (K + 1))
/ f(B)), with f a single-sequence forward over n tokens / a one-token one, measured here too
(``forward_cost``, ``timing.pass_times``). The crossover is the smallest B at which the best K's
median speedup is <= 1. The latency tail: one sequence's inter-token gaps (its tokens'
emission times; the tokens of one round arrive together, gap 0), pooled over the sequences and
prompt sets, mean, P50 and P99, with and without speculation at B = 1 and at the crossover.

Writes ``outputs/benchmarks/batch.json`` and ``batch.md`` and refreshes the table of record.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np
from tqdm.auto import tqdm

from lessonlib import cli, threads
from lessonlib.bench import common, current, record
from lessonlib.decoding import measures, timing
from lessonlib.decoding.batch import batch_generate, batch_speculative_generate
from lessonlib.decoding.decode import generate, speculative_generate

BATCHES = (1, 2, 4, 8, 16, 32)
MAX_BATCH = 256  # ~8 MB of KV cache and logits per sequence: 256 is ~2 GB (100,000 asked for 835 GB)
DEFAULTS = {"prompts": 5, "prompt_len": 48, "new_tokens": 24, "repeats": 2, "ks": (1, 2, 3)}
QUICK = {"prompts": 5, "prompt_len": 32, "new_tokens": 12, "repeats": 1, "ks": (1, 2), "batches": (1, 4, 16)}
DRAFT = "draft-kl"
SUMMARISED = ("speedup", "tokens_per_second", "tau", "alpha", "c", "r", "seconds_per_token")


def prompt_sets(n_sets: int, batch: int, length: int) -> list[list[list[int]]]:
    """``n_sets`` sets of ``batch`` held-out code prompts; row i of a set keeps its first
    length - (7 i mod length / 2) tokens, so the rows of a batch start at different lengths."""
    flat = common.prompts("code", n_sets * batch, length)
    cut = [p[: length - (7 * (i % batch)) % max(1, length // 2)] for i, p in enumerate(flat)]
    return [cut[s * batch : (s + 1) * batch] for s in range(n_sets)]


def _runs(target, draft, sets, batches, ks, new_tokens, temperature, seed):
    """{name: run(i)} for every (B, method), and the batch-1 loops at B = 1; run i decodes set i
    (its first B prompts) with the rng seeded seed + i."""
    rng = (lambda i: np.random.default_rng(seed + i)) if temperature > 0 else (lambda i: None)
    runs = {}
    for B in batches:
        runs[f"B={B} plain"] = lambda i, B=B: batch_generate(target, sets[i][:B], new_tokens, temperature, rng(i))
        for k in ks:
            runs[f"B={B} K={k}"] = lambda i, B=B, k=k: batch_speculative_generate(
                target, draft, sets[i][:B], k, new_tokens, temperature, rng(i))
    if 1 in batches:
        runs["loop-1 plain"] = lambda i: generate(target, sets[i][0], new_tokens, temperature, rng(i))
        for k in ks:
            runs[f"loop-1 K={k}"] = lambda i, k=k: speculative_generate(target, draft, sets[i][0], k, new_tokens,
                                                                       temperature, rng(i))
    return runs


def _per_set(best, name, plain_name) -> list[dict]:
    """Each prompt set's quantities of ``name`` against ``plain_name`` on the same set."""
    rows = []
    for (_, stats), (_, plain) in zip(best[name], best[plain_name]):
        row = {"tokens_per_second": stats.tokens_per_second, "seconds_per_token": stats.seconds_per_token}
        if stats.loop == "chain":
            row |= {"tau": stats.tau, "alpha": stats.alpha, **measures.compare(stats, plain)}
        rows.append(row)
    return rows


def inter_token_gaps(stats) -> np.ndarray:
    """Every sequence's gaps between successive tokens (seconds; first token excluded): the
    batched loops' ``emit_seconds``."""
    gaps = [np.diff(e) for e in stats.extra["emit_seconds"]]
    return np.concatenate(gaps) if gaps else np.zeros(0)


def latency(stats_list) -> dict:
    """Mean, P50 and P99 inter-token latency (ms) pooled over runs, and P99 / mean."""
    g = np.concatenate([inter_token_gaps(s) for s in stats_list]) * 1e3
    mean, p50, p99 = float(g.mean()), float(np.percentile(g, 50)), float(np.percentile(g, 99))
    return {"mean_ms": mean, "p50_ms": p50, "p99_ms": p99, "p99_over_mean": p99 / mean, "gaps": int(g.size)}


def batch_rows(best, batches, ks) -> list[dict]:
    """One row per B: plain tokens/s, every K's spread (speedup, tau, alpha, c, r), the best K."""
    rows = []
    for B in batches:
        plain = measures.summarise(_per_set(best, f"B={B} plain", f"B={B} plain"), SUMMARISED)
        chains = {}
        for k in ks:
            spread = measures.summarise(_per_set(best, f"B={B} K={k}", f"B={B} plain"), SUMMARISED)
            chains[k] = {"k": k, "spread": spread, **common.medians(spread)}
        k_best = max(chains, key=lambda k: chains[k]["speedup"])
        rows.append({"batch": B, "plain": plain, "plain_tokens_per_second": plain["tokens_per_second"]["median"],
                     "chains": list(chains.values()), "best_k": k_best, "best_speedup": chains[k_best]["speedup"],
                     "best_spread": chains[k_best]["spread"]["speedup"]})
    return rows


def forward_cost(target, n_max: int, repeats: int) -> dict:
    """f(n): one single-sequence forward over n new tokens / one over 1 token (``timing.pass_times``
    after 64 cached tokens), the curve the skill file's model stretches to batch B."""
    sizes = sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160} & set(range(1, n_max + 1)) | {n_max})
    seconds = timing.pass_times(target, sizes, context=64, repeats=repeats)
    return {"tokens": sizes, "cost": [seconds[n] / seconds[1] for n in sizes], "context": 64}


def crossover(rows, key) -> int | None:
    """The smallest B whose ``key`` speedup (measured or predicted best) is <= 1, or None."""
    hit = [r["batch"] for r in rows if r.get(key) is not None and r[key] <= 1.0]
    return min(hit) if hit else None


def latency_rows(best, rows, at) -> list[dict]:
    """The latency tail of plain and of the best K at each B of ``at``."""
    out = []
    for B in at:
        k = next(r["best_k"] for r in rows if r["batch"] == B)
        for name in (f"B={B} plain", f"B={B} K={k}"):
            out.append({"batch": B, "method": "plain" if name.endswith("plain") else f"chain K={k}",
                        **latency([stats for _, stats in best[name]])})
    return out


def loop_1(best, ks) -> dict:
    """The batched loop at B = 1 against the batch-1 loop: tokens/s ratio per prompt set."""
    out = {}
    for method in ["plain", *(f"K={k}" for k in ks)]:
        ratio = [b.tokens_per_second / one.tokens_per_second
                 for (_, b), (_, one) in zip(best[f"B=1 {method}"], best[f"loop-1 {method}"])]
        out[method] = measures.summary(ratio)
    return out


def _check_lossless(best, batches, ks) -> None:
    """Greedy decoding must not change a token: every K's output equals plain's at each B, and the
    batched loop's row 0 at B = 1 the batch-1 loop's."""
    for B in batches:
        for k in ks:
            if [t for t, _ in best[f"B={B} K={k}"]] != [t for t, _ in best[f"B={B} plain"]]:
                raise AssertionError(f"B={B} K={k}: greedy output differs from plain greedy decoding")
    if 1 in batches and [t[0] for t, _ in best["B=1 plain"]] != [t for t, _ in best["loop-1 plain"]]:
        raise AssertionError("the batched loop at B = 1 differs from decode.generate")


def _timed(runs: dict, bar) -> dict:
    def tick(run):
        def go(i):
            bar.update()
            return run(i)
        return go
    return {name: tick(run) for name, run in runs.items()}


def bench_batch(batches=BATCHES, ks=DEFAULTS["ks"], n_sets=DEFAULTS["prompts"], prompt_len=DEFAULTS["prompt_len"],
                new_tokens=DEFAULTS["new_tokens"], repeats=DEFAULTS["repeats"], temperature=0.0, seed=0,
                device=None) -> dict:
    """Run the benchmark; returns the report ``main`` writes (module docstring)."""
    from lessonlib.engines import load
    from lessonlib.models import default_device

    device = device or default_device()
    target, draft = load("target", device), load(DRAFT, device)
    sets = prompt_sets(n_sets, max(batches), prompt_len)
    batch_speculative_generate(target, draft, sets[0][:2], 2, 4)  # warm-up: first calls allocate
    runs = _runs(target, draft, sets, batches, ks, new_tokens, temperature, seed)
    with tqdm(total=n_sets * repeats * len(runs), desc="bench batch (runs)") as bar:
        best = timing.interleaved(_timed(runs, bar), n_sets, repeats)
    if temperature == 0:
        _check_lossless(best, batches, ks)
    rows = batch_rows(best, batches, ks)
    cross = crossover(rows, "best_speedup")
    n_max = min(max(batches) * (max(ks) + 1), target.config.block_size - 64)
    return {"rows": rows, "crossover": cross, "forward_cost": forward_cost(target, n_max, 10),
            "latency": latency_rows(best, rows, sorted({batches[0], cross or batches[-1]})),
            "loop_1_over": loop_1(best, ks) if 1 in batches else None,
            "record_rows": record_rows(rows, n_sets)}


def record_rows(rows, n_sets) -> list[dict]:
    """The table of record's rows: plain and the best K at each B."""
    out = []
    for r in rows:
        best = next(c for c in r["chains"] if c["k"] == r["best_k"])
        out += [{"method": f"batch B={r['batch']} plain", "family": "batch plain", "spread": r["plain"],
                 "prompts": n_sets, "batch": r["batch"]},
                {"method": f"batch B={r['batch']} chain {DRAFT} K={best['k']}", "family": f"batch chain {DRAFT}",
                 "k": best["k"], "spread": best["spread"], "prompts": n_sets, "batch": r["batch"]}]
    return out


def markdown(report) -> str:
    s = report["setup"]
    header = ["B", "plain tokens/s", *(f"K={k} speedup" for k in s["ks"]), "best K", "r = verify(B(K+1)) / step(B)",
              "c", "τ", "speculative tokens/s"]
    table = []
    for r in report["rows"]:
        best = next(c for c in r["chains"] if c["k"] == r["best_k"])
        table.append([r["batch"], common.cell(r["plain"], "tokens_per_second", 0),
                      *(common.cell(c["spread"], "speedup", unit="×") for c in r["chains"]), r["best_k"],
                      common.cell(best["spread"], "r"), common.cell(best["spread"], "c", 3),
                      common.cell(best["spread"], "tau"), common.cell(best["spread"], "tokens_per_second", 0)])
    lat = [[x["batch"], x["method"], f"{x['mean_ms']:.1f}", f"{x['p50_ms']:.1f}", f"{x['p99_ms']:.1f}",
            f"{x['p99_over_mean']:.2f}", x["gaps"]] for x in report["latency"]]
    cross = report["crossover"]
    lines = ["# Serving under load: batched speculative decoding", "",
             f"Target `target` on engines.batched (the fast path's weights with a batch axis; native.c at B = 1), "
             f"draft `{DRAFT}`, T = {s['temperature']:g}, {s['prompts']} prompt sets of "
             f"held-out code ({s['prompt_len']} tokens and shorter, rows of a batch at different lengths), "
             f"{s['new_tokens']} new tokens per sequence, {s['threads']} thread(s), fastest of {s['repeats']}, every "
             "(B, method) interleaved per prompt set. Median over prompt sets [inter-quartile range].", "",
             common.markdown_table(header, table), "",
             f"Crossover (the smallest B whose best K is no faster than plain): "
             f"{'B = %d' % cross if cross else 'none up to B = %d' % s['batches'][-1]}.", "",
             "Inter-token latency of one sequence (ms; gaps between its successive tokens, pooled over the "
             "sequences and prompt sets; the tokens of one round arrive together):", "",
             common.markdown_table(["B", "method", "mean", "P50", "P99", "P99 / mean", "gaps"], lat), ""]
    if report["loop_1_over"]:
        lines.append("Batched loop at B = 1 / batch-1 loop, tokens/s: " + "; ".join(
            f"{m} {measures.fmt_spread(v, 3)}" for m, v in report["loop_1_over"].items()) + ".")
    lines += ["", "r is measured in the loop: a verify forward over B (K + 1) tokens / a one-token step at the same "
              "B (what the skill file's `verify_cost(K + 1, B, forward_cost)` predicts as f(B(K + 1)) / f(B) from a "
              "single sequence's forwards, `forward_cost` in batch.json); c = one batched draft step / one batched "
              "target step. The skill file compares its prediction with these rows."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__)
    parser.add_argument("--batches", type=cli.int_at_least(1, MAX_BATCH), nargs="+", default=list(BATCHES),
                        help=f"batch sizes B (at most {MAX_BATCH}: each sequence holds its own KV cache)")
    parser.add_argument("--ks", type=cli.positive_int, nargs="+", default=list(DEFAULTS["ks"]))
    parser.add_argument("--temperature", type=cli.number(0.0), default=0.0)
    parser.add_argument("--quick", action="store_true", help=f"a short run: {QUICK}")
    parser.add_argument("--device", type=cli.device, default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.set_defaults(**{k: v for k, v in DEFAULTS.items() if k != "ks"})
    args = common.parse(parser, argv)  # --ks: common.check_ks (the last round scores K - 1 positions more)
    setup = {"batches": sorted(set(args.batches)), "ks": sorted(set(args.ks)), "prompts": args.prompts,
             "prompt_len": args.prompt_len, "new_tokens": args.new_tokens, "repeats": args.repeats,
             "temperature": args.temperature, "threads": threads.apply(), "quick": args.quick}
    if args.quick:
        setup |= {k: (list(v) if isinstance(v, tuple) else v) for k, v in QUICK.items()}
    started = time.time()
    report = bench_batch(setup["batches"], setup["ks"], setup["prompts"], setup["prompt_len"], setup["new_tokens"],
                         setup["repeats"], setup["temperature"], device=args.device)
    # B sequences at once run engines.batched (native.c is batch-1): the engine this report's rows measured
    machine = common.machine() | {"engine": current.BATCHED}
    report = {"machine": machine, "setup": setup, "seconds": round(time.time() - started, 1), **report}
    record.write_with("batch", report, markdown(report), args.out)  # the report, its Markdown and the record at once
    print(markdown(report))


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench batch"))
