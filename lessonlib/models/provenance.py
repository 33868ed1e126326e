"""What a checkpoint's metadata records about its training run: the counters that add up over
resumed runs (``run_metadata``), where it ran (``where``: device, machine, torch, git revision)
and which part of a resumed run trained where (``record_run``).
"""
from __future__ import annotations

import platform

import numpy as np
import torch

from lessonlib.runs import git_revision


def run_metadata(state, planned_steps, batch_size, device, seed, before=None) -> dict:
    """The fields every checkpoint's metadata records about its training run (steps, tokens
    and seconds add up over resumed runs: ``before`` is the previous metadata)."""
    before = before or {}
    return {
        "steps": before.get("steps", 0) + state["step"],
        "planned_steps": planned_steps,
        "runs": before.get("runs", 0) + (len(state.get("history", [])) or 1),
        "batch_size": batch_size,
        "tokens_seen": before.get("tokens_seen", 0) + state["tokens"],
        "train_seconds": round(before.get("train_seconds", 0.0) + state["seconds"], 1),
        "final_train_loss": float(np.mean(state["losses"][-50:])),
        **where(device),
        "seed": seed,
    }


def where(device) -> dict:
    """Where a run trains: device, machine (with the thread count), torch and the git revision."""
    return {"device": torch.cuda.get_device_name() if torch.device(device).type == "cuda" else "cpu",
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
                       + f", {torch.get_num_threads()} threads",
            # str: a TorchVersion breaks weights_only loads
            "torch": str(torch.__version__), "git_revision": git_revision()}


def record_run(state, before, place):
    """Append this run to ``state["history"]``: the steps it trained, its seconds and where
    (``place``: ``where`` at the run's start), so a resumed checkpoint says which part was trained where."""
    history = state.setdefault("history", [])
    if not history and before["step"] > 0:  # resumed from a run saved before runs kept a history
        history.append({"steps": [0, before["step"]], "where": "not recorded (saved before runs kept a history)"})
    history.append({"steps": [before["step"], state["step"]], "seconds": round(state["seconds"] - before["seconds"], 1),
                    **place})
