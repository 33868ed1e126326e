"""Benchmark tree drafting against chain drafting on the shipped models.

    python -m lessonlib.bench tree [--prompts 5] [--new-tokens 128] [--quick]

One run, one machine, batch 1, T = 0, held-out ``code`` prompts (``data.heldout_prompts``,
the same prompts and lengths as the decode benchmark: ``bench.common.DEFAULTS``). For every
prompt plain decoding and all methods take turns (``timing.interleaved``, so a load spike
hits them alike), each kept as the fastest of ``--repeats`` runs; every speedup, c, r and
draft cost is against plain decoding of the same prompt (``measures.compare``). The table
reports medians over prompts with their inter-quartile range: tau (tokens per target
forward), wall-clock speedup, the draft cost per round in one-token target steps, and
acceptance by depth. A second table times one target forward over n new tokens after a
cached prefix (warm, ``timing.warm_seconds``): a tree of N nodes costs one pass over N + 1
positions, like a chain of K = N drafts -- extra positions, not extra passes. Writes
``outputs/benchmarks/tree.json`` and ``tree.md`` and refreshes the table of record.

To add a method, add a row to ``methods()``: ``name -> (family, run)`` with
``run(models, prompt) -> (tokens, stats)``; ``chain(k)`` and ``tree_of(kind, rule)`` build
the usual ones, and ``Models.drafters`` maps a drafter kind to a factory (one fresh drafter
per run). Every row lands in tree.json and the record.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from lessonlib import cli, threads
from lessonlib.bench import common, record
from lessonlib.core import kinds as core_kinds
from lessonlib.core import tree
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter, ModelDrafter
from lessonlib.decoding.lookahead import lookahead_generate
from lessonlib.decoding.mtp_draft import MTPDrafter
from lessonlib.decoding.prompt_lookup import lookup_generate
from lessonlib.decoding.timing import warm_seconds
from lessonlib.decoding.tree_decode import acceptance_by_depth, tree_generate
from lessonlib.engines import load, load_head, load_mtp
from lessonlib.models import CHECKPOINTS

# core.kinds names each kind's drafter; these are the classes (a kind's drafter takes (module, target))
DRAFTERS = {cls.__name__: cls for cls in (ModelDrafter, EagleDrafter, MedusaDrafter, MTPDrafter)}


def static(branching):
    return functools.partial(tree.draft_topk, branching=tuple(branching))


def dynamic(depth, top_k, total):
    return functools.partial(tree.draft_dynamic, depth=depth, top_k=top_k, total=total)


@dataclass
class Models:
    """What a method's ``run`` gets: the packed target, the separate draft, the run length,
    and ``drafters``: kind -> factory of a fresh ``Drafter``."""

    target: object
    draft: object
    new_tokens: int
    drafters: dict = field(default_factory=dict)


def chain(k):
    """Chain speculative decoding with the separate draft (draft-kl), k drafts per round."""
    return lambda m, prompt, temperature=0.0, rng=None: speculative_generate(m.target, m.draft, prompt, k, m.new_tokens,
                                                                             temperature, rng)


def tree_of(kind, rule):
    """Tree decoding with a fresh ``m.drafters[kind]()`` and the drafting rule ``rule``."""
    return lambda m, prompt, temperature=0.0, rng=None: tree_generate(m.target, m.drafters[kind](), prompt,
                                                                      m.new_tokens, rule=rule,
                                                                      temperature=temperature, rng=rng)


def methods(quick=False, kinds=None):
    """name -> (family, run) for the drafter ``kinds`` present (``core.kinds``: each kind's
    ``sweep``). Families are compared at their best setting. On a CPU a verify pass grows with
    the number of positions, so small trees are in the sweep too. ``kinds``: None for every kind."""
    kinds = core_kinds.names() if kinds is None else kinds
    rows: dict = {}
    for name in core_kinds.REPORT_ORDER:
        k = core_kinds.kind(name)
        if name not in kinds:
            continue
        chains = k.sweep.quick_chains if quick and k.sweep.quick_chains is not None else k.sweep.chains
        for n in chains:  # a separate draft model runs its own chain loop (decoding.decode)
            rows[f"{k.chain} K={n}"] = (k.chain, chain(n) if k.loader == "model" else tree_of(name, static((1,) * n)))
        for b in k.sweep.trees:
            rows[f"{k.tree} {'-'.join(map(str, b))}"] = (k.tree_family, tree_of(name, static(b)))
        for d, top, n in k.sweep.dynamic[: 2 if quick else None]:
            rows[f"{k.dynamic} d{d} k{top} N{n}"] = (k.dynamic_family, tree_of(name, dynamic(d, top, n)))
    # draft-free: n-gram prompt lookup; the draft only where it finds nothing; lookahead
    for k in (4, 8, 12):
        rows[f"prompt lookup k={k}"] = ("prompt lookup",
                                        lambda m, p, k=k: lookup_generate(m.target, p, m.new_tokens, k=k))
    rows["prompt lookup k=8, else draft-kl K=3"] = (
        "lookup + draft", lambda m, p: lookup_generate(m.target, p, m.new_tokens, k=8, draft=m.draft))
    for w, n, g in ((4, 3, 4), (2, 4, 4)):  # window, n-gram size, guesses: small, as the CPU's verify cost wants
        rows[f"lookahead W{w} N{n} G{g}"] = (
            "lookahead", lambda m, p, a=(w, n, g): lookahead_generate(m.target, p, m.new_tokens, *a))
    return rows


def load_models(new_tokens, device="cpu", directory=CHECKPOINTS) -> Models:
    """The target and draft-kl on the fast decode path (``engines.fast``), and a drafter factory
    per draft kind shipped in ``directory`` (the EAGLE-3 head and MTP modules when present)."""
    target, draft = load("target", device, directory), load("draft-kl", device, directory)
    m = Models(target, draft, new_tokens, {"draft": lambda: ModelDrafter(draft)})
    for k in core_kinds.KINDS:
        if k.loader == "model" or not (pathlib.Path(directory) / f"{k.checkpoint}.safetensors").exists():
            continue
        module = (load_head if k.loader == "head" else load_mtp)(k.checkpoint, target, directory)
        m.drafters[k.name] = functools.partial(DRAFTERS[k.drafter], module, target)
    return m


@torch.inference_mode()
def measure_forward_costs(target, prefix_len=128, sizes=(1, 2, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64), reps=15):
    """Warm r(n): median seconds of one target forward over n new tokens after ``prefix_len``
    cached ones, chain-shaped and with a random tree mask and depth positions (same n).
    The measurement, stored as tree.json's ``verify_cost``; the model of r(n) the skill file
    prices with is ``lessonlib.course.skill.recommend.verify_cost``."""
    rng = np.random.default_rng(0)
    cache = target.new_cache()
    target(torch.randint(0, target.config.vocab_size, (1, prefix_len), device=target.device), cache=cache)
    out = []
    for n in sizes:
        idx = torch.randint(0, target.config.vocab_size, (1, n), device=target.device)
        parents = tree.with_root(np.array([rng.integers(-1, i) for i in range(n - 1)], dtype=np.int64))
        mask = torch.from_numpy(tree.tree_attention_mask(parents))
        positions = torch.as_tensor(tree.tree_position_ids(parents, prefix_len), device=target.device)

        def forward(**extra):
            target(idx, cache=cache, **extra)
            cache.truncate(prefix_len)

        out.append({"new_tokens": n, "chain_seconds": warm_seconds(forward, reps),
                    "tree_seconds": warm_seconds(lambda: forward(positions=positions, mask=mask), reps)})
    one = out[0]["chain_seconds"]
    for row in out:
        row["chain_vs_one_token"] = round(row["chain_seconds"] / one, 3)
        row["tree_vs_one_token"] = round(row["tree_seconds"] / one, 3)
    return out


def run(n_prompts=common.DEFAULTS["prompts"], prompt_len=common.DEFAULTS["prompt_len"],
        new_tokens=common.DEFAULTS["new_tokens"], quick=False, device="cpu", directory=CHECKPOINTS,
        repeats=common.DEFAULTS["repeats"], table=None):
    """Time every method of ``table`` (default ``methods(quick, ttt)``) against plain decoding,
    interleaved per prompt; greedy outputs must equal plain greedy decoding. Returns
    (models, table, {name: [per-prompt stats with measures.compare]})."""
    m = load_models(new_tokens, device, directory)
    table = table if table is not None else methods(quick, tuple(m.drafters))
    prompts = common.prompts("code", n_prompts, prompt_len)
    generate(m.target, prompts[0], 8)  # warm-up: first calls allocate
    bar = tqdm(total=n_prompts * repeats, desc="bench tree (plain runs)")

    def plain(prompt, i):
        bar.update()
        return generate(m.target, prompt, new_tokens)

    runs = {name: (lambda prompt, i, fn=fn: fn(m, prompt)) for name, (_, fn) in table.items()}
    results = common.against_plain(plain, runs, prompts, repeats, same_tokens=True)
    bar.close()
    return m, table, results


def summarise(table, results, n_threads=None):
    """One row per method: medians and their spread (``spread``), tree shape and acceptance by depth."""
    rows = []
    for name, runs in results.items():
        family = "plain" if name == "plain" else table[name][0]
        spread = measures.summarise(runs)
        row = {"method": name, "family": family, **common.medians(spread), "spread": spread, "prompts": len(runs),
               "threads": n_threads, "k": runs[0].get("k")}
        row.setdefault("speedup", 1.0)
        if family == "plain":  # one token per target forward, by definition
            row.setdefault("tau", 1.0)
        if "accepted_lengths" in runs[0]:  # tree loops: acceptance by depth over all rounds of all prompts
            depth_max = max(len(r["accepted_lengths"]) for r in runs)
            hist = np.sum([np.pad(r["accepted_lengths"], (0, depth_max - len(r["accepted_lengths"]))) for r in runs], 0)
            depth = max(len(r["acceptance_by_depth"]) for r in runs)
            row["acceptance_by_depth"] = [None if a is None else round(a, 3)
                                          for a in acceptance_by_depth(np.repeat(np.arange(depth_max), hist), depth)]
            row["mean_nodes"] = float(np.median([r["mean_nodes"] for r in runs]))
        rows.append(row)
    best = {}
    for row in rows:
        if row["family"] not in best or row["speedup"] > best[row["family"]]["speedup"]:
            best[row["family"]] = row
    return rows, best


def draft_cost_per_round(row: dict) -> float:
    """One round's drafting in one-token target steps: K·c for a chain (its c is per step), the
    measured whole-round cost for a tree or a draft-free method; 0 for plain decoding."""
    if row.get("draft_cost_per_round") is not None:
        return row["draft_cost_per_round"]
    if row.get("c") is not None and row.get("k"):
        return row["k"] * row["c"]
    if row.get("family", "plain") == "plain":
        return 0.0
    raise ValueError(f"row {row.get('method')!r} has neither draft_cost_per_round nor c and k")


def _cost_cell(r):
    if "c" in r["spread"] and r.get("k"):
        return f"K·c = {draft_cost_per_round(r):.2f} (c {common.cell(r['spread'], 'c', 3)})"
    return common.cell(r["spread"], "draft_cost_per_round")


def markdown(rows, best, cost, targets):
    header = ["method", "τ", "speedup", "draft cost / round (target steps)", "r", "measured / forward bound", "nodes",
              "acceptance by depth", "prompts"]
    table = []
    for r in rows:
        mark = " **(best of family)**" if best.get(r["family"]) is r and r["family"] != "plain" else ""
        acc = ", ".join("-" if a is None else f"{a:.2f}" for a in r.get("acceptance_by_depth", [])) \
            or (f"α = {common.cell(r['spread'], 'alpha')}" if "alpha" in r["spread"] else "")
        table.append([r["method"] + mark, common.cell(r["spread"], "tau"),
                      common.cell(r["spread"], "speedup", unit="×"),
                      _cost_cell(r) if r["family"] != "plain" else "", common.cell(r["spread"], "r"),
                      "" if bound_share(r) is None else f"{bound_share(r):.2f}",
                      f"{r['mean_nodes']:.1f}" if "mean_nodes" in r else "", acc, r["prompts"]])
    lines = [common.markdown_table(header, table), "",
             "Medians over prompts [inter-quartile range]; each method interleaved with plain decoding of the same "
             "prompt, fastest of the repeats. c = draft step / one-token target step; draft cost / round = a round's "
             "drafting in one-token target steps; r = verify forward / one-token step (all timed in the loops); "
             "measured / forward bound = median speedup / median of τ / (draft cost + r), the share of what the "
             "forwards allow that the loop keeps.", ""]
    lines += [common.markdown_table(["new tokens n", "chain forward / 1-token forward (warm)",
                                     "tree forward / 1-token forward (warm)"],
                                    [[c["new_tokens"], f"{c['chain_vs_one_token']:.2f}",
                                      f"{c['tree_vs_one_token']:.2f}"] for c in cost])]
    lines += ["", "Benchmark targets (issues 6 and 17): " + "; ".join(
        f"{k}: {'reached' if v['met'] else 'not reached'} ({v['detail']})" for k, v in targets.items())]
    return "\n".join(lines) + "\n"


EAGLE_FAMILIES = ("EAGLE chain", "EAGLE tree", "EAGLE-2 dynamic", "EAGLE-3 chain", "EAGLE-3 tree")


def bound_share(row) -> float | None:
    """Measured speedup / forward bound (``measures.forward_bound``): the share of the speedup
    its forwards allow that the loop keeps (None where no bound was measured)."""
    bound = row["spread"].get("forward_bound")
    return row["speedup"] / bound["median"] if bound else None


def check_targets(rows, best):
    """The tree benchmark's targets (issues 6 and 17, T = 0). tau: the highest-tau tree with
    draft-kl against the chain with draft-kl at its best speedup. Speedups: the chain with
    draft-kl, the best row of the EAGLE family (EAGLE, EAGLE-2 dynamic, EAGLE-3) alone and
    against the best chain, the target's own MTP modules; measured / forward bound on every row."""
    chain_best = best["chain draft-kl"]
    tree_max_tau = max((r for r in rows if r["family"] == "tree draft-kl"), key=lambda r: r["tau"])
    eagle = max((r for r in rows if r["family"] in EAGLE_FAMILIES), key=lambda r: r["speedup"])
    out = {
        "best tree tau >= chain tau + 0.5 (same draft)": {
            "met": tree_max_tau["tau"] >= chain_best["tau"] + 0.5,
            "detail": f"{tree_max_tau['method']} tau {tree_max_tau['tau']:.2f} "
                      f"vs {chain_best['method']} {chain_best['tau']:.2f}"},
        "chain draft-kl >= 2.0x": {"met": chain_best["speedup"] >= 2.0,
                                   "detail": f"{chain_best['method']} {chain_best['speedup']:.2f}×"},
        "best EAGLE family >= 2.5x and >= 1.15 x best chain": {
            "met": eagle["speedup"] >= 2.5 and eagle["speedup"] >= 1.15 * chain_best["speedup"],
            "detail": f"{eagle['method']} {eagle['speedup']:.2f}× "
                      f"vs {chain_best['method']} {chain_best['speedup']:.2f}× "
                      f"(ratio {eagle['speedup'] / chain_best['speedup']:.2f})"},
    }
    mtp = [r for r in rows if r["family"] in ("MTP chain", "MTP tree")]
    if mtp:
        top = max(mtp, key=lambda r: r["speedup"])
        out["MTP self-speculation >= 1.6x"] = {"met": top["speedup"] >= 1.6,
                                               "detail": f"{top['method']} {top['speedup']:.2f}×"}
    shares = [(bound_share(r), r["method"]) for r in rows if bound_share(r) is not None]
    low = min(shares)
    out["measured / forward bound >= 0.9 on every row"] = {
        "met": low[0] >= 0.9,
        "detail": f"lowest {low[0]:.2f} ({low[1]}); {sum(v < 0.9 for v, _ in shares)} of {len(shares)} rows below 0.9"}
    return out


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=common.PROMPTS, default=common.DEFAULTS["prompts"])
    parser.add_argument("--prompt-len", type=cli.positive_int, default=common.DEFAULTS["prompt_len"])
    parser.add_argument("--new-tokens", type=cli.positive_int, default=common.DEFAULTS["new_tokens"])
    parser.add_argument("--quick", action="store_true", help="fewer settings per family")
    parser.add_argument("--device", type=cli.device, default="cpu")
    parser.add_argument("--repeats", type=cli.positive_int, default=common.DEFAULTS["repeats"],
                        help="time every run this many times, keep the fastest")
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = common.parse(parser, argv)
    started = time.time()
    n_threads = threads.apply()
    m, table, results = run(args.prompts, args.prompt_len, args.new_tokens, args.quick, args.device,
                            repeats=args.repeats)
    rows, best = summarise(table, results, n_threads)
    cost = measure_forward_costs(m.target)
    targets = check_targets(rows, best)
    report = {
        "setup": {"temperature": 0.0, "corpus": "code (held-out)", "corpus_name": "code", "prompts": args.prompts,
                  "prompt_tokens": args.prompt_len, "new_tokens": args.new_tokens, "repeats": args.repeats,
                  "device": args.device, "threads": n_threads,
                  "statistic": "median over prompts [inter-quartile range] of the fastest of `repeats` runs, plain and "
                               "methods interleaved per prompt; speedup = plain s/token / method s/token on the "
                               "same prompt",
                  "seconds": round(time.time() - started, 1)},
        "machine": common.machine(),
        "rows": rows,
        "best_of_family": {k: v["method"] for k, v in best.items()},
        "verify_cost": cost,
        "targets": targets,
        "per_prompt": results,
    }
    md = markdown(rows, best, cost, targets)
    record.write_with("tree", report, md, args.out)  # the report, its Markdown and the record at once
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench tree"))
