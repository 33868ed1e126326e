"""The course's EAGLE-3 head for SmolLM2 written in the layout vLLM and SGLang load:

    python -m lessonlib.models.eagle3_export OUT_DIR     # config.json + model.safetensors

The layout is the reference's (SafeAILab/EAGLE checkpoints, which vLLM's ``llama_eagle3.py`` reads):
``config.json`` is a one-layer Llama config with ``architectures: ["LlamaForCausalLMEagle3"]``,
``draft_vocab_size`` and ``target_hidden_size``; the weights are ``fc`` (3C -> C),
``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}``, ``midlayer.self_attn.
{q,k,v,o}_proj`` (q/k/v over 2C), ``midlayer.mlp.{gate,up,down}_proj``, ``norm``, ``lm_head``
(draft_vocab_size x C), ``d2t`` (int64 offsets: target id = draft id + d2t) and ``t2d`` (bool
over the target vocabulary). No ``embed_tokens``: the server shares the target's.

The course's head ties its LM head to the target's embedding rows of the draft vocabulary; the
export writes those rows out as ``lm_head.weight``. The fused layers are written as vLLM numbers
them (``eagle_aux_hidden_state_layer_ids``: the *input* of decoder layer j, so the course's block
outputs (1, 14, 26) are ids (2, 15, 27), the reference's default for 30 layers).
"""
from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import torch

from lessonlib import cli
from lessonlib.jsonio import write_atomic
from lessonlib.models.llama import Llama
from lessonlib.models.llm_heads import LlamaEagle3Head, ids_from_d2t

WEIGHTS = "model.safetensors"
NAMES = {  # the course's parameter -> the reference checkpoint's tensor
    "fuse.weight": "fc.weight",
    "layer.norm_emb.weight": "midlayer.input_layernorm.weight",
    "layer.norm_1.weight": "midlayer.hidden_norm.weight",
    "layer.norm_2.weight": "midlayer.post_attention_layernorm.weight",
    **{f"layer.{p}.weight": f"midlayer.self_attn.{p}_proj.weight" for p in "qkvo"},
    **{f"layer.{p}.weight": f"midlayer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
    "norm.weight": "norm.weight",
    "d2t": "d2t",
    "t2d": "t2d",
}


def hf_config(head: LlamaEagle3Head, target: Llama) -> dict[str, Any]:
    """The draft's config.json: the keys vLLM's and SGLang's EAGLE-3 Llama read."""
    c = head.config
    aux = [i + 1 for i in head.layers]  # block output i = input of layer i + 1 (vLLM's numbering)
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": c.n_embd,
        "intermediate_size": c.n_hidden,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.n_kv_head,
        "head_dim": c.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": round(c.norm_eps, 12),  # the GGUF stores it in float32: 1e-5, not 9.9999997e-06
        "rope_theta": c.rope_theta,
        "max_position_embeddings": target.config.block_size,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": len(head.d2t),
        "target_hidden_size": target.config.n_embd,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
    }


def export(head: LlamaEagle3Head, target: Llama, out: pathlib.Path) -> pathlib.Path:
    """Write ``config.json`` and ``model.safetensors`` (float16; d2t int64, t2d bool) to ``out``."""
    from safetensors.torch import save_file

    state = head.state_dict()
    missing = set(state) - set(NAMES)
    if missing:
        raise ValueError(f"head holds tensors the export does not map: {sorted(missing)}")
    tensors = {NAMES[k]: (v.detach().to("cpu", torch.float16) if v.is_floating_point() else v.detach().cpu())
               .contiguous() for k, v in state.items()}
    tensors["lm_head.weight"] = head.draft_head(target).detach().to("cpu", torch.float16).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{WEIGHTS}.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / WEIGHTS)
    write_atomic(out / "config.json", json.dumps(hf_config(head, target), indent=2) + "\n")
    return out


def read_back(out: pathlib.Path, target: Llama) -> LlamaEagle3Head:
    """The exported folder read as a course head beside ``target`` (the check that the export is
    complete): every tensor mapped back, ``lm_head`` equal to the target's rows ``d2t`` selects,
    the config's sizes the target's. ValueError naming what differs."""
    from safetensors.torch import load_file

    config = json.loads((out / "config.json").read_text())
    tensors = load_file(str(out / WEIGHTS))
    expected = set(NAMES.values()) | {"lm_head.weight"}
    if set(tensors) != expected:
        raise ValueError(f"{out / WEIGHTS} must hold {sorted(expected)}, got {sorted(tensors)}")
    d2t = tensors["d2t"].long()
    if config["draft_vocab_size"] != len(d2t) or config["target_hidden_size"] != target.config.n_embd:
        raise ValueError(f"config.json sizes disagree with the tensors or the target: {config}")
    head = LlamaEagle3Head(target.config, ids_from_d2t(d2t))
    back = {ours: tensors[theirs] for ours, theirs in NAMES.items()}
    head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in back.items()}, strict=True)
    rows = head.draft_head(target).to(torch.float16)
    if not torch.equal(tensors["lm_head.weight"], rows) or not torch.equal(tensors["t2d"], head.t2d):
        raise ValueError("lm_head.weight must be the target's embedding rows d2t selects, and t2d their mask")
    return head.eval()


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=pathlib.Path, help="folder to write config.json and model.safetensors to")
    args = parser.parse_args(argv)
    from lessonlib.models.llama import load_smollm2
    from lessonlib.models.llm_store import load_llm_head

    target = load_smollm2()
    head = load_llm_head(target)
    if not isinstance(head, LlamaEagle3Head):
        raise ValueError("the shipped head must be an EAGLE-3 head")
    export(head, target, args.out)
    read_back(args.out, target)
    print(f"wrote {args.out / 'config.json'} and {args.out / WEIGHTS} (read back: same tensors)")


if __name__ == "__main__":
    raise SystemExit(cli.run(main, prog="python -m lessonlib.models.eagle3_export"))
