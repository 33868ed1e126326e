"""Checks for notebook 3, distilling a draft: 3a the loss, 3b α on text, 3c a train step, 3d which loss.

torch and the models are imported inside the checks, so notebooks 1 and 2 never load torch.
"""
from __future__ import annotations

import copy

import numpy as np

from lessonlib.core import sampling, toy
from lessonlib.course.checks import numeric, wrong
from lessonlib.course.checks.framework import (
    as_number,
    call,
    expect_close,
    expect_equal,
    fail,
    numbers,
    run_check,
    with_controls,
)
from lessonlib.course.messages import N_, _, say, translated

# ----------------------------------------------------------------------------- 3a the loss

LOSS_HINTS = {
    "ce": N_("cross-entropy of the student's logits on the labels: F.cross_entropy(student / T, labels), averaged "
             "over positions"),
    "fkl": N_("forward KL(p || q) = Σ p (log p − log q) with p = softmax(teacher / T), q = softmax(student / T), "
              "mean over positions"),
    "tvd": N_("total variation ½ Σ |p − q| with both distributions tempered, mean over positions"),
}


def _loss_cases():
    import torch

    gen = torch.Generator().manual_seed(301)
    student = torch.randn(2, 5, 11, generator=gen)
    teacher = 2.5 * torch.randn(2, 5, 11, generator=gen)  # sharper than the student, so KL is asymmetric
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    return [(f"kind={kind!r}, T={t:g}", kind, t, student, teacher, labels)
            for kind in ("ce", "fkl", "tvd") for t in (1.0, 0.5, 2.0)]


def _loss_hint(got, expected, kind, t, student, teacher):
    """The hint for a wrong loss value: the known mistakes first, then the definition."""
    import torch

    from lessonlib.models import train

    positions, per_row = student.shape[0] * student.shape[1], student.shape[1]
    if abs(got - positions * expected) < 1e-4:
        return say("that is the sum over the {positions} positions: return the mean (.mean(), not .sum())",
                   positions=positions)
    if abs(got - per_row * expected) < 1e-4:
        return _("that divides by the batch size only (F.kl_div's reduction='batchmean' on (B, T, V) logits): "
                 "average over all B·T positions")
    if kind == "fkl":
        if abs(got - train.distillation_loss(teacher, student, "fkl", temperature=t).item()) < 1e-5:
            return _("that is KL(q || p): the arguments are swapped. "
                     "Forward KL puts the teacher's p in front: Σ p log(p/q)")
        p = torch.softmax(teacher / t, -1)
        if abs(got - expected - (-(p * p.log()).sum(-1).mean().item())) < 1e-4:
            return _("that is the cross-entropy −Σ p log q; KL subtracts the teacher's entropy: Σ p (log p − log q)")
    if kind == "tvd" and abs(got - 2 * expected) < 1e-5:
        return _("that is twice the answer: TV = ½ Σ |p − q| (without the ½, 1 − TV is no longer α)")
    return LOSS_HINTS[kind]


def _verify_distillation_loss(distillation_loss):
    import torch

    from lessonlib.models import train

    for case, kind, t, student, teacher, labels in _loss_cases():
        s = student.clone().requires_grad_(True)
        got = call(distillation_loss, case, s, teacher.clone(), kind, labels=labels, temperature=t)
        if not isinstance(got, torch.Tensor) or got.ndim != 0:
            fail(case, _("expected a scalar torch tensor (the mean loss), so that .backward() works"),
                 got=repr(got)[:80],
                 hint=_("compute the loss with torch operations and return the tensor (no .item(), no numpy)"))
        expected = train.distillation_loss(student, teacher, kind, labels=labels, temperature=t)
        hint = _loss_hint(got.item(), expected.item(), kind, t, student, teacher)
        expect_close(case, got.detach(), expected.item(), atol=1e-5, hint=hint)  # the tensor: its dtype's precision
        if got.grad_fn is None:
            fail(case, _("the loss is not connected to the student's logits (no gradient would flow)"),
                 hint=_("compute it with torch operations on student_logits; no .detach(), .item(), numpy or "
                        "torch.tensor(...) inside"))
        (grad,) = torch.autograd.grad(got, s)
        s_ref = student.clone().requires_grad_(True)
        ref_loss = train.distillation_loss(s_ref, teacher, kind, labels=labels, temperature=t)
        (grad_ref,) = torch.autograd.grad(ref_loss, s_ref)
        expect_close(say("{case}, gradient", case=translated(case)), grad, grad_ref.numpy(), atol=1e-5,
                     hint=hint)
    return [say("matches the reference value and gradient for ce, fkl and tvd at T = 0.5, 1, 2 ({n} cases) to "
                "{tolerance}", n=len(_loss_cases()), tolerance=numeric.phrase(f"{1e-5:g}"))]


def exercise_3a(distillation_loss):
    """Check ``distillation_loss(student_logits, teacher_logits, kind, labels=None, temperature=1.0)``."""
    from lessonlib.models import train

    verify = with_controls(_verify_distillation_loss, wrong.controls("3a"))
    return run_check("3a", distillation_loss, train.distillation_loss, verify)


# ----------------------------------------------------------------------------- 3b α on teacher-forced text


def _alpha_cases():
    rng = np.random.default_rng(302)
    vocab = 9
    table = rng.dirichlet(np.full(vocab, 0.5), size=vocab)
    noisy = 0.6 * table + 0.4 * rng.dirichlet(np.full(vocab, 0.5), size=vocab)  # agrees on some rows only
    tokens = rng.integers(0, vocab, 120)
    target, draft = toy.markov(table), toy.markov(noisy)  # order-1 toy models in the logits(tokens) protocol
    return [(say("toy order-1 models (vocab {vocab}), T={t:g}", vocab=vocab, t=t), target, draft, tokens, t)
            for t in (1.0, 0.0, 0.5, 2.0)] + [(N_("draft == target, T=1"), target, toy.markov(table), tokens, 1.0)]


def _alpha_hint(got, expected, target, draft, tokens, t):
    p = sampling.softmax(target.logits(tokens[:-1]), t)
    q = sampling.softmax(draft.logits(tokens[:-1]), t)
    if got.shape == (len(tokens),):
        return _("one α per predicted token: len(tokens) − 1 values (row i predicts tokens[i + 1]; the last token "
                 "has nothing after it)")
    if got.shape != expected.shape:
        return _("return the per-position α as a 1-D array with one entry per predicted token")
    if t > 0 and np.allclose(got, p.argmax(-1) == q.argmax(-1)):
        return _("that is the greedy agreement rate; at T > 0 the draft samples, and α = Σ min(p, q)")
    if np.allclose(got, 1 - np.abs(p - q).sum(-1)):
        return _("that is 1 − Σ|p − q|: total variation has a ½ in front")
    if np.allclose(got * p.shape[-1], expected):
        return _("that is the mean over the vocabulary: α sums min(p, q) over it")
    if t == 0:
        return _("at T = 0 both distributions are one-hot on their argmax, so α is [argmax p == argmax q]")
    return _("α at one position is Σ_x min(p(x), q(x)) = 1 − TV(p, q), with p and q the tempered distributions")


def _verify_measure_alpha(measure_alpha):
    from lessonlib.models import distill

    for case, target, draft, tokens, t in _alpha_cases():
        out = call(measure_alpha, case, copy.deepcopy(target), copy.deepcopy(draft), tokens, t)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            fail(case, _("expected a pair (mean alpha, per-position alpha)"), got=repr(out)[:80],
                 hint=_("return mean, alpha (a tuple or a list of the two)"))
        mean, per_position = out
        if np.ndim(mean) == 1 and np.ndim(per_position) == 0:
            fail(case, _("the pair is the wrong way round"), hint=_("return (mean, per_position): the mean first"))
        expected = distill.measure_alpha(target, draft, tokens, t)[1]
        got = numbers(case, per_position, _("return the per-position α as a 1-D array with one entry per predicted "
                                            "token"))[0]
        hint = _alpha_hint(got, expected, target, draft, tokens, t)
        expect_close(say("{case}, per-position alpha", case=translated(case)), per_position, expected,
                     atol=1e-6, hint=hint)  # 1e-6: float32 arithmetic is not a mistake
        expect_close(say("{case}, mean alpha", case=translated(case)), as_number(case, mean), expected.mean(),
                     atol=1e-6, hint=_("the mean is the average of the per-position α"))
    return [say("per-position and mean α match Σ min(p, q) to {tolerance} on {n} cases: T = 0 (greedy "
                "agreement), 0.5, 1, 2, and α = 1 when draft == target", n=len(_alpha_cases()),
                tolerance=numeric.phrase(f"{1e-6:g}"))]


def exercise_3b(measure_alpha):
    """Check ``measure_alpha(target, draft, tokens, temperature) -> (mean, per_position)``."""
    from lessonlib.models import distill

    verify = with_controls(_verify_measure_alpha, wrong.controls("3b"))
    return run_check("3b", measure_alpha, distill.measure_alpha, verify)


# ----------------------------------------------------------------------------- 3c one train step

STEP_STEPS = 12  # optimizer steps on one fixed batch; a working step lowers the loss a lot in this many
STEP_ORDER = N_("optimizer.zero_grad(), loss.backward(), optimizer.step() — in that order, every call")
NEEDS_GRAD = {"does not require grad": N_("only the teacher's forward goes under torch.no_grad(); the student's "
                                          "forward (and the loss) must be recorded for backward — no .detach() on "
                                          "its logits")}


def _step_setup(seed=303):
    import torch

    from lessonlib.models import GPT, GPTConfig

    config = GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32)
    torch.manual_seed(seed)
    student, teacher = GPT(config), GPT(config).eval()
    with torch.no_grad():
        teacher.wte.weight.mul_(20.0)  # a confident teacher: KL and TV to it are far from 0
    gen = torch.Generator().manual_seed(304)
    x = torch.randint(0, 64, (4, 16), generator=gen)
    y = torch.randint(0, 64, (4, 16), generator=gen)
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-2)
    return student, teacher, optimizer, x, y


def _train_kind(train_step, kind):
    import torch

    from lessonlib.models import train

    case = say("kind={kind}, {steps} steps on one batch", kind=repr(kind), steps=STEP_STEPS)
    student, teacher, optimizer, x, y = _step_setup()
    teacher_before = [p.detach().clone() for p in teacher.parameters()]
    with torch.no_grad():
        start = train.distillation_loss(student(x), teacher(x), kind, labels=y).item()
    student.train()
    losses = [call(train_step, case, student, optimizer, x, y, teacher=teacher, kind=kind, hints=NEEDS_GRAD)
              for _step in range(STEP_STEPS)]
    if not all(isinstance(v, (float, np.floating)) for v in losses):
        fail(case, _("train_step must return the loss as a Python float (loss.item())"), got=repr(losses[0])[:80])
    # bf16 autocast (used by lessonlib on CPUs that support it) moves the value by < 3 %
    if abs(losses[0] - start) > 0.03 * abs(start) + 1e-3:
        fail(case, _("the first returned loss is not the distillation loss of this kind before the update"), start,
             losses[0], say("compute distillation_loss(student(x), teacher(x), kind={kind}, labels=y) and return its "
                            ".item()", kind=repr(kind)))
    with torch.no_grad():
        end = train.distillation_loss(student(x), teacher(x), kind, labels=y).item()
    if not end < 0.7 * start:
        fail(case, say("the loss did not fall (from {start:.4f} to {end:.4f}; expected below {below:.4f})",
                       start=start, end=end, below=0.7 * start), hint=STEP_ORDER)
    if any(not torch.equal(a, b) for a, b in zip(teacher_before, teacher.parameters())):
        fail(case, _("the teacher's weights changed"),
             hint=_("only the student is trained: run the teacher under torch.no_grad()"))
    if any(p.grad is not None for p in teacher.parameters()):
        fail(case, _("gradients reached the teacher"), hint=_("run the teacher's forward under torch.no_grad()"))
    return f"{kind} {start:.3f} → {end:.3f}"


def _ignores_leftover_gradients(train_step):
    """One step from the same start, with and without stale gradients in .grad, must agree."""
    import torch

    case = N_("one step with gradients left in .grad by an earlier backward")
    after = []
    for leftover in (False, True):
        student, teacher, optimizer, x, y = _step_setup()
        if leftover:
            gen = torch.Generator().manual_seed(305)
            for p in student.parameters():
                p.grad = 100.0 * torch.randn(p.shape, generator=gen)
        student.train()
        call(train_step, case, student, optimizer, x, y, teacher=teacher, kind="fkl", hints=NEEDS_GRAD)
        after.append([p.detach().clone() for p in student.parameters()])
    if any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(*after)):
        fail(case, _("the update depends on gradients that were in the model before the call"),
             hint=say("call optimizer.zero_grad() before loss.backward(): backward adds to whatever .grad holds, "
                      "so without it the step follows old gradients. {order}", order=translated(STEP_ORDER)))


IN_A_ROW = ("fkl", "ce", "tvd", "fkl")  # consecutive steps, each on its own batch and kind
STALE = N_("each step must move the weights along its own batch's gradient alone: call optimizer.zero_grad() before "
           "loss.backward() on every call (not once, not only when .grad is empty), and step the optimizer you are "
           "given")


def _gradient(model, teacher, x, y, kind):
    """The loss's gradient at the model's current weights, on a copy (float32; one vector)."""
    import torch

    from lessonlib.models import train

    twin = copy.deepcopy(model)
    with torch.no_grad():
        teacher_logits = teacher(x)
    train.distillation_loss(twin(x), teacher_logits, kind, labels=y).backward()
    return torch.cat([p.grad.flatten() for p in twin.parameters()])


def _steps_in_a_row(train_step) -> float:
    """``len(IN_A_ROW)`` consecutive calls with plain SGD, whose update is −lr × the gradient the step used:
    each update must point along that step's own gradient (cosine > 0.99; gradient clipping keeps the
    direction, bfloat16 autocast moves it by < 1e-4). Returns the smallest cosine."""
    import torch

    student, teacher, _adamw, _x, _y = _step_setup()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(306)
    student.train()
    worst = 1.0
    for i, kind in enumerate(IN_A_ROW):
        x, y = (torch.randint(0, 64, (4, 16), generator=gen) for _pair in range(2))
        before = [p.detach().clone() for p in student.parameters()]
        gradient = _gradient(student, teacher, x, y, kind)
        case = say("step {i} of {n} in a row (kind={kind}, a new batch each step)", i=i + 1, n=len(IN_A_ROW),
                   kind=repr(kind))
        call(train_step, case, student, optimizer, x, y, teacher=teacher, kind=kind, hints=NEEDS_GRAD)
        moved = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, student.parameters())])
        cosine = float(torch.nn.functional.cosine_similarity(moved.double(), gradient.double(), dim=0))
        worst = min(worst, cosine)
        if not cosine > 0.99:
            fail(case, say("the update does not follow this step's gradient (cosine {cosine:.3f}, expected above "
                           "0.99): it carries gradients of earlier steps, or another optimizer's", cosine=cosine),
                 hint=STALE)
    return worst


def _verify_train_step(train_step):
    import torch

    with torch.random.fork_rng(devices=[]):  # the models' seeds must not move the notebook's torch RNG
        verified = [_train_kind(train_step, kind) for kind in ("ce", "fkl", "tvd")]
        worst = _steps_in_a_row(train_step)
        _ignores_leftover_gradients(train_step)
    return [say("returns the loss of the right kind, lowers it in {steps} steps on a fixed batch ({losses}), and "
                "leaves the teacher untouched", steps=STEP_STEPS, losses=", ".join(verified)),
            say("{n} steps in a row on new batches (plain SGD): each update follows its own step's gradient "
                "(smallest cosine {worst:.4f})", n=len(IN_A_ROW), worst=worst),
            _("zeroes the gradients before backward: stale .grad values do not change the update")]


def exercise_3c(train_step):
    """Check ``train_step(model, optimizer, x, y, teacher=None, kind="ce") -> float`` (``train.fit``'s step_fn)."""
    from lessonlib.models import train

    verify = with_controls(_verify_train_step, wrong.controls("3c"))
    return run_check("3c", train_step, train.train_step, verify)


# ----------------------------------------------------------------------------- 3d which loss maximises α


def theory_best_loss():
    """The loss whose minimum is the maximum of α on the training distribution: α = 1 − TV."""
    return "tvd"


def _verify_best_loss(predicted_best_loss):
    case = N_("which loss")
    got = call(predicted_best_loss, case)
    if got not in ("ce", "fkl", "tvd"):
        fail(case, _("answer with one of 'ce', 'fkl', 'tvd'"), got=got,
             hint=_("α = Σ min(p, q) = 1 − TV(p, q): which of the three losses is 1 − α itself?"))
    hints = {"fkl": _("forward KL is only an upper bound on α's shortfall (Pinsker: TV ≤ √(KL/2)); "
                      "which loss is 1 − α itself?"),
             "ce": _("cross-entropy fits the data's next tokens, not the target's distribution p that α compares "
                     "with")}
    expect_equal(case, got, "tvd", hints.get(got))
    return [_("'tvd': minimising the mean TV maximises the mean α = 1 − TV on the training text")]


def exercise_3d(predicted_best_loss):
    """Check ``predicted_best_loss() -> str``: the loss that theory says maximises α."""
    return run_check("3d", predicted_best_loss, theory_best_loss, _verify_best_loss)
