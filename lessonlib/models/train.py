"""Train the shipped models:
``python -m lessonlib.models.train {tokenizer,target,draft-base,draft-ce,draft-kl,mini}``.

Every run is seeded, shows a progress bar, checkpoints its full state under ``.cache/runs``
so ``--resume`` continues where it stopped, and finally writes ``lessonlib/assets/NAME
.safetensors`` plus a JSON file with the config, corpus, tokens seen, held-out bits per byte,
training time, device and git revision.

On a CPU with bf16 matrix units (AVX512-BF16 / AMX) bf16 autocast trains several times
faster than float32; the weights and optimizer state stay float32.
"""
from __future__ import annotations

import argparse
import os
import signal

import torch

from lessonlib import cli
from lessonlib.models import (
    CHECKPOINTS,
    GPT,
    GPTConfig,
    config_dict,
    data,
    default_device,
    load,
    load_state,
    read_meta,
    round_trip,
    save,
    scaled_name,
)
from lessonlib.models.checkpoints import fingerprint

# The loop and the run records live in ``loop`` and ``provenance``; their names are re-exported
# here (noqa: F401), as notebooks, checks and benchmarks use them as ``train.fit`` and so on.
from lessonlib.models.loop import (  # noqa: F401
    PAUSED,
    STOP,
    Batches,
    _pause,
    _resume,
    bits_per_byte,
    distillation_loss,
    fit,
    lr_at,
    train_step,
)
from lessonlib.models.provenance import git_revision, record_run, run_metadata, where  # noqa: F401
from lessonlib.models.steps import autocast, optimizer_step  # noqa: F401 (re-exported for train_heads, notebooks)

# The target is deep and narrow, so that on a CPU -- where a step costs per layer --
# a one-layer draft or head costs a few percent of a step, as a 1-layer head does beside a
# 7B-70B model on a GPU. Chosen with ``python -m lessonlib.bench shapes`` (outputs/benchmarks/shapes.md);
# the first course's 8 x 256 target gave a one-layer head 1/8 of a step or more.
TARGET_CONFIG = GPTConfig(n_layer=24, n_head=5, n_embd=160, block_size=256)
MTP_DEPTH = 2  # DeepSeek-V3 trains D = 1; two modules let the target draft two tokens for itself
# One layer: a draft step is dispatch-bound on a CPU, so its cost follows the number of layers,
# not the width (measured in the decoding loop: 0.164 ms for 1 x 128, 0.275 ms for 2 x 128)
DRAFT_CONFIG = GPTConfig(n_layer=1, n_head=4, n_embd=128, block_size=256)
MINI_CONFIG = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64)
# The GPU-scale switch: the same recipes at a size one GPU trains in minutes.
GPU_CONFIGS = {
    TARGET_CONFIG: GPTConfig(n_layer=24, n_head=8, n_embd=384, block_size=256),  # ~44 M parameters, as deep
    DRAFT_CONFIG: GPTConfig(n_layer=2, n_head=4, n_embd=256, block_size=256),    # ~2.1 M parameters
}
SCALES = ("cpu", "gpu")
RUNS = data.CACHE_DIR / "runs"


# ----------------------------------------------------------------------------- recipes

RECIPES = {
    # name: (config, peak lr, batch, kind, teacher, initial weights)
    # trained with MTP modules (lessonlib.models.mtp), saved beside it as target-mtp
    "target": (TARGET_CONFIG, 1.5e-3, 32, "mtp", None, None),
    # draft-ce and draft-kl share a base and differ only in the objective of their last steps,
    # so the comparison of their alphas is not confounded by how many tokens each has seen
    "draft-base": (DRAFT_CONFIG, 3e-3, 32, "ce", None, None),
    "draft-ce": (DRAFT_CONFIG, 1e-3, 32, "ce", None, "draft-base"),
    "draft-kl": (DRAFT_CONFIG, 1e-3, 32, "fkl", "target", "draft-base"),
    "mini": (MINI_CONFIG, 3e-3, 8, "ce", None, None),
}
DEFAULT_STEPS = {"target": 2400, "draft-base": 1500, "draft-ce": 500, "draft-kl": 500, "mini": 50}


def recipe(name: str, scale: str = "cpu"):
    """(config, lr, batch, kind, teacher, init, checkpoint name) of a recipe at a scale."""
    if name not in RECIPES:
        raise ValueError(f"name must be one of {sorted(RECIPES)}, got {name!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    config, lr, batch, kind, teacher, init = RECIPES[name]
    if scale == "gpu":
        config, batch = GPU_CONFIGS.get(config, config), 4 * batch
    teacher, init = (n and scaled_name(n, scale) for n in (teacher, init))  # None stays None
    return config, lr, batch, kind, teacher, init, scaled_name(name, scale)


OBJECTIVES = {"ce": "cross-entropy on ground truth", "fkl": "forward KL to the target",
              "mtp": "cross-entropy on ground truth + (lambda / D) sum_d MTP cross-entropy (lambda 0.3, then 0.1)"}


def _trainee(config, kind, device, steps):
    """The module ``fit`` steps: the GPT, or the GPT with its MTP modules (``kind == "mtp"``)."""
    from lessonlib.models.mtp import TargetWithMTP, mtp_train_step

    gpt = GPT(config).to(device)
    if kind != "mtp":
        return gpt, gpt, train_step
    return TargetWithMTP(gpt, MTP_DEPTH, steps).to(device), gpt, mtp_train_step


def _resume_state(model, run_path, name, out_dir):
    """The saved run state (full, with the optimizer) or, when only the shipped checkpoint of
    an unfinished run is here (a new machine), its weights and counters with a new optimizer."""
    if run_path.exists():
        saved = torch.load(run_path, weights_only=True)
        model.load_state_dict(saved.pop("model"))
        return saved
    meta_path = out_dir / f"{name}.json"
    if not meta_path.exists():
        return None
    meta = read_meta(name, out_dir)
    gpt = getattr(model, "gpt", model)
    gpt.load_state_dict(load_state(name, out_dir))
    if hasattr(model, "mtp"):
        model.mtp.load_state_dict(load_state(f"{name}-mtp", out_dir))
    return {"step": meta["steps"], "tokens": meta["tokens_seen"], "seconds": meta["train_seconds"], "losses": [],
            "history": meta.get("history", []),
            "optimizer_restarted_at": meta["steps"]}


def train_model(name, steps, minutes=None, resume=False, seed=0, device=None, out_dir=CHECKPOINTS, scale="cpu"):
    config, lr, batch, kind, teacher_name, init, name = recipe(name, scale)
    device = device or default_device()
    torch.manual_seed(seed)
    model, gpt, step_fn = _trainee(config, kind, device, steps)
    if init:
        gpt.load_state_dict(load(init, device).state_dict())
    run_path = RUNS / f"{name}.pt"
    state = _resume_state(model, run_path, name, out_dir) if resume else None
    if kind == "mtp":
        model.step = state["step"] if state else 0
    teacher = load(teacher_name, device) if teacher_name else None

    def checkpoint(s):
        run_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = run_path.with_name(f".{run_path.name}.tmp")  # atomic: --resume never reads half a run
        torch.save(s | {"model": model.state_dict()}, tmp)
        os.replace(tmp, run_path)

    before = {"step": state["step"], "seconds": state["seconds"]} if state else {"step": 0, "seconds": 0.0}
    place = where(device)  # at the start: the revision whose code this run executes
    state = fit(model, steps, batch, lr, seed + (init is not None), step_fn=step_fn, teacher=teacher, kind=kind,
                state=state, time_budget_s=None if minutes is None else 60 * minutes, desc=name, checkpoint=checkpoint,
                checkpoint_every=50 if kind == "mtp" else 500)
    record_run(state, before, place)
    checkpoint(state)
    trainee, model = model, gpt
    meta = {
        "name": name,
        "config": config_dict(config),
        "params": model.num_params(),
        "objective": OBJECTIVES[kind],
        "teacher": teacher_name,
        "initialised_from": init,
        "corpus": "train split of code + prose (lessonlib.data), windows sampled by corpus size",
        "heldout_documents": data.heldout_names(),
        **run_metadata(state, steps, batch, device, seed),
        "heldout_bits_per_byte": None,  # filled below, after rounding to the stored precision
        "history": state["history"],
    }
    if "optimizer_restarted_at" in state:
        meta["optimizer_restarted_at"] = state["optimizer_restarted_at"]
    if state["step"] < steps:  # stopped by --minutes or SIGTERM: ship what was reached, say how to go on
        meta["unfinished"] = (f"training stopped at step {state['step']} of {steps}; resume with: "
                              f"python -m lessonlib.models.train {name} --resume")
    model.load_state_dict(round_trip(model.state_dict()))  # evaluate exactly what ships
    meta["heldout_bits_per_byte"] = {c: round(bits_per_byte(model, c), 4) for c in data.CORPORA}
    if teacher is not None:  # which teacher's weights, not only its name (checkpoints.fingerprint)
        meta["teacher_fingerprint"] = fingerprint(teacher)
    meta = save(model, name, meta, out_dir)  # now with its checksum: the MTP modules' target fingerprint
    if kind == "mtp":  # the modules ship beside the target, with the same run metadata
        save(trainee.mtp, f"{name}-mtp",
             meta | {"name": f"{name}-mtp", "kind": "mtp", "depth": MTP_DEPTH, "target": name,
                     "target_fingerprint": meta["sha256"],
                     "params": sum(p.numel() for p in trainee.mtp.parameters())}, out_dir)
    return model, meta


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["tokenizer", *RECIPES])
    parser.add_argument("--steps", type=cli.positive_int, default=None,
                        help="planned optimizer steps (sets the lr schedule)")
    parser.add_argument("--minutes", type=cli.number(0, low_open=True), default=None,
                        help="stop after this many minutes (resume later); SIGTERM or Ctrl-C stops the same way")
    parser.add_argument("--resume", action="store_true", help="continue the run saved under .cache/runs")
    parser.add_argument("--seed", type=cli.nonnegative_int, default=0)
    parser.add_argument("--device", type=cli.device, default=None)
    parser.add_argument("--scale", choices=SCALES, default="cpu", help="gpu: the larger configs, saved as NAME-gpu")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop cleanly: finish the step, save, ship (resume later)
        signal.signal(sig, lambda *_: STOP.set())
    signal.signal(signal.SIGTSTP, _pause)
    signal.signal(signal.SIGCONT, _resume)
    if args.what == "tokenizer":
        data.train_tokenizer()
        print(f"wrote {data.TOKENIZER_PATH}")
        return
    steps = args.steps or DEFAULT_STEPS[args.what] * (2 if args.scale == "gpu" else 1)
    _, meta = train_model(args.what, steps, args.minutes, args.resume, args.seed, args.device, scale=args.scale)
    print({k: meta[k] for k in ("name", "params", "steps", "tokens_seen", "train_seconds", "heldout_bits_per_byte")})


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.train"))
