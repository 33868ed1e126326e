"""Notebook 05's plumbing (solutions/05_high_temperature.ipynb); its cells keep the ideas and every claim.

Here: the tables they print (headers through ``say``), the interleaved runs of the wall-clock table and the fallback
stream, the intervals and crossings the claims compare, the serving figure, temperature.json's sections."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch

from lessonlib.bench import batch as bench_batch
from lessonlib.bench import record
from lessonlib.core import theory
from lessonlib.course.claims import Interval
from lessonlib.course.messages import say
from lessonlib.course.reports import cell
from lessonlib.course.skill import verify_cost
from lessonlib.decoding import batch, decode, fallback, measures
from lessonlib.models import data

KINDS = ("sampled", "greedy")  # the two drafts the wall-clock runs time


def print_costs(in_loop: Mapping[str, Any], measured: Mapping[str, Any], warm: Mapping[int, float], c_warm: float,
                rows_of_record: Sequence[Mapping[str, Any]], here: tuple[int, int, int]) -> None:
    """Print c and r warm and in the loop, f(n), and the table of record's chain K = 3 at T = 0 beside ``here``
    (prompt tokens, new tokens, repeats of the in-loop timing); returns None."""
    sizes = sorted(warm)
    print(say("c in the decoding loop = {c} over {n} prompts; warm c = {warm:.3f}", c=cell(in_loop['c'], 3),
              n=in_loop['c']['n'], warm=c_warm))
    print(say("r = verify over 4 tokens / one-token step: in the loop {r}, warm f(4) = {f4:.2f}", r=cell(in_loop['r']),
              f4=warm[4] / warm[1]))
    print(say("one-token target step: warm {warm:.2f} ms, in the loop {loop:.2f} ms", warm=1e3 * warm[1],
              loop=1e3 * np.median([s['target_forward_seconds'] for s in measured['plain']])))
    print(say("new tokens n:               ") + "  ".join(f"{n:>5}" for n in sizes))
    print(say("warm f(n) = cost / cost(1): ") + "  ".join(f"{warm[n] / warm[1]:>5.2f}" for n in sizes))
    rec_c = record.find(rows_of_record, source="decode", family="chain draft-kl", k=3, corpus="code",
                        temperature=0.0, threads=torch.get_num_threads())
    if rec_c:  # the same chain, prompts and threads, timed by python -m lessonlib.bench decode
        r0 = rec_c[0]
        print(say("table of record, the same chain K = 3 at T = 0: c = {c}, r = {r} ({prompt}-token prompts, {new} new "
                  "tokens, fastest of {repeats}; here {here_prompt}-token prompts, {here_new} new tokens, fastest of "
                  "{here_repeats}: a longer run averages over more rounds and a later, longer context)",
                  c=cell(r0['c'], 3), r=cell(r0['r']), prompt=r0['prompt_tokens'], new=r0['new_tokens'],
                  repeats=r0['repeats'], here_prompt=here[0], here_new=here[1], here_repeats=here[2]))
    else:
        print(say("the table of record has no K = 3 chain of draft-kl at T = 0 for this thread count "
                  "(python -m lessonlib.bench decode)"))
    print()


@torch.inference_mode()
def logits_at(model: Any, windows: torch.Tensor, skip: int = 32) -> np.ndarray:
    """(windows x positions, vocab) float64 logits over ``windows``, the first ``skip`` positions left out."""
    z = model(windows.to(model.device))[:, skip:]
    return z.reshape(-1, z.shape[-1]).double().cpu().numpy()


def print_alpha_table(mean: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
                      alpha: Mapping[tuple[str, str], Mapping[str, np.ndarray]], temps: Sequence[float],
                      vocab: int) -> None:
    """Print the teacher-forced α table and the limits as T → ∞; returns None."""
    print(say("teacher-forced on held-out text; positions: code {code}, prose {prose}",
              code=alpha["code", "draft-kl"]["sampled"].shape[1], prose=alpha['prose', 'draft-kl']['sampled'].shape[1])
          + "\n")
    kl, ce, prose = mean["code", "draft-kl"], mean["code", "draft-ce"], mean["prose", "draft-kl"]
    print(say("  T   (a) sampled  (a) sampled  (b) greedy  (b) top-4  (c) q at T=1   prose (a)  prose (b)"))
    print(say("       draft-kl     draft-ce     draft-kl    draft-kl   draft-kl        draft-kl   draft-kl"))
    for i, t in enumerate(temps):
        print(f"{t:>4}   {kl['sampled'][i]:>9.3f} {ce['sampled'][i]:>12.3f} {kl['greedy'][i]:>11.3f} "
              f"{kl['top4'][i]:>10.3f} {kl['mismatch'][i]:>10.3f} {prose['sampled'][i]:>14.3f} "
              f"{prose['greedy'][i]:>10.3f}")
    print("\n" + say("limits as T → ∞: sampled → 1, greedy → 1/|V| = {g:.5f}, top-4 → 4/|V| = {t:.5f}", g=1 / vocab,
                     t=4 / vocab) + "\n")


def alpha_on_own_text(target: Any, draft: Any, prompt: list[int], length: int, temperature: float,
                      seed: int) -> tuple[list[int], dict[str, np.ndarray]]:
    """The target writes ``length`` tokens after ``prompt`` at ``temperature``; returns (those tokens, the
    acceptance rows of ``fallback.acceptance_by_temperature`` at that temperature, teacher-forced on them)."""
    new, _ = decode.generate(target, prompt, length, temperature=temperature, rng=np.random.default_rng(seed))
    seq, start = torch.as_tensor([prompt + new]), len(prompt) - 1
    with torch.inference_mode():  # the logits that predict the generated tokens
        z_p = target(seq.to(target.device))[0, start:-1].double().cpu().numpy()
        z_q = draft(seq.to(draft.device))[0, start:-1].double().cpu().numpy()
    return new, fallback.acceptance_by_temperature(z_p, z_q, [temperature], widths=(1,))


def print_drift(drift: Mapping[float, Mapping[str, np.ndarray]], drift_spread: Mapping[float, Mapping[str, Any]],
                kl: Mapping[str, np.ndarray], temps: Sequence[float], n_prompts: int, bucket: int) -> None:
    """Print α per bucket of generated positions beside α on held-out text, per temperature; returns None."""
    length = bucket * len(next(iter(drift.values()))["sampled"])
    print(say("{n} prompts x {length} generated tokens; α per bucket pooled over prompts, then median [q25, q75] over "
              "prompts of the whole text", n=n_prompts, length=length))
    print(say("position of the generated token: ")
          + "  ".join(f"{i * bucket:>3}-{(i + 1) * bucket - 1:<3}" for i in range(length // bucket)))
    for t in drift:
        i = list(temps).index(t)
        for kind in KINDS:
            print(f"T = {t}, {kind:<8} α: " + "  ".join(f"{x:>7.3f}" for x in drift[t][kind])
                  + say("   all: {all}   (held-out text: {text:.3f})", all=cell(drift_spread[t][kind], 3),
                        text=kl[kind][i]))
    print()


def streams(target: Any, draft: Any, runs: Mapping[str, tuple[Any, int, float | None]], temperature: Any, n: int,
            prompt: list[int], seed: int = 2, requests: Sequence[Any] = ()) -> dict[str, dict[str, Any]]:
    """{name: trace}: n tokens after ``prompt`` per {name: (policy, k, draft_temperature)}, a step each in turn."""
    made = {}
    for name, (policy, k, draft_temperature) in runs.items():
        stream = fallback.ModelStream(target, draft, prompt, k, temperature, draft_temperature,
                                      rng=np.random.default_rng(seed), requests=requests)
        made[name] = (policy, stream.speculate, stream.plain)
    return fallback.drive_interleaved(made, n, clock=time.process_time)


def wall_clock(target: Any, draft: Any, prompts: Sequence[list[int]], wall_temps: Sequence[float], n: int,
               kl: Mapping[str, np.ndarray], temps: Sequence[float], choose_k: Callable[[float], int], c: float,
               forward_cost: Any) -> tuple[dict[str, list], dict[str, list], dict[str, list], dict[str, list]]:
    """Plain, sampled and greedy draft (K = ``choose_k(α)``) per prompt and T. Returns (wall, wall_spread, alpha_dec,
    alpha_spread), {kind: per T}: rows (T, K, τ, speedup, E/(Kc+1), E/(Kc+r), warm r), speedup summaries, α while
    decoding (all prompts' drafts pooled) and its Interval over the prompts (each prompt's own α)."""
    per_kind: list[dict[str, list]] = [{kind: [] for kind in KINDS} for _ in range(4)]
    wall, wall_spread, alpha_dec, alpha_spread = per_kind
    tps = lambda trace: trace["tokens"].sum() / trace["seconds"].sum()  # noqa: E731
    for t in wall_temps:
        i = list(temps).index(t)
        ks = {"sampled": choose_k(kl["sampled"][i]), "greedy": choose_k(kl["greedy"][i])}
        per: dict[str, list] = {"sampled": [], "greedy": []}
        for j, p_ in enumerate(prompts):
            traces = streams(target, draft, {"plain": (fallback.NeverSpeculate(), 1, None),
                                             "sampled": (fallback.AlwaysSpeculate(), ks["sampled"], None),
                                             "greedy": (fallback.AlwaysSpeculate(), ks["greedy"], 0.0)},
                             t, n, p_, seed=2 + j)
            for kind, k in ks.items():  # (speedup, τ, accepted, judged drafts)
                accepted = traces[kind]["tokens"][traces[kind]["action"] != "plain"] - 1
                per[kind].append((tps(traces[kind]) / tps(traces["plain"]), traces[kind]["tokens"].mean(),
                                  int(accepted.sum()), int(accepted.sum() + (accepted < k).sum())))
        for kind, k in ks.items():
            speedup, tau_s = measures.summary([x[0] for x in per[kind]]), measures.summary([x[1] for x in per[kind]])
            alpha_dec[kind].append(measures.alpha(sum(x[2] for x in per[kind]), sum(x[3] for x in per[kind])))
            alpha_spread[kind].append(Interval.of(measures.summary([x[2] / x[3] for x in per[kind]])))
            wall_spread[kind].append(speedup)
            r = float(verify_cost(k + 1, 1, forward_cost))
            wall[kind].append((t, k, tau_s["median"], speedup["median"], theory.expected_speedup(kl[kind][i], k, c),
                               theory.expected_tokens_per_verify(kl[kind][i], k) / (k * c + r)))
    return wall, wall_spread, alpha_dec, alpha_spread


def print_wall(wall: Mapping[str, list], wall_spread: Mapping[str, list], alpha_dec: Mapping[str, list],
               kl: Mapping[str, np.ndarray], temps: Sequence[float], n: int, c: float, n_prompts: int,
               rows_of_record: Sequence[Mapping[str, Any]]) -> None:
    """Print the wall-clock table and the sampled draft beside the table of record's best K; returns None."""
    print(say("median [q25, q75] over {n} held-out prompts, {tokens} tokens each, c = {c:.3f} (in the loop)",
              n=n_prompts, tokens=n, c=c))
    print(say("draft     T    K   τ measured   speedup measured     α teacher-forced   α while decoding   E/(Kc+1)   "
              "E/(Kc+r)"))
    for kind in wall:
        for (t, k, tau_m, _, pred, pred_r), spread_s, a_dec in zip(wall[kind], wall_spread[kind], alpha_dec[kind]):
            print(f"{kind:<8} {t:>3} {k:>4} {tau_m:>10.2f}   {cell(spread_s, unit='×'):>20} "
                  f"{kl[kind][list(temps).index(t)]:>14.3f} {a_dec:>18.3f} {pred:>11.2f}× {pred_r:>9.2f}×")
    print()
    wall_temps = [row[0] for row in wall["sampled"]]
    for t in (0.0, 1.0):  # the settings the table of record has: its best K for draft-kl's chain
        found = record.find(rows_of_record, source="decode", family="chain draft-kl", corpus="code", temperature=t,
                            threads=torch.get_num_threads())
        j = wall_temps.index(t)
        here = say("{speedup} at K = {k}, {n} tokens, one run", speedup=cell(wall_spread['sampled'][j], unit='×'),
                   k=wall['sampled'][j][1], n=n)
        if found:
            best_rec = max(found, key=lambda r: r["speedup"]["median"])
            print(say("sampled draft at T = {t:g}: here {here}; table of record {record} at K = {k}, {prompt}-token "
                      "prompts, {new} tokens, fastest of {repeats}", t=t, here=here,
                      record=cell(best_rec['speedup'], unit='×'), k=best_rec['k'], prompt=best_rec['prompt_tokens'],
                      new=best_rec['new_tokens'], repeats=best_rec['repeats']))
        else:
            print(say("sampled draft at T = {t:g}: here {here}; not in the table of record for this thread count",
                      t=t, here=here))
    print()


def wall_intervals(wall: Mapping[str, list], wall_spread: Mapping[str, list]) -> SimpleNamespace:
    """A namespace: ``speed`` {kind: [Interval per T]}, ``above_t0`` [(Interval, E/(Kc+1)) at T > 0], ``closest``
    the pair whose upper end is nearest its prediction (or furthest above)."""
    speed = {kind: [Interval.of(s, "×") for s in wall_spread[kind]] for kind in wall}
    above_t0 = [(s, row[4]) for kind in wall for s, row in zip(speed[kind][1:], wall[kind][1:])]
    return SimpleNamespace(speed=speed, above_t0=above_t0, closest=max(above_t0, key=lambda x: x[0].high / x[1]))


def measured_crossing(rows: Sequence[Sequence[float]]) -> float:
    """First T (interpolated) at which the median speedup of wall rows (T, K, τ, speedup, ...) falls below 1."""
    t, s = np.array([r[0] for r in rows]), np.array([r[3] for r in rows])
    if not np.any(s < 1):
        return float("inf")
    i = int(np.flatnonzero(s < 1)[0])
    return float(t[0]) if i == 0 else float(t[i - 1] + (s[i - 1] - 1) / (s[i - 1] - s[i]) * (t[i] - t[i - 1]))


def tokens_until(trace: Mapping[str, Any], start: int, speculating: bool) -> int | None:
    """Tokens into the phase at ``start`` before the first step that is (not) speculation, else None."""
    hit = np.flatnonzero((trace["position"] >= start) & ((trace["action"] == "speculate") == speculating))
    return int(trace["position"][hit[0]] - start) if len(hit) else None


def policy_streams(target: Any, draft: Any, phases: Sequence[tuple[float, int]], k: int,
                   make_policy: Callable[[], Any], throughput: Callable[[Any, Any], np.ndarray],
                   n_streams: int) -> SimpleNamespace:
    """Always, never and ``make_policy()`` on streams following ``phases`` [(T, tokens)]. Returns a namespace:
    bounds, traces (last stream), tps_runs, tps (medians), ratio (policy / better), reaction, left_early,
    over_worse (per phase: policy / the worse fixed strategy, an Interval over the streams)."""
    bounds = np.concatenate([[0], np.cumsum([n for _, n in phases])])

    def schedule(position: int) -> float:
        return phases[min(int(np.searchsorted(bounds, position, side="right")) - 1, len(phases) - 1)][0]

    requests = data.heldout_prompts("code", len(phases) * n_streams, 48)  # each phase of each stream: its own
    tps_runs, left_early = [], 0
    reaction: dict[str, list[int | None]] = {"off in the T = 2 phase": [], "on in the second T = 0 phase": []}
    for s in range(n_streams):
        first, *later = requests[len(phases) * s: len(phases) * (s + 1)]
        traces = streams(target, draft, {"always": (fallback.AlwaysSpeculate(), k, 0.0),
                                         "never": (fallback.NeverSpeculate(), k, 0.0),
                                         "policy": (make_policy(), k, 0.0)},
                         schedule, int(bounds[-1]), first, seed=3 + s, requests=list(zip(bounds[1:-1], later)))
        tps_runs.append({name: throughput(tr, bounds) for name, tr in traces.items()})
        policy = traces["policy"]
        left_early += bool(np.any(policy["action"][policy["position"] < bounds[1]] != "speculate"))
        reaction["off in the T = 2 phase"].append(tokens_until(policy, bounds[1], False))
        reaction["on in the second T = 0 phase"].append(tokens_until(policy, bounds[2], True))
    tps = {name: np.median([r[name] for r in tps_runs], axis=0) for name in ("always", "never", "policy")}
    ratio = np.array([r["policy"] / np.maximum(r["always"], r["never"]) for r in tps_runs])
    worse = np.array([r["policy"] / np.minimum(r["always"], r["never"]) for r in tps_runs])  # (streams, phases)
    over_worse = [Interval.of(measures.summary(worse[:, j], min_count=n_streams)) for j in range(worse.shape[1])]
    return SimpleNamespace(bounds=bounds, traces=traces, tps_runs=tps_runs, tps=tps, ratio=ratio, reaction=reaction,
                           left_early=left_early, over_worse=over_worse)


def print_policy_streams(run: SimpleNamespace, phases: Sequence[tuple[float, int]], k: int, c: float,
                         r: float) -> None:
    """Print the stream's settings, tokens per second per phase and the policy's switches; returns None."""
    n_streams = len(run.tps_runs)
    top = (k + 1) / (k * c + r)  # what perfect drafts (α = 1) would give here
    print(say("K = {k}, c = {c:.3f}, r = {r:.2f} (measured): perfect drafts would give {top:.2f}×", k=k, c=c, r=r,
              top=top)
          + ("" if top >= 1.2 else say(" < on_above = 1.2, so once off the policy stays off (α_on = inf)")))
    print(say("tokens per second in each phase, median over {n} streams", n=n_streams))
    print(say("phase (T)   always   never   policy   policy / better [IQR]   streams within 10 %"))
    tps, ratio = run.tps, run.ratio
    for i, (t, _) in enumerate(phases):
        print(f"{i} (T={t})  {tps['always'][i]:>7.0f} {tps['never'][i]:>7.0f} {tps['policy'][i]:>8.0f}   "
              f"{cell(measures.summary(ratio[:, i])):>20} {int((ratio[:, i] >= 0.9).sum()):>12} of {n_streams}")
    for what, tokens in run.reaction.items():
        listed = ", ".join(say("never") if x is None else str(x) for x in tokens)
        print(say("policy switched off in the T = 2 phase after {tokens} tokens", tokens=listed)
              if what.startswith("off") else
              say("policy switched on in the second T = 0 phase after {tokens} tokens", tokens=listed))
    print(say("left speculation during the first T = 0 phase in {n} of {total} streams", n=run.left_early,
              total=n_streams))
    print()


def print_twin_rows(twin_cal: Mapping[str, Mapping[str, Any]]) -> None:
    """Print α at T = 0, 0.7 and 1 and the over-confidence per checkpoint; returns None."""
    for ckpt, r in twin_cal.items():
        print(f"  {ckpt:12s} {r['alpha']['0']:.3f}   {r['alpha']['0.7']:.3f}     {r['alpha']['1']:.3f}   "
              f"{r['overconfidence']:+.3f}")
    print()


def latency_tails(target: Any, draft: Any, rows: Sequence[Mapping[str, Any]], batches: Sequence[int],
                  new_tokens: int = 24) -> dict[tuple[int, str], tuple[np.ndarray, dict]]:
    """{(B, method): (sorted gaps in ms, latency summary)}: plain and the best K at each B, one short live run."""
    out = {}
    for B in batches:
        k = next(r["k"] for r in rows if r["batch"] == B)
        ps = data.heldout_prompts("code", B, 48)
        for name, run in (("plain", lambda: batch.batch_generate(target, ps, new_tokens)),
                          (f"K={k}", lambda: batch.batch_speculative_generate(target, draft, ps, k, new_tokens))):
            stats = run()[1]
            out[B, name] = np.sort(bench_batch.inter_token_gaps(stats)) * 1e3, bench_batch.latency([stats])
    return out


def plot_serving(rows: Sequence[Mapping[str, Any]], tails: Mapping[tuple[int, str], tuple[np.ndarray, dict]],
                 setup: Mapping[str, Any]) -> None:
    """Draw the measured speedup per batch size beside the model, and the latency CDFs; returns None."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    bs = [r["batch"] for r in rows]
    iqr = np.array([[r["speedup"] - r["spread"]["q25"], r["spread"]["q75"] - r["speedup"]] for r in rows]).T
    ax.errorbar(bs, [r["speedup"] for r in rows], yerr=iqr, fmt="o-", capsize=3, label="measured, best K (median, IQR)")
    ax.plot(bs, [r["speedup_predicted"] for r in rows], "s--", label="model: f(B(K+1)) / f(B), α and c at B = 1")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xticks=bs, xticklabels=bs, xlabel="batch size B", ylabel="speedup over plain at the same B",
           title=f"draft-kl, T = {setup['temperature']:g}, {setup['prompts']} prompt sets")
    ax.legend(fontsize=8)
    for ((B, name), (gaps, t)), colour in zip(tails.items(), ("tab:blue", "tab:blue", "tab:red", "tab:red")):
        style = ":" if name == "plain" else "-"
        bx.plot(gaps, np.arange(1, len(gaps) + 1) / len(gaps), style, color=colour, label=f"B = {B}, {name}")
        bx.axvline(t["p99_ms"], color=colour, ls=style, lw=0.6)  # P99
        bx.plot([t["mean_ms"]], [np.mean(gaps <= t["mean_ms"])], "o", color=colour, ms=5)  # the mean, on its curve
    bx.set(xlabel="inter-token gap of one sequence (ms)", ylabel="CDF",
           title="latency tail (dots: mean; thin lines: P99)")
    bx.legend(fontsize=8)
    plt.show()


def print_serving(rows: Sequence[Mapping[str, Any]], gate: Mapping[str, Any],
                  tails: Mapping[tuple[int, str], tuple[np.ndarray, dict]]) -> None:
    """Print the crossovers, the model / measured ratios, how B >= 8 compares, and the latency tails; returns None."""
    print(say("measured crossover B = {measured}, the model's B = {model}; model / measured speedup: {ratios}",
              measured=gate['crossover'], model=gate['crossover_predicted'],
              ratios=", ".join(f"B = {r['batch']}: {r['predicted_over_measured']:.2f}" for r in rows)))
    big = [r for r in rows if r["batch"] >= 8]
    below = all(r["speedup"] < r["speedup_predicted"] for r in big)
    r_word = say("below") if all(r["r"] < r["r_predicted"] for r in big) else say("not below")
    print(say("at B >= 8 the measured speedup is below the model's (holds here); the measured r there is {r_word} the "
              "model's r", r_word=r_word) if below else
          say("at B >= 8 the measured speedup is not always below the model's (what was measured instead: see the "
              "ratios); the measured r there is {r_word} the model's r", r_word=r_word))
    for (B, name), (_, t) in tails.items():
        print(f"B = {B:2d} {name:5s}: mean {t['mean_ms']:.1f} ms, P50 {t['p50_ms']:.1f}, P99 {t['p99_ms']:.1f}, "
              f"P99 / mean {t['p99_over_mean']:.2f}")


def alpha_section(mean: Mapping[tuple[str, str], Mapping[str, np.ndarray]], corpus: str = "code") -> dict[str, Any]:
    """temperature.json's "alpha": per draft, the teacher-forced curves as lists."""
    return {name: {"sampled": mean[corpus, name]["sampled"].tolist(), "greedy": mean[corpus, name]["greedy"].tolist(),
                   "mismatch": mean[corpus, name]["mismatch"].tolist(),
                   "coverage": {"4": mean[corpus, name]["top4"].tolist()}} for name in ("draft-kl", "draft-ce")}


def wallclock_section(wall: Mapping[str, list], wall_spread: Mapping[str, list], n_prompts: int,
                      kind: str = "sampled") -> dict[str, Any]:
    """temperature.json's "wallclock" entry of draft-kl: T, K, τ and the speedup's median and IQR of ``kind``."""
    rows, spread = wall[kind], wall_spread[kind]
    return {"temperatures": [r[0] for r in rows], "k": [int(r[1]) for r in rows], "tau": [float(r[2]) for r in rows],
            "speedup": [float(r[3]) for r in rows], "kind": kind, "speedup_q25": [s["q25"] for s in spread],
            "speedup_q75": [s["q75"] for s in spread], "prompts": n_prompts}
