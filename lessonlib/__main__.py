"""Command-line demo: ``python -m lessonlib --vocab 64 --alpha 0.75 --k 4 --samples 50000``.

Builds a random target p (K+1 positions) and a draft q with acceptance rate alpha at every
position, runs ``--samples`` verification rounds at once (``batched``), and checks the
claims of the course with a PASS/FAIL verdict each; exits with status 1 on any FAIL.
Every statistical verdict has a stated false-alarm rate (<= 1e-3 each).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from lessonlib import cli
from lessonlib.core.backend import BACKENDS, select
from lessonlib.core.batched import simulate_rounds
from lessonlib.core.chain import draft_with_alpha, exact_output_distribution
from lessonlib.core.sampling import acceptance_rate, softmax
from lessonlib.core.stats import chi_square, tv_distance, tv_noise_floor, tv_null_quantile
from lessonlib.core.theory import expected_speedup, expected_tokens_per_verify, optimal_k, simulate_tokens_per_verify
from lessonlib.core.tree import tree_attention_mask, tree_position_ids

Z = 4.0  # |measured - expected| < 4 standard errors: false alarm 6e-5 per check


def verdict(ok: bool, results: list) -> str:
    results.append(bool(ok))
    return "PASS" if ok else "FAIL"


def parse_args(argv):
    ap = cli.ArgumentParser(prog="python -m lessonlib", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=cli.int_at_least(2, 4096), default=32, help="vocabulary size V (default 32)")
    ap.add_argument("--alpha", type=cli.number(0, 1), default=0.75, help="acceptance rate of the draft (default 0.75)")
    ap.add_argument("--k", type=cli.int_at_least(1, 16), default=4, help="draft length K (default 4)")
    ap.add_argument("--samples", type=cli.int_at_least(1000, 10**7), default=20000,
                    help="verification rounds (default 20000)")
    ap.add_argument("--seed", type=cli.nonnegative_int, default=0)
    ap.add_argument("--c", type=cli.number(0), default=0.05,
                    help="draft/target cost ratio for the table (default 0.05)")
    ap.add_argument("--backend", choices=BACKENDS, default=None,
                    help="array backend (default: $LESSONLIB_BACKEND, else CUDA if available, else numpy)")
    args = ap.parse_args(argv)
    if args.backend is None:
        try:
            select(None)
        except ValueError as err:
            ap.error(str(err))
    return args


def check_distribution(p, q, tokens, rng, results):
    n, V = len(tokens), p.shape[1]
    print(f"1. Distribution of the first emitted token vs the target p ({n} rounds)")
    counts = np.bincount(tokens[:, 0], minlength=V)
    tv, floor = tv_distance(counts / n, p[0]), tv_noise_floor(p[0], n)
    limit = tv_null_quantile(p[0], n, rng, level=0.999)
    print(f"   TV(histogram, p) = {tv:.4f}; noise floor E[TV] = {floor:.4f}, "
          f"99.9% null quantile {limit:.4f}   {verdict(tv <= limit, results)}")
    stat, pval = chi_square(counts, p[0])
    print(f"   chi-square = {stat:.1f}, p-value = {pval:.3f} (pass if > 1e-3)   {verdict(pval > 1e-3, results)}")
    dev = np.abs(exact_output_distribution(p, q) - p).max()
    print(f"   exact law by enumeration, every position: max |P(emit x) - p(x)| = {dev:.1e} "
          f"(pass if < 1e-12)   {verdict(dev < 1e-12, results)}")


def check_alpha(p, q, alpha, n_acc, results):
    K = q.shape[0]
    print("2. Acceptance rate")
    rates = acceptance_rate(p[:K], q)
    gap = np.abs(rates - alpha).max()
    print(f"   requested alpha = {alpha}; sum min(p, q) per position = {rates.min():.9f}..{rates.max():.9f} "
          f"(pass if within 1e-9)   {verdict(gap < 1e-9, results)}")
    judged = n_acc.sum() + (n_acc < K).sum()  # accepted drafts + the one rejected per round
    measured = n_acc.sum() / judged
    se = np.sqrt(alpha * (1 - alpha) / judged)
    print(f"   measured alpha = accepted / judged drafts = {measured:.4f} +- {se:.4f} "
          f"(pass if within {Z:g} s.e.)   {verdict(abs(measured - alpha) <= Z * se + 1e-12, results)}")


def check_tokens(alpha, K, n_acc, results):
    print("3. Tokens per verify")
    tau = n_acc + 1
    se = tau.std() / np.sqrt(len(tau))
    e = expected_tokens_per_verify(alpha, K)
    print(f"   measured tau = {tau.mean():.4f} +- {se:.4f}; formula (1 - a^(K+1)) / (1 - a) = {e:.4f} "
          f"(pass if within {Z:g} s.e.)   {verdict(abs(tau.mean() - e) <= Z * se + 1e-12, results)}")


def theory_table(K, c, n, rng, results):
    print(f"4. Theory for K = {K} and draft cost c = {c} (Monte Carlo: {n} rounds per alpha)")
    print("   alpha   E(K)   simulated  optimal K  speedup(K)  speedup(optimal K)")
    ok = True
    for a in (0.3, 0.5, 0.7, 0.85, 0.95):
        sim = simulate_tokens_per_verify(a, K, n, rng)
        e, best = expected_tokens_per_verify(a, K), optimal_k(a, c)
        ok &= abs(sim.mean() - e) <= Z * sim.std() / np.sqrt(n)
        print(f"   {a:5.2f}  {e:6.3f}  {sim.mean():9.3f}  {best:9d}  {expected_speedup(a, K, c):10.2f}x"
              f"  {expected_speedup(a, best, c):17.2f}x")
    print(f"   simulated E within {Z:g} s.e. of the formula at every alpha   {verdict(ok, results)}")


def check_tree(results, branching=(3, 2, 2), prefix_len=10):
    print(f"5. Tree with branching {'-'.join(map(str, branching))}")
    parents, level = [], [-1]
    for b in branching:  # b children under every node of the previous level
        new = []
        for parent in level:
            for _ in range(b):
                new.append(len(parents))
                parents.append(parent)
        level = new
    mask, pos = tree_attention_mask(parents), tree_position_ids(parents, prefix_len)
    # independent answer: walk up from every node
    expect, depth = np.zeros((len(parents),) * 2, dtype=bool), np.zeros(len(parents), dtype=int)
    for i in range(len(parents)):
        j = i
        while j != -1:
            expect[i, j], j = True, parents[j]
            depth[i] += j != -1
    ok = mask.shape == expect.shape and bool((mask == expect).all()) and bool((pos == prefix_len + depth).all())
    print(f"   {len(parents)} nodes, mask shape {mask.shape}, mask == ancestor walk and "
          f"positions == {prefix_len} + depth   {verdict(ok, results)}")


def main(argv=None) -> int:
    args = parse_args(argv)
    backend = select(args.backend)
    rng = np.random.default_rng(args.seed)
    V, K, n = args.vocab, args.k, args.samples
    p = softmax(2.0 * rng.normal(size=(K + 1, V)))
    try:
        q = draft_with_alpha(p[:K], args.alpha, rng)
    except ValueError as err:
        raise ValueError(f"--alpha: {err}") from None
    print(f"lessonlib demo: vocab {V}, alpha {args.alpha}, K {K}, {n} rounds, seed {args.seed}; "
          f"{backend.describe()}")
    start = time.perf_counter()
    tokens, n_acc = simulate_rounds(p, q, n, rng, backend)
    print(f"   ({n} verification rounds in {time.perf_counter() - start:.3f} s)")
    results = []
    check_distribution(p, q, tokens, rng, results)
    check_alpha(p, q, args.alpha, n_acc, results)
    check_tokens(args.alpha, K, n_acc, results)
    theory_table(K, args.c, n, rng, results)
    check_tree(results)
    failed = results.count(False)
    print(f"{'ALL PASS' if not failed else f'{failed} FAIL'} ({len(results)} checks)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(cli.run(main, prog="python -m lessonlib"))
