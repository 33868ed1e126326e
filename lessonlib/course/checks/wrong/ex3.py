"""Wrong implementations for notebook 3: the distillation loss, α on text, a train step, which loss.

torch is imported inside each function: importing the catalogue never loads it.
"""
from __future__ import annotations

import numpy as np

from lessonlib.core import sampling
from lessonlib.course.checks.framework import Wrong

# ----------------------------------------------------------------------------- 3a the loss


def _loss(student_logits, teacher_logits, kind, labels, temperature):
    from lessonlib.models import train

    return train.distillation_loss(student_logits, teacher_logits, kind, labels, temperature)


def loss_swapped_kl(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """KL(q || p), the arguments of forward KL swapped."""
    if kind == "fkl":
        return _loss(teacher_logits, student_logits, "fkl", None, temperature)
    return _loss(student_logits, teacher_logits, kind, labels, temperature)


def loss_tv_without_half(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Σ |p − q| without the ½."""
    return (2.0 if kind == "tvd" else 1.0) * _loss(student_logits, teacher_logits, kind, labels, temperature)


def loss_teacher_untempered(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    """Only the student is divided by T."""
    if kind == "ce":
        return _loss(student_logits, teacher_logits, kind, labels, temperature)
    return _loss(student_logits, teacher_logits * temperature, kind, labels, temperature)


def loss_untempered(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    return _loss(student_logits, teacher_logits, kind, labels, 1.0)


def loss_summed(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    positions = student_logits.numel() // student_logits.shape[-1]
    return positions * _loss(student_logits, teacher_logits, kind, labels, temperature)


def loss_kl_div_batchmean(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    import torch.nn.functional as F

    if kind != "fkl":
        return _loss(student_logits, teacher_logits, kind, labels, temperature)
    log_q = F.log_softmax(student_logits / temperature, -1)  # (B, T, V): batchmean divides by B only
    return F.kl_div(log_q, F.softmax(teacher_logits / temperature, -1), reduction="batchmean")


def loss_soft_label_ce(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    import torch.nn.functional as F

    if kind != "fkl":
        return _loss(student_logits, teacher_logits, kind, labels, temperature)
    p = F.softmax(teacher_logits / temperature, -1)
    return -(p * F.log_softmax(student_logits / temperature, -1)).sum(-1).mean()


def loss_rebuilt_tensor(student_logits, teacher_logits=None, kind="fkl", labels=None, temperature=1.0):
    import torch

    return torch.tensor(_loss(student_logits, teacher_logits, kind, labels, temperature).item())


# ----------------------------------------------------------------------------- 3b α on text


def _rows(model, tokens, temperature):
    return sampling.softmax(model.logits(tokens)[:-1], temperature)


def alpha_argmax_at_any_t(target, draft, tokens, temperature):
    """Greedy agreement used as α at every temperature."""
    from lessonlib.models import distill

    return distill.measure_alpha(target, draft, tokens, 0.0)


def alpha_tv_without_half(target, draft, tokens, temperature):
    """α = 1 − Σ|p − q|."""
    p, q = _rows(target, tokens, temperature), _rows(draft, tokens, temperature)
    alpha = 1 - np.abs(p - q).sum(-1)
    return float(alpha.mean()), alpha


def alpha_untempered(target, draft, tokens, temperature):
    alpha = np.minimum(_rows(target, tokens, 1.0), _rows(draft, tokens, 1.0)).sum(-1)
    return float(alpha.mean()), alpha


def alpha_own_softmax(target, draft, tokens, temperature):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p, q = (np.exp(m.logits(tokens)[:-1] / temperature) for m in (target, draft))  # T = 0: inf / inf
        alpha = np.minimum(p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)).sum(-1)
    return float(np.mean(alpha)), alpha


def alpha_every_position(target, draft, tokens, temperature):
    p, q = (sampling.softmax(m.logits(tokens), temperature) for m in (target, draft))  # keeps the last row
    alpha = np.minimum(p, q).sum(-1)
    return float(alpha.mean()), alpha


def alpha_of_logits(target, draft, tokens, temperature):
    alpha = np.minimum(target.logits(tokens)[:-1], draft.logits(tokens)[:-1]).sum(-1)  # forgot the softmax
    return float(alpha.mean()), alpha


def alpha_mean_over_vocab(target, draft, tokens, temperature):
    alpha = np.minimum(_rows(target, tokens, temperature), _rows(draft, tokens, temperature)).mean(-1)
    return float(alpha.mean()), alpha


def alpha_pair_swapped(target, draft, tokens, temperature):
    from lessonlib.models import distill

    mean, alpha = distill.measure_alpha(target, draft, tokens, temperature)
    return alpha, mean


# ----------------------------------------------------------------------------- 3c a train step


def _forward(model, x, y, teacher, kind):
    import torch

    from lessonlib.models import train

    logits = model(x)
    with torch.no_grad():
        teacher_logits = teacher(x) if teacher is not None else None
    return train.distillation_loss(logits, teacher_logits, kind, labels=y)


def step_no_update(model, optimizer, x, y, teacher=None, kind="ce"):
    """Computes the loss but never steps the optimizer."""
    import torch

    with torch.no_grad():
        return _forward(model, x, y, teacher, kind).item()


def step_always_ce(model, optimizer, x, y, teacher=None, kind="ce"):
    """Ignores ``kind`` and trains on the labels."""
    from lessonlib.models import train

    return train.train_step(model, optimizer, x, y, teacher=None, kind="ce")


def step_no_zero_grad(model, optimizer, x, y, teacher=None, kind="ce"):
    loss = _forward(model, x, y, teacher, kind)
    loss.backward()  # adds to the gradients of every earlier step
    optimizer.step()
    return loss.item()


def step_zero_grad_last(model, optimizer, x, y, teacher=None, kind="ce"):
    loss = _forward(model, x, y, teacher, kind)
    loss.backward()
    optimizer.step()  # steps on whatever .grad held before this call, plus this batch
    optimizer.zero_grad()
    return loss.item()


def step_teacher_with_grad(model, optimizer, x, y, teacher=None, kind="ce"):
    from lessonlib.models import train

    loss = train.distillation_loss(model(x), teacher(x) if teacher is not None else None, kind, labels=y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_returns_tensor(model, optimizer, x, y, teacher=None, kind="ce"):
    loss = _forward(model, x, y, teacher, kind)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def step_loss_after_update(model, optimizer, x, y, teacher=None, kind="ce"):
    import torch

    loss = _forward(model, x, y, teacher, kind)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        return _forward(model, x, y, teacher, kind).item()  # the loss after the step


def step_everything_no_grad(model, optimizer, x, y, teacher=None, kind="ce"):
    import torch

    with torch.no_grad():
        loss = _forward(model, x, y, teacher, kind)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def step_zero_grad_once(model, optimizer, x, y, teacher=None, kind="ce"):
    """Clears the gradients on its first call only (a flag on the optimizer): later steps reuse stale ones."""
    if not getattr(optimizer, "cleared_once", False):
        optimizer.zero_grad()
        optimizer.cleared_once = True
    loss = _forward(model, x, y, teacher, kind)
    loss.backward()
    optimizer.step()
    return loss.item()


def step_own_optimizer(model, optimizer, x, y, teacher=None, kind="ce"):
    """Builds a new AdamW on every call and ignores the optimizer it is given (its state restarts each step)."""
    import torch

    own = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = _forward(model, x, y, teacher, kind)
    own.zero_grad()
    loss.backward()
    own.step()
    return loss.item()


WORSE = "which loss is 1 − α itself?"
ENTRIES = [
    Wrong("3a", "KL with the arguments swapped", loss_swapped_kl, "arguments are swapped", "computes KL(q || p)",
          control=True),
    Wrong("3a", "TV without the ½", loss_tv_without_half, "twice the answer", "Σ|p − q|", control=True),
    Wrong("3a", "teacher not tempered", loss_teacher_untempered, "softmax(teacher / T)",
          "divides only the student's logits by T", control=True),
    Wrong("3a", "no temperature", loss_untempered, "student / T", "ignores T for both"),
    Wrong("3a", "sum over positions", loss_summed, "return the mean", "sums the per-position losses"),
    Wrong("3a", "kl_div batchmean on (B, T, V)", loss_kl_div_batchmean, "divides by the batch size only",
          "F.kl_div(..., reduction='batchmean') without flattening"),
    Wrong("3a", "soft-label cross-entropy", loss_soft_label_ce, "subtracts the teacher's entropy",
          "−Σ p log q instead of Σ p (log p − log q)"),
    Wrong("3a", "rebuilt as a new tensor", loss_rebuilt_tensor, "not connected to the student's logits",
          "torch.tensor(loss.item()) has no gradient"),
    Wrong("3b", "argmax agreement used as α at T = 1", alpha_argmax_at_any_t, "greedy agreement rate",
          "greedy agreement at every temperature", control=True),
    Wrong("3b", "TV without the ½", alpha_tv_without_half, "½", "α = 1 − Σ|p − q|", control=True),
    Wrong("3b", "no temperature", alpha_untempered, "one-hot on their argmax", "softmax at T = 1 whatever T is"),
    Wrong("3b", "own softmax divides by T = 0", alpha_own_softmax, "one-hot on their argmax",
          "exp(z / 0) gives nan instead of the greedy limit"),
    Wrong("3b", "one α too many", alpha_every_position, "len(tokens) − 1 values",
          "keeps the last position, which predicts nothing"),
    Wrong("3b", "min of the logits", alpha_of_logits, "Σ_x min(p(x), q(x))", "forgot the softmax"),
    Wrong("3b", "mean over the vocabulary", alpha_mean_over_vocab, "mean over the vocabulary",
          "min(p, q).mean(-1) instead of .sum(-1)"),
    Wrong("3b", "(per_position, mean)", alpha_pair_swapped, "the mean first", "returns the pair the wrong way round"),
    Wrong("3c", "no optimizer step", step_no_update, "did not fall", "computes the loss, never updates", control=True),
    Wrong("3c", "always cross-entropy", step_always_ce, "not the distillation loss of this kind", "ignores kind"),
    Wrong("3c", "no zero_grad", step_no_zero_grad, "call optimizer.zero_grad() before loss.backward()",
          "gradients pile up over the steps", control=True),
    Wrong("3c", "zero_grad after the step", step_zero_grad_last, "call optimizer.zero_grad() before loss.backward()",
          "the first step follows gradients left from before"),
    Wrong("3c", "zero_grad on the first call only", step_zero_grad_once, "on every call",
          "the second step onwards follows the sum of every earlier step's gradients", control=True),
    Wrong("3c", "a new optimizer every call", step_own_optimizer, "step the optimizer you are given",
          "ignores the optimizer passed in: its state (and learning rate) restart at every step"),
    Wrong("3c", "teacher with gradients", step_teacher_with_grad, "gradients reached the teacher",
          "the teacher's forward is not under torch.no_grad()"),
    Wrong("3c", "returns the tensor", step_returns_tensor, "loss.item()", "returns loss, not loss.item()"),
    Wrong("3c", "loss after the update", step_loss_after_update, "before the update",
          "returns the loss recomputed after the step"),
    Wrong("3c", "student under no_grad too", step_everything_no_grad, "only the teacher's forward goes under",
          "backward has nothing to differentiate"),
    Wrong("3d", "forward KL", lambda: "fkl", WORSE, "KL only bounds TV (Pinsker)"),
    Wrong("3d", "cross-entropy", lambda: "ce", "not the target's distribution", "fits the data, not p"),
    Wrong("3d", "not one of the three", lambda: "kl", "answer with one of", "any other string"),
]
