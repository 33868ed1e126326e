"""How far is a forward from the memory-traffic limit?

    python -m lessonlib.bench bandwidth [--prompts 5] [--new-tokens 128] [--repeats 3]

Measures this machine's read bandwidth with one thread (the fastest sum over a buffer the size
of the target's weights, and over a 256 MB one that no cache holds), prints the forward bound
(the target's weight bytes / bandwidth: a one-token step cannot be faster than reading every
weight once) beside the measured one-token step and 6- and 16-token verify passes after 128
cached tokens, for the readable packed GPT, the PyTorch fast path (``engines.fast``) and the
native forward (``engines.native``, where it builds), the models taking turns. Then plain and
chain (draft-kl, K = 4; the readable unpacked draft beside the readable target, the draft of the
same path beside the others) greedy decoding with each, all interleaved on held-out code
prompts; every path's tokens must equal the readable model's. Writes bandwidth.{json,md}.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib import engines
from lessonlib.bench.common import machine, markdown_table, parse, parser, prompts, write_report
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.timing import interleaved, pass_times
from lessonlib.engines import FastGPT, native
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


def step_rounds(models: dict, rounds: int = 3) -> dict:
    """{name: {n: [fastest seconds of each round]}}: ``pass_times`` of each model, the models
    taking turns round by round (a round's spread is what a re-run would see)."""
    out: dict = {name: {n: [] for n in SIZES} for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            for n, s in pass_times(model, SIZES, context=128, repeats=20).items():
                out[name][n].append(s)
    return out


def step_times(models: dict, rounds: int = 3) -> dict:
    """{name: {n: fastest seconds}}: the fastest round of ``step_rounds``."""
    return {name: {n: min(times) for n, times in by_n.items()} for name, by_n in step_rounds(models, rounds).items()}


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
    cli = parser(__doc__)
    cli.add_argument("--compile", action="store_true", help="also measure torch.compile of the fast block")
    cli.add_argument("--half", action="store_true", help="also measure float16 / bfloat16 weights")
    args = parse(cli, argv)
    models, drafts = paths_models()
    weight_bytes = sum(p.numel() * p.element_size() for p in models["fast"].parameters()) \
        - models["fast"].wpe.weight.numel() * 4 + models["fast"].config.n_embd * 4  # one position row read
    bandwidth = {"weights-sized buffer": read_bandwidth(weight_bytes), "256 MB buffer": read_bandwidth(256 << 20)}
    steps = step_times(models)
    rates = decode_rates(models, drafts, prompts("code", args.prompts, args.prompt_len),
                         args.new_tokens, args.repeats)
    native_bytes = models["native"].native.nbytes if "native" in models else None
    report = {"machine": machine(), "weight_bytes": weight_bytes, "native_weight_bytes": native_bytes,
              "read_bandwidth_gb_s": {k: v / 1e9 for k, v in bandwidth.items()},
              "bound_ms": {k: 1e3 * weight_bytes / v for k, v in bandwidth.items()},
              "native_bound_ms": {k: 1e3 * native_bytes / v for k, v in bandwidth.items()} if native_bytes else None,
              "forward_ms": {name: {n: 1e3 * s for n, s in by_n.items()} for name, by_n in steps.items()},
              "gain": {name: {n: steps["readable"][n] / steps[name][n] for n in SIZES} for name in models
                       if name != "readable"}, "native": native.status(),
              "tokens_per_second": rates, "prompts": args.prompts, "new_tokens": args.new_tokens,
              "cpu_half_instructions": cpu_half_flags()}
    if args.compile:
        report["compile"] = compile_probe()
    if args.half:
        report["half"] = half_probe(prompts("code", args.prompts, args.prompt_len))
    write_report("bandwidth", report, markdown(report))
    print(markdown(report))
    return 0


def paths_models() -> tuple[dict, dict]:
    """The target and draft-kl on each decode path: readable (the draft unpacked, as the loops
    ran it before), fast (PyTorch, ``native.turned_off``) and native when it builds here."""
    models = {"readable": engines.load("target", "cpu", engine="packed")}
    drafts = {"readable": load("draft-kl", "cpu")}
    for engine in ("fast", "native") if engines.unavailable("native") is None else ("fast",):
        models[engine] = engines.load("target", "cpu", engine=engine)
        drafts[engine] = engines.load("draft-kl", "cpu", engine=engine)
    return models, drafts


def markdown(report: dict) -> str:
    bound = "; ".join(f"{v:.2f} ms at {report['read_bandwidth_gb_s'][k]:.1f} GB/s ({k})"
                      for k, v in report["bound_ms"].items())
    steps = markdown_table(["path"] + [f"forward over {n} new (ms)" for n in SIZES],
                           [[name] + [f"{by_n[n]:.2f}" for n in SIZES] for name, by_n in report["forward_ms"].items()])
    rates = markdown_table(["run", "tokens/s or speedup (median [IQR])"],
                           [[name, measures.fmt_spread(s, 2 if "speedup" in name else 0, count=False)]
                            for name, s in report["tokens_per_second"].items()])
    gains = report.get("gain") or {"fast": report["fast_gain"]}  # reports before the native path: fast only
    gain = "; ".join(f"{name}: " + ", ".join(f"{g:.2f}x ({n} new)" for n, g in by_n.items())
                     for name, by_n in gains.items())
    native_bound = ""
    if report.get("native_bound_ms"):
        half = " (half-precision copies of the weights)" if "half" in report.get("native", "") else ""
        native_bound = (f" The native forward reads {report['native_weight_bytes'] / 1e6:.1f} MB{half}: bound "
                        + "; ".join(f"{v:.2f} ms ({k})" for k, v in report["native_bound_ms"].items()) + ".")
    return (f"# Forward against the memory-traffic bound\n\nTarget weights read per forward: "
            f"{report['weight_bytes'] / 1e6:.1f} MB. Bound (weights / bandwidth): {bound}.{native_bound}\n\n"
            f"Fastest forward after 128 cached tokens, the models taking turns:\n\n{steps}\n\n"
            f"Gain over the readable path: {gain}. Native forward: {report.get('native', 'not measured')}.\n\n"
            f"{report['prompts']} held-out code prompts x "
            f"{report['new_tokens']} new tokens, greedy, all runs interleaved (same tokens checked):\n\n"
            f"{rates}\n" + probes_markdown(report))


def probes_markdown(report: dict) -> str:
    """The torch.compile and half-precision sections (``--compile``, ``--half``), when measured."""
    out = [f"\nCPU instructions for half-precision arithmetic (lscpu flags): "
           f"{', '.join(report.get('cpu_half_instructions', [])) or 'none (conversions only, or none at all)'}.\n"]
    if "compile" in report:
        c = report["compile"]
        rows = [[name] + [f"{ms:.2f}" for ms in by_n.values()] for name, by_n in c["forward_ms"].items()]
        out += ["\n## torch.compile (inductor, dynamic shapes) of the fast block\n",
                f"Compile time from an empty cache (prefill, step, verify): {c['compile_seconds_cold']:.0f} s; "
                f"largest logit difference {c['max_logit_diff']:.1e}; gain "
                + ", ".join(f"{g:.2f}x ({n} new)" for n, g in c["gain"].items()) + ".\n",
                markdown_table(["block", *(f"forward over {n} new (ms)" for n in c["gain"])], rows)]
    if "half" in report:
        h = report["half"]
        rows = [[name, *(f"{ms:.2f}" for ms in h["forward_ms"][name].values()), f"{h['max_logit_diff'][name]:.2g}",
                 f"{h['greedy_equal_prompts'][name]}/{h['prompts']}"] for name in h["forward_ms"]]
        out += ["\n## Half-precision weights on the fast path\n",
                markdown_table(["dtype", "step (ms)", "verify 6 (ms)", "max logit diff vs float32",
                                f"greedy {h['new_tokens']} tokens = float32's"], rows)]
    return "\n".join(out) + "\n"


def cpu_half_flags() -> list[str]:
    """The CPU's half-precision flags (Linux ``/proc/cpuinfo``): f16c converts only; avx512_bf16,
    avx512_fp16 and amx_* compute."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f in ("f16c", "avx512_bf16", "avx512_fp16") or f.startswith("amx"))


def operator_profile(model, steps: int = 50, context: int = 128, top: int = 12) -> dict:
    """Where a one-token step's time goes: ``torch.profiler``'s self CPU time per operator over
    ``steps`` steps of ``model`` after ``context`` cached tokens, in microseconds per step, the
    ``top`` largest; ``calls_per_step`` counts every operator call (the profiler adds its own
    cost to each call, so the total is above the unprofiled step)."""
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        cache = model.new_cache()
        model(torch.randint(model.config.vocab_size, (1, context), generator=gen), cache=cache)
        idx = torch.randint(model.config.vocab_size, (1, 1), generator=gen)  # (1, 1)

        def step():
            cache.truncate(context)
            model(idx, cache=cache)

        for _ in range(5):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
    ops = sorted(({"op": e.key, "calls_per_step": e.count / steps, "us_per_step": e.self_cpu_time_total / steps}
                  for e in prof.key_averages()), key=lambda r: -r["us_per_step"])
    ops = [r for r in ops if not r["op"].startswith("ProfilerStep")]
    return {"steps": steps, "context": context, "us_per_step": sum(r["us_per_step"] for r in ops),
            "calls_per_step": sum(r["calls_per_step"] for r in ops), "ops": ops[:top]}


def _turns(variants: dict, sizes=(1, 6), rounds: int = 3) -> dict:
    """{variant: {n: fastest ms}}: ``pass_times`` of the model each variant's callable sets up
    and returns, the variants taking turns."""
    best: dict = {name: {n: float("inf") for n in sizes} for name in variants}
    for _ in range(rounds):
        for name, apply in variants.items():
            m = apply()
            for n, s in pass_times(m, sizes, context=128, repeats=10).items():
                best[name][n] = min(best[name][n], 1e3 * s)
    return best


def compile_probe(sizes=(1, 6)) -> dict:
    """``torch.compile`` (inductor, dynamic shapes: the cache length changes every step) of the
    fast path's block, as notebooks would meet it: the compile time of the first step and of
    the first verify pass from an empty compile cache, then the steady-state forwards of the
    compiled and eager blocks taking turns, and the largest logit difference."""
    import os
    import tempfile

    model = engines.load("target", "cpu")
    eager = model._block
    tokens = torch.randint(model.config.vocab_size, (1, 128 + max(sizes)), generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as cache_dir, torch.inference_mode():
        before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir  # cold: nothing compiled before
        try:
            compiled = torch.compile(eager, dynamic=True)
            model._block = compiled  # type: ignore[method-assign]
            seconds, logits = {}, {}
            for name, block in (("compiled", compiled), ("eager", eager)):
                model._block = block  # type: ignore[method-assign]
                cache = model.new_cache()
                start = time.perf_counter()
                model(tokens[:, :128], cache=cache)  # the prefill compiles too
                for n in sizes:
                    logits[name, n] = model(tokens[:, 128 : 128 + n], cache=cache)
                    cache.truncate(128)
                seconds[name] = time.perf_counter() - start
            steady = _turns({"eager": lambda: _with(model, eager), "compiled": lambda: _with(model, compiled)}, sizes)
        finally:
            model._block = eager  # type: ignore[method-assign]
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR") if before is None else os.environ.update(
                TORCHINDUCTOR_CACHE_DIR=before)
    return {"compile_seconds_cold": seconds["compiled"] - seconds["eager"], "forward_ms": steady,
            "gain": {n: steady["eager"][n] / steady["compiled"][n] for n in sizes},
            "max_logit_diff": max(float((logits["compiled", n] - logits["eager", n]).abs().max()) for n in sizes)}


def _with(model, block):
    model._block = block
    return model


def half_probe(prompt_list, new_tokens: int = 32) -> dict:
    """float16 and bfloat16 weights and activations on the fast path against float32: the
    forwards taking turns, the largest logit difference over 120 held-out tokens, and on how many
    prompts greedy decoding of ``new_tokens`` gives float32's tokens."""
    fp32 = engines.load("target", "cpu")
    models = {"float32": fp32} | {name: FastGPT.from_gpt(load("target", "cpu").to(dtype))
                                  for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16))}
    tokens = torch.tensor([prompts("code", 1, 120)[0]])
    with torch.inference_mode():
        want = fp32(tokens, cache=fp32.new_cache())
        diff = {name: float((m(tokens, cache=m.new_cache()).float() - want).abs().max()) for name, m in models.items()}
    greedy = {name: [generate(m, p, new_tokens)[0] for p in prompt_list] for name, m in models.items()}
    steady = _turns({name: (lambda m=m: m) for name, m in models.items()})
    return {"forward_ms": steady, "max_logit_diff": diff, "new_tokens": new_tokens,
            "greedy_equal_prompts": {name: sum(a == b for a, b in zip(g, greedy["float32"]))
                                     for name, g in greedy.items()}, "prompts": len(prompt_list)}
