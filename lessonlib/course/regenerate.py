"""One command makes every artifact, in dependency order, under one run id.

    python -m lessonlib.course.regenerate --dry-run          # the plan, nothing run
    python -m lessonlib.course.regenerate                    # everything (hours on a 2-core CPU)
    python -m lessonlib.course.regenerate --only notebooks skill exercises persian notes
    python -m lessonlib.course.regenerate --from tree        # resume a regeneration that stopped

Order: the benchmarks (each refreshes the record), then the notebooks executed in place (they
read the record; notebook 05 writes ``temperature.json`` and the skill file), the skill file
re-rendered from those measurements and the final record, the exercises from the solutions, the
Persian edition, the instructor notes' expected results from the stored outputs, and the
screenshots the browser test takes of every notebook in JupyterLab (``outputs/screenshots/``). Every step
runs with ``LESSONLIB_RUN`` set to one id (``lessonlib.runs``), so each benchmark report, the
measurements and each executed notebook (``metadata.lessonlib.run``) record it. The manifest
``outputs/run.json`` lists the id, each step that ran (command, seconds, exit code) and, for
every artifact, the run it carries; ``tests/course/test_provenance.py`` checks the committed
files against it. ``--only`` / ``--from`` run part of the plan under the same id when
``--run ID`` continues one; the artifacts not remade keep the run they came from and the
manifest says which.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import dataclass

import nbformat

from lessonlib import cli, paths, runs
from lessonlib.jsonio import read_json, write_atomic

NOTEBOOKS = ("notebooks/00_start_here.ipynb", "solutions/01_exact_rule.ipynb", "solutions/02_speedup.ipynb",
             "solutions/03_distill_draft.ipynb", "solutions/04_eagle_tree.ipynb",
             "solutions/05_high_temperature.ipynb")
MANIFEST = "run.json"  # under outputs/


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]  # run with this interpreter: ("-m", module, args...)
    makes: tuple[str, ...]  # repository paths the step (re)writes
    optional: str = ""  # a module that must import for the step to run (else it is skipped and said so)
    env: tuple[tuple[str, str], ...] = ()  # added to the step's environment (paths relative to the repository)


def _bench(name, *args, makes=None, optional=""):
    return Step(f"bench {name}", ("-m", "lessonlib.bench", name, *args),
                tuple(makes or (f"outputs/benchmarks/{name}.json", f"outputs/benchmarks/{name}.md")), optional)


def _notebook(path):
    return Step(f"notebook {path.split('/')[-1].split('.')[0]}",
                ("-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace", path,
                 "--ExecutePreprocessor.timeout=900"), (path,))


PLAN = (
    _bench("bandwidth"), _bench("shapes"), _bench("load"),
    # both thread settings: notebook 00 compares one thread with two from the record's decode rows
    _bench("agreement", "--threads", "1", "2", makes=("outputs/benchmarks/decode.json", "outputs/benchmarks/decode.md",
                                                  "outputs/benchmarks/agreement.json",
                                                  "outputs/benchmarks/agreement.md")),
    _bench("tree"), _bench("profile"), _bench("kinds"), _bench("calibration"), _bench("sampled"), _bench("batch"),
    _bench("peers", optional="llama_cpp"),
    # the real LLM (SmolLM2, requirements-llm.txt): its engines against the memory bound, then draft-free speculation
    _bench("llm-engines", "--repeats", "10", "--compile", makes=("outputs/benchmarks/llm_engines.json",
                                                    "outputs/benchmarks/llm_engines.md")),
    _bench("llm"),
    _bench("record"),
    *(_notebook(path) for path in NOTEBOOKS),
    Step("skill", ("-m", "lessonlib.course.skill"), ("outputs/skill-speculative-tuning.md",)),
    Step("exercises", ("-m", "lessonlib.course.exercises"), ("exercises",)),
    Step("persian extract", ("-m", "lessonlib.course.translate", "extract"), ("locale/fa",)),
    Step("persian", ("-m", "lessonlib.course.translate", "build"), ("notebooks/fa", "solutions/fa", "exercises/fa")),
    # the browser test drives every notebook in JupyterLab (Chromium) and saves its screenshots; only
    # those land in the repository (LESSONLIB_SCREENSHOTS), every other write stays in the test's folder
    Step("screenshots", ("-m", "pytest", "-m", "browser", "-n", "0", "tests/test_browser.py"),
         ("outputs/screenshots",), optional="playwright", env=(("LESSONLIB_SCREENSHOTS", "outputs/screenshots"),)),
    Step("notes", ("-m", "lessonlib.course.notes"), ("solutions/README.md",)),
)
NAMES = tuple(step.name for step in PLAN)
GROUPS = {"benchmarks": [s.name for s in PLAN if s.name.startswith("bench ")],
          "notebooks": [s.name for s in PLAN if s.name.startswith("notebook ")]}


def select(only=(), start=None) -> list[Step]:
    """The steps to run: all, ``only`` those names (or groups: benchmarks, notebooks), or from ``start`` on."""
    wanted = [n for name in only for n in GROUPS.get(name, [name])]
    unknown = [n for n in wanted + ([start] if start else []) if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown step(s) {unknown}; steps: {', '.join(NAMES)}; groups: {', '.join(GROUPS)}")
    if start is not None:
        return list(PLAN[NAMES.index(start):])
    return [s for s in PLAN if not wanted or s.name in wanted]


def _available(module: str) -> bool:
    return not module or importlib.util.find_spec(module) is not None


def run(steps, run_id: str, dry_run: bool = False) -> dict:
    """Run ``steps`` in order under ``run_id`` (stopping at the first failure); returns the manifest."""
    env = os.environ | {runs.ENV: run_id}
    done = []
    for step in steps:
        command = [sys.executable, *step.argv]
        print(("would run: " if dry_run else "running: ") + " ".join(step.argv), flush=True)
        if dry_run:
            continue
        if not _available(step.optional):
            done.append({"step": step.name, "skipped": f"{step.optional} is not installed"})
            continue
        started = time.time()
        step_env = env | {name: str(paths.ROOT / value) for name, value in step.env}
        code = subprocess.run(command, cwd=paths.ROOT, env=step_env).returncode
        if code == 0 and step.name.startswith("notebook "):
            stamp_notebook(step.makes[0], run_id)
        done.append({"step": step.name, "command": " ".join(step.argv), "seconds": round(time.time() - started, 1),
                     "exit_code": code, "makes": list(step.makes)})
        if code != 0:
            print(f"{step.name} failed (exit code {code}); resume with --from '{step.name}' --run {run_id}")
            break
    return {"id": run_id, "steps": done}


def stamp_notebook(path: str, run_id: str, root: pathlib.Path = paths.ROOT) -> None:
    """Record the run in an executed notebook's metadata (``metadata.lessonlib.run``), written the
    way nbformat writes notebooks so the file changes only there."""
    file = root / path
    nb = nbformat.read(file, as_version=4)
    nb.metadata.setdefault("lessonlib", {})["run"] = run_id
    write_atomic(file, nbformat.writes(nb) + "\n")


REBUILD = "delete it (it lists the steps of the last regeneration) and run python -m lessonlib.course.regenerate again"


def previous_manifest() -> dict:
    """outputs/run.json as the last regeneration left it ({} when there is none); a truncated file
    or one of another shape raises ValueError naming the file and what to do."""
    path = paths.outputs() / MANIFEST
    if not path.exists():
        return {}
    old = read_json(path, REBUILD)
    steps = old.get("steps", [])
    if not isinstance(old.get("id", ""), str) or not isinstance(steps, list) \
            or not all(isinstance(step, dict) for step in steps):
        raise ValueError(f"{path} must hold an \"id\" and a list of steps under \"steps\"; {REBUILD}")
    return old


def write_manifest(manifest: dict) -> None:
    """Merge this run's steps into outputs/run.json (a continued run adds to its own steps)."""
    path = paths.outputs() / MANIFEST
    old = previous_manifest()
    steps = old.get("steps", []) if old.get("id") == manifest["id"] else []
    finished = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%M:%SZ}"
    write_atomic(path, json.dumps({"id": manifest["id"], "finished": finished,
                                   "steps": steps + manifest["steps"]}, indent=1) + "\n")


def main(argv=None) -> int:
    parser = cli.ArgumentParser(prog="python -m lessonlib.course.regenerate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", default=(), metavar="STEP", help="only these steps or groups")
    parser.add_argument("--from", dest="start", default=None, metavar="STEP", help="this step and all after it")
    parser.add_argument("--run", default=None, help="continue the run with this id (default: a new id)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    for flag, given in (("--from", [] if args.start is None else [args.start]), ("--only", args.only)):
        if any(not name.strip() for name in given):
            parser.error(f"{flag} must name a step or a group, got an empty name")
    if args.only and args.start:
        parser.error("--only and --from exclude each other")
    try:
        steps = select(args.only, args.start)
    except ValueError as err:
        parser.error(f"--only/--from: {err}")
    if args.run is not None and not runs.PATTERN.fullmatch(args.run):
        parser.error(f"--run must be one word of letters, digits and _.:+-, got {args.run!r}")
    try:  # what the run reads from the environment and writes to, checked before any step runs
        run_id = args.run or f"regen-{runs.run_id()}"
        cli.check_writable_folder(paths.outputs(), cli.outputs_name(None))
        if not args.dry_run:
            previous_manifest()  # a truncated or reshaped run.json is named now, not after the last step
    except ValueError as err:
        parser.error(str(err))
    manifest = run(steps, run_id, args.dry_run)
    if not args.dry_run:
        write_manifest(manifest)
    failed = [s for s in manifest["steps"] if s.get("exit_code")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib.course.regenerate"))
