"""Sampled drafts against deterministic candidates, for every draft kind.

    python -m lessonlib.bench sampled [--prompts 5] [--new-tokens 128] [--repeats 1]

Each draft kind (``core.kinds``: each kind's ``sampled`` sweep) runs a short and a long chain and
one tree shape with each tree rule of the round: ``deterministic`` (the rule's most likely children,
judged by the sibling rule: q is one-hot), ``with`` (children drawn from q i.i.d., SpecInfer's
recursive rule) and ``without`` (drawn without replacement by Gumbel-top-k, recursive rejection
without replacement); the chain's sampled rule is the chain rule of Leviathan et al. EAGLE and
EAGLE-3 add EAGLE-2's dynamic shape (deterministic, and sampled without replacement). The settings:
T = 0 (the deterministic rule only: a sampled rule with a greedy draft is its deterministic twin),
T = 0.7, T = 1, and T = 1 with top-p 0.95 (``decoding.round.Sampling``: p and q truncated alike).
Every method is interleaved with plain decoding at the same sampling on the same prompts, the rng
seeded ``seed + prompt``; at T = 0 every output must equal plain greedy decoding.

Writes ``outputs/benchmarks/sampled.json`` and ``sampled.md``, and refreshes the table of record.
Vocabulary: ``lessonlib.decoding.measures`` (tau, alpha, c, r, speedup).
"""
from __future__ import annotations

import time

import numpy as np

from lessonlib import cli, threads
from lessonlib.bench import common, record, tree
from lessonlib.core import kinds as core_kinds
from lessonlib.core.tree_sampled import SampledRule
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.round import Sampling

DECODE_LOOP_KS = (2, 3)  # the draft model's own chain loop (decoding.decode)
SETTINGS = {"T = 0": Sampling(0.0), "T = 0.7": Sampling(0.7), "T = 1": Sampling(1.0),
            "T = 1, top-p 0.95": Sampling(1.0, top_p=0.95)}
RULES = ("deterministic", "with", "without")


def _shape_name(b) -> str:
    return "chain K=" + str(len(b)) if set(b) == {1} else "-".join(map(str, b))


def methods(kinds) -> dict:
    """name -> (kind label, shape, rule, run(m, prompt, sampling, rng)) for the kinds present."""
    out = {}
    for k in core_kinds.KINDS:  # each kind's ``sampled`` sweep: a short chain beside the long one, since at
        if k.name not in kinds or k.sampled is None:  # T = 1 a round's cost can outweigh what a longer chain adds
            continue
        kind, label, chains, shape, dyn = k.name, k.label, k.sampled.chains, k.sampled.tree, k.sampled.dynamic
        for b in (*((1,) * k for k in chains), shape):
            for rule in RULES:
                if set(b) == {1} and rule == "without":  # one child per node: the same rule as "with"
                    continue
                r = tree.static(b) if rule == "deterministic" else SampledRule(tuple(b), replacement=rule == "with")
                shown = "sampled" if set(b) == {1} and rule != "deterministic" else rule  # a chain's: the chain rule
                out[f"{label} {_shape_name(b)} · {shown}"] = (label, _shape_name(b), shown, tree.tree_of(kind, r))
        if dyn is not None:
            out[f"{label} dynamic d{dyn[0]} k{dyn[1]} N{dyn[2]} · deterministic"] = (
                label, "dynamic", "deterministic", tree.tree_of(kind, tree.dynamic(*dyn)))
            out[f"{label} dynamic d{dyn[0]} k{dyn[1]} N{dyn[2]} · without"] = (
                label, "dynamic", "without", tree.tree_of(kind, SampledRule(dynamic=dyn, replacement=False)))
    if "draft" in kinds:  # the draft model's own chain loop (decoding.decode), the course's reference chain
        for k in DECODE_LOOP_KS:
            out[f"draft-kl chain K={k} (decode loop)"] = ("draft-kl", f"chain K={k}", "sampled",
                                                         lambda m, p, s, rng, k=k: speculative_generate(
                                                             m.target, m.draft, p, k, m.new_tokens, s, rng))
    return out


def run(n_prompts, prompt_len, new_tokens, repeats, seed=0):
    """{setting: against_plain results} for every method of ``methods`` at every setting."""
    m = tree.load_models(new_tokens)
    table = methods(tuple(m.drafters))
    prompts = common.prompts("code", n_prompts, prompt_len)
    generate(m.target, prompts[0], 8)  # warm-up
    results = {}
    for label, sampling in SETTINGS.items():
        names = [n for n, (_, _, rule, _) in table.items() if not sampling.greedy or rule == "deterministic"]
        runs = {n: (lambda p, i, fn=table[n][3], s=sampling: fn(m, p, s, np.random.default_rng(seed + i)))
                for n in names}
        results[label] = common.against_plain(
            lambda p, i, s=sampling: generate(m.target, p, new_tokens, s, np.random.default_rng(seed + i)),
            runs, prompts, repeats, same_tokens=sampling.greedy)
    paths = {"target": type(m.target).__name__, "draft": type(m.draft).__name__}  # FastGPT or the readable GPT
    return table, results, paths


def rows_of(table, results, n_threads=None) -> list[dict]:
    out = []
    fams = {n: (f"{label} {shape}", None) for n, (label, shape, _, _) in table.items()}
    for setting, res in results.items():
        summary, _ = tree.summarise(fams, res, n_threads)
        sampling = SETTINGS[setting]
        for row in summary:
            extra = ({"kind": "plain", "shape": "", "rule": ""} if row["method"] == "plain" else
                     dict(zip(("kind", "shape", "rule"), table[row["method"]][:3])))
            out.append(row | extra | {"setting": setting, "temperature": sampling.temperature,
                                      "top_p": sampling.top_p})
    return out


def headline(rows) -> dict:
    """The issue's targets, read off the rows: the best EAGLE-family speedup at T = 1 and the
    best draft-model chain there; per head and shape, the sampled rules' best tau / the
    deterministic rule's tau at T = 1."""
    at1 = [r for r in rows if r["setting"] == "T = 1" and r["kind"] != "plain"]
    eagle = [r for r in at1 if r["kind"].startswith("EAGLE")]  # the EAGLE family: EAGLE, EAGLE-3
    chains = [r for r in at1 if r["kind"] == "draft-kl" and r["shape"].startswith("chain")]
    ratio = {}
    for r in at1:
        if r["rule"] == "deterministic":
            best = max((s["tau"] for s in at1 if (s["kind"], s["shape"]) == (r["kind"], r["shape"])
                        and s["rule"] != "deterministic"), default=None)
            if best is not None:
                ratio[f"{r['kind']} {r['shape']}"] = round(best / r["tau"], 3)
    top = max(eagle, key=lambda r: r["speedup"]) if eagle else None
    chain = max(chains, key=lambda r: r["speedup"]) if chains else None
    return {"best_eagle_t1": top and {"method": top["method"], "speedup": top["speedup"]},
            "best_draft_chain_t1": chain and {"method": chain["method"], "speedup": chain["speedup"]},
            "sampled_over_deterministic_tau_t1": ratio}


def markdown(rows, head) -> str:
    header = ["method", "rule", "τ", "α (decoding)", "speedup", "draft cost / round", "nodes", "prompts"]
    lines = ["# Sampled drafts against deterministic candidates", ""]
    for setting in SETTINGS:
        part = [r for r in rows if r["setting"] == setting]
        if not part:
            continue
        lines += [f"## {setting}", "", common.markdown_table(header, [
            [r["method"], r["rule"] or "–", common.cell(r["spread"], "tau"), common.cell(r["spread"], "alpha", 3),
             common.cell(r["spread"], "speedup", unit="×"), common.cell(r["spread"], "draft_cost_per_round"),
             f"{r['mean_nodes']:.1f}" if r.get("mean_nodes") else "–", r["prompts"]] for r in part]), ""]
    best, chain = head["best_eagle_t1"], head["best_draft_chain_t1"]
    lines += ["Held-out code prompts, medians over prompts [inter-quartile range]; every method interleaved with plain "
              "decoding at the same sampling. Rules: deterministic = the most likely children, judged by the sibling "
              "rule (q one-hot); with / without = children drawn from q with / without replacement, judged by "
              "recursive rejection; sampled = a chain drawn from q (the chain rule).", ""]
    if best and chain:
        lines.append(f"At T = 1: best of the EAGLE family {best['method']} {best['speedup']:.2f}×; best draft-model "
                     f"chain {chain['method']} {chain['speedup']:.2f}×. τ of the best sampled rule / τ of the "
                     "deterministic rule, same head and shape: " +
                     ", ".join(f"{k} {v:.2f}" for k, v in head["sampled_over_deterministic_tau_t1"].items()) + ".")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__)
    parser.add_argument("--seed", type=cli.nonnegative_int, default=0)
    parser.add_argument("--out", default=None)
    args = common.parse(parser, argv)
    started = time.time()
    n_threads = threads.apply()
    table, results, model_paths = run(args.prompts, args.prompt_len, args.new_tokens, args.repeats, args.seed)
    rows = rows_of(table, results, n_threads)
    head = headline(rows)
    report = {"setup": {"corpus": "code (held-out)", "corpus_name": "code", "prompts": args.prompts,
                        "prompt_tokens": args.prompt_len, "new_tokens": args.new_tokens, "repeats": args.repeats,
                        "settings": {k: vars(s) for k, s in SETTINGS.items()}, "seed": args.seed,
                        "threads": n_threads, "seconds": round(time.time() - started, 1), "models": model_paths},
              "machine": common.machine(), "rows": rows, "headline": head,
              "per_prompt": {k: r for k, r in results.items()}}
    md = markdown(rows, head)
    record.write_with("sampled", report, md, args.out)  # the report, its Markdown and the record at once
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench sampled"))
