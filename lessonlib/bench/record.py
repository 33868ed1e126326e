"""The table of record: ``python -m lessonlib.bench record`` writes outputs/benchmarks/record.{json,md}.

One row per method and setting -- plain decoding and chain drafts at every K from the decode
benchmark (``decode.json``), every row of the tree benchmark's methods table (``tree.json``), each
draft kind's best chain and tree at T = 0 and 1 (``kinds.json``, also appended as its table), plain
decoding and the best chain at each batch size B (``batch.json``: B sequences at once), and each
engine's plain and speculative rows on the same weights (``peers.json``; a peer row's speedup is
against that engine's own plain decoding), and the real LLM's methods (``llm.json``) -- each row
naming its target (``COURSE_GPT``, ``SMOLLM2``) and engine, with tau, alpha measured while decoding, c,
r, the speedup and tokens/s, each the median over prompts with its inter-quartile range, the number
of prompts, the thread count and the machine. Every
number comes from ``lessonlib.decoding.measures`` through ``bench.common.against_plain``.
The decode and tree benchmarks refresh the record when they finish; ``record`` alone
rebuilds it from their JSON files (run ``decode`` and ``tree`` first for a fresh record).
Notebooks that show a benchmark number read it from here (``load``, ``find``, ``read``); each
notebook's last cell prints ``quoted()``, the run of every report it read, and
tests/course/test_provenance.py fails when a committed notebook quotes another run than the
committed report (a benchmark re-run without re-executing the notebooks that quote it).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import warnings

from lessonlib import cli, paths, runs
from lessonlib.bench import common, current
from lessonlib.jsonio import read_json, write_together

# draft_cost_per_round: a round's drafting / one-token target step (K c for a chain; a tree's or lookup's: no single c)
QUANTITIES = ("tau", "alpha", "c", "draft_cost_per_round", "r", "speedup", "tokens_per_second")
SOURCES = ("decode", "tree", "kinds", "sampled", "batch", "peers", "llm")
COURSE_GPT, SMOLLM2 = "course GPT", "SmolLM2-135M"  # the targets: models.gpt's 24 x 160 GPT; the real LLM (bench.llm)


def _row(source, report, row, setting) -> dict:
    spread = dict(row.get("spread", {}))
    if "draft_cost_per_round" not in spread and "c" in spread and row.get("k"):  # a chain drafts K steps of c
        spread["draft_cost_per_round"] = {q: row["k"] * v if q != "n" else v for q, v in spread["c"].items()}
    return {"source": source, "target": row.get("target", COURSE_GPT), "method": row["method"],
            "family": row.get("family", f"chain {row.get('draft')}"),
            "k": row.get("k"), **setting, "threads": row.get("threads", setting.get("threads")),
            **{key: spread.get(key) for key in QUANTITIES}, "prompts": row.get("prompts", setting.get("prompts")),
            "machine": report.get("machine", {}), "run": runs.of(report),
            "path": row.get("path") or _path(report)}


def _path(report) -> str:
    """Which forward a report's rows decoded with: "native", "fast" or "readable" when the report
    says so (``current.engine_of``), else "not recorded" (reports written before it was recorded)."""
    return current.engine_of(report) or "not recorded"


def _report(path: pathlib.Path) -> dict:
    """A benchmark's JSON report (``jsonio.read_json``: a corrupt file names its rebuild command)."""
    return read_json(path, f"python -m lessonlib.bench {path.stem}")


def collect(folder: pathlib.Path | None = None, pending: dict | None = None) -> list[dict]:
    """Every method row of the benchmark reports found in ``folder`` (default: paths.benchmarks());
    ``pending``: {stem: report} about to be written there, read instead of the files (``write_with``).
    A report that lacks a field a row needs, or holds one of the wrong type, raises ValueError
    naming that report's file and the command that rebuilds it (``python -m lessonlib.bench STEM``)."""
    folder = pathlib.Path(folder) if folder is not None else paths.benchmarks()
    pending = pending or {}
    rows = []
    for stem in SOURCES:
        path = folder / f"{stem}.json"
        report = pending[stem] if stem in pending else _report(path) if path.exists() else None
        if report is None:
            continue
        try:
            rows += ROWS[stem](report)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as err:
            raise ValueError(f"{path} lacks a field the record needs or holds one of the wrong type ({err!r}); "
                             f"rebuild it with: python -m lessonlib.bench {stem}") from None
    return rows


def _rows(report, key: str = "rows", default=None) -> list[dict]:
    """``report[key]``: a list of JSON objects (a row of another type is refused, not skipped)."""
    rows = report[key] if default is None else report.get(key, default)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"{key!r} must be a list of JSON objects")
    return rows


def _setup(report) -> dict:
    """The settings every row of the kinds and sampled reports shares (their ``setup``)."""
    s = report["setup"]
    return {"corpus": s.get("corpus_name", "code"), "threads": s.get("threads"), "prompts": s.get("prompts"),
            "new_tokens": s.get("new_tokens"), "prompt_tokens": s.get("prompt_tokens"), "repeats": s.get("repeats")}


def _decode_rows(report) -> list[dict]:
    s = report.get("settings", {})
    setting = {"new_tokens": s.get("new_tokens"), "prompt_tokens": s.get("prompt_len"), "repeats": s.get("repeats")}
    return ([_row("decode", report, r | {"method": "plain", "family": "plain"},
                  setting | {"corpus": r["corpus"], "temperature": r["temperature"]})
             for r in _rows(report, "plain", []) if "spread" in r]
            + [_row("decode", report, r, setting | {"corpus": r["corpus"], "temperature": r["temperature"]})
               for r in _rows(report) if "spread" in r])


def _tree_rows(report) -> list[dict]:
    s = report["setup"]
    setting = {"corpus": s.get("corpus_name", "code"), "temperature": s.get("temperature", 0.0),
               "threads": s.get("threads"), "prompts": s.get("prompts"), "new_tokens": s.get("new_tokens"),
               "prompt_tokens": s.get("prompt_tokens"), "repeats": s.get("repeats")}
    return [_row("tree", report, r, setting) for r in _rows(report) if r["method"] != "plain" and "spread" in r]


def _kinds_rows(report) -> list[dict]:  # every draft kind's best chain and tree at T = 0 and T = 1 (bench.kinds)
    return [_row("kinds", report, r, _setup(report) | {"temperature": r["temperature"]})
            for r in _rows(report) if r["method"] != "plain" and "spread" in r]


def _sampled_rows(report) -> list[dict]:  # every kind with each tree rule at T = 0, 0.7, 1 and top-p 0.95
    return [_row("sampled", report, r | {"method": f"{r['method']} ({r['setting']})"},
                 _setup(report) | {"temperature": r["temperature"]})
            for r in _rows(report) if r["method"] != "plain" and "spread" in r]


def _batch_rows(report) -> list[dict]:  # plain and the best chain at each batch size B (bench.batch)
    s = report["setup"]
    setting = {"corpus": "code", "temperature": s.get("temperature", 0.0), "threads": s.get("threads"),
               "new_tokens": s.get("new_tokens"), "prompt_tokens": s.get("prompt_len"), "repeats": s.get("repeats")}
    return [_row("batch", report, r, setting | {"batch": r["batch"]}) for r in _rows(report, "record_rows")]


def _peers_rows(report) -> list[dict]:  # lessonlib, transformers and llama.cpp on the same weights (bench.peers)
    s = report["setup"]
    setting = {"corpus": "code", "temperature": s.get("temperature", 0.0), "prompts": s.get("prompts"),
               "new_tokens": s.get("new_tokens"), "prompt_tokens": s.get("prompt_tokens"), "repeats": s.get("repeats")}
    return [_row("peers", report, r | {"family": r["method"],  # speedup: against the same engine's plain
                                       "spread": {q: r[q] for q in ("tau", "speedup", "tokens_per_second")
                                                  if isinstance(r.get(q), dict)}}, setting)
            for r in _rows(report)]


def _llm_rows(report) -> list[dict]:  # the real LLM's methods on its fastest engine per thread count (bench.llm)
    out, setting = [], {"new_tokens": report.get("new_tokens"), "repeats": report.get("repeats")}
    for n, at in report["by_threads"].items():
        for prompts, by_method in at["methods"].items():
            corpus, _, hot = prompts.partition(" · T = ")  # "<set> · T = 1": that prompt set at T = 1
            out += [_row("llm", report, {"method": name, "family": name, "spread": r["spread"], "threads": int(n),
                                         "prompts": r.get("prompts"), "target": SMOLLM2, "path": at["baseline_engine"]},
                         setting | {"corpus": corpus, "temperature": float(hot or 0.0)})
                    for name, r in by_method.items() if name != "plain" and r.get("spread")]
    return out


ROWS = {"decode": _decode_rows, "tree": _tree_rows, "kinds": _kinds_rows, "sampled": _sampled_rows,
        "batch": _batch_rows, "peers": _peers_rows, "llm": _llm_rows}  # in SOURCES' order: the record's row order


def shown(rows) -> list[dict]:
    """The rows ``record.md`` shows: each chain draft at its best K per setting, every tree-benchmark row."""
    best = {}
    for r in rows:
        if r["source"] != "decode" or r["family"] == "plain":
            best[id(r)] = r  # plain decoding and the tree benchmark's rows: all shown
            continue
        key = (r["family"], r["corpus"], r["temperature"], r["threads"])
        if key not in best or r["speedup"]["median"] > best[key]["speedup"]["median"]:
            best[key] = r
    return list(best.values())


def cell(row, key, digits=2, unit="") -> str:
    """One quantity of a record row, '1.52× [1.41, 1.60]' ('–' when it was not measured)."""
    return common.cell({key: row[key]} if row.get(key) else {}, key, digits, unit)


def provenance_lines(rows, folder: pathlib.Path | None = None) -> list[str]:
    """The record's last lines: which run each source came from, and the run-to-run agreement
    of the decode benchmark when ``agreement.json`` exists (``bench.agreement``)."""
    ids: dict = {}
    paths_of: dict = {}
    for r in rows:
        ids.setdefault(r["source"], r.get("run") or "not recorded")
        paths_of.setdefault(r["source"], r.get("path", "not recorded"))
    lines = ["Runs: " + "; ".join(f"{source} {run}" for source, run in ids.items())
             + (" (one run)" if len(set(ids.values())) == 1 else " (separate runs: compare rows of one source)")]
    lines.append("Decode path (fast = engines.fast, native = engines.native, batched = engines.batched, readable = "
                 "models.gpt; native f16 = engines.llama's native forward of the real LLM): "
                 + "; ".join(f"{source} {path}" for source, path in paths_of.items()))
    report = read("agreement", folder)
    if report:
        line = agreement_line(report)
        decode_run = ids.get("decode")
        if decode_run and not any(str(run).startswith(str(decode_run)) for run in report.get("runs", [])):
            line += (f" The decode rows above are from another run ({decode_run}): that agreement was measured on "
                     "two earlier runs, not on this one.")
        lines.append(line)
    return lines


def agreement_line(result: dict) -> str:
    """The one line about run-to-run agreement (``bench.agreement.compare``'s result)."""
    worst = max(result["rows"], key=lambda r: r["deviation"])
    verdict = "agree" if result["agree"] else "do not all agree"
    return (f"Run-to-run agreement (agreement.md): two back-to-back decode runs {verdict}: {result['within']} of "
            f"{result['rows_compared']} chain rows within {result['tolerance']:.0%}; median "
            f"|b/a - 1| = {result['median_deviation']:.1%}, worst {result['max_deviation']:.1%} "
            f"({worst['draft']} K={worst['k']}, {worst['corpus']} T={worst['temperature']:g}, "
            f"{worst['threads']} thread(s)).")


def markdown(rows, folder: pathlib.Path | None = None) -> str:
    header = ["target", "method", "source", "corpus", "T", "threads", "τ", "α (decoding)", "c", "draft cost / round",
              "r", "speedup", "tokens/s", "prompts"]
    digits = {"alpha": 3, "c": 3, "draft_cost_per_round": 3, "tokens_per_second": 0}
    table = [[r.get("target", COURSE_GPT), r["method"], r["source"], r["corpus"], f"{r['temperature']:g}", r["threads"],
              *(cell(r, k, digits.get(k, 2), "×" if k == "speedup" else "") for k in QUANTITIES), r["prompts"]]
             for r in shown(rows)]
    machines = {json.dumps({k: r["machine"].get(k) for k in ("platform", "processor", "torch")}) for r in rows}
    lines = ["# Table of record", "",
             "Median over prompts [inter-quartile range]. τ = tokens per target forward; α = accepted / judged drafts, "
             "measured while decoding; c = draft step / one-token target step, draft cost / round = a round's "
             "drafting / one-token step (K c for a chain), r = verify forward / one-token step, all timed in the "
             "decoding loops; speedup = plain s/token / method s/token on the same "
             "prompt, plain and method runs interleaved (lessonlib.decoding.measures). Chain rows show each draft at "
             "its best K; record.json holds every K. A method two benchmarks measured appears once per source: they "
             "are separate runs, which on this machine can differ by more than their IQRs, so quote a row with its "
             "source. Target: the course GPT (24 × 160, 7.75 M parameters, `models.gpt`) or SmolLM2-135M-Instruct "
             "(the real LLM, `bench llm`; corpus = its prompt set, speedups over its fastest plain engine).", "",
             common.markdown_table(header, table), "",
             "Machine: " + "; ".join(sorted(machines)), "", *provenance_lines(rows, folder)]
    return "\n".join(lines) + "\n"


def write(folder: pathlib.Path | None = None) -> pathlib.Path:
    """Rebuild record.json and record.md in ``folder`` from the benchmark reports there; record.md
    ends with the draft-kinds comparison (kinds.md) when the kinds benchmark has run."""
    folder = pathlib.Path(folder) if folder is not None else paths.benchmarks()
    write_together(_record_files(folder, {}, {}))
    return folder


def write_with(stem: str, report: dict, md: str, folder: pathlib.Path | None = None) -> pathlib.Path:
    """Write a benchmark's ``stem.json`` and ``stem.md`` and the record rebuilt with them, all five
    files' changes at once (``jsonio.write_together``): an interrupt or an error leaves the old
    report, Markdown and record, or all the new ones. Returns the folder."""
    folder = pathlib.Path(folder) if folder is not None else paths.benchmarks()
    files = common.report_files(stem, report, md, folder)
    new = json.loads(files[folder / f"{stem}.json"])  # exactly what the file will hold, run stamp included
    write_together(files | _record_files(folder, {stem: new}, {stem: md}))
    return folder


def _record_files(folder: pathlib.Path, pending: dict, pending_md: dict) -> dict:
    rows = collect(folder, pending)
    text = markdown(rows, folder)
    kinds = pending_md.get("kinds") or ((folder / "kinds.md").read_text() if (folder / "kinds.md").exists() else "")
    if kinds:
        text += "\n" + kinds.replace("# Draft kinds on one target", "## Draft kinds on one target (kinds.md)", 1)
    sources = [s for s in SOURCES if any(r["source"] == s for r in rows)]
    runs_of = {s: next(r["run"] for r in rows if r["source"] == s) for s in sources}  # the run each source came from
    return common.report_files("record", {"rows": rows, "quantities": list(QUANTITIES), "sources": sources,
                                          "source_runs": runs_of}, text, folder)


_QUOTED: dict[str, str] = {}  # report -> run id, for every report this process has read (``quoted``)
QUOTED = "Quoted from the benchmark reports: "  # the line ``quoted`` prints; the provenance test parses it
UNRECORDED = "unrecorded"  # a report written before runs were stamped


def _note(report: dict, stem: str) -> None:
    """Remember which run ``stem`` came from; the record stands for every source it was built from."""
    if stem == "record":
        for source, run in (report.get("source_runs") or {}).items():
            _QUOTED[source] = str(run) if run else UNRECORDED
    else:
        _QUOTED[stem] = str(runs.of(report) or UNRECORDED)


def quoted() -> str:
    """One line, ``QUOTED`` then ``report=run id; ...``: each report this process read (directly or
    through the record) and the run it came from ("none" when nothing was read)."""
    if not _QUOTED:
        return QUOTED + "none"
    return QUOTED + "; ".join(f"{stem}={run}" for stem, run in sorted(_QUOTED.items()))


def parse_quoted(line: str) -> dict[str, str]:
    """{report: run id} from a line ``quoted`` printed (ValueError on any other line)."""
    if not isinstance(line, str) or not line.startswith(QUOTED):
        raise ValueError(f"line must start with {QUOTED!r}, got {line!r}")
    body = line[len(QUOTED):].strip()
    if body == "none":
        return {}
    out = {}
    for part in body.split("; "):
        stem, sep, run = part.partition("=")
        if not sep or not stem.isidentifier() or not runs.PATTERN.fullmatch(run):
            raise ValueError(f"each report reads 'NAME=RUN', got {part!r}")
        out[stem] = run
    return out


def where(stem: str, folder: pathlib.Path | None = None) -> pathlib.Path | None:
    """The file ``read(stem, folder)`` reads: ``stem.json`` in ``folder`` (default
    paths.benchmarks()), else the shipped one in the repository's outputs/benchmarks/, else None."""
    for base in (pathlib.Path(folder) if folder is not None else paths.benchmarks(),
                 paths.ROOT / "outputs" / "benchmarks"):
        if (base / f"{stem}.json").exists():
            return base / f"{stem}.json"
    return None


def read(stem: str, folder: pathlib.Path | None = None) -> dict | None:
    """A benchmark report ``stem.json`` from ``folder`` (default paths.benchmarks()), else the
    shipped one in the repository's outputs/benchmarks/ (tests point the outputs elsewhere);
    None when neither exists. Its run is remembered for ``quoted``."""
    path = where(stem, folder)
    if path is None:
        return None
    report = _report(path)
    _note(report, stem)
    why = current.why_historical(report, stem)
    if why is not None:  # shown under the cell that read it: the page says the numbers are historical
        warnings.warn(why, stacklevel=2)
    return report


def load(folder: pathlib.Path | None = None) -> list[dict]:
    """The record's rows (empty when no benchmark has run: notebooks then say so)."""
    report = read("record", folder)
    if report and not isinstance(report.get("rows"), list):
        raise ValueError("record.json has no list of rows; rebuild it with: python -m lessonlib.bench record")
    return report["rows"] if report else []


def find(rows, **where) -> list[dict]:
    """The rows whose fields equal every ``where`` item, e.g. find(rows, family="chain draft-kl", threads=1)."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = common.parse(parser, argv)
    out = write(args.out)
    print((out / "record.md").read_text())


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench record"))
