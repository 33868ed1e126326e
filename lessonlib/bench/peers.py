"""The peer, side by side: ``python -m lessonlib.bench peers`` writes outputs/benchmarks/peers.{json,md}.

The shipped GPT is GPT-2's architecture (pre-LayerNorm blocks, learned positions, tanh GELU,
tied embeddings), so it converts exactly to Hugging Face transformers' ``GPT2LMHeadModel``
(``to_hf``; the logits agree to about 1e-5). One run on one machine measures, on the same
held-out code prompts, greedy, batch 1:

* lessonlib: plain decoding (packed target), chain speculative decoding with draft-kl K = 3,
  and n-gram prompt lookup (``decoding.prompt_lookup``, through the tree loop);
* Hugging Face: plain ``generate``, assisted generation with the same draft-kl (K = 3,
  constant schedule, no confidence cut-off) and prompt lookup (``prompt_lookup_num_tokens``).

For every prompt the methods take turns, ``--repeats`` rounds of all six, each method kept
at its fastest round, so a load spike hits them alike. Every time is the whole call (prefill
included) over the new tokens, for both libraries; each speedup is over the same library's
plain decoding of the same prompt. Every output must equal its library's plain greedy output;
whether the two libraries' greedy outputs agree is recorded per prompt.

Each library runs as it does by default on a CPU: lessonlib's target packed for oneDNN, Hugging
Face's as ``torch.nn`` layers; both under the course's thread policy (``lessonlib.threads``:
``LESSONLIB_THREADS=2`` for two threads). Needs ``pip install -r requirements-peers.txt``
(transformers, not in the default install).
"""
from __future__ import annotations

import time

import torch

from lessonlib.bench import common
from lessonlib.decoding import measures
from lessonlib.decoding.decode import generate, speculative_generate
from lessonlib.decoding.prompt_lookup import lookup_generate
from lessonlib.decoding.timing import interleaved
from lessonlib.models import load

INSTALL = "pip install -r requirements-peers.txt"
LOOKUP_TOKENS = 10  # Hugging Face's prompt_lookup_num_tokens, and lessonlib's k: the same budget


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
        raise ValueError("model must be unpacked (models.load(name) without pack=True): "
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


def _timed(fn, new_tokens):
    """A lessonlib loop timed end to end (prefill included), like ``hf_run``."""
    start = time.perf_counter()
    out, stats = fn()
    seconds = time.perf_counter() - start
    return out, stats.as_dict() | {"loop_seconds": stats.seconds, "seconds": seconds,
                                   "seconds_per_token": seconds / new_tokens}


def methods(target, draft, target_hf, draft_hf, new_tokens):
    """name -> (library, run(prompt) -> (tokens, stats)); each library's plain comes first."""
    assistant = hf_assistant(draft_hf)
    return {
        "lessonlib plain": ("lessonlib", lambda p: _timed(lambda: generate(target, p, new_tokens), new_tokens)),
        "lessonlib chain, draft-kl K = 3": (
            "lessonlib", lambda p: _timed(lambda: speculative_generate(target, draft, p, 3, new_tokens), new_tokens)),
        f"lessonlib prompt lookup (k = {LOOKUP_TOKENS})": (
            "lessonlib", lambda p: _timed(lambda: lookup_generate(target, p, new_tokens, k=LOOKUP_TOKENS), new_tokens)),
        "HF plain generate": ("HF", lambda p: hf_run(target_hf, p, new_tokens)),
        "HF assisted, draft-kl K = 3 constant": (
            "HF", lambda p: hf_run(target_hf, p, new_tokens, assistant_model=assistant)),
        f"HF prompt lookup (prompt_lookup_num_tokens = {LOOKUP_TOKENS})": (
            "HF", lambda p: hf_run(target_hf, p, new_tokens, prompt_lookup_num_tokens=LOOKUP_TOKENS)),
    }


def run(n_prompts=common.DEFAULTS["prompts"], prompt_len=common.DEFAULTS["prompt_len"],
        new_tokens=common.DEFAULTS["new_tokens"], repeats=common.DEFAULTS["repeats"]):
    """Per method, per prompt: the fastest of ``repeats`` interleaved turns (``timing.interleaved``),
    its speedup over its library's plain, and whether its output equals that plain output."""
    target, draft = load("target", "cpu", pack=True), load("draft-kl", "cpu")
    target_hf, draft_hf = to_hf(load("target", "cpu")), to_hf(load("draft-kl", "cpu"))
    table = methods(target, draft, target_hf, draft_hf, new_tokens)
    prompts = common.prompts("code", n_prompts, prompt_len)
    for _, fn in table.values():  # warm-up: first calls allocate and pick kernels
        fn(prompts[0][:16])
    best = interleaved({name: (lambda i, fn=fn: fn(prompts[i])) for name, (_, fn) in table.items()}, n_prompts,
                       repeats, seconds=lambda stats: stats["seconds"])  # both libraries' runs: dicts timed end to end
    plain = {lib: best[next(n for n, (owner, _) in table.items() if owner == lib)] for lib in ("lessonlib", "HF")}
    results = {}
    for name, (lib, _) in table.items():
        other = "HF" if lib == "lessonlib" else "lessonlib"
        results[name] = [dict(stats, speedup=measures.speedup(plain[lib][i][1]["seconds_per_token"],
                                                              stats["seconds_per_token"]),
                              identical_to_plain=out == plain[lib][i][0],
                              identical_to_other_library_plain=out == plain[other][i][0])
                         for i, (out, stats) in enumerate(best[name])]
    return table, results


def summarise(table, results):
    rows = []
    for name, runs in results.items():
        row = {"method": name, "library": table[name][0],
               "tokens_per_second": measures.summary([1 / r["seconds_per_token"] for r in runs]),
               "speedup": measures.summary([r["speedup"] for r in runs]),
               "identical": all(r["identical_to_plain"] for r in runs),
               "identical_across_libraries": sum(r["identical_to_other_library_plain"] for r in runs)}
        if "tau" in runs[0]:
            row["tau"] = measures.summary([r["tau"] for r in runs])
        rows.append(row)
    return rows


def markdown(rows, setup):
    body = [[r["method"], measures.fmt_spread(r["tokens_per_second"], 0),
             "—" if r["method"].endswith(("plain", "plain generate")) else measures.fmt_spread(r["speedup"], 2, "×"),
             measures.fmt_spread(r["tau"], 2) if "tau" in r else "", "yes" if r["identical"] else "**no**"]
            for r in rows]
    ours = next(r for r in rows if r["method"].startswith("lessonlib prompt lookup"))["speedup"]["median"]
    theirs = next(r for r in rows if r["method"].startswith("HF prompt lookup"))["speedup"]["median"]
    same = min(r["identical_across_libraries"] for r in rows)
    return "\n".join([
        f"Peers: {setup['prompts']} held-out code prompts x {setup['new_tokens']} new tokens, greedy, batch 1, "
        f"{setup['threads']} thread(s), transformers {setup['transformers']}; median [IQR] over prompts, "
        "each the fastest of its interleaved repeats; time = the whole call, prefill included.", "",
        common.markdown_table(["method", "tokens/s", "speedup over its own plain", "tau", "output = its plain greedy"],
                              body), "",
        f"Prompt lookup speedup: lessonlib {ours:.2f}× vs Hugging Face {theirs:.2f}× (each over its own plain). "
        f"The two libraries' greedy outputs agree on {same} of {setup['prompts']} prompts "
        "(the same weights; float32 rounding differs between the two implementations).", ""])


def main(argv=None):
    parser = common.parser(__doc__, "interleaved turns of all methods per prompt; each keeps its fastest")
    args = parser.parse_args(argv)
    tf = _transformers()
    tf.logging.set_verbosity_error()  # its deprecation notes would bury the table
    started = time.time()
    table, results = run(args.prompts, args.prompt_len, args.new_tokens, args.repeats)
    rows = summarise(table, results)
    setup = {"prompts": args.prompts, "prompt_tokens": args.prompt_len, "new_tokens": args.new_tokens,
             "repeats": args.repeats, "temperature": 0.0, "corpus": "code (held-out)", "transformers": tf.__version__,
             "threads": torch.get_num_threads(), "machine": common.machine(),
             "seconds": round(time.time() - started, 1),
             "statistic": "median [IQR] over prompts of the fastest of `repeats` interleaved runs; "
                          "speedup = own plain s/token / method s/token on the same prompt; time includes prefill"}
    md = markdown(rows, setup)
    common.write_report("peers", {"setup": setup, "rows": rows, "per_prompt": results}, md)
    print(md)
    bad = [r["method"] for r in rows if not r["identical"]]
    if bad:
        print(f"outputs differ from their library's plain greedy output: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
