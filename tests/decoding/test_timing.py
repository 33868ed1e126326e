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
