"""Stopping at an end-of-turn token (``stop``) in every loop: the output is plain decoding's up to
and including the first ``stop`` token, nothing after it, and the stats count the tokens delivered
(tokens per second over them); a stop the text never reaches changes nothing; a stop outside the
vocabulary is refused before any work. A random tiny GPT whose next token depends on the whole
context (``loop_support.context_gpt``), greedy and at T = 0.7 with the same seed."""
import functools

import numpy as np
import pytest
from loop_support import context_gpt, noisy_copy

from lessonlib.core import tree
from lessonlib.decoding import decode, lookahead, prompt_lookup
from lessonlib.decoding.drafters import ModelDrafter
from lessonlib.decoding.tree_decode import tree_generate

PROMPT, N = [3, 1, 4, 1, 5], 40


def loops(target, draft):
    chain = functools.partial(tree.draft_topk, branching=(2, 1, 1))
    return {
        "plain": lambda **kw: decode.generate(target, PROMPT, N, **kw),
        "chain": lambda **kw: decode.speculative_generate(target, draft, PROMPT, 3, N, **kw),
        "tree": lambda **kw: tree_generate(target, ModelDrafter(draft), PROMPT, N, rule=chain, **kw),
        "lookup": lambda **kw: prompt_lookup.lookup_generate(target, PROMPT, N, k=4, **kw),
        "lookahead": lambda **kw: lookahead.lookahead_generate(target, PROMPT, N, **kw),
    }


@pytest.mark.parametrize("name", ["plain", "chain", "tree", "lookup", "lookahead"])
def test_every_loop_stops_after_the_first_stop_token(name):
    target = context_gpt(0)
    run = loops(target, noisy_copy(target, 1))[name]
    full, _ = decode.generate(target, PROMPT, N)
    stop = next(t for i, t in enumerate(full) if i >= 5 and t not in full[:i])  # first seen at position >= 5
    cut = full[: full.index(stop) + 1]
    out, stats = run(stop=stop)
    assert out == cut and stats.new_tokens == len(cut) < N
    assert stats.tokens_per_second == pytest.approx(len(cut) / stats.seconds)
    unused = next(t for t in range(target.config.vocab_size) if t not in full)
    assert run(stop=unused)[0] == full  # never reached: the whole budget
    sampled = {}
    for s in (stop, None):  # at T = 0.7 with the same seed: the same tokens up to the stop
        out, _ = run(temperature=0.7, rng=np.random.default_rng(3), stop=s)
        sampled[s] = out
    if stop in sampled[None]:
        assert sampled[stop] == sampled[None][: sampled[None].index(stop) + 1]
    else:
        assert sampled[stop] == sampled[None]
    with pytest.raises(ValueError, match="stop"):
        run(stop=target.config.vocab_size)
