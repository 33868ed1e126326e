"""Notebook 00's report plumbing (lessonlib.course.reports.start_here): the thread table of record
and load.json's table print their rows, and return the ratios and intervals the claims compare,
computed here independently from small synthetic reports (and once from the committed record)."""
import pytest

from lessonlib.bench import record
from lessonlib.course.claims import Interval
from lessonlib.course.reports import start_here


def _summary(median, q25, q75, n=5):
    return {"median": median, "q25": q25, "q75": q75, "n": n}


def _row(method, threads, **fields):
    return {"source": "decode", "method": method, "corpus": "code", "temperature": 0.0, "threads": threads, **fields}


ROWS = [
    _row("plain", 1, tokens_per_second=_summary(800.4, 770.2, 826.0)),
    _row("plain", 2, tokens_per_second=_summary(1000.6, 915.0, 979.0)),
    _row("chain draft-kl K=3", 1, speedup=_summary(0.94, 0.93, 1.25), prompts=5),
    _row("chain draft-kl K=3", 2, speedup=_summary(0.84, 0.62, 0.99), prompts=4),
    # rows the table must not pick: another corpus, another temperature, another source
    {**_row("plain", 1, tokens_per_second=_summary(1.0, 1.0, 1.0)), "corpus": "chat"},
    {**_row("chain draft-kl K=3", 2, speedup=_summary(9.0, 9.0, 9.0), prompts=9), "temperature": 1.0},
    {**_row("plain", 2, tokens_per_second=_summary(1.0, 1.0, 1.0)), "source": "load"},
]


def test_the_thread_table_prints_both_settings_and_returns_what_the_claims_compare(capsys):
    threads = start_here.record_threads(ROWS)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("read from the table of record")
    assert lines[1].split() == "threads plain tokens/s chain draft-kl K = 3 speedup prompts".split()
    assert lines[2].split() == ["1", "800", "[770,", "826]", "0.94×", "[0.93,", "1.25]", "5"]
    assert lines[3].split() == ["2", "1001", "[915,", "979]", "0.84×", "[0.62,", "0.99]", "4"]
    assert len(lines) == 4
    assert threads is not None
    assert threads.more == pytest.approx(1000.6 / 800.4)
    assert threads.one == Interval(0.94, 0.93, 1.25, "×") and threads.two == Interval(0.84, 0.62, 0.99, "×")


def test_without_both_thread_counts_the_table_prints_but_no_claim_is_possible(capsys):
    one_thread = [r for r in ROWS if r["threads"] == 1]
    assert start_here.record_threads(one_thread) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[2].split()[0] == "1"
    assert start_here.record_threads([r for r in ROWS if r["method"] == "plain"]) is None
    assert capsys.readouterr().out.startswith("no table of record yet")


def _result(ms, model="24 x 160", chain=True):
    runs = {"plain T=0": {"tokens_per_second": _summary(146.2, 145.4, 148.3)},
            "chain draft-kl K=3, T=0": {"speedup": _summary(1.281, 1.263, 1.514)}} if chain else {"skipped": "no head"}
    return {"model": model, "pass_table": {"ms": [ms, 2 * ms]}, "chain": runs}


LOAD = {"results": {"idle, 1 thread(s)": _result(10.0), "idle, 2 thread(s)": _result(18.0),
                    "busy, 1 thread(s)": _result(11.0), "busy, 2 thread(s)": _result(27.0, chain=False)}}


def test_the_load_table_prints_every_setting_and_returns_busy_over_idle(capsys):
    load = start_here.load_rows(LOAD, shape="24 x 160")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "" and lines[1] == "load.json timed its pass table on a 24 x 160 model"
    assert lines[2].startswith("read from outputs/benchmarks/load.json")
    assert lines[3] == ("  idle, 1 thread(s)    pass 10.00 ms   "
                        "plain 146 [145, 148] tokens/s   speedup 1.28× [1.26, 1.51]")
    assert lines[6] == "  busy, 2 thread(s)    pass 27.00 ms   no head"
    assert len(lines) == 7
    assert load is not None
    assert load.one_busy == pytest.approx(1.1) and load.two_busy == pytest.approx(1.5)


def test_a_load_report_of_another_model_or_missing_settings_says_so(capsys):
    partial = {"results": {name: _result(10.0, model="8 x 256") for name in ("idle, 1 thread(s)", "busy, 1 thread(s)")}}
    assert start_here.load_rows(partial, shape="24 x 160") is None
    out = capsys.readouterr().out
    assert "on a 8 x 256 model, not this notebook's 24 x 160" in out and out.count("pass 10.00 ms") == 2
    unrecorded = {"results": {"idle, 1 thread(s)": {k: v for k, v in _result(10.0).items() if k != "model"}}}
    start_here.load_rows(unrecorded, shape="24 x 160")
    assert "on a 8 x 256 (not recorded) model, not this" in capsys.readouterr().out
    assert start_here.load_rows(None, shape="24 x 160") is None
    assert capsys.readouterr().out.startswith("no load.json yet")


def test_the_committed_record_gives_the_ratio_of_its_own_medians(capsys):
    rows = record.load()
    found = record.find(rows, source="decode", method="plain", corpus="code", temperature=0.0)
    plain = {r["threads"]: r for r in found}
    threads = start_here.record_threads(rows)
    if {1, 2} - set(plain):
        pytest.skip("the committed record lacks a thread setting")
    assert threads is not None
    assert threads.more == plain[2]["tokens_per_second"]["median"] / plain[1]["tokens_per_second"]["median"]
    assert f"{plain[1]['tokens_per_second']['median']:.0f}" in capsys.readouterr().out


def _llm_row(speedup, alpha):
    return {"spread": {"speedup": _summary(*speedup), "alpha": _summary(alpha, alpha, alpha)}}


def test_two_targets_picks_each_targets_fastest_setting_and_fastest_trained_draft(capsys):
    tree = {"source": "tree"}
    rows = [_row("prompt lookup k=4", 1, **tree, speedup=_summary(1.47, 1.19, 1.64), alpha=_summary(0.7, 0.6, 0.8)),
            _row("EAGLE chain K=3", 1, **tree, speedup=_summary(1.41, 1.16, 1.51), alpha=_summary(0.81, 0.8, 0.9)),
            _row("EAGLE chain K=3", 2, **tree, speedup=_summary(9.0, 9.0, 9.0), alpha=_summary(0.9, 0.9, 0.9)),
            _row("chain draft-kl K=3", 1, speedup=_summary(0.94, 0.93, 1.25), alpha=_summary(0.6, 0.5, 0.7))]
    llm = {"by_threads": {"1": {"methods": {
        "edit": {"plain": {}, "prompt lookup k=3": _llm_row((2.13, 1.82, 2.17), 0.8),
                 "EAGLE-3 chain K=2": _llm_row((1.11, 1.04, 1.12), 0.36)},
        "chat": {"plain": {}, "EAGLE-3 chain K=1": _llm_row((1.07, 1.06, 1.11), 0.35)}}}}}
    engines = {"rows": {start_here.REAL_ENGINE: {"r": {"5": 1.47}, "weight_bytes": 269e6, "step_ms": 13.9}}}
    found = start_here.two_targets(rows, llm, engines, {1: 2.0, 5: 2.5}, 31.0)
    assert found is not None
    assert found.real_best == ("prompt lookup k=3 (edit)", Interval(2.13, 1.82, 2.17, "×"))
    assert found.tiny_best == ("prompt lookup k=4", Interval(1.47, 1.19, 1.64, "×"))  # the 2-thread row left out
    assert found.real_trained == ("EAGLE-3 chain K=2 (edit)", Interval(1.11, 1.04, 1.12, "×"))
    assert found.tiny_trained[0] == "EAGLE chain K=3" and found.alpha == (0.36, 0.81)
    assert found.r5 == (1.47, 1.25)
    table = capsys.readouterr().out
    assert "269 MB" in table and "EAGLE chain K=3: 1.41× [1.16, 1.51], α 0.81" in table
    assert start_here.two_targets(rows, None, engines, {1: 2.0, 5: 2.5}, 31.0) is None
    assert capsys.readouterr().out.startswith("no stored benchmark of the real LLM yet")
