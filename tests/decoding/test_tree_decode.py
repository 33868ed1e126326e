"""Tree speculative decoding on real (tiny, random-init) GPTs: tree forward, compaction,
greedy equality with plain decoding, sampling distribution (lessonlib.decoding.tree_decode)."""
import functools

import numpy as np
import pytest
import torch
from loop_support import context_gpt

from lessonlib.core import tree
from lessonlib.core.stats import chi_square
from lessonlib.decoding import decode
from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter, ModelDrafter
from lessonlib.decoding.tree_decode import tree_generate, verify_tree_forward
from lessonlib.models import GPT, GPTConfig
from lessonlib.models.heads import EagleHead, MedusaHeads

CONFIG = GPTConfig(vocab_size=64, block_size=96, n_layer=2, n_head=2, n_embd=32)


def tiny(seed, config=CONFIG, sharpen=1.0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = GPT(config).to(dtype).eval()
    with torch.no_grad():
        model.wte.weight.mul_(sharpen)  # larger embeddings -> peakier next-token distributions
    return model


def lesson_tree():
    return np.array([-1, -1, 0, 0, 1, 1, 2, 4]), np.array([5, 9, 7, 1, 3, 3, 8, 2])


@torch.inference_mode()
def test_tree_forward_equals_path_forward():
    """Every node's logits from the one tree forward equal a plain causal forward over
    prefix + that node's root-to-node path (float32, tolerance 1e-4 absolute)."""
    target = tiny(0, dtype=torch.float32)
    prefix = [3, 14, 15, 9, 2, 6]
    parents, tokens = lesson_tree()
    cache = target.new_cache()
    target(torch.tensor([prefix[:-1]]), cache=cache)
    logits, _ = verify_tree_forward(target, cache, prefix[-1], parents, tokens)
    for node in range(-1, len(parents)):
        path = [] if node < 0 else tokens[tree.ancestor_closure(parents, [node])].tolist()
        plain = target(torch.tensor([prefix + path]))[0, -1]
        torch.testing.assert_close(logits[node + 1], plain, atol=1e-4, rtol=0)


@torch.inference_mode()
def test_wrong_positions_change_the_logits():
    """Negative control: positions 0..N instead of prefix_len + depth break the equality."""
    target = tiny(0, dtype=torch.float32)
    parents, tokens = lesson_tree()
    full = tree.with_root(parents)
    idx = torch.from_numpy(np.concatenate([[6], tokens]))[None]
    mask = torch.from_numpy(tree.tree_attention_mask(full))
    right = target(idx, positions=torch.as_tensor(tree.tree_position_ids(full)), mask=mask)
    wrong = target(idx, positions=torch.arange(len(full)), mask=mask)
    assert (right - wrong).abs().max() > 1e-2


@torch.inference_mode()
def test_compaction_equals_fresh_prefill():
    target = tiny(1)
    prefix = [3, 14, 15, 9, 2, 6]
    parents, tokens = lesson_tree()
    cache = target.new_cache()
    target(torch.tensor([prefix[:-1]]), cache=cache)
    start = cache.length
    verify_tree_forward(target, cache, prefix[-1], parents, tokens)
    path = [1, 4, 7]  # b -> its first child -> its child
    cache.keep(start, [0] + [a + 1 for a in path])
    fresh = target.new_cache()
    target(torch.tensor([prefix + tokens[path].tolist()]), cache=fresh)
    assert cache.length == fresh.length == len(prefix) + len(path)
    torch.testing.assert_close(cache.kv[:, :, :, : cache.length], fresh.kv[:, :, :, : fresh.length], atol=1e-10, rtol=0)
    # negative control: keeping the nodes in the wrong order is not a prefill
    cache2 = target.new_cache()
    target(torch.tensor([prefix[:-1]]), cache=cache2)
    verify_tree_forward(target, cache2, prefix[-1], parents, tokens)
    cache2.keep(start, [0, 8, 5, 2])
    assert (cache2.kv[:, :, :, : cache2.length] - fresh.kv[:, :, :, : fresh.length]).abs().max() > 1e-3


RULES = {
    "topk": functools.partial(tree.draft_topk, branching=(3, 2, 2)),
    "choices": functools.partial(tree.draft_static,
                                 choices=[(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)]),
    "top_p": functools.partial(tree.draft_top_p, top_p=0.5, depth=3, max_children=3),
    "dynamic": functools.partial(tree.draft_dynamic, depth=4, top_k=3, total=10),
    "chain": functools.partial(tree.draft_topk, branching=(1, 1, 1, 1)),
}


def drafters(target):
    draft = tiny(7, GPTConfig(vocab_size=64, block_size=96, n_layer=1, n_head=2, n_embd=16), sharpen=30.0)
    torch.manual_seed(8)
    eagle = EagleHead(target.config).to(torch.float64).eval()
    medusa = MedusaHeads(target.config, n_heads=4).to(torch.float64).eval()
    return {
        "self": ModelDrafter(target),  # the target drafting for itself: every node on its greedy path is accepted
        "draft": ModelDrafter(draft),
        "eagle": EagleDrafter(eagle, target),
        "medusa": MedusaDrafter(medusa, target),
    }


@torch.inference_mode()
def test_drafter_rows_do_not_depend_on_how_the_tree_was_fed():
    """A drafter's cache keeps the nodes fed this round. Its rows must not depend on the call
    order: depth by depth (as the rules call it), all nodes in one call (ancestors fed on the
    way), or after a call on a different tree (stale nodes must be dropped). For the small
    GPT the rows must also equal a plain forward over prompt + the node's path (float64)."""
    target = tiny(2, sharpen=3.0)
    prompt = [1, 5, 9, 13, 2]
    parents, tokens = lesson_tree()
    depth = tree.tree_depth(parents)
    every = np.arange(-1, len(parents))
    other = tokens.copy()
    other[[0, 3]] = [11, 12]  # same shape, other tokens: cached keys/values would be wrong
    features = target(torch.tensor([prompt[:-1]]), return_hidden=True)[1][0]
    rows = {}
    for how in ("by depth", "at once", "after another tree"):
        for name, drafter in drafters(target).items():  # fresh drafters (same weights) for each way
            if name == "medusa":
                continue
            drafter.commit(prompt, features)
            if how == "by depth":
                got = np.concatenate([drafter.expand(parents[:0], tokens[:0], [-1])] + [
                    drafter.expand(parents[depth < d], tokens[depth < d], np.flatnonzero(depth == d - 1))
                    for d in range(1, depth.max() + 2)])
            else:
                if how == "after another tree":
                    drafter.expand(parents, other, np.arange(len(parents)))
                got = drafter.expand(parents, tokens, every)
            rows[how, name] = got
    for name in ("self", "draft", "eagle"):
        np.testing.assert_allclose(rows["at once", name], rows["by depth", name], atol=1e-10, rtol=0, err_msg=name)
        np.testing.assert_allclose(rows["after another tree", name], rows["by depth", name], atol=1e-10, rtol=0,
                                   err_msg=name)
    for name, drafter in drafters(target).items():
        if name in ("self", "draft"):
            for node in every:
                path = [] if node < 0 else tokens[tree.ancestor_closure(parents, [node])].tolist()
                plain = torch.log_softmax(drafter.model(torch.tensor([prompt + path]))[0, -1], -1).numpy()
                np.testing.assert_allclose(rows["at once", name][node + 1], plain, atol=1e-9, rtol=0)


@pytest.mark.parametrize("rule", RULES)
def test_greedy_tree_decoding_equals_greedy_decoding(rule):
    # a target whose next token depends on the context: a sharpened random GPT repeats its last
    # token, and there a wrongly compacted cache still gives the right tokens
    target = context_gpt(2, vocab=64, block_size=96)
    prompt = [1, 5, 9, 13, 2]
    expected, _ = decode.generate(target, prompt, 40)
    assert len(set(expected)) > 5
    for name, drafter in drafters(target).items():
        out, stats = tree_generate(target, drafter, prompt, 40, rule=RULES[rule])
        assert out == expected, (rule, name)
        if name == "self" and rule not in ("top_p", "dynamic"):
            assert stats.tau > 3  # deep acceptance exercised the compaction on every round
        elif name == "self":
            assert stats.tau >= 2.5  # a dynamic or top-p tree may leave the greedy path out at depth


def test_stats_and_acceptance_by_depth():
    target = context_gpt(2, vocab=64, block_size=96)
    _, stats = tree_generate(target, ModelDrafter(target), [1, 5, 9], 30, rule=RULES["chain"])
    assert stats.acceptance_by_depth == [1.0, 1.0, 1.0, 1.0]
    assert stats.rounds == stats.target_calls and stats.mean_nodes == 4


@torch.inference_mode()
def test_sampled_tree_decoding_matches_target_distribution():
    """T = 1, 3-token vocabulary: the first two emitted tokens follow the target's own
    two-step distribution (chi-square, false-alarm rate 1e-3, 800 runs), and the same
    histogram rejects the draft's distribution (the test has power)."""
    config = GPTConfig(vocab_size=3, block_size=32, n_layer=1, n_head=1, n_embd=8)
    target, draft = tiny(3, config, sharpen=15.0), tiny(4, config, sharpen=15.0)
    prompt = [0, 2, 1]
    exact = np.zeros((3, 3))
    p1 = torch.softmax(target(torch.tensor([prompt]))[0, -1], -1).numpy()
    for a in range(3):
        exact[a] = p1[a] * torch.softmax(target(torch.tensor([prompt + [a]]))[0, -1], -1).numpy()
    q1 = torch.softmax(draft(torch.tensor([prompt]))[0, -1], -1).numpy()
    q = np.array([q1[a] * torch.softmax(draft(torch.tensor([prompt + [a]]))[0, -1], -1).numpy() for a in range(3)])
    rng = np.random.default_rng(0)
    counts = np.zeros((3, 3))
    rule = functools.partial(tree.draft_topk, branching=(2, 1))
    for _ in range(800):
        out, _ = tree_generate(target, ModelDrafter(draft), prompt, 2, rule=rule, temperature=1.0, rng=rng)
        counts[out[0], out[1]] += 1
    assert chi_square(counts, exact / exact.sum())[1] > 1e-3
    assert chi_square(counts, q / q.sum())[1] < 1e-3


def test_a_tree_larger_than_the_context_left_is_cut_and_a_budget_past_it_raises():
    """Near the end of the context a round verifies the nodes that fit (``round.fit_to_room``),
    so the output is still plain greedy decoding's; asking for more tokens than fit raises."""
    target = tiny(2)
    prompt, rule = [i % 64 for i in range(80)], functools.partial(tree.draft_topk, branching=(4, 4))
    room = target.config.block_size - len(prompt)
    assert tree_generate(target, ModelDrafter(target), prompt, room, rule=rule)[0] == \
        decode.generate(target, prompt, room)[0]
    with pytest.raises(ValueError, match="fit"):
        tree_generate(target, ModelDrafter(target), prompt, room + 1, rule=rule)


@torch.inference_mode()
def test_drafter_rows_do_not_depend_on_the_order_nodes_are_asked_for():
    """One node per call, in index order and in reverse (a deep node before its ancestors, so
    expand must feed the unfed ancestors first; a depth-0 node after its sibling's subtree, so
    its EAGLE input must be the root's feature, not the sibling's), equals all nodes at once."""
    target = tiny(2, sharpen=3.0)
    prompt = [1, 5, 9, 13, 2]
    parents, tokens = lesson_tree()
    features = target(torch.tensor([prompt[:-1]]), return_hidden=True)[1][0]
    every = np.arange(-1, len(parents))
    for name in ("self", "draft", "eagle"):
        rows = {}
        for how, order in (("at once", None), ("in order", every), ("reversed", every[::-1])):
            drafter = drafters(target)[name]
            drafter.commit(prompt, features)
            if order is None:
                rows[how] = drafter.expand(parents, tokens, every)
            else:
                got = {int(n): drafter.expand(parents, tokens, [n])[0] for n in order}
                rows[how] = np.stack([got[int(n)] for n in every])
        for how in ("in order", "reversed"):
            np.testing.assert_allclose(rows[how], rows["at once"], atol=1e-10, rtol=0, err_msg=f"{name}, {how}")


@torch.inference_mode()
@pytest.mark.parametrize("prompt_len", [5, 93])  # 93: the draft cache runs out of room inside the chain
def test_a_chain_rule_runs_as_its_rule_would(prompt_len):
    """A chain rule (``tree_sampled.chain_length``) runs as ``TreeDrafter.chain``, a plain loop.
    It must hand the round what the rule itself gives through ``expand`` -- the same tokens, the
    same q rows, the same random draws -- and leave the drafter as the rule's calls leave it
    (its rows for every node equal), sampled (T = 0.8, top-k 5) and deterministic, also where
    the draft cache has no room left for the last nodes."""
    from lessonlib.core.tree_sampled import SampledRule, chain_length
    from lessonlib.decoding.drafters import RuleDrafter
    from lessonlib.decoding.round import Sampling

    target = tiny(2, sharpen=3.0)
    prompt = [(7 * i + 3) % 64 for i in range(prompt_len)]
    features = target(torch.tensor([prompt[:-1]]), return_hidden=True)[1][0]
    sampling = Sampling(0.8, top_k=5)
    rules = {"sampled": SampledRule((1, 1, 1, 1)), "deterministic": functools.partial(tree.draft_topk,
                                                                                   branching=(1, 1, 1, 1))}
    assert {chain_length(r) for r in rules.values()} == {4}
    assert chain_length(SampledRule((1, 1), replacement=False)) is None  # drawn another way: the rule runs
    assert chain_length(SampledRule((2, 1))) is None
    with pytest.raises(ValueError, match="branching"):  # a bool is no width: refused when the rule is built
        SampledRule((True, 1))
    for name in ("self", "draft", "eagle"):
        for label, rule in rules.items():
            got = {}
            for how in ("chain", "rule"):
                drafter, rng = drafters(target)[name], np.random.default_rng(3)
                drafter.commit(prompt, features)
                proposal = (drafter.propose if how == "chain" else
                            functools.partial(RuleDrafter.propose, drafter))(rule, sampling, rng)
                every = np.arange(-1, len(proposal.parents))
                got[how] = proposal, drafter.expand(proposal.parents, proposal.tokens, every), rng.random()
            (a, rows_a, u_a), (b, rows_b, u_b) = got["chain"], got["rule"]
            where = f"{name}, {label}, prompt {prompt_len}"
            np.testing.assert_array_equal(a.parents, b.parents, err_msg=where)
            np.testing.assert_array_equal(a.tokens, b.tokens, err_msg=where)
            assert (a.q is None) == (b.q is None) == (label == "deterministic"), where
            if a.q is not None:
                np.testing.assert_allclose(a.q, b.q, atol=1e-12, rtol=0, err_msg=where)
                assert a.replacement and b.replacement
            np.testing.assert_allclose(rows_a, rows_b, atol=1e-10, rtol=0, err_msg=where)
            assert u_a == u_b, where  # the same number of draws taken from the generator
