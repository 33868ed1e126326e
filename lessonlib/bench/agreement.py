"""Run-to-run agreement: do two runs of the decode benchmark, back to back, give the same speedups?

    python -m lessonlib.bench agreement [decode options, e.g. --threads 1]   # two runs, then compare
    python -m lessonlib.bench agreement --compare A/decode.json B/decode.json

A speedup the course quotes is the median over prompts of per-prompt ratios, each the fastest of
interleaved repeats (``common.against_plain``). Whether that protocol is repeatable is itself a
measurement: for every chain row (threads, corpus, T, draft, K) this takes the ratio of the two
runs' median speedups, b / a, and the runs agree when |b / a - 1| <= ``TOLERANCE`` on every row.
The same seeds give the same tokens in both runs, so τ and α match exactly and any difference is
timing. The second run is kept as the decode benchmark (decode.json, and the record); the
comparison goes to agreement.json / agreement.md, and the record prints its line.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from lessonlib import cli, runs
from lessonlib.bench import common, decode
from lessonlib.bench.record import agreement_line as summary_line
from lessonlib.jsonio import read_json

TOLERANCE = 0.10  # the agreement asked of two runs of the same setting: within 10 %
KEY = ("threads", "corpus", "temperature", "draft", "k")


def _rows(report: dict) -> dict[tuple, dict]:
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise ValueError("a decode report must be a dict with a list of rows (python -m lessonlib.bench decode)")
    return {tuple(r.get(k) for k in KEY): r for r in report["rows"]}


def compare(a: dict, b: dict, tolerance: float = TOLERANCE) -> dict:
    """Row-by-row agreement of two decode reports (``decode.json`` contents) on the rows both have.

    Returns {"rows": [{key..., "speedup_a", "speedup_b", "ratio", "tau_equal"}], "max_deviation",
    "within", "rows_compared", "tolerance", "agree", "runs": [id a, id b]}; ValueError when the
    two reports share no row (different settings) or ``tolerance`` is not in (0, 1)."""
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    rows_a, rows_b = _rows(a), _rows(b)
    if a["rows"] == b["rows"]:  # a run compared with itself agrees trivially: that proves nothing
        raise ValueError("the two decode reports hold the same rows: compare two separate runs")
    shared = [key for key in rows_a if key in rows_b]
    if not shared:
        raise ValueError("the two decode reports share no (threads, corpus, T, draft, K) row: run them with the "
                         "same settings")
    out = []
    for key in shared:
        ra, rb = rows_a[key], rows_b[key]
        ratio = rb["speedup"] / ra["speedup"]
        out.append({**dict(zip(KEY, key)), "speedup_a": ra["speedup"], "speedup_b": rb["speedup"], "ratio": ratio,
                    "deviation": abs(ratio - 1), "tau_equal": bool(np.isclose(ra["tau"], rb["tau"]))})
    deviations = np.array([r["deviation"] for r in out])
    return {"rows": out, "rows_compared": len(out), "within": int((deviations <= tolerance).sum()),
            "max_deviation": float(deviations.max()), "median_deviation": float(np.median(deviations)),
            "tolerance": tolerance, "agree": bool((deviations <= tolerance).all()),
            "runs": _run_names(a, b), "settings": [a.get("settings"), b.get("settings")],
            "machine": a.get("machine") or {}}  # the first run's machine and engine (both decode runs share them)


def _run_names(a: dict, b: dict) -> list[str]:
    """The two reports' run ids; under one regeneration (one LESSONLIB_RUN) both carry the same id, so
    each is told apart by when it was written."""
    ids = [runs.of(a), runs.of(b)]
    if ids[0] is None or ids[0] != ids[1]:
        return [str(i) for i in ids]
    written = [(r.get("run") or {}).get("written", "?") for r in (a, b)]
    return [f"{ids[0]} (first run, written {written[0]})", f"{ids[1]} (second run, written {written[1]})"]


def markdown(result: dict) -> str:
    header = ["threads", "corpus", "T", "draft", "K", "speedup run a", "speedup run b", "b / a", "τ equal"]
    table = [[r["threads"], r["corpus"], f"{r['temperature']:g}", r["draft"], r["k"], f"{r['speedup_a']:.2f}×",
              f"{r['speedup_b']:.2f}×", f"{r['ratio']:.3f}", "yes" if r["tau_equal"] else "no"]
             for r in result["rows"]]
    return "\n".join(["# Run-to-run agreement of the decode benchmark", "", summary_line(result), "",
                      common.markdown_table(header, table), "",
                      f"Runs: {result['runs'][0]} and {result['runs'][1]}. Each speedup is the median over prompts "
                      "of per-prompt ratios, each the fastest of interleaved repeats (bench.common.against_plain); "
                      "the seeds are the same, so τ and α are equal and the ratio is timing alone."]) + "\n"


def main(argv=None):
    parser = decode.build_parser(__doc__)
    parser.add_argument("--compare", type=pathlib.Path, nargs=2, metavar=("A", "B"), default=None,
                        help="compare two existing decode.json files instead of running the benchmark twice")
    args = common.parse(parser, argv)
    if args.compare is not None:
        a, b = (read_json(p, "python -m lessonlib.bench decode") for p in args.compare)
        out = pathlib.Path(args.out) if args.out is not None else None
    else:
        started = time.time()
        a = decode.measure(args)
        b = decode.measure(args)
        out = decode.write(args, b)  # the second run is the decode benchmark of record
        print(f"two decode runs in {time.time() - started:.0f} s")
    result = compare(a, b)
    folder = common.write_report("agreement", result, markdown(result), out)
    print(markdown(result))
    return 0 if folder else 1


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench agreement"))
