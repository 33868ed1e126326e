"""The peers, side by side: ``python -m lessonlib.bench peers`` writes outputs/benchmarks/peers.{json,md}.

    python -m lessonlib.bench peers [--prompts 5] [--new-tokens 128] [--repeats 3] [--threads 1 2]

The shipped GPT is GPT-2's architecture, so the same weights run in two other engines:
Hugging Face transformers' ``GPT2LMHeadModel`` (``peer_hf.to_hf``, logits within about 1e-5)
and llama.cpp on a GGUF file written by the course's own exporter (``models.gguf_export``,
float32 and float16; ``peer_llama``). One run on one machine measures, on the same held-out code
prompts, greedy, batch 1, at each thread count:

* lessonlib (its decode path: ``engines.native`` where it builds, else ``engines.fast``): plain
  decoding, chain speculative decoding with draft-kl K = 3, the EAGLE-3 head's chain (K = 3),
  and n-gram prompt lookup (``decoding.prompt_lookup``, through the tree loop) with k = 10 and 4;
* Hugging Face: plain ``generate``, assisted generation with the same draft (K = 3, constant
  schedule, no confidence cut-off) and prompt lookup (``prompt_lookup_num_tokens``);
* llama.cpp (llama-cpp-python): plain decoding of the f32 and f16 GGUF, its own prompt lookup
  (``LlamaPromptLookupDecoding``, 10 and 4 tokens) on f16, and the same draft-kl as a draft model
  (K = 3) on both.

For every prompt the methods take turns, ``--repeats`` rounds of all of them, each kept at its
fastest round, so a load spike hits them alike. Every time is the whole call (prefill included)
over the new tokens; each speedup is over the same engine's plain decoding of the same prompt.
Every output must equal its engine's plain greedy output (else exit 1); whether it equals
lessonlib's plain greedy output is recorded per prompt (float16 weights and other kernels round
differently). Then ``peer_limits`` measures what limits each engine (one-token step and verify
passes, c and r, the memory-traffic bound, the per-operator profile of lessonlib's step) and
checks the engines' targets. Engines that are not installed are left out and named
(``pip install -r requirements-peers.txt``; neither is in the default install).
"""
from __future__ import annotations

import functools
import importlib.util
import pathlib
import tempfile
import time

from lessonlib import cli, engines, threads
from lessonlib.bench import common, peer_hf, peer_limits, peer_llama
from lessonlib.bench.peer_hf import hf_run, to_hf  # noqa: F401 (the peer test's names)
from lessonlib.core import tree
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.drafters import EagleDrafter
from lessonlib.decoding.prompt_lookup import lookup_generate
from lessonlib.decoding.timing import interleaved
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import gguf_export, load

INSTALL = "pip install -r requirements-peers.txt"
LOOKUP_TOKENS = 10  # Hugging Face's prompt_lookup_num_tokens, llama.cpp's num_pred_tokens, lessonlib's k
SHORT_LOOKUP = 4  # a second lookup length for lessonlib and llama.cpp f16: on a CPU a verify over k + 1 grows with k
K = 3  # draft length of every engine's draft-model row
DTYPES = ("f32", "f16")


def installed() -> dict[str, bool]:
    """Which optional engines this environment has."""
    return {"HF": importlib.util.find_spec("transformers") is not None,
            "llama.cpp": all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "gguf"))}


def _timed(fn, new_tokens):
    """A lessonlib loop timed end to end (prefill included), like ``hf_run``."""
    start = time.perf_counter()
    out, stats = fn()
    seconds = time.perf_counter() - start
    return out, stats.as_dict() | {"loop_seconds": stats.seconds, "seconds": seconds,
                                   "seconds_per_token": seconds / new_tokens}


def prepare(folder: pathlib.Path) -> dict:
    """The models every engine runs: lessonlib's target and draft on its decode path, their Hugging Face copies
    (when installed) and their GGUF files in ``folder`` (when llama.cpp is installed)."""
    have = installed()
    m: dict = {"target": engines.load("target", "cpu"), "draft": engines.load("draft-kl", "cpu"),
               "installed": have, "gguf": {}}
    m["eagle3"] = engines.load_head("eagle3", m["target"])
    if have["HF"]:
        m["target_hf"], m["draft_hf"] = to_hf(load("target", "cpu")), to_hf(load("draft-kl", "cpu"))
    if have["llama.cpp"]:
        for name in ("target", "draft-kl"):
            model = load(name, "cpu")
            for dtype in DTYPES:
                m["gguf"][name, dtype] = gguf_export.export(model, folder / f"{name}-{dtype}.gguf", dtype, name)
    return m


def methods(m: dict, n_threads: int, new_tokens: int) -> dict:
    """name -> (engine, run(prompt) -> (tokens, stats)); each engine's plain comes first."""
    target, draft = m["target"], m["draft"]
    chain_rule = functools.partial(tree.draft_topk, branching=(1,) * K)
    table = {
        "lessonlib plain": ("lessonlib", lambda p: _timed(lambda: generate(target, p, new_tokens), new_tokens)),
        f"lessonlib chain, draft-kl K = {K}": ("lessonlib", lambda p: _timed(
            lambda: speculative_generate(target, draft, p, K, new_tokens), new_tokens)),
        f"lessonlib prompt lookup (k = {LOOKUP_TOKENS})": ("lessonlib", lambda p: _timed(
            lambda: lookup_generate(target, p, new_tokens, k=LOOKUP_TOKENS), new_tokens)),
        f"lessonlib prompt lookup (k = {SHORT_LOOKUP})": ("lessonlib", lambda p: _timed(
            lambda: lookup_generate(target, p, new_tokens, k=SHORT_LOOKUP), new_tokens)),
        f"lessonlib EAGLE-3 chain K = {K}": ("lessonlib", lambda p: _timed(lambda: tree_generate(
            target, EagleDrafter(m["eagle3"], target), p, new_tokens, rule=chain_rule), new_tokens)),
    }
    if "target_hf" in m:
        assistant = peer_hf.hf_assistant(m["draft_hf"], K)
        table |= {
            "HF plain generate": ("HF", lambda p: hf_run(m["target_hf"], p, new_tokens)),
            f"HF assisted, draft-kl K = {K} constant": (
                "HF", lambda p: hf_run(m["target_hf"], p, new_tokens, assistant_model=assistant)),
            f"HF prompt lookup (prompt_lookup_num_tokens = {LOOKUP_TOKENS})": (
                "HF", lambda p: hf_run(m["target_hf"], p, new_tokens, prompt_lookup_num_tokens=LOOKUP_TOKENS))}
    n_ctx = target.config.block_size
    for dtype in DTYPES if m["gguf"] else ():
        engine = f"llama.cpp {dtype}"
        path = m["gguf"]["target", dtype]
        engines = {f"{engine} plain": peer_llama.engine(path, n_threads, n_ctx),
                   f"{engine} draft-kl K = {K}": peer_llama.engine(path, n_threads, n_ctx, draft=peer_llama.draft_model(
                       m["gguf"]["draft-kl", dtype], n_threads, n_ctx, K))}
        if dtype == "f16":
            for k in (LOOKUP_TOKENS, SHORT_LOOKUP):
                engines[f"{engine} prompt lookup (num_pred_tokens = {k})"] = peer_llama.engine(
                    path, n_threads, n_ctx, draft=peer_llama.lookup(k))
        table |= {name: (engine, lambda p, llm=llm: peer_llama.run(llm, p, new_tokens))
                  for name, llm in engines.items()}
    return table


def run(m: dict, n_threads: int, prompt_list, new_tokens: int, repeats: int) -> tuple[dict, dict]:
    """(table, results) at ``n_threads`` (torch's and llama.cpp's): per method, per prompt, the
    fastest of ``repeats`` interleaved turns (``timing.interleaved``), its speedup over its
    engine's plain, and whether its output equals that plain output and lessonlib's."""
    with threads.using(n_threads):
        table = methods(m, n_threads, new_tokens)
        for _, fn in table.values():  # warm-up: first calls allocate and pick kernels
            fn(prompt_list[0][:16])
        best = interleaved({name: (lambda i, fn=fn: fn(prompt_list[i])) for name, (_, fn) in table.items()},
                           len(prompt_list), repeats, seconds=lambda stats: stats["seconds"])
    plain = {}
    for name, (engine, _) in table.items():
        plain.setdefault(engine, best[name])  # each engine's first row is its plain decoding
    results = {name: [dict(stats, speedup=measures.speedup(plain[engine][i][1]["seconds_per_token"],
                                                           stats["seconds_per_token"]),
                           identical_to_plain=out == plain[engine][i][0],
                           identical_to_lessonlib_plain=out == plain["lessonlib"][i][0])
                      for i, (out, stats) in enumerate(best[name])]
               for name, (engine, _) in table.items()}
    return table, results


def summarise(table: dict, results: dict, n_threads: int) -> list[dict]:
    rows = []
    for name, runs in results.items():
        row = {"method": name, "engine": table[name][0], "threads": n_threads, "plain": name.endswith(
                   ("plain", "plain generate")),
               "tokens_per_second": measures.summary([1 / r["seconds_per_token"] for r in runs]),
               "speedup": measures.summary([r["speedup"] for r in runs]),
               "identical": all(r["identical_to_plain"] for r in runs),
               "identical_to_lessonlib": sum(r["identical_to_lessonlib_plain"] for r in runs)}
        if "tau" in runs[0]:
            row["tau"] = measures.summary([r["tau"] for r in runs])
        rows.append(row)
    return rows


def markdown(rows: list[dict], setup: dict, limits: dict) -> str:
    body = [[r["method"], r["threads"], measures.fmt_spread(r["tokens_per_second"], 0, count=False),
             "—" if r["plain"] else measures.fmt_spread(r["speedup"], 2, "×", count=False),
             measures.fmt_spread(r["tau"], 2, count=False) if "tau" in r else "",
             "yes" if r["identical"] else "**no**", f"{r['identical_to_lessonlib']}/{setup['prompts']}"]
            for r in rows]
    versions = ", ".join(f"{k} {v}" for k, v in setup["versions"].items())
    missing = [k for k, v in setup["installed"].items() if not v]
    return "\n".join([
        "# Peers: lessonlib, Hugging Face and llama.cpp on the same weights", "",
        f"{setup['prompts']} held-out code prompts x {setup['new_tokens']} new tokens, greedy, batch 1; {versions}; "
        "median [IQR] over prompts, each the fastest of its interleaved repeats; time = the whole call, prefill "
        "included; speedup over the same engine's plain decoding of the same prompt."
        + (f" Not installed, so not measured: {', '.join(missing)} ({INSTALL})." if missing else ""), "",
        common.markdown_table(["method", "threads", "tokens/s", "speedup over its own plain", "tau",
                               "output = its plain greedy", "= lessonlib plain"], body), "",
        peer_limits.markdown(limits), ""])


def _versions() -> dict:
    import torch

    out = {"torch": torch.__version__}
    for module, name in (("transformers", "transformers"), ("llama_cpp", "llama-cpp-python"), ("gguf", "gguf")):
        try:
            out[name] = importlib.import_module(module).__version__
        except (ImportError, AttributeError):
            pass
    return out


def main(argv=None):
    parser = common.parser(__doc__, "interleaved turns of all methods per prompt; each keeps its fastest")
    parser.add_argument("--threads", type=cli.positive_int, nargs="+", default=[1, 2],
                        help="thread counts to measure at, each a separate interleaved run")
    args = common.parse(parser, argv)
    if not any(installed().values()):
        parser.exit(2, f"{parser.prog}: error: no peer engine is installed: {INSTALL}\n")
    if installed()["HF"]:
        importlib.import_module("transformers").logging.set_verbosity_error()  # its notes would bury the table
    started = time.time()
    prompt_list = common.prompts("code", args.prompts, args.prompt_len)
    rows, per_prompt = [], {}
    with tempfile.TemporaryDirectory() as folder:
        m = prepare(pathlib.Path(folder))
        for n in args.threads:
            table, results = run(m, n, prompt_list, args.new_tokens, args.repeats)
            rows += summarise(table, results, n)
            per_prompt[n] = results
        limits = peer_limits.measure(m, rows, K, LOOKUP_TOKENS)
    setup = {"prompts": args.prompts, "prompt_tokens": args.prompt_len, "new_tokens": args.new_tokens,
             "repeats": args.repeats, "temperature": 0.0, "corpus": "code (held-out)", "threads": args.threads,
             "installed": m["installed"], "versions": _versions(), "machine": common.machine(),
             "seconds": round(time.time() - started, 1),
             "statistic": "median [IQR] over prompts of the fastest of `repeats` interleaved runs; "
                          "speedup = own plain s/token / method s/token on the same prompt; time includes prefill"}
    md = markdown(rows, setup, limits)
    common.write_report("peers", {"setup": setup, "rows": rows, "limits": limits, "per_prompt": per_prompt}, md)
    print(md)
    bad = [f"{r['method']} ({r['threads']} threads)" for r in rows if not r["identical"]]
    if bad:
        print(f"outputs differ from their engine's plain greedy output: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
