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

from lessonlib import cli, paths, runs, threads
from lessonlib.core.backend import describe
from lessonlib.decoding import measures, timing
from lessonlib.engines import native, resolve
from lessonlib.jsonio import jsonable, write_together
from lessonlib.models import data

# held-out prompts, tokens per prompt, new tokens per run, timed runs per (method, prompt)
DEFAULTS = {"prompts": 5, "prompt_len": 64, "new_tokens": 128, "repeats": 3}


def parser(doc: str, repeats_help: str = "time every run this many times, keep the fastest") -> argparse.ArgumentParser:
    """The command line every benchmark shares: --prompts, --prompt-len, --new-tokens, --repeats."""
    out = cli.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--prompts", type=PROMPTS, default=DEFAULTS["prompts"],
                     help=f"held-out prompts (>= {measures.MIN_PROMPTS})")
    out.add_argument("--prompt-len", type=cli.positive_int, default=DEFAULTS["prompt_len"])
    out.add_argument("--new-tokens", type=cli.positive_int, default=DEFAULTS["new_tokens"])
    out.add_argument("--repeats", type=cli.positive_int, default=DEFAULTS["repeats"], help=repeats_help)
    return out


# every benchmark's --prompts: no conclusion from fewer than measures.MIN_PROMPTS prompts
PROMPTS = cli.int_at_least(measures.MIN_PROMPTS)


def parse(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parse a benchmark's command line (the flags' types refuse a bad value, e.g. fewer than
    ``measures.MIN_PROMPTS`` prompts); an unusable ``LESSONLIB_OUTPUTS`` is refused here, before
    anything is measured."""
    args = parser.parse_args(argv)
    if hasattr(args, "prompt_len") and hasattr(args, "new_tokens"):
        context = _target_context()
        if args.prompt_len + args.new_tokens > context:
            parser.error(f"--prompt-len + --new-tokens must fit the target's context of {context} tokens, "
                         f"got {args.prompt_len} + {args.new_tokens}")
    if hasattr(args, "ks"):
        check_ks(parser, args.ks, getattr(args, "prompt_len", 0), getattr(args, "new_tokens", 0))
    try:  # everything the run will read from the environment or write to, before it measures anything
        runs.run_id()  # LESSONLIB_RUN, stamped into the report when it is written
        threads.policy()  # LESSONLIB_THREADS
        out = getattr(args, "out", None)
        cli.check_writable_folder(pathlib.Path(out) if out is not None else paths.benchmarks(),
                                  cli.outputs_name(out))
    except ValueError as err:
        parser.error(str(err))
    return args


MAX_K = 64  # the largest draft length a benchmark runs (the skill file's table stops at K = 64)


def check_ks(parser: argparse.ArgumentParser, ks, prompt_len: int, new_tokens: int) -> None:
    """--ks: every K at most ``MAX_K``, and the prompt, the new tokens and the last round's K - 1
    extra scored positions fit the target's context; an error names --ks."""
    if max(ks) > MAX_K:
        parser.error(f"argument --ks: {max(ks)} (expected draft lengths <= {MAX_K})")
    context = _target_context()
    if prompt_len + new_tokens + max(ks) - 1 > context:
        parser.error(f"argument --ks: --prompt-len + --new-tokens + max K - 1 must fit the target's context of "
                     f"{context} tokens, got {prompt_len} + {new_tokens} + {max(ks)} - 1")


def _target_context() -> int:
    """The shipped target's context length (its metadata; the CPU-scale and GPU-scale targets share it)."""
    from lessonlib.models import checkpoints

    return int(checkpoints.read_meta("target").get("config", {}).get("block_size", 0)) or 10**9


# which forward the benchmarks decode with (the record says which path each row used)
DECODE_PATH = ("fast: every model loaded with engines.load is an engines.fast.FastGPT on the PyTorch fast path "
               "(target and drafts), and the EAGLE, EAGLE-3 and MTP draft steps run fast.head_block")
NATIVE_PATH = ("native: every model loaded with engines.load is an engines.fast.FastGPT whose batch-1 cached calls "
               "of up to engines.native.MAX_T tokens, and the EAGLE, EAGLE-3 and MTP draft steps, run engines/native.c")


def decode_path() -> str:
    """``NATIVE_PATH`` where ``engines.load``'s "auto" picks the native forward here, else ``DECODE_PATH``."""
    return NATIVE_PATH if resolve("auto") == "native" else DECODE_PATH


def machine() -> dict:
    """The machine and settings a measurement was taken on."""
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "thread_policy": threads.describe(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "backend": describe(), "decode_path": decode_path(), "engine": resolve("auto"),
            "native": native.status()}


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


def report_files(stem: str, report: dict, markdown: str, out: pathlib.Path | None = None) -> dict:
    """{path: text} of ``stem.json`` and ``stem.md`` in ``out`` (default paths.benchmarks()): the JSON
    serialised with the run that wrote it under "run" (``runs.stamp``: the regeneration's id, or this
    process's own); a report that cannot be serialised raises here, before any file is touched."""
    out = pathlib.Path(out) if out is not None else paths.benchmarks()
    text = json.dumps({**report, "run": runs.stamp()}, indent=1, default=jsonable) + "\n"
    return {out / f"{stem}.json": text, out / f"{stem}.md": markdown}


def write_report(stem: str, report: dict, markdown: str, out: pathlib.Path | None = None) -> pathlib.Path:
    """Write ``stem.json`` and ``stem.md`` together (``jsonio.write_together``: an interrupt leaves
    both old files or both new ones, and no temporary file); returns the folder. A benchmark whose
    rows enter the table of record writes through ``record.write_with`` instead (the record too)."""
    out = pathlib.Path(out) if out is not None else paths.benchmarks()
    write_together(report_files(stem, report, markdown, out))
    return out
