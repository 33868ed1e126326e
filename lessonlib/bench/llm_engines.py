"""How close does each engine of the real LLM come to the memory-traffic limit?

    python -m lessonlib.bench llm-engines [--repeats 20] [--threads 1 2] [--context 128] [--bf16]
                                          [--compile]

For SmolLM2-135M (``engines.load_llm``) on the readable float32 model (bf16 too with --bf16; with
--compile also the readable model under ``torch.compile(model, dynamic=True)``, PyTorch's own
answer to per-call overhead, its compile time recorded: the portable default is kept only with
this evidence beside it) and the native engine at f16 and f32 weights: the fastest forward over
n new tokens after a cached ``--context`` (n in ``SIZES``; the engines and sizes take turns, so a
busy machine slows all alike), as the one-token step (ms) and r(n) = t(n) / t(1). Beside them this machine's read
bandwidth (the fastest sum over a 256 MB buffer, one thread, measured at each thread count) and
the bound = the bytes of weights a step reads / that bandwidth. The targets of the real-LLM work:
step <= 1.5 x bound; r(5) <= 1.2 at 2 threads and <= 1.35 at 1 thread. Writes llm_engines.{json,md}.
"""
from __future__ import annotations

import argparse
import pathlib
import time

import torch

from lessonlib import cli, paths
from lessonlib.bench.bandwidth import read_bandwidth
from lessonlib.bench.common import machine, markdown_table, write_report
from lessonlib.decoding.timing import pass_times

SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32)  # new tokens per forward: a step, chains, trees


def models(bf16: bool, block_size: int = 512, compile_: bool = False) -> tuple[dict, dict]:
    """({name: (model, weight bytes a step reads)}, {name: seconds its first passes took}): the
    engines that run here, each serving ``block_size`` positions; a compiled model's first passes
    (one of each size, where ``torch.compile`` traces and builds its kernels) are timed here."""
    from lessonlib.engines.llama import load_llm, unavailable

    readable = load_llm("readable", block_size=block_size)
    f32_bytes = sum(p.numel() * 4 for p in readable.parameters())
    out: dict[str, tuple] = {"readable f32": (readable, f32_bytes)}
    warm: dict[str, float] = {}
    if compile_:
        compiled = torch.compile(load_llm("readable", block_size=block_size), dynamic=True)
        started = time.perf_counter()
        pass_times(compiled, SIZES, context=128, repeats=1)  # type: ignore[arg-type]
        warm["readable f32 compiled"] = time.perf_counter() - started
        out["readable f32 compiled"] = (compiled, f32_bytes)
    if bf16:
        half = load_llm("readable", block_size=block_size).to(torch.bfloat16)
        out["readable bf16"] = (half, sum(p.numel() * 2 for p in half.parameters()))
    if unavailable() is None:
        for precision in ("f16", "f32"):
            model = load_llm("native", precision, block_size=block_size)
            out[f"native {precision}"] = (model, int(model.native.nbytes))  # type: ignore[union-attr,arg-type]
    return out, warm


def measure(engines: dict, threads: list[int], context: int, repeats: int) -> dict:
    """{threads: {"bandwidth_gb_s", "seconds": {name: {n: fastest seconds}}}}: in every round each
    thread count in turn runs every engine in turn (``pass_times``: the sizes in turn)."""
    before = torch.get_num_threads()
    best: dict = {k: {name: {n: float("inf") for n in SIZES} for name in engines} for k in threads}
    bandwidth = {}
    try:
        for _ in range(repeats):
            for k in threads:
                torch.set_num_threads(k)
                for name, (model, _) in engines.items():
                    for n, s in pass_times(model, SIZES, context=context, repeats=1).items():
                        best[k][name][n] = min(best[k][name][n], s)
        for k in threads:
            torch.set_num_threads(k)
            bandwidth[k] = read_bandwidth(256 << 20)
    finally:
        torch.set_num_threads(before)
    return {k: {"bandwidth_gb_s": bandwidth[k] / 1e9, "seconds": best[k]} for k in threads}


def report(engines: dict, runs: dict, context: int, warm: dict | None = None) -> dict:
    rows = {}
    for threads, run in runs.items():
        for name, (_, nbytes) in engines.items():
            t = run["seconds"][name]
            bound = nbytes / (run["bandwidth_gb_s"] * 1e9)
            rows[f"{name}, {threads} thread{'s' if threads > 1 else ''}"] = {
                "engine": name, "threads": threads, "weight_bytes": nbytes, "step_ms": 1e3 * t[1],
                "bound_ms": 1e3 * bound, "step_over_bound": t[1] / bound,
                "r": {n: t[n] / t[1] for n in SIZES}, "ms": {n: 1e3 * t[n] for n in SIZES}}
    return {"machine": machine(), "context": context, "sizes": list(SIZES),
            "bandwidth_gb_s": {threads: run["bandwidth_gb_s"] for threads, run in runs.items()}, "rows": rows,
            "compile_seconds": dict(warm or {})}


def markdown(rep: dict) -> str:
    head = ["engine", "step (ms)", "bound (ms)", "step / bound"] + [f"r({n})" for n in SIZES[1:]]
    rows = [[name, f"{r['step_ms']:.2f}", f"{r['bound_ms']:.2f}", f"{r['step_over_bound']:.2f}"]
            + [f"{r['r'][n]:.2f}" for n in SIZES[1:]] for name, r in rep["rows"].items()]
    bw = ", ".join(f"{v:.1f} GB/s at {k} thread(s)" for k, v in rep["bandwidth_gb_s"].items())
    built = "".join(f" {name}: its first pass of each size (tracing and building its kernels) took {s:.0f} s."
                    for name, s in rep.get("compile_seconds", {}).items())
    return (f"# The real LLM's engines against the memory bound\n\nRead bandwidth (256 MB buffer): {bw}; "
            f"forwards after {rep['context']} cached tokens, fastest of the repeats.{built}\n\n"
            + markdown_table(head, rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=cli.positive_int, default=20, help="rounds; the fastest is kept")
    parser.add_argument("--threads", type=cli.positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--context", type=cli.positive_int, default=128, help="cached tokens before each forward")
    parser.add_argument("--bf16", action="store_true", help="also the readable model in bfloat16")
    parser.add_argument("--compile", action="store_true", help="also the readable model under torch.compile")
    parser.add_argument("--out", default=None, help="folder for llm_engines.{json,md} (default outputs/benchmarks)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    if args.context + max(SIZES) > 512:
        parser.error(f"argument --context: at most {512 - max(SIZES)} (the models serve 512 positions)")
    out = pathlib.Path(args.out) if args.out is not None else paths.benchmarks()
    try:  # refused before anything is loaded or measured
        if not args.no_write:
            cli.check_writable_folder(out, cli.outputs_name(args.out))
    except ValueError as err:
        parser.error(str(err))
    engines, warm = models(args.bf16, compile_=args.compile)
    runs = measure(engines, sorted(set(args.threads)), args.context, args.repeats)
    rep = report(engines, runs, args.context, warm)
    text = markdown(rep)
    if not args.no_write:
        write_report("llm_engines", rep, text, out)
    print(text)
    return 0
