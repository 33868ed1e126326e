"""The one definition of every measured number (decoding.measures), the one clock
(decoding.timing) and the CPU thread policy (lessonlib.threads)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lessonlib import threads
from lessonlib.decoding import measures, timing
from lessonlib.models import GPT, GPTConfig

# one prompt's stats as the loops report them (seconds chosen so every ratio is exact)
PLAIN = {"seconds_per_token": 0.004, "target_forward_seconds": 0.004, "tokens_per_second": 250.0}
CHAIN = {"k": 3, "tau": 2.5, "alpha": 0.6, "seconds_per_token": 0.002, "draft_forward_seconds": 0.0005,
         "verify_forward_seconds": 0.005}
TREE = {"tau": 3.0, "seconds_per_token": 0.0025, "verify_forward_seconds": 0.006, "draft_seconds_per_round": 0.002}


def test_tau_alpha_and_their_bad_input():
    assert measures.tau(10, 4) == 2.5
    assert measures.alpha(3, 4) == 0.75
    assert np.isnan(measures.alpha(0, 0))
    with pytest.raises(ValueError, match="target_forwards"):
        measures.tau(3, 0)
    with pytest.raises(ValueError, match="accepted"):
        measures.alpha(5, 4)


def test_compare_prices_draft_and_verify_in_one_token_target_steps():
    out = measures.compare(CHAIN, PLAIN)
    assert out["c"] == pytest.approx(0.125)  # draft step / plain's one-token step
    assert out["r"] == pytest.approx(1.25)  # verify forward / one-token step
    assert out["speedup"] == pytest.approx(2.0)
    assert out["forward_bound"] == pytest.approx(2.5 / (3 * 0.125 + 1.25))
    # negative control: the old definition (draft step / verify pass) gives a different c
    assert CHAIN["draft_forward_seconds"] / CHAIN["verify_forward_seconds"] != pytest.approx(out["c"])


def test_compare_on_a_tree_round_uses_the_whole_draft_of_a_round():
    out = measures.compare(TREE, PLAIN)
    assert "c" not in out
    assert out["draft_cost_per_round"] == pytest.approx(0.5)
    assert out["forward_bound"] == pytest.approx(3.0 / (0.5 + 1.5))


def test_summary_is_median_and_quartiles():
    s = measures.summary([5.0, 1.0, 4.0, 2.0, 3.0])
    assert s == {"median": 3.0, "q25": 2.0, "q75": 4.0, "n": 5}
    assert measures.fmt_spread(s, 1, "×") == "3.0× [2.0, 4.0], n = 5"
    for bad in ([], [[1.0, 2.0]], [1.0, float("nan")]):
        with pytest.raises(ValueError, match="values"):
            measures.summary(bad)
    with pytest.raises(ValueError, match="level"):
        measures.summary([1.0], level=0)


def test_against_plain_pairs_each_prompt_with_its_own_plain_run():
    slow = dict(PLAIN, seconds_per_token=0.008, target_forward_seconds=0.008)
    rows = measures.against_plain([CHAIN, CHAIN], [PLAIN, slow])
    assert [r["speedup"] for r in rows] == pytest.approx([2.0, 4.0])
    assert [r["c"] for r in rows] == pytest.approx([0.125, 0.0625])
    assert rows[0]["tau"] == 2.5  # the loop's own stats are kept
    with pytest.raises(ValueError, match="one plain run per method run"):
        measures.against_plain([CHAIN], [PLAIN, PLAIN])


def test_summarise_skips_what_a_method_does_not_measure_and_undefined_alphas():
    rows = measures.against_plain([CHAIN, dict(CHAIN, alpha=float("nan")), CHAIN], [PLAIN] * 3)
    spread = measures.summarise(rows)
    assert spread["speedup"]["n"] == 3 and spread["alpha"]["n"] == 2  # the NaN prompt judged nothing
    assert "draft_cost_per_round" not in spread  # a chain has no tree rounds
    assert "c" not in measures.summarise(measures.against_plain([TREE], [PLAIN]))
    with pytest.raises(ValueError, match="runs"):
        measures.summarise([])


def test_interleaved_takes_turns_and_keeps_the_fastest():
    calls, seconds = [], iter([3.0, 5.0, 1.0, 4.0, 2.0, 2.0, 6.0, 1.0])

    def method(name):
        def run(i):
            calls.append((name, i))
            return (name, i), {"seconds": next(seconds)}
        return run

    best = timing.interleaved({"plain": method("plain"), "spec": method("spec")}, n_items=2, repeats=2)
    assert calls == [("plain", 0), ("spec", 0), ("plain", 0), ("spec", 0),
                     ("plain", 1), ("spec", 1), ("plain", 1), ("spec", 1)]
    assert [s["seconds"] for _, s in best["plain"]] == [1.0, 2.0]
    assert [s["seconds"] for _, s in best["spec"]] == [4.0, 1.0]
    for bad in ({"repeats": 0}, {"n_items": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            timing.interleaved({"plain": method("plain")}, **({"n_items": 1, "repeats": 1} | bad))


def test_pass_times_times_every_size_and_checks_the_context():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
    times = timing.pass_times(model, (1, 4), context=8, repeats=2)
    assert set(times) == {1, 4} and all(0 < t < float("inf") for t in times.values())
    with pytest.raises(ValueError, match="context"):
        timing.pass_times(model, (1, 30), context=8)


def test_thread_policy_default_override_and_bad_values(monkeypatch):
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    assert threads.policy() == threads.DEFAULT == 1
    assert threads.describe() == "1 torch thread (course default; LESSONLIB_THREADS overrides)"
    monkeypatch.setenv(threads.ENV_VAR, "2")
    assert threads.policy() == 2 and threads.describe() == "2 torch threads (LESSONLIB_THREADS=2)"
    for bad in ("two", "-1", "1.5"):
        monkeypatch.setenv(threads.ENV_VAR, bad)
        with pytest.raises(ValueError, match="LESSONLIB_THREADS must be an integer"):
            threads.policy()


def test_using_restores_the_thread_count():
    before = torch.get_num_threads()
    with threads.using(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be an integer"):
        with threads.using(0):
            pass


@pytest.mark.parametrize("env,expected", [(None, 1), ("2", 2)])
def test_importing_models_applies_the_policy(env, expected):
    environ = {k: v for k, v in os.environ.items() if k != threads.ENV_VAR}
    if env is not None:
        environ[threads.ENV_VAR] = env
    code = ("import torch; torch.set_num_threads(3); import lessonlib.models, lessonlib; "
            "print(torch.get_num_threads()); print(lessonlib.describe())")
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True).stdout
    count, line = out.splitlines()
    assert int(count) == expected
    assert f"{expected} torch thread" in line
