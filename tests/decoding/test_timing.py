"""The one clock (lessonlib.decoding.timing): interleaved runs keep the fastest, pass times per size."""
import types

import pytest
import torch

from lessonlib.decoding import timing
from lessonlib.models import GPT, GPTConfig


def test_interleaved_takes_turns_and_keeps_the_fastest():
    calls, seconds = [], iter([3.0, 5.0, 1.0, 4.0, 2.0, 2.0, 6.0, 1.0])

    def method(name):
        def run(i):
            calls.append((name, i))
            return (name, i), types.SimpleNamespace(seconds=next(seconds))
        return run

    best = timing.interleaved({"plain": method("plain"), "spec": method("spec")}, n_items=2, repeats=2)
    assert calls == [("plain", 0), ("spec", 0), ("plain", 0), ("spec", 0),
                     ("plain", 1), ("spec", 1), ("plain", 1), ("spec", 1)]
    assert [s.seconds for _, s in best["plain"]] == [1.0, 2.0]
    assert [s.seconds for _, s in best["spec"]] == [4.0, 1.0]
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


def test_clock_files_a_block_or_a_call_under_its_phase():
    """``Clock`` as a context manager and as the loops' Timer: seconds and calls add up per phase,
    a block that raises is not counted, phases stay apart."""
    import time as _time

    from lessonlib.decoding.timing import Clock

    clock = Clock()
    with clock.phase("verify"):
        _time.sleep(0.002)
    assert clock("verify", lambda x: x + 1, 1) == 2
    with pytest.raises(RuntimeError):
        with clock.phase("draft"):
            raise RuntimeError("boom")
    assert clock.calls == {"verify": 2} and "draft" not in clock.seconds
    assert clock.seconds["verify"] >= 0.002 and clock.per_call("verify") == clock.seconds["verify"] / 2
    assert clock.per_call("draft") == 0.0
