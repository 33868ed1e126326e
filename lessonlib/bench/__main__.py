"""``python -m lessonlib.bench {decode,tree,kinds,profile,record,load,shapes,peers,gpu} [options]``: each writes JSON
and Markdown under outputs/benchmarks/ (``--help`` after the name lists its options); decode,
tree and kinds also refresh the table of record, record.json / record.md."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {"decode": "lessonlib.bench.decode", "tree": "lessonlib.bench.tree", "kinds": "lessonlib.bench.kinds",
            "profile": "lessonlib.bench.profile", "record": "lessonlib.bench.record",
            "load": "lessonlib.bench.load", "shapes": "lessonlib.bench.shapes", "gpu": "lessonlib.bench.gpu",
            "peers": "lessonlib.bench.peers"}  # needs requirements-peers.txt


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip() + "\ncommands: " + ", ".join(COMMANDS), file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
