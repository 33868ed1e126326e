"""The prepared GPU check: ``python -m lessonlib.bench gpu`` on a machine with a CUDA GPU.

In one command (budget: under 8 minutes on one GPU) it
1. runs the library tests with CUDA visible (the backend picks torch-cuda by itself),
2. runs the batched exactness check at 10^7 verification rounds (vocab 64, K = 4) on CUDA:
   rounds per second, and the first emitted token's histogram against p (TV with its noise
   floor, chi-square),
3. trains the GPU-scale recipe (``--scale gpu``: target, draft base, draft-ce, draft-kl) for a
   few minutes, and
4. runs the decode benchmark at both scales on the GPU,
then writes ``outputs/benchmarks/gpu.json`` with the device, torch version and the figures.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
import torch

from lessonlib import cli, paths
from lessonlib.bench import common
from lessonlib.bench import decode as bench
from lessonlib.core.backend import select
from lessonlib.core.batched import sample_rounds
from lessonlib.core.chain import draft_with_alpha
from lessonlib.core.stats import chi_square, tv_distance, tv_noise_floor
from lessonlib.jsonio import write_atomic
from lessonlib.models import train


def exactness_check(n_rounds=10**7, vocab=64, k=4, alpha=0.75, seed=0, backend=None):
    """Rounds per second of the batched rule on ``backend`` and its first-token statistics."""
    be = select(backend)
    rng = np.random.default_rng(seed)
    p_row = rng.dirichlet(np.ones(vocab))
    q_row = draft_with_alpha(p_row, alpha, rng)
    p = be.asarray(np.tile(p_row, (k + 1, 1)))
    q = be.asarray(np.tile(q_row, (k, 1)))
    u = be.uniform((n_rounds, 2 * k + 1), rng)
    sample_rounds(p, q, u[:1000], validate=False)  # warm-up
    sync = torch.cuda.synchronize if be.name == "torch-cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    _, tokens, n_acc = sample_rounds(p, q, u, validate=False)
    sync()
    seconds = time.perf_counter() - start
    first = np.bincount(np.asarray(tokens[:, 0].cpu() if be.is_torch else tokens[:, 0]), minlength=vocab)
    _, p_value = chi_square(first, p_row)
    return {"backend": be.name, "rounds": n_rounds, "vocab": vocab, "k": k, "alpha": alpha,
            "seconds": seconds, "rounds_per_second": n_rounds / seconds,
            "tv_first_token": float(tv_distance(first / n_rounds, p_row)),
            "tv_noise_floor": float(tv_noise_floor(p_row, n_rounds)), "chi_square_p_value": float(p_value),
            "mean_accepted": float(n_acc.float().mean() if be.is_torch else n_acc.mean())}


def run_tests(timeout_s):
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-m", "not browser", "-x"],
                          capture_output=True, text=True, timeout=timeout_s)
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    return {"exit_code": proc.returncode, "summary": tail[0], "seconds": time.perf_counter() - started}


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=cli.positive_int, default=10**7)
    parser.add_argument("--train-minutes", type=cli.number(0, low_open=True), default=3.0,
                        help="for the GPU-scale target")
    parser.add_argument("--skip-tests", action="store_true")
    args = common.parse(parser, argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this check is for a GPU machine")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    if not args.skip_tests:
        report["tests"] = run_tests(timeout_s=150)
        print("tests:", report["tests"]["summary"], flush=True)
    report["exactness"] = exactness_check(args.rounds)
    print("exactness:", report["exactness"], flush=True)
    minutes = {"target": args.train_minutes, "draft-base": args.train_minutes / 3,
               "draft-ce": args.train_minutes / 6, "draft-kl": args.train_minutes / 6}
    report["training"] = {}
    for name, budget in minutes.items():
        _, meta = train.train_model(name, train.DEFAULT_STEPS[name] * 2, budget, scale="gpu", device="cuda")
        report["training"][name] = {k: meta[k] for k in ("params", "steps", "tokens_seen", "train_seconds",
                                                         "heldout_bits_per_byte")}
        print(name, report["training"][name], flush=True)
    report["decode"] = {}
    for scale in ("cpu", "gpu"):
        rows, plain = bench.bench_decode(ks=(1, 2, 3, 4, 6, 8), n_prompts=5, device="cuda", scale=scale)
        report["decode"][scale] = {"plain": plain, "best": bench.best_rows(rows)}
        print(bench.markdown(rows, plain), flush=True)
    write_atomic(paths.benchmarks() / "gpu.json", json.dumps(report, indent=1) + "\n")
    print(f"wrote {paths.benchmarks() / 'gpu.json'}")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.bench gpu"))
