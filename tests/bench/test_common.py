"""The benchmarks' common machinery (lessonlib.bench.common): one way to time methods against
plain decoding, shared by the decode, tree and profile benchmarks (the table of record is in
test_record.py, the load check's verdicts in test_load.py). Nothing here asserts on time: the
properties are the pairing, the definitions and the bookkeeping (timing goals live in the
benchmarks' own JSON)."""
import json

import numpy as np
import pytest

from lessonlib import engines, paths, runs
from lessonlib.bench import common, kinds, load, tree
from lessonlib.bench import decode as bench_decode
from lessonlib.decoding import measures
from lessonlib.decoding.stats import DecodeStats
from lessonlib.models import load as load_model


def fake_run(seconds, tokens=(1, 2, 3), loop="plain"):
    """A decoding loop stand-in: (tokens, DecodeStats) of 3 tokens in ``seconds``: plain, one
    one-token step = seconds / 3; a chain of K = 2, tau 2, draft step = seconds / 30, verify
    forward = seconds / 2."""
    def run(prompt, i):
        s = seconds[i] if isinstance(seconds, list) else seconds
        if loop == "plain":
            return list(tokens), DecodeStats("plain", 0.0, 3, rounds=3, emitted=3, seconds=s,
                                             phase_seconds={"target": 2 * s / 3}, phase_calls={"target": 2})
        return list(tokens), DecodeStats("chain", 0.0, 3, k=2, rounds=2, emitted=4, accepted=1, judged=2, seconds=s,
                                         phase_seconds={"draft": 4 * s / 30, "verify": s},
                                         phase_calls={"draft": 4, "verify": 2})
    return run


def test_against_plain_compares_each_prompt_with_its_own_plain_run():
    plain = fake_run([0.3, 0.6])
    spec = fake_run([0.15, 0.15], loop="chain")
    runs = common.against_plain(plain, {"spec": spec}, [[1], [2]], repeats=2)
    assert [r["speedup"] for r in runs["spec"]] == pytest.approx([2.0, 4.0])
    # c = draft step / plain's one-token step of the same prompt
    assert [r["c"] for r in runs["spec"]] == pytest.approx([0.005 / 0.1, 0.005 / 0.2])


def test_against_plain_rejects_a_lossy_greedy_method():
    with pytest.raises(AssertionError, match="differs from plain greedy"):
        common.against_plain(fake_run(0.3), {"lossy": fake_run(0.1, tokens=(1, 2, 4))}, [[1]], 1, same_tokens=True)
    common.against_plain(fake_run(0.3), {"same": fake_run(0.1)}, [[1]], 1, same_tokens=True)  # control


def test_cell_shows_median_and_quartiles():
    spread = {"speedup": measures.summary([1.0, 2.0, 3.0, 4.0, 5.0])}
    assert common.cell(spread, "speedup", unit="×") == "3.00× [2.00, 4.00]"
    assert common.cell(spread, "alpha") == "–"


def test_tree_methods_are_named_runs():
    table = tree.methods(quick=True)
    assert len(table) == len(set(table)) and all(callable(run) for _, run in table.values())
    assert {family for family, _ in table.values()} >= {"chain draft-kl", "tree draft-kl", "Medusa", "EAGLE chain"}


def test_decode_and_tree_benchmarks_share_the_definition_of_c():
    """Same prompts, same settings: both benchmarks compute a prompt's c as its draft step over
    plain decoding's one-token step of that prompt (the numbers differ run to run, the formula not)."""
    target, draft = engines.load("target", "cpu"), load_model("draft-kl", "cpu")
    settings = {"prompts": 5, "prompt_len": 16, "new_tokens": 8, "repeats": 1}
    rows, plain = bench_decode.config_rows(target, {"draft-kl": draft}, (3,), "code", 0.0, 1, settings, seed=0)
    row = rows[0]
    assert row["spread"]["c"]["n"] == 5 and row["prompts"] == 5
    m = tree.Models(target, draft, 8)
    runs = common.against_plain(lambda p, i: bench_decode.generate(target, p, 8),
                                {"chain": lambda p, i: tree.chain(3)(m, p)}, common.prompts("code", 5, 16), 1)
    for stats, base in zip(runs["chain"], runs["plain"]):
        assert stats["c"] == pytest.approx(stats["draft_forward_seconds"] / base["target_forward_seconds"])
        assert stats["r"] == pytest.approx(stats["verify_forward_seconds"] / base["target_forward_seconds"])


def test_benchmarks_refuse_fewer_than_five_prompts():
    for main in (bench_decode.main, tree.main, kinds.main, load.main):
        with pytest.raises(SystemExit):
            main(["--prompts", "4"])


def test_benchmarks_write_under_the_outputs_folder_of_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path))
    assert paths.benchmarks() == tmp_path / "benchmarks"
    common.write_report("x", {"a": np.float64(1.5), "b": np.arange(2)}, "md\n")
    written = json.loads((tmp_path / "benchmarks" / "x.json").read_text())
    assert written.pop("run")["id"] == runs.run_id() and written == {"a": 1.5, "b": [0, 1]}


def test_best_rows_pick_the_best_k_per_setting_and_the_table_shows_spreads():
    def spread(x):
        return {k: measures.summary([x - 0.1, x, x + 0.1], min_count=3) for k in ("tau", "alpha", "c", "r", "speedup")}

    def row(threads, draft, k, speedup):
        return {"threads": threads, "corpus": "code", "temperature": 1.0, "draft": draft,
                "k": k, "speedup": speedup, "predicted_speedup": 1.5,
                "measured_over_predicted": speedup / 1.5, "forward_bound_speedup": 1.6,
                "prompts": 3, "spread": spread(speedup)}

    rows = [row(1, "draft-ce", 1, 1.1), row(1, "draft-ce", 2, 0.9), row(1, "draft-kl", 1, 1.0),
            row(1, "draft-kl", 2, 1.2), row(2, "draft-kl", 1, 1.3), row(2, "draft-kl", 2, 1.0)]
    assert [(r["threads"], r["draft"], r["k"]) for r in bench_decode.best_rows(rows)] == [
        (1, "draft-ce", 1), (1, "draft-kl", 2), (2, "draft-kl", 1)]
    plain = [{"threads": 1, "corpus": "code", "temperature": 1.0,
              "spread": {"tokens_per_second": measures.summary([250.0], min_count=1)}}]
    md = bench_decode.markdown(rows, plain)
    assert "1.20× [1.15, 1.25]" in md and "250 [250, 250]" in md


def test_profile_alpha_for_a_speedup_prices_the_measured_verify():
    """The profile's 'alpha for 1.6x' is the one inverse of E (theory.alpha_for_speedup) at the
    measured r: at that alpha E(alpha, K) / (K c + r) is 1.6, a little less falls short."""
    from lessonlib.core.theory import alpha_for_speedup, expected_tokens_per_verify

    k, c, r = 3, 0.13, 1.24
    alpha = float(alpha_for_speedup(1.6, k, c, r))
    assert expected_tokens_per_verify(alpha, k) / (k * c + r) == pytest.approx(1.6, abs=1e-9)
    assert expected_tokens_per_verify(alpha - 0.01, k) / (k * c + r) < 1.6
    assert alpha_for_speedup(1.6, k, c, 1.0) < alpha  # negative control: r = 1 asks for less
    assert float(alpha_for_speedup((k + 1) / (k * c + r) + 0.01, k, c, r)) == float("inf")
