"""Notebook 02's report module: the rows it picks from the record, the numbers in its table lines and
the values its figure draws, each checked against values computed here from the same inputs."""
import json

import matplotlib
import numpy as np
import pytest

from lessonlib import paths
from lessonlib.course.reports import speedup as report

matplotlib.use("Agg")


def summary(median, q25, q75, n=5):
    return {"median": median, "q25": q25, "q75": q75, "n": n}


def spread_of(k):
    """A made-up summary per quantity for one K: the numbers differ per K and per quantity."""
    return {"tau": summary(1 + 0.3 * k, 0.9 + 0.3 * k, 1.1 + 0.3 * k), "alpha": summary(0.6, 0.5, 0.7),
            "c": summary(0.1 + 0.001 * k, 0.09, 0.12), "r": summary(1 + 0.2 * k, 0.95 + 0.2 * k, 1.1 + 0.2 * k),
            "speedup": summary(1.5 - 0.1 * k, 1.45 - 0.1 * k, 1.55 - 0.1 * k)}


KS = (1, 2, 4)
SPREAD = {k: spread_of(k) for k in KS}
RECORD = {1: {"speedup": summary(1.0, 0.9, 1.2)},  # K = 1 here: [1.35, 1.45], wholly above the record's
          2: {"speedup": summary(1.3, 1.2, 1.4)}}  # K = 2 here: [1.25, 1.35] overlaps; K = 4 has no record row


def test_chain_of_record_picks_the_settings_rows():
    def row(**fields):
        return {"source": "decode", "corpus": "code", "temperature": 0.0, "threads": 1, **fields}
    rows = [row(family="chain draft-kl", k=1), row(family="chain draft-kl", k=2),
            row(family="chain draft-kl", k=3, threads=2), row(family="chain draft-kl", k=4, temperature=1.0),
            row(family="chain draft-kl", k=5, corpus="chat"), row(family="chain other", k=6),
            row(family="plain", k=0, threads=2), row(family="plain", k=0, tag="this one")]
    of_record, plain = report.chain_of_record(rows, threads=1)
    assert sorted(of_record) == [1, 2] and all(of_record[k] is rows[k - 1] for k in (1, 2))
    assert plain is rows[-1]
    assert report.chain_of_record(rows, threads=2) == ({3: rows[2]}, rows[6])
    assert report.chain_of_record(rows[:2], threads=1)[1] is None


def test_chain_of_record_on_the_committed_record():
    rows = json.loads((paths.ROOT / "outputs/benchmarks/record.json").read_text())["rows"]
    of_record, plain = report.chain_of_record(rows, threads=1)
    expected = [r for r in rows if r["family"] == "chain draft-kl" and r["source"] == "decode"
                and r["corpus"] == "code" and r["temperature"] == 0.0 and r["threads"] == 1]
    assert of_record and {k: r["speedup"]["median"] for k, r in of_record.items()} == {
        r["k"]: r["speedup"]["median"] for r in expected}
    assert plain is not None and plain["family"] == "plain" and plain["threads"] == 1


def test_measured_rows_hold_the_medians_brackets_and_where_this_run_lies():
    lines = report.measured_rows(KS, SPREAD, RECORD)
    assert len(lines) == len(KS)
    for line, k in zip(lines, KS):
        s = SPREAD[k]
        assert line.split()[0] == str(k)
        assert f"{s['tau']['median']:.2f} [{s['tau']['q25']:.2f}, {s['tau']['q75']:.2f}]" in line
        assert f"{s['c']['median']:.3f} [{s['c']['q25']:.3f}, {s['c']['q75']:.3f}]" in line
        assert f"{s['r']['median']:.2f} [{s['r']['q25']:.2f}, {s['r']['q75']:.2f}]" in line
        assert f"{s['speedup']['median']:.2f}× [{s['speedup']['q25']:.2f}, {s['speedup']['q75']:.2f}]" in line
    assert lines[0].endswith("1.00× [0.90, 1.20]  above")
    assert lines[1].endswith("1.30× [1.20, 1.40]  overlaps")
    assert lines[2].endswith("not in the record  –")
    below = report.measured_rows([1], SPREAD, {1: {"speedup": summary(2.0, 1.9, 2.1)}})
    assert below[0].endswith("below")


def test_measured_table_prints_the_setting_and_both_runs(capsys):
    class Model:
        def __init__(self, n):
            self.n = n

        def num_params(self):
            return self.n

    plain = {"tokens_per_second": summary(980.4, 922.0, 988.0),
             "target_forward_seconds": summary(0.00102, 0.001, 0.0011)}
    threads = report.torch.get_num_threads()
    rows = [{"source": "decode", "corpus": "code", "temperature": 0.0, "threads": threads, "family": "chain draft-kl",
             "k": k, "speedup": r["speedup"], "prompts": 5, "new_tokens": 128, "repeats": 3} for k, r in RECORD.items()]
    rows.append({"source": "decode", "corpus": "code", "temperature": 0.0, "threads": threads, "family": "plain",
                 "k": 0, "tokens_per_second": summary(796.2, 771.0, 826.0)})
    of_record = report.measured_table(Model(7_750_000), Model(460_000), SPREAD, plain, rows, n_prompts=5, n_new=48,
                                      repeats=2)
    out = capsys.readouterr().out.splitlines()
    assert sorted(of_record) == [1, 2]
    assert out[0] == "target 7.75M parameters, draft 0.46M (0.06 of the target)"
    assert out[1] == "plain decoding: 980 [922, 988] tokens/s; one-token target step 1.02 ms"
    assert out[2].endswith(f"fastest of 2 runs each, {threads} torch thread(s)")
    assert out[4:7] == report.measured_rows(KS, SPREAD, of_record)
    assert out[8] == ("table of record: python -m lessonlib.bench decode, 5 prompts, 128 new tokens, fastest of 3 runs "
                      "each, plain 796 [771, 826] tokens/s")
    assert out[9] == "this cell: 5 prompts, 48 new tokens, fastest of 2 runs each, plain 980 [922, 988] tokens/s"
    assert len(out) == 11
    report.measured_table(Model(2), Model(1), SPREAD, plain, [], n_prompts=5, n_new=48, repeats=2)
    assert capsys.readouterr().out.splitlines()[-1].startswith("the table of record has no chain draft-kl rows")


def test_prediction_rows_and_figure_show_the_given_numbers():
    e_hat, predicted, timed = [1.6, 1.9, 2.2], [1.42, 1.57, 1.54], [0.96, 1.32, 1.10]
    lines = report.prediction_rows(KS, SPREAD, e_hat, predicted, timed)
    for line, k, e, p, t in zip(lines, KS, e_hat, predicted, timed):
        s = SPREAD[k]["speedup"]
        assert line.split() == [str(k), f"{SPREAD[k]['tau']['median']:.2f}", f"{e:.2f}", f"{s['median']:.2f}×",
                                f"[{s['q25']:.2f},", f"{s['q75']:.2f}]", f"{p:.2f}×", f"{t:.2f}×"]
    fig = report.plot_prediction(KS, SPREAD, e_hat, predicted, timed, alpha_hat=0.58, c_hat=0.112, n_prompts=5)
    left, right = fig.axes
    assert list(left.lines[0].get_ydata()) == e_hat
    assert list(left.lines[1].get_ydata()) == [SPREAD[k]["tau"]["median"] for k in KS]
    assert list(right.lines[-1].get_ydata()) == timed
    assert right.get_title() == "α = 0.58, c = 0.112, CPU, 5 prompts"
    report.plt.close(fig)


STEPS = {"readable target": {1: 8e-3, 6: 8.8e-3}, "readable draft": {1: 2e-4, 6: 3e-4},
         "fast target": {1: 5e-3, 6: 6.5e-3}, "fast draft": {1: 1.5e-4, 6: 2e-4}}


def test_prediction_lines_say_where_each_bracket_lies_and_which_prediction_is_nearer():
    """SPREAD's speedup brackets: K = 1 [1.35, 1.45], K = 2 [1.25, 1.35], K = 4 [1.05, 1.15]."""
    predicted, timed = [1.60, 1.30, 1.00], [1.42, 1.10, 1.12]  # below, holds it, above; nearer, not, nearer
    lines = report.prediction_lines(KS, SPREAD, predicted, timed)
    assert lines[0] == "K = 1: measured 1.40× [1.35, 1.45] against E/(Kc + 1) = 1.60×: below; " \
                       "E/(Kc + r) = 1.42× lies nearer the measured median"
    assert ": overlaps; E/(Kc + r) = 1.10× lies no nearer the measured median" in lines[1]
    assert ": above; E/(Kc + r) = 1.12× lies nearer" in lines[2] and len(lines) == 3


def test_c_and_r_and_the_forwards_table():
    cost = report.c_and_r(STEPS, ["readable", "fast"])
    assert cost["readable"] == pytest.approx((2e-4 / 8e-3, 8.8e-3 / 8e-3))
    assert cost["fast"] == pytest.approx((1.5e-4 / 5e-3, 6.5e-3 / 5e-3))
    bounds = {"readable": 6.7e-4, "fast": 6.7e-4}
    predicted = {"readable": 1.92, "fast": 1.59}
    lines = report.forwards_rows(STEPS, bounds, cost, predicted)
    assert lines[0].split() == ["readable", "8.00", f"{8e-3 / 6.7e-4:.1f}", "1.10", "0.025", "1.92×"]
    assert lines[1].split() == ["fast", "5.00", f"{5e-3 / 6.7e-4:.1f}", "1.30", "0.030", "1.59×"]


def test_peers_table_on_the_committed_run(capsys):
    peers = json.loads((paths.ROOT / "outputs/benchmarks/peers.json").read_text())
    run = report.peers_table(peers)
    out = capsys.readouterr().out.splitlines()
    k = peers["limits"]["k"]
    assert run is not None and run.k == k and run.rk == f"r({k + 1})" and "llama.cpp f16" in run.engines
    assert out[0].startswith(f"chain of K = {k} with draft-kl, greedy, ")
    engines = peers["limits"]["engines"]
    assert len(out) == 2 + len(engines)
    for line, (name, e) in zip(out[2:], engines.items()):
        assert line.startswith(f" {name} ")
        cells = line[len(name) + 1:].split()
        assert cells[0] == f"{e['step_ms']:.2f}" and cells[2] == f"{e[run.rk]:.2f}"
        assert cells[-1] == f"{e['tau'] / (k * e['c'] + 1):.2f}x"  # the same τ and c, a verify pass at one step


def test_peers_table_without_a_llama_cpp_run(capsys):
    assert report.peers_table(None) is None
    assert report.peers_table({"limits": {"engines": {"lessonlib": {}}}}) is None
    out = capsys.readouterr().out.splitlines()
    assert out == ["no llama.cpp measurement stored: run python -m lessonlib.bench peers "
                   "(after pip install -r requirements-peers.txt)"] * 2


def test_forward_spread_gives_each_compared_ratio_over_the_rounds():
    """Per round: step / bound, the path against the one before it, and E(α, 5) / (5c + r(6)) with
    that round's c and r; the interval is the median [q25, q75] of the rounds' values."""
    from lessonlib.core.theory import expected_tokens_per_verify

    rounds = {"readable target": {1: [4.0, 5.0, 6.0], 6: [5.0, 6.0, 6.0]},
              "readable draft": {1: [0.4, 0.5, 0.3]},
              "fast target": {1: [2.0, 2.5, 2.0], 6: [3.0, 3.0, 4.0]},
              "fast draft": {1: [0.2, 0.2, 0.4]}}
    out = report.forward_spread(rounds, {"readable": 1.0, "fast": 0.5}, alpha=0.6)
    assert set(out) == {"readable step / bound", "fast step / bound", "readable predicted", "fast predicted",
                        "fast / readable step"}
    ratio = out["fast / readable step"]  # 2/4, 2.5/5, 2/6
    assert ratio.median == pytest.approx(0.5) and ratio.low == pytest.approx(np.quantile([0.5, 0.5, 1 / 3], 0.25))
    assert out["fast step / bound"].median == pytest.approx(4.0)
    e = expected_tokens_per_verify(0.6, 5)
    per_round = [e / (5 * d / s + r / s) for d, s, r in zip([0.2, 0.2, 0.4], [2.0, 2.5, 2.0], [3.0, 3.0, 4.0])]
    assert out["fast predicted"].median == pytest.approx(np.median(per_round))
    assert out["fast predicted"].high == pytest.approx(np.quantile(per_round, 0.75))
