"""``python -m lessonlib.course.skill``: regenerate the skill file, or print one decision."""
from __future__ import annotations

import json
import pathlib
import sys

from lessonlib import cli
from lessonlib.course.skill.recommend import recommend
from lessonlib.course.skill.render import write_skill
from lessonlib.jsonio import jsonable


def main(argv=None):
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.skill",
                                     description="Regenerate outputs/skill-speculative-tuning.md from "
                                                 "outputs/benchmarks/temperature.json, or print the decision for "
                                                 "your own alpha and c.")
    parser.add_argument("--alpha", type=cli.number(0, 1), help="print the decision for this measured alpha instead")
    parser.add_argument("--c", type=cli.number(0), default=0.1,
                        help="draft step / one-token target step (with --alpha)")
    parser.add_argument("--temperature", type=cli.number(0), default=1.0)
    parser.add_argument("--concurrency", type=cli.positive_int, default=1)
    parser.add_argument("--measurements", default=None, help="default: lessonlib.paths.benchmarks()/temperature.json")
    parser.add_argument("--out", default=None, help="default: lessonlib.paths.outputs()/skill-speculative-tuning.md")
    args = parser.parse_args(argv)
    if args.alpha is None and argv is not None and any(a.split("=")[0] in ("--c", "--temperature", "--concurrency")
                                                       for a in argv):
        parser.error("--c, --temperature and --concurrency need --alpha (they describe your own workload)")
    if args.alpha is not None and (args.out or args.measurements):
        parser.error("--out and --measurements regenerate the skill file; --alpha prints one decision instead")
    if args.out and pathlib.Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a folder: give the skill file's name")
    if args.alpha is not None:
        decision = recommend(args.alpha, args.c, args.temperature, args.concurrency)
        print(json.dumps(decision, indent=2, default=jsonable))
        return 0
    print(f"wrote {write_skill(args.measurements, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.skill"))
