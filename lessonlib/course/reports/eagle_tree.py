"""The plumbing of notebook 04 (EAGLE: draft a tree, verify it in one pass): the cells keep the
ideas (the rules, the measurements, the claims), this module what surrounds them. The enumerated
laws that test the sibling rule, the sampled rules' random rows and labels, the sampled-τ figure
and table, the race split between the EAGLE heads and the separate draft, the draft-free methods
beside the table of record, the kinds table with the intervals its claims compare, and the sweep's
fastest setting per family. Every English sentence it prints goes through ``say``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import torch

from lessonlib.bench import kinds, record
from lessonlib.bench import tree as tree_bench
from lessonlib.core.kinds import KINDS
from lessonlib.course import messages, outputs, plots
from lessonlib.course.claims import Interval, order
from lessonlib.course.messages import say
from lessonlib.decoding import measures

Row = dict[str, Any]
RowOf = Callable[[tuple], np.ndarray]


# --- the sibling rule at T > 0, enumerated: the target's own law and the rule without renormalisation
def target_law(parents: np.ndarray, tokens: np.ndarray, p_rows: Sequence[np.ndarray], node: int = -1,
               prefix: tuple = (), prob: float = 1.0, out: dict | None = None) -> dict[tuple, float]:
    """{emitted tokens: probability} of the target sampling its own continuation along the tree:
    x ~ p; follow child x or stop."""
    out = {} if out is None else out
    for x, px in enumerate(p_rows[node + 1]):
        kids = np.flatnonzero((parents == node) & (tokens == x))
        if len(kids):
            target_law(parents, tokens, p_rows, int(kids[0]), prefix + (x,), prob * px, out)
        elif px > 0:
            out[prefix + (x,)] = prob * px
    return out


def no_renormalise_law(parents: np.ndarray, tokens: np.ndarray, p_rows: Sequence[np.ndarray], node: int = -1,
                       prefix: tuple = (), prob: float = 1.0, out: dict | None = None) -> dict[tuple, float]:
    """{emitted tokens: probability} of the WRONG rule: every sibling is tried with the original p."""
    out = {} if out is None else out
    p, stay = p_rows[node + 1], 1.0
    kids = np.flatnonzero(parents == node)
    for c in kids:
        no_renormalise_law(parents, tokens, p_rows, int(c), prefix + (int(tokens[c]),), prob * stay * p[tokens[c]], out)
        stay *= 1 - p[tokens[c]]
    rest = p.copy()
    rest[tokens[kids]] = 0
    for x in np.flatnonzero(rest):
        out[prefix + (int(x),)] = out.get(prefix + (int(x),), 0.0) + prob * stay * rest[x] / rest.sum()
    return out


def gap(a: Mapping[tuple, float], b: Mapping[tuple, float]) -> float:
    """The largest difference between two laws over every sequence either gives mass."""
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# --- sampled trees: the exact rules and two bugs, enumerated ----------------------------------
def context_rows(vocab: int, seed: int, concentration: float = 0.7) -> tuple[RowOf, RowOf]:
    """``(p_of, q_of)``: path -> a Dirichlet row over ``vocab`` tokens, fresh per (path, p or q) and
    fixed once drawn (a draft that depends on the context). Every call draws a row and keeps the
    first one drawn for its key, as ``dict.setdefault`` with a drawn default does."""
    rng, table = np.random.default_rng(seed), {}  # type: tuple[np.random.Generator, dict[tuple, np.ndarray]]

    def row(path: tuple, which: str) -> np.ndarray:
        return table.setdefault((path, which), rng.dirichlet(np.full(vocab, concentration)))

    return (lambda path: row(path, "p")), (lambda path: row(path, "q"))


def rule_gap_line(name: str, gap: float) -> str:
    """The line for one rule: its name as shown (in the reader's language) and its largest gap."""
    shown = {"with replacement": say("with replacement"), "without replacement": say("without replacement"),
             "BUG: without, judged with the full q": say("BUG: without, judged with the full q"),
             "BUG: q before top-k (#47932)": say("BUG: q before top-k (#47932)")}
    return say("{name:38s} largest gap to the target's law: {gap:.1e}", name=shown[name], gap=gap)


# --- sampled candidates at T = 1: τ per (setting, rule) ----------------------------------------
def show_sampled_taus(taus: Mapping[tuple[str, str], np.ndarray]) -> dict[tuple[str, str], float]:
    """Draws a bar per (setting, rule) at its median τ over prompts (grey: deterministic candidates),
    then prints one line per bar; returns the medians."""
    median_tau = {key: float(np.median(t)) for key, t in taus.items()}
    _, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    names = [f"{a}\n{b}" for a, b in taus]
    ax.bar(names, list(median_tau.values()), color=["#999" if "determ" in b else "#2a7" for _, b in taus])
    ax.set_ylabel("τ (median of 5 prompts)")
    ax.set_title("EAGLE head at T = 1: deterministic candidates vs candidates drawn from q")
    plt.show()
    shown_rule = {"deterministic": say("deterministic"), "sampled, with replacement": say("sampled, with replacement"),
                  "sampled, without": say("sampled, without")}  # the rules' names as shown
    for (label, rule_name), t in median_tau.items():
        print(f"{label:13s} {shown_rule[rule_name]:26s} τ = {t:.2f}")
    return median_tau


def sampled_gains(taus: Mapping[tuple[str, str], np.ndarray]) -> dict[str, Interval]:
    """{setting: the best sampled rule's τ over the deterministic rule's, prompt by prompt, median
    [q25, q75]} (best: the setting's sampled rule with the highest median τ); prints them too."""
    gains = {}
    for label in dict.fromkeys(lab for lab, _ in taus):
        best = max((r for (lab, r) in taus if lab == label and r != "deterministic"),
                   key=lambda r: float(np.median(taus[(label, r)])))
        ratio = np.asarray(taus[(label, best)]) / np.asarray(taus[(label, "deterministic")])
        gains[label] = Interval(float(np.median(ratio)), float(np.quantile(ratio, 0.25)),
                                float(np.quantile(ratio, 0.75)), "×")
    print(say("best sampled τ / deterministic τ per prompt, median [q25, q75]: {gains}",
              gains=", ".join(f"{k} {v:.2f}" for k, v in gains.items())))
    return gains


# --- the race between the EAGLE heads and the separate draft ----------------------------------

# the kinds whose draft step is one block beside the target (EAGLE's and EAGLE-3's head, MTP's module), by
# the kinds table's row label
ONE_BLOCK = frozenset(k.report for k in KINDS if k.drafter in ("EagleDrafter", "MTPDrafter"))
RACE_FAMILIES = ("EAGLE chain", "EAGLE tree", "EAGLE-2 dynamic", "EAGLE-3 chain", "EAGLE-3 tree")


def print_profile(profile_report: Mapping[str, Any]) -> None:
    """Prints each profiled forward, warm and in the decoding loop, then one EAGLE head call in
    draft-kl steps (in the loop) and a blank line; returns None."""
    loop = profile_report["in_loop_seconds"]
    for name, warm in profile_report["warm_seconds"].items():
        print(outputs.localise(f"{name}:"))  # a forward's name from the bench layer, in the reader's language
        print(say("    warm {warm:.3f} ms, in the decoding loop {loop:.3f} ms", warm=1e3 * warm, loop=1e3 * loop[name]))
    head_call = next(v for k, v in loop.items() if k.startswith("EAGLE head"))
    draft_step = next(v for k, v in loop.items() if k.startswith("draft-kl step"))
    print(say("in the loop one EAGLE head call costs {steps:.1f} draft-kl steps", steps=head_call / draft_step) + "\n")


def round_cost(row: Mapping[str, Any]) -> float:
    """A round's cost in one-token target steps: its drafting plus its verify pass (r)."""
    return tree_bench.draft_cost_per_round(dict(row)) + row["r"]


def race_split(report: Mapping[str, Any]) -> dict[str, tuple[float, float, float]]:
    """{method: (τ ratio, round-cost ratio, speedup ratio)} of the best setting of each EAGLE
    family (``RACE_FAMILIES``) against the separate draft's best chain, in the stored tree sweep;
    prints the separate draft's chain, then a row per method."""
    by_method = {r["method"]: r for r in report["rows"]}
    base = by_method[report["best_of_family"]["chain draft-kl"]]
    print(say("against {method} (τ {tau:.2f}, round cost {cost:.2f}, speedup {speedup:.2f}×):", method=base["method"],
              tau=base["tau"], cost=round_cost(base), speedup=base["speedup"]))
    print(say("method                        τ ratio  round-cost ratio  τ / cost  speedup ratio"))
    split = {}
    for family in RACE_FAMILIES:
        r = by_method[report["best_of_family"][family]]
        t, c, s = r["tau"] / base["tau"], round_cost(r) / round_cost(base), r["speedup"] / base["speedup"]
        split[r["method"]] = (t, c, s)
        print(f"{r['method']:28s} {t:8.2f} {c:17.2f} {t / c:9.2f} {s:14.2f}")
    return split


# --- no draft at all: the draft-free methods beside the table of record ------------------------
def summarise_draft_free(timed: Mapping[str, Sequence[dict]], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{method: {quantity: median [IQR] over prompts}} of ``against_plain``'s rows for each of ``names``;
    a row's α is its lookup drafts' α where it reports no other (the rows are updated in place)."""
    out = {}
    for name in names:
        for s in timed[name]:
            s.setdefault("alpha", s.get("lookup_alpha"))
        out[name] = measures.summarise(timed[name])
    return out


def print_against_record(draft_free: Mapping[str, Mapping[str, Any]], prompts: int, new_tokens: int,
                         repeats: int) -> None:
    """Prints each method's α, τ, draft cost and speedup, with the table of record's speedup for the
    same method and where this run's lies against it, then how the two runs differ; returns None."""
    rows_of_record = record.load()  # the table of record (outputs/benchmarks/record.json)
    of_record = {name: next(iter(record.find(rows_of_record, source="tree", method=name, temperature=0.0,
                                             threads=torch.get_num_threads())), None) for name in draft_free}
    labels = {"alpha": say("α (lookup drafts)"), "tau": "τ", "draft_cost_per_round": say("draft cost / round"),
              "speedup": "speedup"}
    for name, s in draft_free.items():
        print(f"\n{name}")
        for key, label in labels.items():
            if key in s:
                digits, unit = 3 if key == "draft_cost_per_round" else 2, "×" if key == "speedup" else ""
                print(f"    {label:20s} {measures.fmt_spread(s[key], digits, unit)}")
        rec = of_record[name]
        if rec:
            here, theirs = Interval.of(s["speedup"], "×"), Interval.of(rec["speedup"], "×")
            print(say("    table of record      {theirs:.2f}: this run's speedup {word} it", theirs=theirs,
                      word=messages.word(order(here, theirs))))
        else:
            print(say("    table of record      no row for this method: python -m lessonlib.bench tree writes it"))
    rec = next((r for r in of_record.values() if r), None)
    if rec:
        print("\n" + say("table of record: python -m lessonlib.bench tree, {prompts} prompts, {new} new tokens, "
                         "fastest of {repeats} runs each", prompts=rec["prompts"], new=rec["new_tokens"],
                         repeats=rec["repeats"]))
        print(say("this cell: {prompts} prompts, {new} new tokens, fastest of {repeats} runs each", prompts=prompts,
                  new=new_tokens, repeats=repeats))
        print(say("they may differ: a lookup pays more the longer the text it can repeat, so more new tokens give it "
                  "more to match; fewer repeats leave more noise in each prompt's time; and each run has the load of "
                  "its own moment"))


def backed_line(backed: Interval, alone: Interval) -> str:
    """The sentence for the backed lookup's speedup against the lookup alone's: one per order word."""
    word = order(backed, alone)
    if word == "above":
        return say("speedup, lookup backed by the draft against the lookup alone: {backed:.2f} above {alone:.2f} in "
                   "this run", backed=backed, alone=alone)
    if word == "below":
        return say("speedup, lookup backed by the draft against the lookup alone: {backed:.2f} below {alone:.2f} in "
                   "this run", backed=backed, alone=alone)
    return say("speedup, lookup backed by the draft against the lookup alone: {backed:.2f} overlaps {alone:.2f} in "
               "this run", backed=backed, alone=alone)


# --- every draft kind on one target -------------------------------------------------------------
def show_kinds(kinds_report: Mapping[str, Any]) -> None:
    """Prints the kinds table (a row per kind and setting: params, training, α₁, τ, draft cost and
    the speedups at T = 0 and T = 1) and what MTP's modules add to a training step, then draws the
    speedups (``plots.kinds_speedups``) and prints a blank line; returns None."""
    kind_rows = kinds_report["rows"]
    print(say("draft kind              params        training  setting                           α₁     τ   "
              "draft cost  T = 0  T = 1"))
    for kind, cost in kinds_report["training"].items():
        minutes = "–" if cost["train_seconds"] is None else f"{cost['train_seconds'] / 60:.0f} min"
        head = [kind, f"{cost['params'] / 1e6:.2f}M", f"{minutes}, {cost['tokens'] / 1e6:.1f}M tok"]
        for row in (r for r in kind_rows if r["kind"] == kind and r["temperature"] == 0):
            hot = next(r for r in kind_rows if r["method"] == row["method"] and r["temperature"] == 1)
            acc = row.get("acceptance_by_depth") or [row.get("alpha")]
            print(f"{head[0]:22s} {head[1]:>7s} {head[2]:>15s}  {row['method']:30s} {acc[0]:5.2f} {row['tau']:5.2f} "
                  f"{kinds.draft_cost_text(row):>12s} {row['speedup']:5.2f}× {hot['speedup']:5.2f}×")
            head = ["", "", ""]
    overhead = kinds_report["mtp_overhead"]
    print("\n" + say("MTP's two modules add {percent:.0f} % to a target training step ({mtp:.2f} s against "
                     "{plain:.2f} s, batch {batch})", percent=100 * overhead["fraction"],
                     mtp=overhead["mtp_step_seconds"], plain=overhead["plain_step_seconds"],
                     batch=overhead["batch_size"]))
    _ = plots.kinds_speedups(kind_rows)
    plt.show()
    print()


def c_interval(row: Mapping[str, Any]) -> Interval:
    """A chain row's c (one drafting step / one-token target step): its measured c, else its round over its K steps."""
    spread = row["spread"]
    if "c" in spread:
        return Interval.of(spread["c"])
    c, _ = kinds.draft_cost(dict(row))
    k = round(row["draft_cost_per_round"] / c)
    return Interval(*(spread["draft_cost_per_round"][q] / k for q in ("median", "q25", "q75")))


class KindsIntervals(NamedTuple):
    """The rows and intervals the kinds claims compare (unpack it in this order)."""

    cold: dict[str, Row]  # the T = 0 rows by method, plain left out
    speed0: dict[str, Interval]  # each T = 0 row's speedup
    speed1: dict[str, Interval]  # each T = 1 row's speedup, plain left out
    chains: dict[str, Row]  # the T = 0 chain rows
    c_of: dict[str, Interval]  # each chain's c (c_interval)
    first_guess: dict[str, float]  # each chain's α₁: its acceptance at depth 1, else its α
    medusa: str  # the Medusa chain
    separate: str  # the separate draft's chain
    one_block: list[str]  # the chains of the one-block heads: EAGLE, EAGLE-3, MTP
    cheapest: str  # the chain with the smallest median c
    top: str  # the T = 0 row with the highest median speedup
    rest: list[str]  # the T = 1 rows but the separate draft's chain


def kinds_intervals(kinds_report: Mapping[str, Any]) -> KindsIntervals:
    """The rows and intervals of the stored kinds run that its claims compare (``KindsIntervals``)."""
    kind_rows = kinds_report["rows"]
    cold = {r["method"]: r for r in kind_rows if r["temperature"] == 0 and r["method"] != "plain"}
    speed0 = {m: Interval.of(r["spread"]["speedup"], "×") for m, r in cold.items()}
    speed1 = {r["method"]: Interval.of(r["spread"]["speedup"], "×") for r in kind_rows
              if r["temperature"] == 1 and r["method"] != "plain"}
    chains = {m: r for m, r in cold.items() if r["shape"] == "chain"}
    c_of = {m: c_interval(r) for m, r in chains.items()}
    separate = next(m for m, r in chains.items() if r["kind"].startswith("draft model"))
    return KindsIntervals(
        cold, speed0, speed1, chains, c_of,
        first_guess={m: (r.get("acceptance_by_depth") or [r.get("alpha")])[0] for m, r in chains.items()},
        medusa=next(m for m, r in chains.items() if r["kind"] == "Medusa"), separate=separate,
        one_block=[m for m, r in chains.items() if r["kind"] in ONE_BLOCK],
        cheapest=min(chains, key=lambda m: c_of[m].median), top=max(cold, key=lambda m: speed0[m].median),
        rest=[m for m in speed1 if m != separate])


def print_top_against(top: str, speed0: Mapping[str, Interval]) -> None:
    """Prints the T = 0 rows whose speedup interval ``top``'s lies wholly above, then those it
    overlaps; returns None."""
    print(say("    at T = 0 its interval lies wholly above: {names}",
              names=", ".join(m for m in speed0 if speed0[top] > speed0[m]) or say("none")))
    overlapped = [m for m in speed0 if m != top and speed0[top].overlaps(speed0[m])]
    print(say("    and overlaps: {names}", names=", ".join(overlapped) or say("none")))


# --- the stored sweep against the published results ---------------------------------------------

FAMILIES = ("chain draft-kl", "tree draft-kl", "Medusa", "EAGLE chain", "EAGLE tree", "EAGLE-2 dynamic",
            "EAGLE-3 chain", "EAGLE-3 tree", "MTP chain", "MTP tree")
TRAINED = ("chain draft-kl", "tree draft-kl", "Medusa chain", "Medusa", "EAGLE chain", "EAGLE tree", "EAGLE-2 dynamic",
           "EAGLE-3 chain", "EAGLE-3 tree", "MTP chain", "MTP tree")  # the families whose drafter was trained
# drafter: (its chain families, its tree families), from the registry; Medusa's heads draw a fixed tree of their own
PAIRS = {k.label: ([k.chain], list(k.families[1])) for k in KINDS if k.name != "medusa"}


def fastest_by_family(report: Mapping[str, Any]) -> dict[str, Row]:
    """{family: its row with the highest median speedup} for each of ``FAMILIES`` the sweep ran."""
    return {family: max((r for r in report["rows"] if r["family"] == family), key=lambda r: r["speedup"])
            for family in FAMILIES if any(r["family"] == family for r in report["rows"])}


def print_fastest(fastest: Mapping[str, Row]) -> None:
    """Prints each family's fastest setting with its τ and speedup, then a blank line; returns None."""
    for family, r in fastest.items():
        print(say("fastest {family:16s} {method:32s} τ {tau:.2f}, {speedup:.2f}×", family=family, method=r["method"],
                  tau=r["tau"], speedup=r["speedup"]))
    print()


def chains_and_trees(fastest: Mapping[str, Row]) -> dict[str, tuple[Row, Row]]:
    """{drafter: (its fastest chain row, its fastest tree row)} for each drafter of ``PAIRS``."""
    def pick(families: list[str]) -> Row:
        return max((fastest[f] for f in families), key=lambda r: r["speedup"])
    return {d: (pick(c), pick(t)) for d, (c, t) in PAIRS.items()}


def print_chains_and_trees(chain_tree: Mapping[str, tuple[Row, Row]], speed: Mapping[str, Interval]) -> None:
    """Prints each drafter's fastest chain and fastest tree, with τ and speedup interval; returns None."""
    for drafter, (c, t) in chain_tree.items():
        print(say("{drafter:9s} chain {chain:22s} τ {chain_tau:.2f} {chain_speedup:.2f}   tree {tree:28s} τ "
                  "{tree_tau:.2f} {tree_speedup:.2f}", drafter=drafter, chain=c["method"], chain_tau=c["tau"],
                  chain_speedup=speed[c["method"]], tree=t["method"], tree_tau=t["tau"],
                  tree_speedup=speed[t["method"]]))


def against_distilled_line(sweep: Interval, kl_sweep: Interval, kinds_run: Interval, kl_kinds: Interval) -> str:
    """The line placing the fastest trained drafter's speedup (``sweep``, ``kinds_run``) against the
    distilled draft's best chain in each stored run."""
    return say("    against the distilled draft's best chain ({sweep:.2f} in the sweep, {kinds:.2f} in the kinds run) "
               "its interval: {in_sweep} in the sweep, {in_kinds} in the kinds run", sweep=kl_sweep, kinds=kl_kinds,
               in_sweep=messages.word(order(sweep, kl_sweep)), in_kinds=messages.word(order(kinds_run, kl_kinds)))
