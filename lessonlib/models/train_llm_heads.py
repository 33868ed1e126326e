"""Train the real LLM's EAGLE-3 head (or the EAGLE control) on the cached features (``llm_features``),
on the CPU, in pieces:

    python -m lessonlib.models.llm_features --until 08:15          # the features first
    python -m lessonlib.models.train_llm_heads eagle3 --until 09:28 [--resume]
    python -m lessonlib.models.train_llm_heads eagle --minutes 60   # top feature, full vocabulary; kept in
                                                                    # the cache folder (40 MB shipping limit)
    python -m lessonlib.models.train_llm_heads medusa --until 20:30  # Medusa-1 heads (``llm_medusa``), shipped
    python -m lessonlib.models.train_llm_heads draft --batch 4 --lr 2e-3  # the distilled draft model (``llm_draft``)

Every ``--save-minutes`` the training state (float32 weights, AdamW moments, counters) is written
atomically to the cache folder, so ``--resume`` continues where a run stopped; every
``--eval-minutes`` the held-out alpha (teacher-forced, depths 1..3) is measured and, when depth 1
improved, the head is shipped to ``lessonlib/assets/smollm2-eagle3.{safetensors,json}`` (float16,
d2t/t2d exact). Its metadata records the data, tokens seen, steps, seconds, machine, git revision
and alpha against tokens seen (what more training would buy). The learning rate follows a cosine
over the run's own time budget (warm-up first), so a run that is stopped by its deadline has
annealed; a resumed run starts a new schedule (recorded in ``runs``).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models import llm_features
from lessonlib.models.checkpoints import CHECKPOINTS
from lessonlib.models.llama import Llama
from lessonlib.models.llm_draft import LlamaDraftModel, draft_losses
from lessonlib.models.llm_eagle import LlamaEagleHead, eagle_losses
from lessonlib.models.llm_features import FeatureStore
from lessonlib.models.llm_heads import (
    DRAFT_VOCAB,
    STEP_WEIGHT,
    TTT_STEPS,
    LlamaEagle3Head,
    draft_vocabulary,
    ids_from_d2t,
    losses,
    weighted,
)
from lessonlib.models.llm_medusa import N_HEADS, LlamaMedusaHeads, medusa_losses
from lessonlib.models.llm_store import NAMES, save_head
from lessonlib.models.llm_store import LlmHead as Head
from lessonlib.models.provenance import where

EVAL_DEPTHS = 3
WARMUP = 30


def _batch(store: FeatureStore, rows: np.ndarray, fused: bool = True) -> tuple[torch.Tensor, ...]:
    rows = np.sort(rows)  # memmap reads in file order
    return (torch.from_numpy(store.tokens[rows].astype(np.int64)),  # (B, L)
            torch.from_numpy(store.fused[rows].astype(np.float32) if fused else np.zeros(0)),  # (B, L, 3C)
            torch.from_numpy(store.final[rows].astype(np.float32)),  # (B, L, C)
            torch.from_numpy(store.top1[rows].astype(np.int64)))  # (B, L)


def head_losses(head: Head, target: Llama, batch: tuple[torch.Tensor, ...],
                steps: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(per-step losses, per-step alphas) of any head on one batch of ``_batch`` (Medusa: per head,
    ``steps`` unused: its heads are its depths)."""
    tokens, fused, final, top1 = batch
    if isinstance(head, LlamaMedusaHeads):
        return medusa_losses(head, target, final, top1)
    if isinstance(head, LlamaDraftModel):
        return draft_losses(head, target, tokens, final, top1)
    if isinstance(head, LlamaEagleHead):
        return eagle_losses(head, target, tokens, final, top1, steps)
    return losses(head, target, tokens, fused, final, top1, steps)


@torch.no_grad()
def heldout_alpha(head: Head, target: Llama, store: FeatureStore, depths: int = EVAL_DEPTHS) -> dict[str, Any]:
    """Teacher-forced alpha by depth on every held-out window (all positions; the draft model: depth 1,
    its one way of drafting), the KL at depth 1, and the draft vocabulary's coverage (share of positions
    whose target argmax is in it)."""
    head.eval()
    alphas, kl1, covered, n = np.zeros(0), 0.0, 0.0, 0
    for w in range(store.heldout):
        batch = _batch(store, np.array([w]), isinstance(head, LlamaEagle3Head))
        kls, al = head_losses(head, target, batch, depths)
        alphas = np.array([float(a) for a in al]) + (alphas if len(alphas) else 0.0)
        kl1 += float(kls[0])
        covered += float(head.t2d[batch[3][:, 1:]].float().mean()) if hasattr(head, "t2d") else 1.0
        n += 1
    head.train()
    return {"alpha_by_depth": [round(float(a) / n, 4) for a in alphas], "kl_depth1": round(kl1 / n, 4),
            "draft_vocab_coverage": round(covered / n, 4), "positions": n * (store.meta["window"] - 1)}


def lr_scale(step: int, frac: float) -> float:
    """Linear warm-up over ``WARMUP`` steps, then a cosine from 1 to 0.1 over the run's time budget
    (``frac``: the share of it spent)."""
    return min(1.0, (step + 1) / WARMUP) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0))))


def _save_state(path: pathlib.Path, head: Head, optimizer: torch.optim.Optimizer,
                state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"head": head.state_dict(), "optimizer": optimizer.state_dict(), "state": state}, buffer)
    write_atomic(path, buffer.getvalue())


def _new_head(kind: str, target: Llama, store: FeatureStore, saved: dict | None, draft_vocab: int) -> Head:
    """The head of ``kind``: from a saved training state, else fresh (EAGLE-3's draft vocabulary:
    the most frequent target argmax tokens of the training windows extracted so far)."""
    if kind == "eagle":
        head: Head = LlamaEagleHead(target.config)
    else:
        ids = ids_from_d2t(saved["head"]["d2t"]) if saved is not None else \
            draft_vocabulary(store.top1[store.heldout : store.done], draft_vocab, target.config.vocab_size)
        head = LlamaMedusaHeads(target.config, ids, N_HEADS) if kind == "medusa" else \
            LlamaDraftModel(target, ids) if kind == "draft" else LlamaEagle3Head(target.config, ids)
    if saved is not None:
        head.load_state_dict(saved["head"])
    return head


def _data(batch: int) -> tuple[FeatureStore, Llama]:
    """The feature store (enough windows extracted, else ValueError) and the frozen float32 target."""
    from lessonlib.models.llama import load_smollm2

    store = FeatureStore(llm_features.folder())
    if store.done <= store.heldout + batch:
        raise ValueError(f"only {store.done} feature windows extracted ({store.heldout} held out): "
                         "run python -m lessonlib.models.llm_features first")
    target = load_smollm2(torch.float32, block_size=store.meta["window"])
    for p in target.parameters():
        p.requires_grad_(False)
    return store, target


def _optimizer_step(head: Head, target: Llama, optimizer: torch.optim.Optimizer, data: tuple[torch.Tensor, ...],
                    ttt: int) -> tuple[float, float]:
    """One step on ``data``: the reference's sum over unroll steps of 0.8 ** j * loss_j, its gradient
    clip at 0.5; returns (loss, depth-1 alpha on the batch)."""
    kls, alphas = head_losses(head, target, data, ttt)
    loss = weighted(kls)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
    optimizer.step()
    return loss.item(), alphas[0].item()


def _resume(kind: str, target: Llama, store: FeatureStore, resume: bool, draft_vocab: int,
            lr: float) -> tuple[Head, torch.optim.Optimizer, dict[str, Any], pathlib.Path]:
    """(head, optimizer, state, the state's path): from the saved training state when ``resume``
    finds one, else fresh."""
    state_path = llm_features.folder() / f"{kind}-train-state.pt"
    saved = torch.load(state_path, weights_only=False) if resume and state_path.exists() else None
    head = _new_head(kind, target, store, saved, draft_vocab)
    state: dict[str, Any] = saved["state"] if saved is not None else {
        "steps": 0, "tokens_seen": 0, "seconds": 0.0, "alpha_curve": [], "runs": [], "best_alpha1": -1.0,
        "draft_vocab_from_windows": int(store.done - store.heldout)}
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    if saved is not None:
        optimizer.load_state_dict(saved["optimizer"])
    return head, optimizer, state, state_path


def _evaluate(head: Head, target: Llama, store: FeatureStore, own: FeatureStore | None, state: dict[str, Any],
              name: str, directory: pathlib.Path) -> None:
    """Held-out alpha on the corpora (and on the self-distilled chats when trained on them), added
    to the curve; the head is shipped when the alpha it is judged by (``own``'s when given) improved."""
    result = heldout_alpha(head, target, store)
    if own is not None:
        result["self"] = heldout_alpha(head, target, own)
    state["alpha_curve"].append({"tokens_seen": state["tokens_seen"], "steps": state["steps"], **result})
    tqdm.write(f"step {state['steps']} tokens {state['tokens_seen']}: {result}")
    best_key = "best_self_alpha1" if own is not None else "best_alpha1"
    score = (result["self"] if own is not None else result)["alpha_by_depth"][0]
    if score > state.get(best_key, -1.0):
        state[best_key] = score
        save_head(head, _meta(head, store, state, result, target, own), name, directory)


def _self_store(batch: int) -> FeatureStore:
    """The self-distilled chats' feature store (``llm_selfdistill``), enough windows extracted."""
    from lessonlib.models import llm_selfdistill

    path = llm_selfdistill.folder() / "features"
    if not (path / "meta.json").exists():
        raise ValueError(f"self_share needs the self-distilled features in {path}: run python -m "
                         "lessonlib.models.llm_selfdistill replies, then features")
    store = FeatureStore(path)
    if store.done <= store.heldout + batch:
        raise ValueError(f"only {store.done} self-distilled windows extracted ({store.heldout} held out): "
                         "run python -m lessonlib.models.llm_selfdistill features")
    return store


def train_eagle3(deadline: float, max_steps: int | None = None, batch: int = 2, lr: float = 1e-3,
                 ttt: int = TTT_STEPS, draft_vocab: int = DRAFT_VOCAB, resume: bool = False, seed: int = 0,
                 save_minutes: float = 5.0, eval_minutes: float = 10.0,
                 directory: pathlib.Path = CHECKPOINTS, kind: str = "eagle3",
                 self_share: float = 0.0) -> dict[str, Any]:
    """Train (or ``resume``) the EAGLE-3 head (``kind`` "eagle": the EAGLE control) until ``deadline``
    (epoch seconds) or ``max_steps``; saves the best held-out head to ``directory``; returns the
    run's counters. ``self_share``: the share of steps whose batch comes from the target's own
    replies (``llm_selfdistill``); above 0 the head shipped is the best on *their* held-out windows
    (the text decoding drafts), else the best on the corpora's."""
    if not 0.0 <= self_share <= 1.0:
        raise ValueError(f"self_share must be in [0, 1], got {self_share!r}")
    store, target = _data(batch)
    own, done = _self_store(batch) if self_share > 0 else None, store.done
    torch.manual_seed(seed)
    head, optimizer, state, state_path = _resume(kind, target, store, resume, draft_vocab, lr)
    rng = np.random.default_rng(seed + len(state["runs"]))  # a resumed run draws new batches
    began, last_save, last_eval = time.time(), time.time(), time.time()
    budget = max(deadline - began, 1.0)
    sources = [(store, done)] + ([(own, own.done)] if own is not None else [])  # windows fixed at the start
    run = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "from_step": state["steps"],
           "windows_available": int(done), "lr": lr, "batch_windows": batch, "self_share": self_share,
           "ttt_steps": ttt if kind in ("eagle3", "eagle") else None,  # Medusa and the draft model never unroll
           "self_windows_available": int(sources[-1][1]) if own else 0, **where("cpu")}
    state["runs"].append(run)

    def evaluate() -> None:
        _evaluate(head, target, store, own, state, NAMES[kind], directory)

    step_in_run = 0
    with tqdm(desc=kind, unit="step", total=max_steps) as bar:
        while time.time() < deadline and (max_steps is None or step_in_run < max_steps):
            scale = lr_scale(step_in_run, (time.time() - began) / budget)
            for group in optimizer.param_groups:
                group["lr"] = lr * scale
            source, end = sources[-1] if len(sources) > 1 and rng.random() < self_share else sources[0]
            data = _batch(source, rng.integers(source.heldout, end, size=batch), kind == "eagle3")
            loss, alpha1 = _optimizer_step(head, target, optimizer, data, ttt)
            step_in_run += 1
            state["steps"] += 1
            state["tokens_seen"] += int(data[0].numel())
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", a1=f"{alpha1:.3f}", lr=f"{lr * scale:.1e}")
            now = time.time()
            if now - last_eval > 60 * eval_minutes or now - last_save > 60 * save_minutes:
                state["seconds"] += now - last_save
                last_save = now
                if now - last_eval > 60 * eval_minutes:
                    evaluate()
                    last_eval = time.time()
                _save_state(state_path, head, optimizer, state)
    state["seconds"] += time.time() - last_save
    run.update(steps=step_in_run, ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    evaluate()
    _save_state(state_path, head, optimizer, state)
    return state


def _meta(head: Head, store: FeatureStore, state: dict, result: dict, target: Llama,
          own: FeatureStore | None = None) -> dict[str, Any]:
    kind = {LlamaEagle3Head: "eagle3", LlamaMedusaHeads: "medusa", LlamaDraftModel: "draft"}.get(type(head), "eagle")
    shape: dict[str, Any] = _medusa_shape(head, state) if isinstance(head, LlamaMedusaHeads) else \
        _draft_shape(head, state) if isinstance(head, LlamaDraftModel) else {
        "fused_layers": list(head.layers), "fused_layers_are": "block outputs = inputs of layers {2, N//2, N-3}",
        "draft_vocab_size": len(head.d2t), "draft_vocab": f"the {len(head.d2t)} most frequent target argmax tokens "
        f"of the first {state['draft_vocab_from_windows']} training windows",
        "lm_head": "tied: the target's embedding rows of the draft vocabulary (not stored)",
        "loss": f"forward KL(p || q) at T = 1 over the draft vocabulary, p renormalised there; positions whose "
                f"target argmax is outside it masked; mean over kept positions; step j weighted {STEP_WEIGHT} ** j",
    } if isinstance(head, LlamaEagle3Head) else {
        "feature": "the target's last block output (before norm_f)", "lm_head": "the target's own (full vocabulary)",
        "loss": f"forward KL(p || q) at T = 1 over the full vocabulary + 0.1 smooth-L1 to the next feature; "
                f"step j weighted {STEP_WEIGHT} ** j",
    }
    return {
        "name": NAMES[kind], "kind": kind, "n_embd": target.config.n_embd, **shape,
        "target": {k: v for k, v in target.source.items() if k in ("name", "gguf_sha256", "gguf_bytes")},
        "target_config": dict(vars(target.config)),
        **({} if kind in ("medusa", "draft") else {"ttt_steps": state["runs"][-1]["ttt_steps"]}),  # never unrolled
        "params": sum(p.numel() for p in head.parameters()),
        "data": {"folder": store.path.name, "meta": {k: store.meta[k] for k in ("window", "mix", "corpora", "seed")},
                 "windows_extracted": store.done, "heldout_windows": store.heldout,
                 **({"self_distilled": {"folder": f"{own.path.parent.name}/{own.path.name}",
                                        "chats": own.meta.get("chats"), "windows_extracted": own.done,
                                        "heldout_windows": own.heldout,
                                        "text": own.meta.get("corpora")}} if own is not None else {})},
        "shipped_by": "depth-1 alpha on the self-distilled held-out windows" if own is not None
                      else "depth-1 alpha on the corpora's held-out windows",
        "steps": state["steps"], "tokens_seen": state["tokens_seen"], "train_seconds": round(state["seconds"], 1),
        "heldout": result, "alpha_curve": state["alpha_curve"], "runs": state["runs"],
        "rebuild": f"python -m lessonlib.models.llm_features && python -m lessonlib.models.train_llm_heads {kind}",
    }


def _medusa_shape(heads: LlamaMedusaHeads, state: dict) -> dict[str, Any]:
    return {"n_heads": heads.n_heads, "feature": "the target's last block output, through its norm_f",
            "draft_vocab_size": len(heads.d2t), "draft_vocab": f"the {len(heads.d2t)} most frequent target argmax "
            f"tokens of the first {state['draft_vocab_from_windows']} training windows",
            "lm_head": "tied: the target's embedding rows of the draft vocabulary (not stored); the reference "
                       "trains a full LM head per head",
            "loss": f"head k: forward KL(p || q) at T = 1 against the target's distribution of token s + 2 + k over "
                    f"the draft vocabulary, p renormalised there; positions whose target argmax is outside it "
                    f"masked; head k weighted {STEP_WEIGHT} ** k (the reference's lambda_k)"}


def _draft_shape(model: LlamaDraftModel, state: dict) -> dict[str, Any]:
    return {"draft_config": model.shape(), "draft_vocab_size": len(model.d2t),
            "draft_vocab": f"the {len(model.d2t)} most frequent target argmax tokens of the first "
                           f"{state['draft_vocab_from_windows']} training windows",
            "embedding": "the target's token embedding (frozen, not stored) through proj_in",
            "lm_head": "proj_out, then the target's embedding rows of the draft vocabulary (tied, not stored)",
            "loss": "forward KL(p || q) at T = 1 against the target's distribution of the next token over the "
                    "draft vocabulary, p renormalised there; positions whose target argmax is outside it masked; "
                    "teacher-forced on the windows' tokens"}


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=list(NAMES),
                        help="eagle3, medusa, draft ship to lessonlib/assets; eagle (the control) stays in the cache")
    parser.add_argument("--steps", type=cli.positive_int, default=None, help="stop after this many steps")
    parser.add_argument("--minutes", type=cli.number(0, low_open=True), default=None)
    parser.add_argument("--until", type=cli.clock_time, default=None, help="stop at this UTC time, HH:MM")
    parser.add_argument("--batch", type=cli.positive_int, default=2, help="windows per step")
    parser.add_argument("--lr", type=cli.number(0, 1, low_open=True), default=1e-3)
    parser.add_argument("--ttt", type=cli.int_at_least(1, 16), default=TTT_STEPS)
    parser.add_argument("--draft-vocab", type=cli.positive_int, default=DRAFT_VOCAB)
    parser.add_argument("--eval-minutes", type=cli.number(0, low_open=True), default=10.0)
    parser.add_argument("--save-minutes", type=cli.number(0, low_open=True), default=5.0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--self-share", type=cli.number(0, 1), default=0.0,
                        help="share of batches from the target's own replies (llm_selfdistill)")
    args = parser.parse_args(argv)
    deadline = time.time() + 60 * (args.minutes or 60.0)
    if args.until:
        deadline = min(deadline if args.minutes else float("inf"), args.until)
    state = train_eagle3(deadline, args.steps, args.batch, args.lr, args.ttt, args.draft_vocab, args.resume,
                         eval_minutes=args.eval_minutes, save_minutes=args.save_minutes, kind=args.kind,
                         self_share=args.self_share,
                         directory=llm_features.folder() if args.kind == "eagle" else CHECKPOINTS)
    print(json.dumps({k: state.get(k) for k in ("steps", "tokens_seen", "best_alpha1", "best_self_alpha1")}))


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.train_llm_heads"))
