"""Every training loss against a hand computation on a tiny batch: MTP's L_main + (lambda / D)
sum_d L_d with depth d at position i predicting token i + d + 1, EAGLE's forward KL plus the
weighted smooth-L1 to the next feature, EAGLE-3's forward KL on fused features, Medusa's head
k against the target k + 1 positions further, and the head trainer's sum over kinds of the
mean over depths. A wrong weight or shift still trains something, so only these see it."""
import pytest
import torch
import torch.nn.functional as F

from lessonlib.models import GPT, GPTConfig
from lessonlib.models.heads import (
    REG_WEIGHT,
    Eagle3Head,
    EagleHead,
    MedusaHeads,
    eagle3_losses,
    eagle_losses,
    head_loss,
    medusa_losses,
    tempered_fkl,
)
from lessonlib.models.mtp import LAMBDA_EARLY, LAMBDA_LATE, TargetWithMTP, mtp_losses, mtp_train_step
from lessonlib.models.steps import autocast
from lessonlib.models.train_heads import Trainee, _step

CONFIG = GPTConfig(vocab_size=11, block_size=16, n_layer=4, n_head=2, n_embd=8)


def tiny_target(seed=0):
    torch.manual_seed(seed)
    target = GPT(CONFIG).double().eval()
    with torch.no_grad():
        target.wte.weight.mul_(20.0)  # peaked rows: a shifted or misweighted loss differs clearly
    return target


def batch(seed=1, B=2, T=7):
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, CONFIG.vocab_size, (B, T + 1), generator=gen)
    return seq[:, :-1], seq[:, 1:], seq


def cross_entropy(logits, labels):
    """Mean of -log softmax(logits)[label] over every position, by hand."""
    logp = logits.double().log_softmax(-1)
    return -logp.gather(-1, labels[..., None]).mean()


def forward_kl(student, teacher):
    """Mean over positions of sum_x p (log p - log q), p the teacher's softmax, q the student's."""
    logp, logq = teacher.double().log_softmax(-1), student.double().log_softmax(-1)
    return (logp.exp() * (logp - logq)).sum(-1).mean()


def smooth_l1(a, b):
    d = (a - b).double().abs()
    return torch.where(d < 1, 0.5 * d ** 2, d - 0.5).mean()


@torch.no_grad()
def test_mtp_depth_d_at_position_i_predicts_token_i_plus_d_plus_1():
    model = TargetWithMTP(tiny_target(), depth=3).double()
    x, y, seq = batch()
    T = x.shape[1]
    _, h = model.gpt(x, return_hidden=True)
    losses = mtp_losses(model.mtp, model.gpt, x, y, h)
    for d in range(1, 4):
        h = model.mtp[d](model.gpt, x[:, d:], h[:, : T - d])  # module d reads h^{d-1}_i and x_{i+d}
        expected = cross_entropy(model.gpt.lm_head(h), seq[:, d + 1 :])
        assert losses[d - 1].item() == pytest.approx(expected.item(), rel=1e-4)


@pytest.mark.parametrize("depth", [2, 3])
def test_mtp_train_step_weighs_the_depths_by_lambda_over_d(depth):
    torch.manual_seed(0)
    model = TargetWithMTP(GPT(CONFIG), depth=depth, planned_steps=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the step changes nothing: the loss is comparable
    x, y, _ = batch()
    for step, lam in ((0, LAMBDA_EARLY), (1, LAMBDA_EARLY), (2, LAMBDA_LATE)):  # switch after 2/3 of 3 steps
        with torch.no_grad(), autocast(model.device):
            main, per_depth = model.losses(x, y)
        expected = (main + lam / depth * sum(per_depth)).item()
        assert model.step == step
        assert mtp_train_step(model, opt, x, y) == pytest.approx(expected, rel=1e-4)
    assert LAMBDA_EARLY != LAMBDA_LATE


@torch.no_grad()
def test_eagle_loss_is_forward_kl_plus_weighted_feature_regression():
    target = tiny_target()
    torch.manual_seed(2)
    head = EagleHead(CONFIG).double().eval()
    x, _, _ = batch()
    t_logits, h = target(x, return_hidden=True)
    losses, agree = eagle_losses(head, target, x, t_logits, h, ttt_steps=2)
    g = head(target, x[:, 1:], h[:, :-1])  # step 0 at s: (x_{s+1}, h_s) -> h_{s+1}, the target's x_{s+2}
    student = target.lm_head(g)
    expected = forward_kl(student, t_logits[:, 1:]) + REG_WEIGHT * smooth_l1(g, h[:, 1:])
    assert losses[0].item() == pytest.approx(expected.item(), rel=1e-4)
    hit = (student.argmax(-1) == t_logits[:, 1:].argmax(-1)).double().mean()
    assert agree[0].item() == pytest.approx(hit.item())
    assert len(losses) == 2 and losses[1].item() != pytest.approx(losses[0].item())


@torch.no_grad()
def test_eagle3_loss_is_forward_kl_on_the_fused_features():
    target = tiny_target()
    torch.manual_seed(3)
    head = Eagle3Head(CONFIG).double().eval()
    x, _, _ = batch()
    t_logits, fused = target(x, return_hidden=head.layers)
    assert fused.shape[-1] == 3 * CONFIG.n_embd
    losses, _ = eagle3_losses(head, target, x, t_logits, fused, ttt_steps=1)
    g = head(target, x[:, 1:], fused[:, :-1])  # fused first, no feature regression
    assert losses[0].item() == pytest.approx(forward_kl(target.lm_head(g), t_logits[:, 1:]).item(), rel=1e-4)


@torch.no_grad()
def test_medusa_head_k_is_scored_against_the_target_k_plus_1_further():
    target = tiny_target()
    torch.manual_seed(4)
    heads = MedusaHeads(CONFIG, n_heads=3).double().eval()
    x, _, _ = batch()
    t_logits, h = target(x, return_hidden=True)
    losses, _ = medusa_losses(heads, target, t_logits, h)
    T = x.shape[1]
    for k in range(3):
        student = target.lm_head(h + F.silu(heads.heads[k](h)))[:, : T - 1 - k]
        assert losses[k].item() == pytest.approx(forward_kl(student, t_logits[:, 1 + k :]).item(), rel=1e-4)


def test_head_trainer_sums_kinds_of_the_mean_over_depths():
    torch.manual_seed(0)
    target = GPT(CONFIG).eval()
    model = Trainee(CONFIG, kinds=("eagle", "medusa"), n_heads=3, ttt_steps=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y, _ = batch()
    with torch.no_grad(), autocast(model.device):
        losses = model.losses(target, x)
    assert [len(v[0]) for v in losses.values()] == [2, 3]
    expected = sum(sum(v[0]).item() / len(v[0]) for v in losses.values())
    assert _step(model, opt, x, y, teacher=target) == pytest.approx(expected, rel=1e-4)


def test_head_trainer_feeds_eagle_the_top_block_when_eagle3_trains_beside_it():
    target = tiny_target()
    model = Trainee(CONFIG, kinds=("eagle", "eagle3"), ttt_steps=1).double()
    x, _, _ = batch()
    with torch.no_grad():
        losses = model.losses(target, x)
        t_logits, h = target(x, return_hidden=True)
        alone = eagle_losses(model.heads["eagle"], target, x, t_logits, h, 1)[0][0]
    assert losses["eagle"][0][0].item() == pytest.approx(alone.item(), rel=1e-6)


def test_tempered_fkl_averages_the_forward_kl_over_the_sampling_temperatures():
    torch.manual_seed(5)
    student, teacher = 3 * torch.randn(6, 11, dtype=torch.double), 3 * torch.randn(6, 11, dtype=torch.double)
    by_hand = [forward_kl(student / t, teacher / t).item() for t in (0.7, 1.0, 1.5)]
    assert tempered_fkl(student, teacher).item() == pytest.approx(by_hand[1], rel=1e-6)
    assert tempered_fkl(student, teacher, (0.7, 1.0, 1.5)).item() == pytest.approx(sum(by_hand) / 3, rel=1e-6)
    assert len({round(v, 6) for v in by_hand}) == 3  # the temperatures weigh differently: a dropped T shows
    assert tempered_fkl(teacher, teacher, (0.5, 2.0)).item() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="temperatures"):
        tempered_fkl(student, teacher, ())


@torch.no_grad()
@pytest.mark.parametrize("kinds", [("eagle",), ("eagle3",), ("medusa",)])
def test_head_trainer_passes_its_temperatures_to_every_kind(kinds):
    torch.manual_seed(0)
    target = tiny_target()
    x, _, _ = batch()
    values = []
    for temps in ((1.0,), (0.5, 2.0)):
        torch.manual_seed(7)  # the same heads
        model = Trainee(CONFIG, kinds=kinds, n_heads=2, ttt_steps=1, eagle3_ttt=2, temperatures=temps).double()
        values.append(model.losses(target, x)[kinds[0]][0][0].item())
    assert values[0] != pytest.approx(values[1], rel=1e-3)


def test_the_top1_objective_is_cross_entropy_on_the_targets_argmax_alone():
    torch.manual_seed(6)
    student, teacher = 3 * torch.randn(6, 11, dtype=torch.double), 3 * torch.randn(6, 11, dtype=torch.double)
    top1 = head_loss(student, teacher, objective="top1").item()
    assert top1 == pytest.approx(F.cross_entropy(student, teacher.argmax(-1)).item(), rel=1e-6)  # float32 inside
    assert head_loss(student, teacher).item() == pytest.approx(tempered_fkl(student, teacher).item(), rel=1e-6)
    # the rest of p is invisible to it, unlike the forward KL: reshape every non-argmax entry
    flat = teacher.clone()
    rows = torch.arange(6)
    flat[rows[:, None], torch.arange(11)[None]] = 0.0
    flat[rows, teacher.argmax(-1)] = teacher.max(-1).values.clamp(min=0.1)
    assert head_loss(student, flat, objective="top1").item() == pytest.approx(top1, rel=1e-6)
    assert head_loss(student, flat).item() != pytest.approx(head_loss(student, teacher).item(), rel=1e-3)
    with pytest.raises(ValueError, match="objective"):
        head_loss(student, teacher, objective="ce")
    with pytest.raises(ValueError, match="objective"):
        Trainee(CONFIG, kinds=("eagle",), objective="tvd")


@torch.no_grad()
@pytest.mark.parametrize("kinds", [("eagle",), ("eagle3",), ("medusa",)])
def test_head_trainer_passes_its_objective_to_every_kind(kinds):
    target = tiny_target()
    x, _, _ = batch()
    values = []
    for objective in ("fkl", "top1"):
        torch.manual_seed(7)  # the same heads
        model = Trainee(CONFIG, kinds=kinds, n_heads=2, ttt_steps=1, eagle3_ttt=2, objective=objective).double()
        values.append(model.losses(target, x)[kinds[0]][0][0].item())
    assert values[0] != pytest.approx(values[1], rel=1e-3)
