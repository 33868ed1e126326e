"""Hugging Face transformers as a peer (``bench.peers``): the course GPT as a ``GPT2LMHeadModel``
with the same weights (``to_hf``; the logits agree to about 1e-5), its assistant set up like
lessonlib's chain, and one greedy ``generate`` call timed end to end. Needs transformers
(``pip install -r requirements-peers.txt``; not in the default install)."""
from __future__ import annotations

import time

import torch

INSTALL = "pip install -r requirements-peers.txt"


def _transformers():
    try:
        import transformers
    except ImportError as err:
        raise ImportError(f"the peer benchmark needs Hugging Face transformers: {INSTALL}") from err
    return transformers


def to_hf(model):
    """The lessonlib GPT as a ``transformers.GPT2LMHeadModel`` with the same weights and dtype
    (eval mode, on the CPU). GPT-2 stores its linear layers as ``Conv1D`` (weight = our weight transposed)
    and splits ``c_attn`` into q, k, v in the same order as our ``qkv``."""
    tf = _transformers()
    if getattr(model, "packed", False):
        raise ValueError("model must be unpacked (models.load(name), not an engine's packed model): "
                         "packed weights are not nn.Linear")
    c = model.config
    config = tf.GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd, n_layer=c.n_layer,
                           n_head=c.n_head, n_inner=4 * c.n_embd, activation_function="gelu_new",
                           layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    dtype = model.wte.weight.dtype
    hf = tf.GPT2LMHeadModel(config).to(dtype)
    ours = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    state = {"transformer.wte.weight": ours["wte.weight"], "transformer.wpe.weight": ours["wpe.weight"],
             "transformer.ln_f.weight": ours["ln_f.weight"], "transformer.ln_f.bias": ours["ln_f.bias"],
             "lm_head.weight": ours["wte.weight"]}
    names = {"ln_1": "ln_1", "ln_2": "ln_2", "qkv": "attn.c_attn", "proj": "attn.c_proj", "fc": "mlp.c_fc",
             "fc_out": "mlp.c_proj"}
    for i in range(c.n_layer):
        for mine, theirs in names.items():
            w, b = ours[f"blocks.{i}.{mine}.weight"], ours[f"blocks.{i}.{mine}.bias"]
            state[f"transformer.h.{i}.{theirs}.weight"] = w if mine.startswith("ln") else w.t().contiguous()
            state[f"transformer.h.{i}.{theirs}.bias"] = b
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")]
    if missing or unexpected:
        raise ValueError(f"GPT-2 conversion left weights unset: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


def _quiet(hf):
    """Greedy defaults with no end-of-text token (our vocabulary has none), so every call
    emits exactly the requested number of tokens."""
    g = hf.generation_config
    g.eos_token_id = g.bos_token_id = None
    g.pad_token_id = 0
    g.do_sample = False
    return hf


def hf_assistant(draft_hf, k=3):
    """The draft as Hugging Face's assistant: exactly ``k`` drafts every round (constant
    schedule, the confidence cut-off off), like lessonlib's chain of K."""
    g = _quiet(draft_hf).generation_config
    g.num_assistant_tokens, g.num_assistant_tokens_schedule, g.assistant_confidence_threshold = k, "constant", 0.0
    return draft_hf


@torch.inference_mode()
def hf_run(model, prompt, new_tokens, **extra):
    """(new tokens, stats) of one greedy ``model.generate`` call, timed end to end."""
    idx = torch.tensor([prompt])
    start = time.perf_counter()
    out = _quiet(model).generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, **extra)
    seconds = time.perf_counter() - start
    return out[0, len(prompt) :].tolist(), {"seconds": seconds, "seconds_per_token": seconds / new_tokens}


def llama_to_hf(model):
    """The readable real LLM (``models.llama.Llama``) as a ``transformers.LlamaForCausalLM`` with
    the same float32 weights (eval mode, on the CPU): q/k/v/o, gate/up/down and the norms map one
    to one (the loader already undid GGUF's rotary permutation), the head tied to the embedding."""
    tf = _transformers()
    c = model.config
    config = tf.LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.n_embd, intermediate_size=c.n_hidden,
                            num_hidden_layers=c.n_layer, num_attention_heads=c.n_head,
                            num_key_value_heads=c.n_kv_head, head_dim=c.head_dim,
                            max_position_embeddings=c.block_size,
                            rms_norm_eps=c.norm_eps, tie_word_embeddings=True,
                            rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
                            attention_bias=False, mlp_bias=False,
                            bos_token_id=None, eos_token_id=None, pad_token_id=None)
    hf = tf.LlamaForCausalLM(config).float()
    ours = {k: v.detach().cpu().float() for k, v in model.state_dict().items()}
    state = {"model.embed_tokens.weight": ours["wte.weight"], "model.norm.weight": ours["norm_f.weight"],
             "lm_head.weight": ours["wte.weight"]}
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
             "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj", "norm_1": "input_layernorm",
             "norm_2": "post_attention_layernorm"}
    for i in range(c.n_layer):
        for mine, theirs in names.items():
            state[f"model.layers.{i}.{theirs}.weight"] = ours[f"blocks.{i}.{mine}.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"Llama conversion left weights unset: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()
