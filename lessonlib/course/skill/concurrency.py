"""The skill file's concurrency gate, best K per batch size and P99 alert, from the batched benchmark.

``python -m lessonlib.bench batch`` measures plain and chain decoding over B sequences at once
(``batch.json``). When that report exists, the gate and the best K at each B are the measured
ones, and the cost model's prediction for the same run -- S = E(alpha, K) / (K c +
f(B (K + 1)) / f(B)), ``recommend.speedup_grid`` with alpha and c measured at B = 1 and the run's
single-sequence forward-cost curve f -- is printed beside them with its ratio to the measurement.
Without the report the gate is the model's (``recommend``'s ``concurrency_limit``), and the file
says so. The P99 alert comes from the measured inter-token latency tail.

Thresholds are the decision's: speculate at B while the best K's median speedup is >= 1 + margin
(``recommend.MARGIN``), switch off where it is <= 1 (``OFF_BELOW``: the crossover).
vLLM takes one per-batch-size setting, ``disable_by_batch_size`` in ``--speculative-config``
(``vllm.config.SpeculativeConfig``: "Disable speculative decoding for new incoming requests when
the number of enqueued requests is larger than this value", an integer >= 2; docs.vllm.ai, API
reference ``vllm.config.speculative``). SGLang's documented server arguments
(``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``)
have no per-batch-size switch, so no SGLang setting is emitted.
"""
from __future__ import annotations

import json

import numpy as np

from lessonlib.bench import common, record
from lessonlib.course.skill.recommend import MARGIN, OFF_BELOW, measured_limit, speedup_grid, verify_cost

VLLM_DOC = "docs.vllm.ai, API reference `vllm.config.speculative` (`SpeculativeConfig.disable_by_batch_size`)"


def load(folder=None) -> dict | None:
    """The batched benchmark's report (outputs folder, else the shipped one), or None."""
    return record.read("batch", folder)


def _anchor(report) -> dict:
    """alpha and c at B = 1 (the model's inputs): the B = 1 row's best K."""
    row = next(r for r in report["rows"] if r["batch"] == 1)
    best = next(c for c in row["chains"] if c["k"] == row["best_k"])
    return {"alpha": best["alpha"], "c": best["c"], "k": best["k"]}


def table(report) -> list[dict]:
    """Per measured B: the measured best K and speedup against the model's, and r measured vs
    predicted at the measured best K (the prediction/measurement ratios)."""
    fc = (report["forward_cost"]["tokens"], report["forward_cost"]["cost"])
    ks = report["setup"]["ks"]
    base = _anchor(report) if any(r["batch"] == 1 for r in report["rows"]) else None
    out = []
    for r in report["rows"]:
        best = next(c for c in r["chains"] if c["k"] == r["best_k"])
        row = {"batch": r["batch"], "k": r["best_k"], "speedup": r["best_speedup"], "spread": r["best_spread"],
               "r": best["r"], "off": r["best_speedup"] <= OFF_BELOW}
        if base:  # the model on this run: alpha and c at B = 1, the single-sequence curve f stretched to B
            grid = speedup_grid(base["alpha"], base["c"], max(ks), None, r["batch"], fc)[1][0]  # (K,) chains
            r_pred = float(verify_cost(r["best_k"] + 1, r["batch"], fc))
            row |= {"k_predicted": int(np.argmax(grid)) + 1, "speedup_predicted": float(grid.max()),
                    "predicted_over_measured": float(grid.max()) / r["best_speedup"],
                    "r_predicted": r_pred, "r_predicted_over_measured": r_pred / best["r"]}
        out.append(row)
    return out


def measured(report) -> dict[int, dict]:
    """{B: {"speedup": the best K's median speedup, "k": that K}}: ``recommend``'s ``measured_concurrency``."""
    return {int(r["batch"]): {"speedup": float(r["best_speedup"]), "k": int(r["best_k"])} for r in report["rows"]}


def gate(rows) -> dict:
    """The measured gate: the largest B still >= 1 + margin (0: none), the crossover (the smallest
    B <= 1, None: none measured) and the model's crossover on the same run."""
    off = [r["batch"] for r in rows if r["off"]]
    pred = [r["batch"] for r in rows if r.get("speedup_predicted") is not None and r["speedup_predicted"] <= OFF_BELOW]
    limit = measured_limit({r["batch"]: r for r in rows})  # the decision's own rule: >= 1 + margin
    return {"limit": limit, "crossover": min(off) if off else None,
            "crossover_predicted": min(pred) if pred else None}


def p99_alert(report) -> list[dict]:
    """Per latency row pair (plain and the best K at one B): the P99 to alert above and the tail ratios."""
    out = []
    by_batch: dict[int, dict] = {}
    for x in report["latency"]:
        by_batch.setdefault(x["batch"], {})["plain" if x["method"] == "plain" else "spec"] = x
    for batch, pair in sorted(by_batch.items()):
        if "plain" in pair and "spec" in pair:
            out.append({"batch": batch, "method": pair["spec"]["method"], "alert_above_ms": pair["spec"]["p99_ms"],
                        "plain_p99_ms": pair["plain"]["p99_ms"],
                        "p99_over_mean": pair["spec"]["p99_over_mean"],
                        "plain_p99_over_mean": pair["plain"]["p99_over_mean"],
                        "p99_spec_over_plain": pair["spec"]["p99_ms"] / pair["plain"]["p99_ms"]})
    return out


def vllm_setting(limit: int) -> dict:
    """vLLM's per-batch-size switch for a measured limit (speculate while the batch is <= limit)."""
    return {"disable_by_batch_size": max(2, int(limit))}


def _fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def lines(x) -> list[str]:
    """The skill file's section: the measured gate and best K per B beside the model, the P99
    alert, the vLLM setting; or, without the report, which command measures it."""
    report = x.get("batch")
    if not report:
        return ["## Concurrency: not measured\n",
                "No batched measurement yet: the concurrency limit in step 7 is the cost model's (`verify_cost`, "
                "a single sequence's forwards stretched to batch B), not measured. `python -m lessonlib.bench batch` "
                "measures it.\n"]
    rows, s = table(report), report["setup"]
    g = gate(rows)
    body = [[r["batch"], r["k"], common.cell({"speedup": r["spread"]}, "speedup", unit="×"), _fmt(r["r"]),
             r.get("k_predicted", "–"), _fmt(r.get("speedup_predicted")), _fmt(r.get("predicted_over_measured")),
             _fmt(r.get("r_predicted")), _fmt(r.get("r_predicted_over_measured"))] for r in rows]
    cross, pred = g["crossover"], g["crossover_predicted"]
    near = (cross is not None and pred is not None
            and abs(s["batches"].index(cross) - s["batches"].index(pred)) <= 1)
    out = ["## Concurrency: measured\n",
           f"Measured with `python -m lessonlib.bench batch` (`batch.json`): `target` and `draft-kl`, "
           f"T = {s['temperature']:g}, B sequences decoded at once, {s['prompts']} prompt sets, median [IQR]. "
           "The gate and the best K per batch size below are these measurements; \"model\" is the cost model on "
           "the same run (α and c at B = 1, the run's single-sequence f(n)), and model / measured is printed "
           "beside each.\n",
           common.markdown_table(["B", "best K", "speedup", "r measured", "model K", "model S", "model / measured",
                                  "model r", "model r / measured"], body), "",
           "- **Concurrency gate** (measured): "
           + (f"speculate while B ≤ {g['limit']}" if g["limit"] else "speculate at no measured B")
           + f" (best K at ≥ 1 + margin = {1 + MARGIN:g}); the crossover, where the best K is no faster than plain, "
           f"is {'B = %d' % cross if cross else 'beyond B = %d' % s['batches'][-1]}; the model predicts "
           f"{'B = %d' % pred if pred else 'beyond B = %d' % s['batches'][-1]} "
           + ("(within one batch-size step: holds here)." if near else "(not within one batch-size step here: "
              "trust the measured gate and re-measure on your engine).")]
    out += [_alert_line(a) for a in p99_alert(report)]
    return out + _vllm_lines(g["limit"], rows[0]["k"])


def _alert_line(a) -> str:
    """One P99 alert, with the tail claim stated as a condition on this run's numbers."""
    grows = a["p99_over_mean"] > a["plain_p99_over_mean"]
    return (f"- **P99 alert** at B = {a['batch']} ({a['method']}): alert when the P99 inter-token latency exceeds "
            f"{a['alert_above_ms']:.1f} ms, the measured P99 (plain decoding's: {a['plain_p99_ms']:.1f} ms); "
            f"P99 / mean = {a['p99_over_mean']:.2f} with speculation, {a['plain_p99_over_mean']:.2f} without: "
            + ("the tail grows relative to the mean, as expected when a round's tokens arrive together (holds here)."
               if grows else "the tail did not grow relative to the mean here."))


def _vllm_lines(limit: int, k: int) -> list[str]:
    """vLLM's setting for the measured gate (SGLang: none to emit)."""
    head = ["", f"vLLM switches speculation off above a batch size with `disable_by_batch_size` ({VLLM_DOC}; an "
            "integer ≥ 2: new requests are not speculated while more than that many are enqueued)."]
    tail = ["", "SGLang's documented server arguments take no per-batch-size speculative setting: run two "
            "deployments or switch by load outside the engine.\n"]
    if limit < 1:
        return head + [" At these measurements no batch size pays: leave speculation off."] + tail
    vllm = {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": k, **vllm_setting(limit)}
    note = " (the gate is 1, below vLLM's minimum of 2: this speculates up to B = 2)" if limit < 2 else ""
    return head + [f"From the measured gate, K from B = 1{note}:", "", "```bash",
                   f"vllm serve Qwen/Qwen3-8B --speculative-config '{json.dumps(vllm)}'", "```"] + tail
