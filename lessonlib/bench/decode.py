"""The decode benchmark: ``python -m lessonlib.bench decode`` writes outputs/benchmarks/decode.{json,md}
and refreshes the table of record (``record.json``, ``record.md``).

Everything is measured in one run on one machine: plain decoding and chain speculative
decoding with each shipped draft, K = 1..8, T in {0, 1}, on held-out code and prose prompts
(``data.heldout_prompts``), batch 1, under each thread setting of ``--threads`` (default: one
and two). For each prompt plain and every speculative run take turns (``timing.interleaved``),
each kept as the fastest of ``--repeats``; c, r and the speedup of a prompt are against plain
decoding of that prompt (``measures.compare``). Per configuration we report the median over
prompts with its inter-quartile range of tau, alpha (measured while decoding), c, r and the
speedup, next to the speedup Leviathan et al. Thm 3.8 predicts from the median alpha and c.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np
from tqdm.auto import tqdm

from lessonlib import cli, runs, threads
from lessonlib.bench import common, record
from lessonlib.core.theory import expected_speedup
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.engines import load
from lessonlib.models import data, default_device, scaled_name

THREADS = (1, 2)  # the benchmark shows both settings of the thread policy (lessonlib.threads)


def _methods(target, draft_models, ks, temperature, new_tokens, seed):
    """{(draft, K): run(prompt, i)} for one temperature; run i always uses the rng seeded seed + i."""
    def chain(draft, k):
        return lambda prompt, i: speculative_generate(target, draft, prompt, k, new_tokens, temperature,
                                                      np.random.default_rng(seed + i))
    return {(name, k): chain(draft, k) for name, draft in draft_models.items() for k in ks}


def config_rows(target, draft_models, ks, corpus, temperature, n_threads, settings, seed, bar=None):
    """Rows for one (corpus, T, thread count): every draft and K against plain decoding."""
    n_prompts, prompt_len, new_tokens, repeats = (settings[k]
                                                  for k in ("prompts", "prompt_len", "new_tokens", "repeats"))
    prompts = common.prompts(corpus, n_prompts, prompt_len)
    generate(target, prompts[0], 8)  # warm-up: first calls allocate

    def plain(prompt, i):
        if bar is not None:
            bar.update()
        return generate(target, prompt, new_tokens, temperature, np.random.default_rng(seed + i))

    methods = _methods(target, draft_models, ks, temperature, new_tokens, seed)
    runs = common.against_plain(plain, {f"{d} K={k}": run for (d, k), run in methods.items()}, prompts, repeats)
    rows = []
    for draft, k in methods:
        per_prompt = runs[f"{draft} K={k}"]
        spread = measures.summarise(per_prompt)
        med = common.medians(spread)
        predicted = float(expected_speedup(med["alpha"], k, med["c"]))
        rows.append({"corpus": corpus, "temperature": temperature, "threads": n_threads, "draft": draft, "k": k,
                     "method": f"chain {draft} K={k}", **med, "prompts": n_prompts,
                     "overhead_seconds_per_round": float(np.median([r["overhead_seconds"] / r["target_calls"]
                                                                    for r in per_prompt])),
                     "predicted_speedup": predicted, "measured_over_predicted": med["speedup"] / predicted,
                     "forward_bound_speedup": med["forward_bound"], "spread": spread,
                     "per_prompt_speedup": [r["speedup"] for r in per_prompt]})
    plain_spread = measures.summarise(runs["plain"])
    plain_row = {"corpus": corpus, "temperature": temperature, "threads": n_threads, "prompts": n_prompts,
                 **common.medians(plain_spread), "spread": plain_spread,
                 "prompt_seconds": [s["seconds"] for s in runs["plain"]]}
    return rows, plain_row


def bench_decode(drafts=("draft-ce", "draft-kl"), ks=range(1, 9), temperatures=(0.0, 1.0), corpora=data.CORPORA,
                 n_prompts=common.DEFAULTS["prompts"], prompt_len=common.DEFAULTS["prompt_len"],
                 new_tokens=common.DEFAULTS["new_tokens"], device=None, seed=0, scale="cpu",
                 repeats=common.DEFAULTS["repeats"], thread_counts=None):
    """Run the decode benchmark; returns (rows, plain_rows): one row per thread count, corpus, T,
    draft and K, one plain row per thread count, corpus and T. ``thread_counts`` defaults to the
    policy's own setting only (``main`` passes both)."""
    device = device or default_device()
    target = load(scaled_name("target", scale), device)  # the fastest engine here (engines.resolve)
    draft_models = {name: load(scaled_name(name, scale), device) for name in drafts}  # both on it
    thread_counts = thread_counts or (threads.apply(),)
    settings = {"prompts": n_prompts, "prompt_len": prompt_len, "new_tokens": new_tokens, "repeats": repeats}
    configs = [(n, c, t) for n in thread_counts for c in corpora for t in temperatures]
    rows, plain_rows = [], []
    with tqdm(total=len(configs) * n_prompts * repeats, desc="bench decode (plain runs)") as bar:
        for n_threads, corpus, temperature in configs:
            with threads.using(n_threads):
                config, plain = config_rows(target, draft_models, ks, corpus, temperature, n_threads, settings,
                                            seed, bar)
            rows += config
            plain_rows.append(plain)
    return rows, plain_rows


def best_rows(rows):
    """The best K (highest median speedup) per thread count, corpus, temperature and draft."""
    best = {}
    for r in rows:
        key = (r.get("threads"), r["corpus"], r["temperature"], r["draft"])
        if key not in best or r["speedup"] > best[key]["speedup"]:
            best[key] = r
    return list(best.values())


def markdown(rows, plain_rows) -> str:
    header = ["threads", "corpus", "T", "draft", "best K", "τ", "α (decoding)", "c", "r", "predicted", "speedup [IQR]",
              "measured/predicted", "forward bound", "prompts"]
    table = [[r["threads"], r["corpus"], f"{r['temperature']:g}", r["draft"], r["k"], common.cell(r["spread"], "tau"),
              common.cell(r["spread"], "alpha", 3), common.cell(r["spread"], "c", 3), common.cell(r["spread"], "r"),
              f"{r['predicted_speedup']:.2f}×", common.cell(r["spread"], "speedup", unit="×"),
              f"{r['measured_over_predicted']:.2f}", f"{r['forward_bound_speedup']:.2f}×", r["prompts"]]
             for r in best_rows(rows)]
    lines = [common.markdown_table(header, table), ""]
    lines.append("Plain decoding (median [IQR] tokens/s): " + "; ".join(
        f"{p['threads']} thread(s), {p['corpus']} T={p['temperature']:g}: "
        f"{common.cell(p['spread'], 'tokens_per_second', 0)}" for p in plain_rows))
    lines.append("")
    lines.append("Medians over prompts with their inter-quartile range. c = draft step / one-token target step and "
                 "r = verify forward over K + 1 tokens / one-token step, all timed in the decoding loops "
                 "(lessonlib.decoding.measures); speedup = plain s/token / speculative s/token on the same prompt, "
                 "plain and speculative runs interleaved, each the fastest of its repeats. "
                 "predicted = E(α, K) / (K c + 1) "
                 "(Leviathan et al. Thm 3.8, verify priced as one step); forward bound = τ / (K c + r), the speedup "
                 "if a round cost only its model forwards. The best K is picked by the measured median, which "
                 "favours K values that were lucky on these prompts.")
    return "\n".join(lines) + "\n"


def build_parser(doc: str = __doc__):
    """The decode benchmark's command line (the agreement benchmark reuses it)."""
    parser = common.parser(doc, "time every run this many times, keep the fastest")
    parser.add_argument("--threads", type=cli.positive_int, nargs="+", default=list(THREADS),
                        help="thread counts to measure")
    parser.add_argument("--ks", type=cli.positive_int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--device", type=cli.device, default=None)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--scale", choices=("cpu", "gpu"), default="cpu", help="gpu: the NAME-gpu checkpoints")
    return parser


def measure(args) -> dict:
    """One run of the benchmark with parsed ``args``: the report decode.json holds."""
    started = time.time()
    rows, plain_rows = bench_decode(ks=args.ks, n_prompts=args.prompts, prompt_len=args.prompt_len,
                                    new_tokens=args.new_tokens, device=args.device, scale=args.scale,
                                    repeats=args.repeats, thread_counts=tuple(args.threads))
    return {"machine": common.machine(), "scale": args.scale, "seconds": round(time.time() - started, 1),
            "settings": {"prompts": args.prompts, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
                         "repeats": args.repeats, "threads": args.threads},
            "statistic": "median over prompts [inter-quartile range]; per prompt the fastest of `repeats` runs, "
                         "plain and speculative interleaved",
            "plain": plain_rows, "rows": rows, "best": best_rows(rows), "run": runs.stamp()}


def write(args, result: dict) -> pathlib.Path:
    """Write decode.json / decode.md (decode-gpu for ``--scale gpu``) and, on the CPU, refresh the record."""
    stem = "decode" if args.scale == "cpu" else f"decode-{args.scale}"
    md = markdown(result["rows"], result["plain"])
    if args.scale == "cpu":  # decode.json/.md and the record change together (record.write_with)
        return record.write_with(stem, result, md, args.out)
    return common.write_report(stem, result, md, args.out)


def main(argv=None):
    args = common.parse(build_parser(), argv)
    result = measure(args)
    write(args, result)
    print(markdown(result["rows"], result["plain"]))


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench decode"))
