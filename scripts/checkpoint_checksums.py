"""One-off migration: record checksums and target fingerprints in checkpoint metadata saved
before ``checkpoints.save`` recorded them itself (issue 54, item 6).

    python scripts/checkpoint_checksums.py                 # stamp lessonlib/assets/*.json
    python scripts/checkpoint_checksums.py --check         # exit 1 when a metadata file lacks or
                                                            # disagrees with what it would record
    python scripts/checkpoint_checksums.py --dir FOLDER    # another checkpoint folder

For every ``NAME.json`` beside a ``NAME.safetensors`` it records what ``save`` records today:
``sha256`` (the weights file's bytes) and ``config_sha256`` (its config), plus, for a head or
MTP modules, ``target_fingerprint`` (the sha256 of the target checkpoint it names) and, for a
distilled model, ``teacher_fingerprint``. Nothing else in the file changes; each file is
rewritten atomically. The real LLM's files (``smollm2-*``) have their own format and their own
trainer, and are skipped. Stamping only says which bytes are shipped now: run it only on
checkpoints known to be good (it cannot tell a corrupt file from a good one).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence

from lessonlib.jsonio import write_atomic
from lessonlib.models import checkpoints

SKIP = ("smollm2-",)  # other formats, other owners


def stamped(name: str, directory: pathlib.Path) -> dict:
    """``name``'s metadata with the fields ``save`` records, computed from the files on disk."""
    meta = checkpoints.read_meta(name, directory)
    weights, _ = checkpoints.checkpoint_paths(name, directory)
    meta = checkpoints.stamp(meta, weights)
    for field, other in (("target_fingerprint", meta.get("target") if meta.get("kind") else None),
                         ("teacher_fingerprint", meta.get("teacher"))):
        if other:  # a target's fingerprint is its checkpoint's sha256 (checkpoints.fingerprint)
            meta[field] = checkpoints.sha256_file(checkpoints.checkpoint_paths(other, directory)[0])
    return meta


def names(directory: pathlib.Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.json")
                  if (directory / f"{p.stem}.safetensors").exists() and not p.name.startswith(SKIP))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=pathlib.Path, default=checkpoints.CHECKPOINTS)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for name in names(args.dir):
        meta, new = checkpoints.read_meta(name, args.dir), stamped(name, args.dir)
        if meta == new:
            continue
        stale.append(name)
        if not args.check:
            write_atomic(checkpoints.checkpoint_paths(name, args.dir)[1],
                         json.dumps(new, indent=2, sort_keys=True, allow_nan=False) + "\n")
    verb = "lack or disagree with their checksums" if args.check else "stamped"
    print(f"{len(stale)} checkpoint(s) {verb}: {', '.join(stale) or 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
