"""Mutation run: apply each mutant of ``mutants.py`` to a temporary copy of the repository, run
the test files that speak for it, and print who killed what and the score per group.

    python scripts/mutants/run.py               # every mutant (about an hour on 2 busy cores)
    python scripts/mutants/run.py --group core  # one group: core, decoding, "kv cache", heads, bench, native
    python scripts/mutants/run.py --match tree  # mutants whose file or reason contains "tree" (repeatable)
    python scripts/mutants/run.py --check       # only check that every snippet still matches once (and compiles)
    python scripts/mutants/run.py --out scripts/mutants/results.json   # also store who killed what

``--out`` writes one row per mutant (group, file, reason, status, the test that killed it, seconds,
equivalent) with the run's git revision, date and machine, atomically; ``scripts/docs_figures.py``
renders the score per module in docs/testing.md from the stored file (a run that ends early stores
the mutants it reached).

A mutant is killed when its test run fails (a failing test, or a hang: every test has a
LESSONLIB_TEST_TIMEOUT of 60 s and the whole run ``--timeout`` seconds). The copy holds
lessonlib/ (assets linked, not copied), tests/, pyproject.toml and outputs/ (copied: the committed
reports; a test run writes under test-outputs/, as the suite writes under a temporary folder), and
links to locale/ and the notebooks' folders (read only); the working tree is never touched. The
score leaves out the mutants of ``EQUIVALENT`` (they compute the same thing).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from mutants import EQUIVALENT, GROUP_TESTS, MUTANTS, TESTS  # noqa: E402


def copy_repository(dest: pathlib.Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "assets", "fa")
    shutil.copytree(ROOT / "lessonlib", dest / "lessonlib", ignore=ignore)
    (dest / "lessonlib" / "assets").symlink_to(ROOT / "lessonlib" / "assets")  # checkpoints: read only
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / "locale").symlink_to(ROOT / "locale")  # the Persian catalogues the message tests read: read only
    for folder in ("notebooks", "solutions", "exercises"):  # the tests that read a notebook (read only)
        (dest / folder).symlink_to(ROOT / folder)
    # the committed reports and skill file some tests compare with: a copy, since a test run writes under outputs
    shutil.copytree(ROOT / "outputs", dest / "outputs", ignore=shutil.ignore_patterns("screenshots"))


def tests_for(group: str, path: str) -> list[str]:
    return TESTS.get(path, GROUP_TESTS[group])


def pytest(dest: pathlib.Path, args: list[str], timeout: float):
    """(return code, failed test ids, last output line) of one pytest run in the copy."""
    env = dict(os.environ, PYTHONPATH=str(dest), LESSONLIB_TEST_TIMEOUT="60",
               LESSONLIB_OUTPUTS=str(dest / "test-outputs"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=-p no:cacheprovider", *args]
    done = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    failed = [line.split(" ", 1)[1][:160] for line in done.stdout.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    out = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, failed, out[-1] if out else ""


def baseline(dest: pathlib.Path, tests: list[str], timeout: float) -> list[str]:
    """The tests that already fail without a mutant (someone else's work in progress): they are
    deselected in every mutant's run, so they cannot count as kills."""
    code, failed, last = pytest(dest, tests, timeout * 4)
    if code not in (0, 1):
        raise SystemExit(f"the unmutated test run could not complete: {last}")
    return [f.split(" - ")[0] for f in failed]


def run_tests(dest: pathlib.Path, tests: list[str], timeout: float, deselect: list[str]) -> tuple[str, str]:
    """('killed' | 'survived' | 'error', the test that failed or why)."""
    skip = [arg for test in deselect for arg in ("--deselect", test)]
    try:
        code, failed, last = pytest(dest, ["-x", *tests, *skip], timeout)
    except subprocess.TimeoutExpired:
        return "killed", f"the run passed {timeout:.0f} s (a hang)"
    if code == 0:
        return "survived", ""
    if code == 1 and failed:
        return "killed", failed[0]
    return "error", last or str(code)


def check(mutants) -> list[str]:
    """The mutants whose original snippet no longer occurs exactly once, or whose mutated file no
    longer compiles (stale after an edit: a snippet can still match inside a re-indented line)."""
    stale = []
    for _group, path, original, mutated, why in mutants:
        source = (ROOT / path).read_text()
        count = source.count(original)
        if count != 1:
            stale.append(f"{path}: {why!r} (snippet found {count} times)")
            continue
        if not path.endswith(".py"):  # native.c: compiled by the tests themselves (engines.native)
            continue
        try:
            compile(source.replace(original, mutated), path, "exec")
        except SyntaxError as err:
            stale.append(f"{path}: {why!r} (the mutated file does not compile: {err.msg}, line {err.lineno})")
    return stale


def score(results) -> list[str]:
    lines = ["", f"{'group':<10} {'killed':>6} / {'scored':<6} {'score':>6}   equivalent  survived  errors"]
    for group in dict.fromkeys(r["group"] for r in results):
        rows = [r for r in results if r["group"] == group]
        scored = [r for r in rows if not r["equivalent"] and r["status"] != "error"]
        killed = sum(r["status"] == "killed" for r in scored)
        pct = 100 * killed / len(scored) if scored else float("nan")
        lines.append(f"{group:<10} {killed:>6} / {len(scored):<6} {pct:>5.1f}%"
                     f"   {sum(r['equivalent'] for r in rows):>10}"
                     f"  {sum(r['status'] == 'survived' and not r['equivalent'] for r in rows):>8}"
                     f"  {sum(r['status'] == 'error' for r in rows):>6}")
    return lines


def store(out: pathlib.Path, results: list[dict]) -> None:
    """Write ``results`` with the run's revision, date and machine to ``out`` (atomically: a file
    beside it, then renamed), so an interrupted run leaves the mutants it reached."""
    import datetime
    import json
    import platform

    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "unknown"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                            text=True).stdout.splitlines()
    dirty = [line for line in status if not line.endswith(out.name)]  # the results file itself is not the code
    report = {"git_revision": revision + ("+dirty" if dirty else ""),
              "written": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%M:%SZ}",
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
              "mutants": results}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", choices=sorted(GROUP_TESTS))
    parser.add_argument("--match", action="append",
                        help="only mutants whose file or reason contains this text (repeatable)")
    parser.add_argument("--check", action="store_true", help="only check that every snippet matches once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one mutant's test run")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="store the results as JSON (docs_figures.py reads scripts/mutants/results.json)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if (args.group is None or m[0] == args.group)
              and (args.match is None or any(text in m[1] or text in m[4] for text in args.match))]
    stale = check(chosen)
    for line in stale:
        print("stale:", line)
    if args.check or stale:
        print(f"{len(chosen) - len(stale)} of {len(chosen)} mutants apply")
        return 1 if stale else 0
    results = []
    with tempfile.TemporaryDirectory(prefix="lessonlib-mutants-") as tmp:
        dest = pathlib.Path(tmp)
        copy_repository(dest)
        needed = list(dict.fromkeys(t for m in chosen for t in tests_for(m[0], m[1])))
        broken = baseline(dest, needed, args.timeout)
        for test in broken:
            print("fails without a mutant (deselected):", test)
        for i, (group, path, original, mutated, why) in enumerate(chosen, 1):
            target = dest / path
            source = target.read_text()
            target.write_text(source.replace(original, mutated))
            start = time.perf_counter()
            status, detail = run_tests(dest, tests_for(group, path), args.timeout, broken)
            target.write_text(source)
            equivalent = why in EQUIVALENT
            results.append({"group": group, "path": path, "why": why, "status": status, "equivalent": equivalent,
                            "detail": detail, "seconds": round(time.perf_counter() - start, 1)})
            if args.out is not None:
                store(args.out, results)
            mark = "EQUIVALENT " if equivalent else ""
            print(f"[{i}/{len(chosen)}] {status:<8} {mark}{path}: {why} ({time.perf_counter() - start:.0f} s) {detail}",
                  flush=True)
    for line in score(results):
        print(line)
    for why, reason in EQUIVALENT.items():
        if any(m[4] == why for m in chosen):
            print(f"equivalent: {why} -- {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
