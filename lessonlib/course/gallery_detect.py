"""The reference detector for ``gallery``'s samplers, the table it gives, and the two-sided case.

``detect(sampler, rng)`` runs, cheapest first, and stops at the first test that flags:

1. **greedy equality** (deterministic): at T = 0 every emitted token must be the target's argmax
   at its position, as plain greedy decoding gives (a batch of three rows and a near-tie, five
   times over: a greedy round that draws random numbers may match by luck once);
2. **inputs unchanged** (deterministic): the sampler gets copies, which must come back unchanged;
3. **exact law** (enumeration, no samples): where the sampler's rule can be enumerated
   (``Sampler.law``), its first-token law must equal p to 1e-9;
4. **powered chi-square**: at T = 0.7 the first token and the second token (given a round
   emits two) against their exact laws (``chain.exact_output_distribution``), on 1,000, then
   4,000 rounds of each sampled case; each of the 2 × 2 × 2 tests at level 10⁻³ / 8,
   so a correct sampler is flagged with probability at most 10⁻³ (Bonferroni). 1,000 rounds give
   the first-token test alone a power above 0.999 against each sampled bug of the gallery (the
   smallest first-token bias, bf16 drafting, is TV 0.105 from p; 200 rounds would catch it with
   probability 0.31). The number of tokens per round is not tested: it is a law of the acceptance, which an
   exact rule may change (the two-sided case).

It returns ``Verdict(detected, test, samples)``: samples = the rounds the deciding test used
(0 for exact enumeration). ``table`` runs a detector over the gallery; ``two_sided`` measures the
acceptance and the output law of the exact rule and of "accept only on a sample match".
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from lessonlib.core import chain, stats
from lessonlib.course import gallery

LEVEL = 1e-3  # the reference detector's false-alarm rate on a correct sampler (at most)
STAGES = (1_000, 4_000)
EXACT_TOL = 1e-9
GREEDY_REPEATS = 5


class Verdict(NamedTuple):
    detected: bool
    test: str  # the test that flagged ("" when none did)
    samples: int  # rounds that test used (0 for exact enumeration)


def run(sampler: gallery.Sampler, case: gallery.Case, rng: np.random.Generator) -> tuple[list, bool]:
    """``sampler.step`` on copies of ``case``'s logits: (emitted tokens per row, whether it changed its inputs)."""
    tl, dl = case.target_logits.copy(), case.draft_logits.copy()
    out = sampler.step(tl, dl, case.temperature, case.top_k, rng)
    changed = not (np.array_equal(tl, case.target_logits) and np.array_equal(dl, case.draft_logits))
    return [[int(t) for t in row] for row in out], changed


def greedy_ok(case: gallery.Case, out: list) -> bool:
    """Every emitted token is the target's argmax at its position, 1 to K+1 per row."""
    best = case.target_logits.argmax(axis=-1)  # (B, K+1), in float64: the plain loop's choice
    K = case.draft_logits.shape[1]
    return len(out) == len(best) and all(1 <= len(row) <= K + 1 and row == best[b, : len(row)].tolist()
                                         for b, row in enumerate(out))


def expected_laws(case: gallery.Case) -> dict[str, np.ndarray]:
    """The exact laws (row 0 of a sampled case) of the first token, of the number of tokens per round
    (1 … K+1) and of the second token given a round emits two or more."""
    p, q = case.p[0], case.q[0]
    accepted, _ = chain.exact_round_distribution(p, q)
    alpha = accepted.sum(axis=-1)  # P(accept at j | reached j)
    reach = np.concatenate([[1.0], np.cumprod(alpha)])
    law = chain.exact_output_distribution(p, q)
    return {"first token": law[0], "second token": law[1], "tokens per round": reach * np.append(1 - alpha, 1.0)}


def histograms(outs: list[list[int]], V: int, K: int) -> dict[str, np.ndarray]:
    lengths = np.array([len(o) for o in outs])
    return {"first token": np.bincount([o[0] for o in outs], minlength=V),
            "tokens per round": np.bincount(lengths - 1, minlength=K + 1),
            "second token": np.bincount([o[1] for o in outs if len(o) > 1], minlength=V)}


def _chi_square_flags(sampler, cases, rng, level, stages) -> Verdict:
    if not cases:
        return Verdict(False, "", 0)
    each = level / (len(cases) * len(stages) * 2)
    outs: dict[str, list] = {c.name: [] for c in cases}
    for n in stages:
        for case in cases:
            while len(outs[case.name]) < n:
                outs[case.name].append(run(sampler, case, rng)[0][0])
            V, K = case.target_logits.shape[-1], case.draft_logits.shape[1]
            laws = expected_laws(case)
            for name, counts in histograms(outs[case.name], V, K).items():
                if name == "tokens per round":  # a law of the acceptance, not of the output: not tested
                    continue
                if counts.sum() >= 20 and stats.chi_square(counts, laws[name])[1] < each:
                    return Verdict(True, f"chi-square ({name}, {case.name})", n)
    return Verdict(False, "", 0)


def detect(sampler: gallery.Sampler, rng: np.random.Generator, level: float = LEVEL,
           stages: tuple[int, ...] = STAGES, cases: list[gallery.Case] | None = None) -> Verdict:
    """Whether ``sampler`` changes the target's output law, and which test showed it (module docstring)."""
    cases = gallery.CASES if cases is None else cases
    greedy, sampled = [c for c in cases if c.greedy], [c for c in cases if not c.greedy]
    rounds = 0
    for _ in range(GREEDY_REPEATS):  # greedy decoding is deterministic: the same tokens every time
        for case in greedy:
            out, _ = run(sampler, case, rng)
            rounds += len(out)
            if not greedy_ok(case, out):
                return Verdict(True, f"greedy equality ({case.name})", rounds)
    for case in cases:
        if run(sampler, case, rng)[1]:
            return Verdict(True, f"inputs unchanged ({case.name})", 1)
    if sampler.law is not None:
        for case in sampled:
            if stats.tv_distance(sampler.law(case), case.p[0, 0]) > EXACT_TOL:
                return Verdict(True, f"exact law ({case.name})", 0)
    return _chi_square_flags(sampler, sampled, rng, level, stages)


def table(detector: Callable = detect, seed: int = 0, samplers: list | None = None) -> list[dict]:
    """One row per gallery sampler: name, source, is it a bug, and the detector's verdict."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in gallery.GALLERY if samplers is None else samplers:
        detected, test, samples = detector(s, rng)
        rows.append({"sampler": s.name, "bug": s.bug, "detected": bool(detected), "test": test or "—",
                     "samples": int(samples), "source": s.source, "symptom": s.symptom})
    return rows


def format_table(rows: list[dict]) -> str:
    lines = [f"{'sampler':<36} {'bug?':<5} {'detected':<9} {'samples':>7}  test"]
    for r in rows:
        right = "✓" if r["detected"] == r["bug"] else "✗"
        lines.append(f"{r['sampler']:<36} {'yes' if r['bug'] else 'no':<5} "
                     f"{('yes ' if r['detected'] else 'no  ') + right:<9} {r['samples']:>7}  {r['test']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the two-sided case

def acceptance(outs: list[list[int]], K: int) -> float:
    """Accepted drafts / judged drafts over rounds (a round of L tokens accepted L − 1, judged min(L, K))."""
    accepted = sum(len(o) - 1 for o in outs)
    return accepted / sum(min(len(o), K) for o in outs)


# what two_sided measures per rule (printed as row labels; message_catalogue takes them as templates)
TWO_SIDED = ("alpha exact (position 0)", "alpha measured (all positions)", "TV(exact law, p)", "chi-square p-value")


def two_sided(case: gallery.Case, n: int, seed: int = 0) -> dict[str, dict]:
    """The exact rule against "accept only on a sample match" on ``case`` (row 0): acceptance at the
    first position exactly (Σ min(p, q) and Σ p·q) and measured on ``n`` rounds, TV of the exact
    first-token law from p, and the chi-square p-value of the n first tokens against p."""
    rng = np.random.default_rng(seed)
    p0, q0 = case.p[0, 0], case.q[0, 0]
    K = case.draft_logits.shape[1]
    exact = {"correct round": float(np.minimum(p0, q0).sum()), "accept only on a sample match": float(p0 @ q0)}
    out = {}
    for name, rate in exact.items():
        s = gallery.BY_NAME[name]
        outs = [run(s, case, rng)[0][0] for _ in range(n)]
        first = np.bincount([o[0] for o in outs], minlength=p0.size)
        out[name] = dict(zip(TWO_SIDED, (rate, acceptance(outs, K),
                                         float(stats.tv_distance(s.law(case), p0)),  # type: ignore[misc]
                                         stats.chi_square(first, p0)[1])))
    return out
