"""The training loop (lessonlib.models.train): the loss falls, a stop request ends and resumes a
run, the recipes, paused time, and the distillation losses."""
import functools
import time

import numpy as np
import pytest
import torch

from lessonlib import models
from lessonlib.models import GPT, train


def test_training_lowers_the_loss():
    torch.manual_seed(0)
    model = GPT(train.MINI_CONFIG)
    state = train.fit(model, steps=60, batch_size=8, lr=3e-3, seed=0, desc="mini")
    losses = state["losses"]
    assert len(losses) == 60 and state["tokens"] == 60 * 8 * train.MINI_CONFIG.block_size
    assert np.mean(losses[-10:]) < losses[0] - 1.0, (losses[0], np.mean(losses[-10:]))


def test_a_stop_request_ends_training_after_the_step_in_progress_and_resumes():
    torch.manual_seed(0)
    model = GPT(train.MINI_CONFIG)
    saved = []
    train.STOP.set()  # what SIGTERM / Ctrl-C do under `python -m lessonlib.models.train`
    try:
        state = train.fit(model, steps=20, batch_size=2, lr=3e-3, seed=0, desc="mini", checkpoint=saved.append,
                          checkpoint_every=1)
    finally:
        train.STOP.clear()
    assert state["step"] == 1 and len(state["losses"]) == 1 and "optimizer" in state and len(saved) == 1
    state = train.fit(model, steps=3, batch_size=2, lr=3e-3, seed=0, desc="mini", state=state)
    assert state["step"] == 3 and len(state["losses"]) == 3  # resumed where it stopped, to the planned end


def test_a_stopped_run_ships_unfinished_and_its_resumption_records_where_each_part_trained(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "RUNS", tmp_path / "runs")
    train.STOP.set()  # stopped after its first step, as by SIGTERM
    try:
        _, meta = train.train_model("mini", steps=3, out_dir=tmp_path)
    finally:
        train.STOP.clear()
    assert meta["steps"] == 1 and "--resume" in meta["unfinished"] and meta["runs"] == 1
    assert [h["steps"] for h in meta["history"]] == [[0, 1]] and meta["history"][0]["device"] == "cpu"
    _, meta = train.train_model("mini", steps=3, resume=True, out_dir=tmp_path)
    assert meta["steps"] == 3 and "unfinished" not in meta and meta["runs"] == 2
    assert [h["steps"] for h in meta["history"]] == [[0, 1], [1, 3]]
    assert models.read_meta("mini", tmp_path)["history"] == meta["history"]  # shipped beside the weights


def test_the_recipes_pair_the_drafts_with_the_mtp_target():
    config, lr, batch, kind, teacher, init, name = train.recipe("draft-kl")
    assert (teacher, init, kind, name) == ("target", "draft-base", "fkl", "draft-kl")
    assert train.recipe("draft-ce")[:3] == (config, lr, batch)  # draft-ce and draft-kl differ only in the objective
    assert train.recipe("target")[3] == "mtp" and train.recipe("target")[0].n_layer == 24
    assert train.recipe("target", "gpu")[0].n_layer == 24  # the GPU scale keeps the depth
    with pytest.raises(ValueError, match="name must be one of"):
        train.recipe("target-v2")


def test_time_paused_by_sigtstp_is_not_training_time():
    torch.manual_seed(0)
    model = GPT(train.MINI_CONFIG)

    def step(*args, pause=0.0, **kwargs):  # a step during which the run was stopped for `pause` seconds
        time.sleep(pause)
        train.PAUSED["seconds"] += pause
        return train.train_step(*args, **kwargs)

    paused = train.fit(model, steps=2, batch_size=2, lr=3e-3, seed=0, desc="mini",
                       step_fn=functools.partial(step, pause=0.4))
    assert paused["step"] == 2 and 0 < paused["seconds"] < 0.4  # 0.8 s paused, not counted
    slept = train.fit(model, steps=2, batch_size=2, lr=3e-3, seed=0, desc="mini",  # control: a sleep that is no pause
                      step_fn=lambda *a, **k: (time.sleep(0.4), train.train_step(*a, **k))[1])
    assert slept["seconds"] >= 0.8


@pytest.mark.parametrize("kind", ["ce", "fkl", "tvd"])
def test_distillation_losses_vanish_only_at_the_teacher(kind):
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(6, 11, generator=g)
    labels = teacher.argmax(-1)
    same = train.distillation_loss(teacher, teacher, kind, labels=labels)
    other = train.distillation_loss(torch.randn(6, 11, generator=g), teacher, kind, labels=labels)
    assert other > same
    if kind != "ce":
        assert same.abs() < 1e-6
    p, q = torch.softmax(teacher, -1), torch.softmax(teacher.flip(-1), -1)
    if kind == "tvd":  # equals 1 - alpha averaged over positions
        want = 1 - torch.minimum(p, q).sum(-1).mean()
        torch.testing.assert_close(train.distillation_loss(teacher.flip(-1), teacher, "tvd"), want)


def test_autocast_uses_bfloat16_only_where_the_cpu_computes_it(monkeypatch):
    """Emulated bfloat16 made training 8.6x slower on an AVX2-only CPU (steps.native_bf16)."""
    import contextlib

    import torch

    from lessonlib.models import steps
    monkeypatch.setattr(steps, "native_bf16", lambda: False)
    assert isinstance(steps.autocast("cpu"), contextlib.nullcontext)
    monkeypatch.setattr(steps, "native_bf16", lambda: True)
    if torch.backends.mkldnn.is_available():
        ctx = steps.autocast("cpu")
        assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
