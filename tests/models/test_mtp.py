"""Multi-token prediction (lessonlib.models.mtp): the loss weight's schedule and the training
loss's alignment (the MTP drafter is tested in tests/decoding/test_mtp_draft.py)."""
import numpy as np
import torch

from lessonlib.models import GPT, GPTConfig
from lessonlib.models.mtp import TargetWithMTP, mtp_train_step, mtp_weight


def test_lambda_schedule():
    assert mtp_weight(0, 300) == 0.3 and mtp_weight(199, 300) == 0.3 and mtp_weight(200, 300) == 0.1


def test_mtp_loss_predicts_the_token_after_its_input():
    """On i.i.d. uniform tokens nothing beyond the input token is predictable, so a correctly
    aligned depth-d loss stays near log V. Negative control: an off-by-one module that
    predicts its own input token x_{i+d} learns it (loss far below log V)."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=16, block_size=32, n_layer=1, n_head=2, n_embd=32)
    model = TargetWithMTP(GPT(config), depth=2, planned_steps=60)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(60):
        x = torch.randint(0, 16, (16, 32), generator=gen)
        mtp_train_step(model, opt, x, torch.roll(x, -1, 1))
    x = torch.randint(0, 16, (16, 32), generator=gen)
    with torch.no_grad():
        main, depth = model.losses(x, torch.roll(x, -1, 1))
        h0 = model.gpt(x, return_hidden=True)[1]
        h1 = model.mtp[1](model.gpt, x[:, 1:], h0[:, :-1])
        copy_loss = torch.nn.functional.cross_entropy(model.gpt.lm_head(h1).reshape(-1, 16), x[:, 1:].reshape(-1))
    assert all(loss > 0.9 * np.log(16) for loss in depth)
    # the same module scored on its own input token: learnable, so training would find it
    # (the control shows the test can tell the two alignments apart on this data)
    assert copy_loss > 0.9 * np.log(16)  # the aligned training did NOT learn to copy
    shifted = TargetWithMTP(GPT(config), depth=1, planned_steps=60)
    opt = torch.optim.AdamW(shifted.parameters(), lr=1e-2)
    for _ in range(60):  # train module 1 on the wrong (copy) target: it learns it
        x = torch.randint(0, 16, (16, 32), generator=gen)
        with torch.no_grad():
            h0 = shifted.gpt(x, return_hidden=True)[1]
        logits = shifted.gpt.lm_head(shifted.mtp[1](shifted.gpt, x[:, 1:], h0[:, :-1]))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss < 0.5 * np.log(16)
