"""``python -m lessonlib.bench NAME [options]`` (NAME in ``COMMANDS``): each writes JSON and Markdown under
outputs/benchmarks/ (``--help`` after the name lists its options); decode, tree, kinds, sampled and
batch also refresh the table of record, record.json / record.md."""
from __future__ import annotations

import importlib
import sys

from lessonlib import cli

COMMANDS = {"decode": "lessonlib.bench.decode", "tree": "lessonlib.bench.tree", "kinds": "lessonlib.bench.kinds",
            "sampled": "lessonlib.bench.sampled", "calibration": "lessonlib.bench.calibration",
            "profile": "lessonlib.bench.profile", "record": "lessonlib.bench.record",
            "load": "lessonlib.bench.load", "shapes": "lessonlib.bench.shapes", "gpu": "lessonlib.bench.gpu",
            "peers": "lessonlib.bench.peers",  # needs requirements-peers.txt
            "bandwidth": "lessonlib.bench.bandwidth",
            "batch": "lessonlib.bench.batch",  # B sequences at once: speedup against the batch size
            "agreement": "lessonlib.bench.agreement",  # two decode runs back to back, row by row
            "llm-engines": "lessonlib.bench.llm_engines",  # the real LLM's engines against the memory bound
            "llm": "lessonlib.bench.llm"}  # the real LLM: draft-free speculation over the fastest plain decoding


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip() + "\ncommands: " + ", ".join(COMMANDS), file=sys.stderr)
        return 2
    name = argv[0]
    # imported inside cli.run: a bad LESSONLIB_THREADS or LESSONLIB_BACKEND, read at import, is one line too
    return cli.run(lambda args: importlib.import_module(COMMANDS[name]).main(args), argv[1:],
                   prog=f"python -m lessonlib.bench {name}")


if __name__ == "__main__":
    sys.exit(main())
