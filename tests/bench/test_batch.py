"""``python -m lessonlib.bench batch`` (issue 31): the report's pieces on a tiny real run, the latency
arithmetic on known emission times, the lossless check with a negative control, the record's rows."""
import json
import types

import numpy as np
import pytest

from lessonlib import cli
from lessonlib.bench import __main__ as bench
from lessonlib.bench import batch, record


@pytest.fixture(scope="module")
def tiny_report():
    """B = 1 and 2, K = 1 and 2, 5 prompt sets of <= 12 tokens, 3 new tokens: a few seconds."""
    return batch.bench_batch(batches=(1, 2), ks=(1, 2), n_sets=5, prompt_len=12, new_tokens=3, repeats=1)


def test_the_report_measures_every_batch_and_k(tiny_report):
    rows = tiny_report["rows"]
    assert [r["batch"] for r in rows] == [1, 2]
    for r in rows:
        assert [c["k"] for c in r["chains"]] == [1, 2]
        assert r["best_k"] in (1, 2) and r["best_speedup"] == max(c["speedup"] for c in r["chains"])
        for c in r["chains"]:
            assert c["spread"]["speedup"]["n"] == 5 and c["r"] > 0 and 0 < c["alpha"] <= 1 and c["tau"] >= 1
    assert set(tiny_report["loop_1_over"]) == {"plain", "K=1", "K=2"}
    fc = tiny_report["forward_cost"]
    assert fc["tokens"][0] == 1 and fc["cost"][0] == 1.0 and fc["tokens"][-1] == 2 * 3
    lat = tiny_report["latency"]
    assert {x["method"] for x in lat} >= {"plain"} and all(x["p99_ms"] >= x["p50_ms"] >= 0 for x in lat)


def test_prompt_sets_start_the_rows_of_a_batch_at_different_lengths():
    sets = batch.prompt_sets(5, 4, 12)
    assert len(sets) == 5 and all(len(s) == 4 for s in sets)
    assert len({len(p) for p in sets[0]}) == 4
    assert sets[0][0] != sets[1][0]  # each set its own prompts


def test_inter_token_gaps_and_latency_from_known_emission_times():
    stats = types.SimpleNamespace(extra={"emit_seconds": [[0.0, 0.1, 0.1, 0.3], [0.0, 0.2]]})
    np.testing.assert_allclose(batch.inter_token_gaps(stats), [0.1, 0.0, 0.2, 0.2])
    lat = batch.latency([stats])
    assert lat["gaps"] == 4 and lat["mean_ms"] == pytest.approx(125.0) and lat["p50_ms"] == pytest.approx(150.0)
    assert lat["p99_ms"] == pytest.approx(200.0) and lat["p99_over_mean"] == pytest.approx(1.6)


def test_the_crossover_is_the_smallest_batch_no_faster_than_plain():
    rows = [{"batch": 1, "best_speedup": 1.3}, {"batch": 4, "best_speedup": 1.0}, {"batch": 8, "best_speedup": 0.7}]
    assert batch.crossover(rows, "best_speedup") == 4
    assert batch.crossover(rows[:1], "best_speedup") is None


def test_a_lossy_batched_loop_is_caught(monkeypatch):
    right = batch.batch_speculative_generate

    def lossy(*args, **kwargs):  # the negative control: one token of row 0 changed
        out, stats = right(*args, **kwargs)
        out[0][-1] = (out[0][-1] + 1) % 2048
        return out, stats

    monkeypatch.setattr(batch, "batch_speculative_generate", lossy)
    with pytest.raises(AssertionError, match="differs from plain"):
        batch.bench_batch(batches=(2,), ks=(1,), n_sets=5, prompt_len=8, new_tokens=3, repeats=1)


def test_the_record_takes_plain_and_the_best_k_per_batch(tiny_report, tmp_path):
    report = {"machine": {}, "setup": {"temperature": 0.0, "threads": 1, "new_tokens": 3, "prompt_len": 12,
                                       "repeats": 1, "prompts": 5, "ks": [1, 2], "batches": [1, 2]}, **tiny_report}
    (tmp_path / "batch.json").write_text(json.dumps(report))
    rows = record.collect(tmp_path)
    assert [r["method"] for r in rows if r["family"] == "batch plain"] == ["batch B=1 plain", "batch B=2 plain"]
    chains = [r for r in rows if r["family"] == "batch chain draft-kl"]
    assert [r["k"] for r in chains] == [tiny_report["rows"][0]["best_k"], tiny_report["rows"][1]["best_k"]]
    assert all(r["source"] == "batch" and r["speedup"]["n"] == 5 for r in chains)
    md = batch.markdown(report)
    assert "| 2 |" in md and "Crossover" in md and "P99" in md


@pytest.mark.parametrize("argv, flag", [(["batch", "--batches", "0"], "--batches"),
                                        (["batch", "--ks", "1", "-2"], "--ks"),
                                        (["batch", "--prompts", "4"], "--prompts"),
                                        (["batch", "--prompt-len", "200", "--new-tokens", "50", "--ks", "9"], "--ks"),
                                        (["batch", "--temperature", "-1"], "--temperature")])
def test_a_bad_flag_is_one_line_and_exit_2(argv, flag, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path / "outputs"))
    try:
        code = cli.run(bench.main, argv, prog="lessonlib")
    except SystemExit as stop:  # argparse's own exit
        code = stop.code
    assert code == 2 and not (tmp_path / "outputs").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
