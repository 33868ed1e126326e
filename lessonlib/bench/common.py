"""What every benchmark shares: the machine it ran on, Markdown tables, and writing the
JSON + Markdown pair under ``outputs/benchmarks/`` (``lessonlib.paths.benchmarks``)."""
from __future__ import annotations

import json
import pathlib
import platform

import torch

from lessonlib import paths
from lessonlib.core.backend import describe


def machine() -> dict:
    """The machine and settings a measurement was taken on."""
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "backend": describe()}


def markdown_table(header, rows) -> str:
    """A Markdown table: ``header`` is a list of column names, ``rows`` lists of cells."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def write_report(stem: str, report: dict, markdown: str, out: pathlib.Path | None = None) -> pathlib.Path:
    """Write ``stem.json`` and ``stem.md``; returns the folder."""
    out = pathlib.Path(out) if out is not None else paths.benchmarks()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    return out
