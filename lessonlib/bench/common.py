"""What every benchmark shares: one configuration, one way to time methods against plain
decoding (interleaved, fastest of ``repeats``, per prompt, summarised with a spread), the
machine it ran on, Markdown tables, and writing the JSON + Markdown pair under
``outputs/benchmarks/`` (``lessonlib.paths.benchmarks``).

The decode, tree and profile benchmarks all start from ``DEFAULTS`` and time through
``against_plain``, so the same configuration gives the same c, r and speedup in each of them.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform

import torch

from lessonlib import paths, threads
from lessonlib.jsonio import jsonable
from lessonlib.core.backend import describe
from lessonlib.decoding import measures, timing
from lessonlib.models import data

# held-out prompts, tokens per prompt, new tokens per run, timed runs per (method, prompt)
DEFAULTS = {"prompts": 5, "prompt_len": 64, "new_tokens": 128, "repeats": 3}


def parser(doc: str, repeats_help: str = "time every run this many times, keep the fastest") -> argparse.ArgumentParser:
    """The command line every benchmark shares: --prompts, --prompt-len, --new-tokens, --repeats."""
    out = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--prompts", type=int, default=DEFAULTS["prompts"])
    out.add_argument("--prompt-len", type=int, default=DEFAULTS["prompt_len"])
    out.add_argument("--new-tokens", type=int, default=DEFAULTS["new_tokens"])
    out.add_argument("--repeats", type=int, default=DEFAULTS["repeats"], help=repeats_help)
    return out


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parse a benchmark's command line; fewer than ``measures.MIN_PROMPTS`` prompts is an error
    (no conclusion from fewer)."""
    args = parser.parse_args(argv)
    if args.prompts < measures.MIN_PROMPTS:
        parser.error(f"--prompts must be >= {measures.MIN_PROMPTS}: no conclusion from fewer prompts")
    return args


def machine() -> dict:
    """The machine and settings a measurement was taken on."""
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "thread_policy": threads.describe(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "backend": describe()}


def prompts(corpus: str = "code", n: int = DEFAULTS["prompts"], length: int = DEFAULTS["prompt_len"]):
    """The benchmarks' prompts: ``data.heldout_prompts``, the one prompt slicer."""
    return data.heldout_prompts(corpus, n, length)


def against_plain(plain, methods: dict, prompt_list, repeats: int, same_tokens: bool = False) -> dict:
    """Time plain decoding and every method on each prompt, interleaved (``timing.interleaved``):
    ``plain(prompt, i)`` and ``methods[name](prompt, i)`` return (tokens, stats).

    Returns {"plain": [stats row per prompt], name: [stats row + measures.compare per prompt]}
    (rows: ``DecodeStats.as_dict``, the benchmarks' JSON): c, r and
    the speedup of prompt i are against plain decoding of prompt i in the same turn.
    ``same_tokens``: raise if a method's tokens differ from plain's (greedy decoding must be lossless).
    """
    runs = {"plain": lambda i: plain(prompt_list[i], i)}
    runs.update({name: (lambda i, run=run: run(prompt_list[i], i)) for name, run in methods.items()})
    best = timing.interleaved(runs, len(prompt_list), repeats)
    plain_stats = [stats for _, stats in best["plain"]]
    out = {"plain": [stats.as_dict() for stats in plain_stats]}
    for name in methods:
        if same_tokens:
            for i, ((tokens, _), (reference, _)) in enumerate(zip(best[name], best["plain"])):
                if tokens != reference:
                    raise AssertionError(f"{name}: greedy output on prompt {i} differs from plain greedy decoding")
        out[name] = measures.against_plain([stats for _, stats in best[name]], plain_stats)
    return out


def medians(spread: dict) -> dict:
    """{quantity: median} of a ``measures.summarise`` result (the flat numbers tables show)."""
    return {key: s["median"] for key, s in spread.items()}


def cell(spread: dict, key: str, digits: int = 2, unit: str = "") -> str:
    """'1.52× [1.41, 1.60]' for a table cell ('–' when the quantity was not measured):
    ``measures.fmt_spread`` without its ', n = 5' (the tables have a prompts column)."""
    if key not in spread:
        return "–"
    return measures.fmt_spread(spread[key], digits, unit, count=False)


def markdown_table(header, rows) -> str:
    """A Markdown table: ``header`` is a list of column names, ``rows`` lists of cells."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def write_report(stem: str, report: dict, markdown: str, out: pathlib.Path | None = None) -> pathlib.Path:
    """Write ``stem.json`` and ``stem.md``; returns the folder."""
    out = pathlib.Path(out) if out is not None else paths.benchmarks()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=jsonable) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    return out
