"""What limits each engine in the peer benchmark (``bench.peers``), measured in the same run.

For lessonlib's decode path (native where it builds, ``engines.native``) and for llama.cpp (f32
and f16 GGUF) on the same target and draft:
the one-token step, the verify passes a chain of K and a lookup of k need (r = verify / step),
the draft's step (c = draft step / target step), all after 128 cached tokens, the engines
taking turns; the forward bound (the bytes of weights a step reads / this machine's read
bandwidth, ``bandwidth.read_bandwidth``); the per-operator profile of lessonlib's step
(``bandwidth.operator_profile``); the chain's speedup as the forwards alone predict it,
``measures.forward_bound`` = tau / (K c + r(K + 1)), beside the measured one; and the three
course's targets for its engines, each with its measured ratio.
"""
from __future__ import annotations

from lessonlib import threads
from lessonlib.bench import bandwidth, peer_llama
from lessonlib.bench.common import markdown_table
from lessonlib.decoding import measures
from lessonlib.decoding.timing import pass_times
from lessonlib.models import data, gguf_export, load

TARGETS = {"plain vs llama.cpp f16 plain": 0.8, "best speculative vs best llama.cpp row": 1.3,
           "best speculative vs own plain": 1.8}  # the engines' targets, as ratios of tokens/s


def weight_bytes(dtype: str) -> int:
    """Bytes of target weights one step reads when stored as ``dtype`` (f32 or f16): every
    matrix and vector, the LM head, one row of each embedding."""
    arrays = gguf_export.tensors(load("target", "cpu"), dtype)
    rows = {"token_embd.weight", "position_embd.weight"}
    return sum(a.nbytes for n, a in arrays.items() if n not in rows) + sum(arrays[n][0].nbytes for n in rows)


def step_table(m: dict, sizes: tuple[int, ...], n_threads: int, context: int = 128, rounds: int = 3) -> dict:
    """{engine: {"step": s, "verify n": s, ..., "draft step": s}}, the fastest of ``rounds``
    turns, the engines taking turns."""
    ctx = data.heldout_prompts("code", 1, context)[0]
    engines = {"lessonlib": (lambda: pass_times(m["target"], sizes, context, repeats=10),
                             lambda: pass_times(m["draft"], (1,), context, repeats=10)[1])}
    for dtype in peer_llama_dtypes(m):
        target = peer_llama.engine(m["gguf"]["target", dtype], n_threads, m["target"].config.block_size,
                                   logits_all=True)  # a verify needs every position's logits
        draft = peer_llama.engine(m["gguf"]["draft-kl", dtype], n_threads, m["target"].config.block_size)
        engines[f"llama.cpp {dtype}"] = (lambda t=target: peer_llama.step_times(t, sizes, ctx, repeats=10),
                                         lambda d=draft: peer_llama.step_times(d, (1,), ctx, repeats=10)[1])
    best: dict = {}
    with threads.using(n_threads):
        for _ in range(rounds):
            for name, (steps, draft_step) in engines.items():
                got = {("step" if n == 1 else f"verify {n}"): s for n, s in steps().items()}
                got["draft step"] = draft_step()
                best[name] = {k: min(v, best.get(name, {}).get(k, v)) for k, v in got.items()}
    return best


def peer_llama_dtypes(m: dict) -> list[str]:
    return sorted({dtype for _, dtype in m["gguf"]})


def _row(rows, method_start, n_threads):
    return next((r for r in rows if r["method"].startswith(method_start) and r["threads"] == n_threads), None)


def targets(rows: list[dict]) -> list[dict]:
    """Issue 27's targets at each thread count: the measured ratio of median tokens/s and whether it holds."""
    out = []
    for n in sorted({r["threads"] for r in rows}):
        ours = [r for r in rows if r["threads"] == n and r["engine"] == "lessonlib"]
        theirs = [r for r in rows if r["threads"] == n and r["engine"].startswith("llama.cpp")]
        if not theirs:
            continue
        tps = {r["method"]: r["tokens_per_second"]["median"] for r in ours + theirs}
        best = max((r for r in ours if not r["plain"]), key=lambda r: r["tokens_per_second"]["median"])
        f16 = _row(rows, "llama.cpp f16 plain", n)
        ratios = {"plain vs llama.cpp f16 plain": tps["lessonlib plain"] / f16["tokens_per_second"]["median"],
                  "best speculative vs best llama.cpp row": tps[best["method"]] / max(
                      r["tokens_per_second"]["median"] for r in theirs),
                  "best speculative vs own plain": best["speedup"]["median"]}
        out += [{"threads": n, "target": k, "goal": TARGETS[k], "measured": v, "holds": v >= TARGETS[k],
                 "best_speculative": best["method"]} for k, v in ratios.items()]
    return out


def measure(m: dict, rows: list[dict], k: int, lookup_tokens: int, n_threads: int = 1) -> dict:
    """The limits report (module docstring) at ``n_threads``."""
    sizes = (1, k + 1, lookup_tokens + 1)
    steps = step_table(m, sizes, n_threads)
    with threads.using(n_threads):
        profile = bandwidth.operator_profile(m["target"])
    bw = bandwidth.read_bandwidth(256 << 20)
    bound = {dtype: weight_bytes(dtype) / bw for dtype in ("f32", "f16")}
    engines = {}
    for name, s in steps.items():
        chain = _row(rows, f"{name} chain" if name == "lessonlib" else f"{name} draft-kl", n_threads)
        plain = _row(rows, f"{name} plain", n_threads)
        c, r = measures.cost_ratio(s["draft step"], s["step"]), measures.verify_ratio(s[f"verify {k + 1}"], s["step"])
        half = name.endswith("f16") or name == "lessonlib" and getattr(m["target"].native, "f16", False)
        e = {"step_ms": 1e3 * s["step"], "c": c, f"r({k + 1})": r,
             f"r({lookup_tokens + 1})": measures.verify_ratio(s[f"verify {lookup_tokens + 1}"], s["step"]),
             "bound_ms": 1e3 * bound["f16" if half else "f32"]}
        if plain:
            e["plain_ms_per_token"] = 1e3 / plain["tokens_per_second"]["median"]
            e["outside_forward_ms_per_token"] = e["plain_ms_per_token"] - e["step_ms"]
        if chain and "tau" in chain:
            e |= {"tau": chain["tau"]["median"], "predicted_chain_speedup": measures.forward_bound(
                chain["tau"]["median"], k, c, r), "measured_chain_speedup": chain["speedup"]["median"]}
        engines[name] = e
    return {"threads": n_threads, "k": k, "read_bandwidth_gb_s": bw / 1e9, "engines": engines,
            "profile": profile, "targets": targets(rows), "native": m["target"].native is not None}


def markdown(limits: dict) -> str:
    k = limits["k"]
    cols = ["step_ms", "bound_ms", "plain_ms_per_token", "outside_forward_ms_per_token", "c", f"r({k + 1})",
            next(c for c in next(iter(limits["engines"].values())) if c.startswith("r(") and c != f"r({k + 1})"),
            "tau", "predicted_chain_speedup", "measured_chain_speedup"]
    body = [[name] + [f"{e[c]:.3g}" if c in e else "–" for c in cols] for name, e in limits["engines"].items()]
    p = limits["profile"]
    matmul = sum(o["us_per_step"] for o in p["ops"] if o["op"] == "aten::addmm")
    where = (f"{matmul / max(p['us_per_step'], 1e-9):.0%} in the 96 matrix products, the rest in the operators "
             "around them, each a fixed cost of dispatch; the profiler adds to every call")
    if limits.get("native"):
        where = ("the 24 blocks run in one call to native.c, which the profiler does not see: these are the "
                 "operators around it (embedding, mask, cache bookkeeping)")
    ops = markdown_table(["operator", "calls / step", "self µs / step"],
                         [[o["op"], f"{o['calls_per_step']:.0f}", f"{o['us_per_step']:.0f}"] for o in p["ops"]])
    goals = markdown_table(["threads", "target", "goal", "measured", "holds"],
                           [[t["threads"], t["target"], f"≥ {t['goal']}×", f"{t['measured']:.2f}×",
                             "yes" if t["holds"] else "**no**"] for t in limits["targets"]])
    return "\n".join([
        f"## What limits each engine ({limits['threads']} thread)", "",
        "After 128 cached tokens, fastest of 3 rounds taking turns; ms per step; bound = weight bytes a step "
        f"reads / {limits['read_bandwidth_gb_s']:.1f} GB/s (this machine's read bandwidth, one thread, 256 MB "
        "buffer); outside forward = plain ms/token - step (sampling, the loop, the prefill's share); "
        f"predicted chain speedup = tau / (K c + r(K+1)), K = {k} (measures.forward_bound).", "",
        markdown_table(["engine"] + cols, body), "",
        f"lessonlib's one-token step under torch.profiler: {p['calls_per_step']:.0f} operator calls, "
        f"{p['us_per_step'] / 1e3:.2f} ms of self time ({where}):", "", ops, "",
        "### Issue 27's targets (ratios of median tokens/s)", "", goals if limits["targets"] else "(llama.cpp not "
        "installed: no target measured)", ""])
