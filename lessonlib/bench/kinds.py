"""Every draft kind on one target: the lesson's cheat-sheet table, measured.

    python -m lessonlib.bench kinds [--prompts 5] [--new-tokens 128] [--repeats 3]

The kinds are a separate draft model (draft-kl), Medusa heads, the EAGLE head, the EAGLE-3
head and the target's own MTP modules. Each kind gets two settings: its best chain and its
best tree. "Best" means the highest T = 0 speedup in the tree benchmark's sweep (``tree.json``;
without that file, ``FALLBACK``). Both settings run at T = 0 and at T = 1 on the same held-out
code prompts. Each method is interleaved with plain decoding at the same temperature, and each
run uses the rng seeded ``seed + prompt``. At T = 0 every output must equal plain greedy
decoding (``common.against_plain(same_tokens=True)``). At T = 1 exactness is the tests' job
(tests/decoding/test_tree_decode.py, tests/decoding/test_mtp_draft.py); a benchmark cannot check it.

The table also carries what the checkpoints' metadata records about training: where the
kind was trained, CPU minutes, tokens and parameters. The MTP modules train together with the
target, so their cost is the extra time they add to each of its steps. ``mtp_overhead`` times
that here: training steps with and without the modules, interleaved.

Writes ``outputs/benchmarks/kinds.json`` and ``kinds.md`` and refreshes the table of record.
Vocabulary: ``lessonlib.decoding.measures`` (tau, alpha, c, r, speedup).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lessonlib import cli, threads
from lessonlib.bench import common, record, tree
from lessonlib.core import kinds as core_kinds
from lessonlib.decoding.decode import generate
from lessonlib.models import CHECKPOINTS, GPT, read_meta

# report label -> its kind (``core.kinds``), in the order the table has always printed them
KINDS = {core_kinds.kind(name).report: core_kinds.kind(name) for name in core_kinds.REPORT_ORDER}
# the settings used when no tree.json exists (tests, a fresh checkout that deleted outputs/)
FALLBACK = {"chain draft-kl": "chain draft-kl K=3", "tree draft-kl": "tree draft-kl dynamic d6 k3 N10",
            "Medusa chain": "Medusa chain K=3", "Medusa": "Medusa 2-1-1", "EAGLE chain": "EAGLE chain K=4",
            "EAGLE tree": "EAGLE tree 2-2-1-1", "EAGLE-3 chain": "EAGLE-3 chain K=4",
            "EAGLE-3 tree": "EAGLE-3 tree 2-2-1-1", "MTP chain": "MTP chain K=2", "MTP tree": "MTP tree 2-1"}
TEMPERATURES = (0.0, 1.0)


def pick(table: dict, tree_report: dict | None) -> dict:
    """{kind: {"chain": method, "tree": method}}: each kind's best chain and best tree by
    T = 0 speedup in ``tree_report`` (``tree.json``), among the methods of ``table`` (``tree.methods``).
    Kinds without a method in ``table`` (a head that is not shipped) are left out."""
    speed = {r["method"]: r["speedup"] for r in (tree_report or {}).get("rows", []) if r["method"] in table}
    out = {}
    for kind, k in KINDS.items():
        choice = {}
        chains, trees = k.families
        for shape, families in (("chain", chains), ("tree", trees)):
            names = [n for n, (family, _) in table.items() if family in families]
            measured = [n for n in names if n in speed]
            if measured:
                choice[shape] = max(measured, key=speed.get)
            elif names:
                choice[shape] = next((FALLBACK[f] for f in families if FALLBACK.get(f) in names), names[0])
        if choice:
            out[kind] = choice
    return out


def training_cost(kind: str, directory=CHECKPOINTS, mtp_fraction: float | None = None) -> dict:
    """What the checkpoints of ``kind`` record about their training: seconds, tokens, params,
    devices. MTP: its modules' params, and ``mtp_fraction`` x the target's seconds (the share
    of each target step the modules add) when that was measured."""
    names, how = KINDS[kind].trained, KINDS[kind].description
    metas = [read_meta(n, directory) for n in names]
    devices = sorted({h.get("device", m.get("device")) for m in metas for h in m.get("history", [m])})
    params = metas[-1]["params"]
    shared = sorted(set(metas[-1].get("trained_with") or [])) if len(metas[-1].get("trained_with") or []) > 1 else None
    if kind.startswith("MTP"):
        seconds = None if mtp_fraction is None else mtp_fraction * metas[0]["train_seconds"]
        tokens = metas[0]["tokens_seen"]  # the target's own tokens: MTP sees no others
    else:
        seconds = sum(m["train_seconds"] for m in metas)
        tokens = sum(m["tokens_seen"] for m in metas)
    return {"how": how, "checkpoints": list(names), "params": params, "train_seconds": seconds,
            "tokens": tokens, "devices": devices, "trained_with": shared, "steps": [m["steps"] for m in metas]}


def mtp_overhead(config, depth=2, batch_size=8, reps=3, seed=0) -> dict:
    """Seconds of one training step of a fresh ``GPT(config)`` without and with ``depth`` MTP
    modules (``mtp.TargetWithMTP``), fastest of ``reps``, the two interleaved; ``fraction`` =
    with / without - 1, the share of each target step the modules add."""
    from lessonlib.models.mtp import TargetWithMTP, mtp_train_step
    from lessonlib.models.train import Batches, train_step

    torch.manual_seed(seed)
    plain = GPT(config)
    with_mtp = TargetWithMTP(GPT(config), depth, planned_steps=reps + 1)
    x, y = next(Batches(config.block_size, batch_size, seed))
    runs = {"plain": (plain, train_step), "mtp": (with_mtp, mtp_train_step)}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, (model, _) in runs.items()}
    best = {name: float("inf") for name in runs}
    for rep in range(reps + 1):  # round 0 warms up (first calls allocate)
        for name, (model, step) in runs.items():
            start = time.perf_counter()
            step(model, optimizers[name], x, y)
            if rep:
                best[name] = min(best[name], time.perf_counter() - start)
    return {"batch_size": batch_size, "depth": depth, "reps": reps, "plain_step_seconds": best["plain"],
            "mtp_step_seconds": best["mtp"], "fraction": best["mtp"] / best["plain"] - 1}


def run(n_prompts=common.DEFAULTS["prompts"], prompt_len=common.DEFAULTS["prompt_len"],
        new_tokens=common.DEFAULTS["new_tokens"], repeats=common.DEFAULTS["repeats"], device="cpu",
        directory=CHECKPOINTS, seed=0, tree_report=None):
    """Time each kind's picked settings at both temperatures against plain decoding.
    Returns (models, picks, {temperature: {method: per-prompt stats}})."""
    m = tree.load_models(new_tokens, device, directory)
    table = tree.methods(kinds=tuple(m.drafters))
    picks = pick(table, tree_report)
    prompts = common.prompts("code", n_prompts, prompt_len)
    generate(m.target, prompts[0], 8)  # warm-up
    results = {}
    for t in TEMPERATURES:
        names = sorted({name for choice in picks.values() for name in choice.values()})
        runs = {name: (lambda p, i, fn=table[name][1], t=t: fn(m, p, t, np.random.default_rng(seed + i)))
                for name in names}
        results[t] = common.against_plain(
            lambda p, i, t=t: generate(m.target, p, new_tokens, t, np.random.default_rng(seed + i)),
            runs, prompts, repeats, same_tokens=t == 0)
    return m, table, picks, results


def rows_of(table, picks, results, n_threads=None) -> list[dict]:
    """One row per (kind, shape, temperature), summarised as ``tree.summarise`` does."""
    out = []
    for t, res in results.items():
        summary, _ = tree.summarise(table, res, n_threads)
        by_name = {r["method"]: r for r in summary}
        out.append(by_name["plain"] | {"kind": "plain", "shape": "", "temperature": t})
        for kind, choice in picks.items():
            for shape, name in choice.items():
                row = by_name[name] | {"kind": kind, "shape": shape, "temperature": t,
                                       "greedy_identical": True if t == 0 else None}
                depth = len(row.get("acceptance_by_depth") or []) or row.get("k")
                if shape == "chain" and "c" not in row["spread"] and depth:  # a chain's draft cost / round = K c
                    row["c_per_step"] = row["draft_cost_per_round"] / depth
                out.append(row)
    return out


def draft_cost(row: dict) -> tuple[float, str]:
    """A kinds row's drafting cost in one-token target steps: ``(c, "step")`` for a chain (its
    measured c, else its round's cost / K) and ``(cost, "round")`` for a tree."""
    if row["shape"] == "chain":
        c = row.get("c") if row.get("c") is not None else row.get("c_per_step")
        if c is None:
            raise ValueError(f"chain row {row.get('method')!r} has neither c nor c_per_step")
        return c, "step"
    return row["draft_cost_per_round"], "round"


def draft_cost_text(row: dict, label: str = "c ") -> str:
    """``draft_cost`` as the tables print it: "c 0.046" for a chain (``label`` before the
    number; "" where the column already says c), "0.73 / round" for a tree."""
    value, per = draft_cost(row)
    return f"{label}{value:.3f}" if per == "step" else f"{value:.2f} / round"


def markdown(rows, costs, overhead) -> str:
    header = ["draft kind", "trained (where, when)", "training (CPU min, tokens)", "params", "setting", "α depth 1",
              "acceptance by depth", "τ", "c (per draft step)", "speedup T = 0", "speedup T = 1", "greedy = plain"]
    table = []
    for kind in KINDS:
        if kind not in costs:
            continue
        cost = costs[kind]
        minutes = "–" if cost["train_seconds"] is None else f"{cost['train_seconds'] / 60:.0f}"
        shared = f" (one run with {', '.join(cost['trained_with'])})" if cost["trained_with"] else ""
        for shape in ("chain", "tree"):
            at = {r["temperature"]: r for r in rows if r["kind"] == kind and r["shape"] == shape}
            if not at:
                continue
            zero, one = at.get(0.0), at.get(1.0)
            acc = zero.get("acceptance_by_depth") or []
            alpha1 = f"{acc[0]:.2f}" if acc and acc[0] is not None else common.cell(zero["spread"], "alpha")
            c = common.cell(zero["spread"], "c", 3) if "c" in zero["spread"] else draft_cost_text(zero, label="")
            table.append([kind if shape == "chain" else "",
                          f"{cost['how']}; {'/'.join(cost['devices'])}" if shape == "chain" else "",
                          f"{minutes} min, {cost['tokens'] / 1e6:.1f} M tokens{shared}" if shape == "chain" else "",
                          f"{cost['params'] / 1e6:.2f} M" if shape == "chain" else "", zero["method"], alpha1,
                          ", ".join("-" if a is None else f"{a:.2f}" for a in acc) or "–",
                          common.cell(zero["spread"], "tau"), c, common.cell(zero["spread"], "speedup", unit="×"),
                          common.cell(one["spread"], "speedup", unit="×") if one else "–",
                          "yes" if zero.get("greedy_identical") else "–"])
    plain = {r["temperature"]: r for r in rows if r["kind"] == "plain"}
    lines = ["# Draft kinds on one target", "", common.markdown_table(header, table), "",
             "Held-out code prompts, medians over prompts [inter-quartile range]; every method interleaved with plain "
             "decoding of the same prompt at the same temperature. Setting = the kind's best chain and best tree in "
             "the tree benchmark's T = 0 sweep. α depth 1 and acceptance by depth: "
             "P(depth d accepted | depth d - 1 accepted) "
             "over all rounds at T = 0 (for the draft model's chain loop, α = accepted / judged). c = one draft step / "
             "one-token target step (a chain's round / K); a tree's drafting is given per round. Greedy = plain: every "
             "T = 0 output equalled plain greedy decoding token for token (checked in the run).",
             "", "Plain decoding: " + "; ".join(
                 f"T = {t:g}: {common.cell(r['spread'], 'tokens_per_second', 0)} tokens/s" for t, r in plain.items())]
    if overhead:
        lines += ["", f"MTP's training cost: a training step with {overhead['depth']} MTP modules takes "
                      f"{overhead['mtp_step_seconds']:.2f} s against {overhead['plain_step_seconds']:.2f} s without "
                      f"(batch {overhead['batch_size']}, fastest of {overhead['reps']}, interleaved): "
                      f"+{100 * overhead['fraction']:.0f} % per target step, the minutes shown for MTP."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__)
    parser.add_argument("--device", type=cli.device, default="cpu")
    parser.add_argument("--seed", type=cli.nonnegative_int, default=0)
    parser.add_argument("--out", default=None)
    args = common.parse(parser, argv)
    started = time.time()
    n_threads = threads.apply()
    m, table, picks, results = run(args.prompts, args.prompt_len, args.new_tokens, args.repeats, args.device,
                                   seed=args.seed, tree_report=record.read("tree"))
    rows = rows_of(table, picks, results, n_threads)
    overhead = mtp_overhead(m.target.config) if "mtp" in m.drafters else None
    costs = {kind: training_cost(kind, mtp_fraction=overhead and overhead["fraction"]) for kind in picks}
    report = {"setup": {"corpus": "code (held-out)", "corpus_name": "code", "prompts": args.prompts,
                        "prompt_tokens": args.prompt_len, "new_tokens": args.new_tokens, "repeats": args.repeats,
                        "temperatures": list(TEMPERATURES), "seed": args.seed, "device": args.device,
                        "threads": n_threads,
                        "seconds": round(time.time() - started, 1)},
              "machine": common.machine(), "picks": picks, "rows": rows, "training": costs, "mtp_overhead": overhead,
              "per_prompt": {str(t): r for t, r in results.items()}}
    md = markdown(rows, costs, overhead)
    record.write_with("kinds", report, md, args.out)  # the report, its Markdown and the record at once
    print(md)


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench kinds"))
