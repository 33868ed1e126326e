"""Every command line refuses a bad flag or variable in one line that names it: exit code 2, no
traceback (issue 29). In-process (no model is loaded: the flags are refused before any work),
plus one real subprocess for the no-traceback promise."""
from __future__ import annotations

import subprocess
import sys

import pytest

from lessonlib import __main__ as demo
from lessonlib import cli
from lessonlib.bench import __main__ as bench
from lessonlib.course import exercises, translate
from lessonlib.course.skill import __main__ as skill
from lessonlib.decoding import llm_replies
from lessonlib.models import llm_features, llm_selfdistill, train, train_heads, train_llm_heads

# (entry point, argv, environment, what the one line must name)
CASES = {
    "bench decode negative --new-tokens": (bench.main, ["decode", "--new-tokens", "-3"], {}, "--new-tokens"),
    "bench decode 4 prompts": (bench.main, ["decode", "--prompts", "4"], {}, "--prompts"),
    "bench decode text --prompt-len": (bench.main, ["decode", "--prompt-len", "x"], {}, "--prompt-len"),
    "bench decode --ks 0": (bench.main, ["decode", "--ks", "1", "0"], {}, "--ks"),
    "bench decode --device gpu": (bench.main, ["decode", "--device", "gpu"], {}, "--device"),
    "bench decode --threads 0": (bench.main, ["decode", "--threads", "0"], {}, "--threads"),
    "bench tree past the context": (bench.main, ["tree", "--new-tokens", "500"], {}, "--new-tokens"),
    "bench tree --repeats 0": (bench.main, ["tree", "--repeats", "0"], {}, "--repeats"),
    "bench shapes 1 prompt": (bench.main, ["shapes", "--prompts", "1"], {}, "--prompts"),
    "bench kinds --seed -1": (bench.main, ["kinds", "--seed", "-1"], {}, "--seed"),
    "bench load --budget nan": (bench.main, ["load", "--budget", "nan"], {}, "--budget"),
    "bench profile --repeats 1.5": (bench.main, ["profile", "--repeats", "1.5"], {}, "--repeats"),
    "bench gpu --rounds 0": (bench.main, ["gpu", "--rounds", "0"], {}, "--rounds"),
    "bench agreement --threads 0": (bench.main, ["agreement", "--threads", "0"], {}, "--threads"),
    "bench agreement --compare missing": (bench.main, ["agreement", "--compare", "/nonexistent/a.json", "b.json"], {},
                                          "a.json"),
    "bench record, empty outputs": (bench.main, ["record"], {"LESSONLIB_OUTPUTS": ""}, "LESSONLIB_OUTPUTS"),
    "bench decode, empty outputs": (bench.main, ["decode"], {"LESSONLIB_OUTPUTS": " "}, "LESSONLIB_OUTPUTS"),
    "skill --alpha 2": (skill.main, ["--alpha", "2"], {}, "--alpha"),
    "skill --alpha nan": (skill.main, ["--alpha", "nan"], {}, "--alpha"),
    "skill --c -1": (skill.main, ["--alpha", "0.5", "--c", "-1"], {}, "--c"),
    "skill --concurrency 0": (skill.main, ["--alpha", "0.5", "--concurrency", "0"], {}, "--concurrency"),
    "skill --temperature inf": (skill.main, ["--alpha", "0.5", "--temperature", "inf"], {}, "--temperature"),
    "skill --temperature without --alpha": (skill.main, ["--temperature", "2"], {}, "--alpha"),
    "skill --measurements missing": (skill.main, ["--measurements", "/nonexistent/t.json"], {}, "t.json"),
    "skill --out a folder": (skill.main, ["--out", "/"], {}, "--out"),
    "skill --out with --alpha": (skill.main, ["--alpha", "0.5", "--out", "x.md"], {}, "--out"),
    "translate check --root missing": (translate.main, ["check", "--root", "/nonexistent"], {}, "--root"),
    "translate check 99_nope": (translate.main, ["check", "99_nope"], {}, "99_nope"),
    "translate build with names": (translate.main, ["build", "01_exact_rule"], {}, "build"),
    "exercises --check 99_nope": (exercises.main, ["--check", "99_nope"], {}, "99_nope"),
    "exercises --root missing": (exercises.main, ["--check", "--root", "/nonexistent"], {}, "--root"),
    "demo --k 0": (demo.main, ["--k", "0"], {}, "--k"),
    "demo --vocab 1": (demo.main, ["--vocab", "1"], {}, "--vocab"),
    "demo --alpha 1.5": (demo.main, ["--alpha", "1.5"], {}, "--alpha"),
    "demo --samples 10**9": (demo.main, ["--samples", "1000000000"], {}, "--samples"),
    "demo LESSONLIB_BACKEND": (demo.main, [], {"LESSONLIB_BACKEND": "gpu"}, "LESSONLIB_BACKEND"),
    "train --steps -5": (train.main, ["target", "--steps", "-5"], {}, "--steps"),
    "train --steps 0": (train.main, ["target", "--steps", "0"], {}, "--steps"),
    "train --minutes 0": (train.main, ["target", "--minutes", "0"], {}, "--minutes"),
    "train_heads --batch 0": (train_heads.main, ["eagle", "--batch", "0"], {}, "--batch"),
    "train_heads --suffix ../x": (train_heads.main, ["eagle", "--suffix", "../x"], {}, "--suffix"),
    "train_heads --lr -1": (train_heads.main, ["eagle", "--lr", "-1"], {}, "--lr"),
    "train_heads --temperatures 0": (train_heads.main, ["eagle", "--temperatures", "1", "0"], {}, "--temperatures"),
    "train_heads --temperatures nan": (train_heads.main, ["eagle", "--temperatures", "nan"], {}, "--temperatures"),
    # the real LLM's background jobs: a deadline that is no clock time is refused before any data is read
    "train_llm_heads --until 25:00": (train_llm_heads.main, ["draft", "--until", "25:00"], {}, "--until"),
    "llm_features --until 9": (llm_features.main, ["--until", "9"], {}, "--until"),
    "llm_replies --until 12:60": (llm_replies.main, ["--until", "12:60"], {}, "--until"),
    "llm_selfdistill --until 7h": (llm_selfdistill.main, ["features", "--until", "7h"], {}, "--until"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_flag_is_one_line_naming_it_with_exit_code_2(name, monkeypatch, capsys, tmp_path):
    main, argv, env, named = CASES[name]
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path / "outputs"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        code = cli.run(main, argv, prog="lessonlib")
    except SystemExit as stop:  # argparse's own exit
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert named in lines[0], lines[0]
    assert not (tmp_path / "outputs").exists()  # refused before anything was written


def test_a_corrupt_measurements_file_names_the_file_and_how_to_rebuild_it(tmp_path, capsys):
    bad = tmp_path / "temperature.json"
    bad.write_text('{"temperatures": [0.0, 1.0')
    assert cli.run(skill.main, ["--measurements", str(bad), "--out", str(tmp_path / "skill.md")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "05_high_temperature" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "skill.md").exists()


def test_debug_shows_the_traceback():
    with pytest.raises(ValueError, match="99_nope"):
        cli.run(translate.main, ["check", "99_nope", "--debug"])


def test_the_real_command_line_prints_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "lessonlib.bench", "decode", "--new-tokens", "-3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "python -m lessonlib.bench decode: error: argument --new-tokens: '-3' (expected an integer >= 1) "
        "(--help lists the options)"]


@pytest.mark.parametrize("text, ok", [("3", True), ("0", False), ("-1", False), ("1.5", False), ("True", False),
                                      ("", False), ("1e3", False)])
def test_positive_int_takes_only_integers_at_least_one(text, ok):
    if ok:
        assert cli.positive_int(text) == 3
    else:
        with pytest.raises(Exception, match=repr(text)):
            cli.positive_int(text)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "x", "1.0000001", "-0.1"])
def test_a_unit_number_refuses_what_lies_outside_zero_one(text):
    with pytest.raises(Exception, match="expected|not a number"):
        cli.number(0, 1)(text)


def test_a_clock_time_is_its_next_occurrence(monkeypatch):
    """``--until HH:MM`` is the next time the clock shows it: later today, or tomorrow once it has
    passed today (a run started at 23:00 with --until 01:30 stops in the coming night, not at once)."""
    import datetime as dt

    now = dt.datetime(2026, 12, 7, 23, 0, 30, tzinfo=dt.UTC)

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    monkeypatch.setattr(dt, "datetime", Clock)
    assert cli.clock_time("23:30") == dt.datetime(2026, 12, 7, 23, 30, tzinfo=dt.UTC).timestamp()
    assert cli.clock_time("01:30") == dt.datetime(2026, 12, 8, 1, 30, tzinfo=dt.UTC).timestamp()
    assert cli.clock_time("23:00") == dt.datetime(2026, 12, 8, 23, 0, tzinfo=dt.UTC).timestamp()  # just passed
    for bad in ("24:00", "7:60", "7", "07:5", "-1:00", " 07:00", "07:00:00"):
        with pytest.raises(Exception, match="HH:MM"):
            cli.clock_time(bad)
