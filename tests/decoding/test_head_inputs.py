"""What reaches each head in the decoding loop: at every commit of a tree loop, the features a
feature-based drafter is handed equal a fresh forward of the target over the committed tokens
with exactly the features its kind uses (EAGLE-3: the fused low/middle/top blocks; EAGLE,
Medusa, MTP: the top block), and the drafter's first row equals a fresh computation of the
head on them. A wrong feature still gives exact tokens (the target verifies everything), only
slower drafts: nothing else in the tests would notice."""
import functools

import pytest
import torch
import torch.nn.functional as F
from loop_support import context_gpt

from lessonlib.core import tree
from lessonlib.decoding.drafters import EagleDrafter, MedusaDrafter
from lessonlib.decoding.mtp_draft import MTPDrafter
from lessonlib.decoding.tree_decode import tree_generate
from lessonlib.models.heads import Eagle3Head, EagleHead, MedusaHeads
from lessonlib.models.mtp import MTPModules

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def fresh_root_row(kind, drafter, target, seq, layers):
    """The drafter's first row recomputed from scratch on ``seq`` (no cache), float64 log-probs."""
    x = torch.tensor(seq)[None]
    _, h = target(x, return_hidden=layers or True)  # (1, T, C) or (1, T, 3C)
    if kind in ("eagle", "eagle3"):
        g = drafter.head(target, x[:, 1:], h[:, :-1])[0, -1]
        return F.log_softmax(target.lm_head(g).double(), -1)
    if kind == "medusa":
        return F.log_softmax(drafter.heads(target, h[0, -2]).double(), -1)
    h1 = drafter.mtp.unroll(target, x, h)[0]  # h^1 at positions 0 .. T - 2
    return F.log_softmax(target.lm_head(h1[0, -1]).double(), -1)


def build(kind, target):
    torch.manual_seed(5)
    if kind == "mtp":
        return MTPDrafter(MTPModules(target.config, depth=2).double().eval(), target)
    if kind == "medusa":
        return MedusaDrafter(MedusaHeads(target.config, n_heads=3).double().eval(), target)
    head = (Eagle3Head if kind == "eagle3" else EagleHead)(target.config).double().eval()
    return EagleDrafter(head, target)


def root_row(kind, drafter):
    return {"medusa": lambda: drafter.rows, "mtp": lambda: drafter.root_logq}.get(kind, lambda: drafter.logq[0])()


@pytest.mark.parametrize("kind", ["eagle3", "eagle", "medusa", "mtp"])
@torch.inference_mode()
def test_each_head_gets_exactly_its_features_in_the_tree_loop(kind):
    target = context_gpt(3, n_layer=4, block_size=64)
    drafter = build(kind, target)
    layers = (0, 1, 3) if kind == "eagle3" else None
    assert drafter.feature_layers == layers
    seen = []
    commit = drafter.commit

    def spy(seq, features=None, clock=None):
        commit(seq, features, clock) if clock else commit(seq, features)
        seen.append((list(seq), features.clone(), torch.as_tensor(root_row(kind, drafter)).clone()))

    drafter.commit = spy
    depth = 2 if kind in ("mtp", "medusa") else 3
    tree_generate(target, drafter, PROMPT, 20, functools.partial(tree.draft_topk, branching=(2,) * depth))
    assert len(seen) >= 3
    width = target.config.n_embd * (3 if layers else 1)
    for seq, features, row in seen:
        _, h = target(torch.tensor(seq[:-1])[None], return_hidden=layers or True)
        n = len(features)
        assert features.shape == (n, width) and 1 <= n <= len(seq) - 1
        torch.testing.assert_close(features, h[0, len(seq) - 1 - n :], rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(row, fresh_root_row(kind, drafter, target, seq, layers), rtol=1e-7, atol=1e-7)


def test_log_probs_over_a_draft_vocabulary_are_the_full_rows():
    """``drafters.log_probs`` with a support (a head's draft vocabulary) gives the rows the full
    log-softmax gives when every logit outside it is -inf, at every row; NaN inside is refused."""
    import numpy as np
    import pytest
    import torch

    from lessonlib.decoding.drafters import log_probs

    rng = np.random.default_rng(0)
    support = np.sort(rng.choice(40, 9, replace=False))
    compact = torch.from_numpy(rng.normal(size=(3, 9)) * 4)
    full = torch.full((3, 40), float("-inf"), dtype=torch.float64)
    full[:, support] = compact
    want = log_probs(full)
    got = log_probs(full, support)
    assert got.shape == (3, 40) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.allclose(got[:, support], want[:, support], atol=1e-12, rtol=0)
    assert np.allclose(np.exp(got).sum(-1), 1.0)
    full[1, support[4]] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        log_probs(full, support)
