"""The lesson's opening demo: a real LLM on this machine, plain and speculative on the same text.

``run()`` loads SmolLM2-135M-Instruct on the fastest engine that runs here (``engines.llama``),
asks it to edit a held-out function (``models.llm_prompts``, the ``edit`` set), and decodes the
reply twice -- plain greedy decoding, and prompt lookup (a draft made of n-grams of the prompt,
no draft model at all) -- taking turns, fastest of ``repeats``. Both must give the same tokens:
the exact rule at T = 0 keeps the target's greedy output. One prompt is a demonstration, not a
measurement: ``stored()`` reads the benchmark's medians over five prompts (``bench llm``).
"""
from __future__ import annotations

from lessonlib.bench import record
from lessonlib.course.messages import N_
from lessonlib.decoding.decode import generate
from lessonlib.decoding.prompt_lookup import lookup_generate
from lessonlib.decoding.timing import interleaved


def run(new_tokens: int = 64, k: int = 5, repeats: int = 2, prompt: int = 0) -> dict:
    """{"engine", "prompt", "reply", "plain", "lookup" (tokens/s), "tau", "same"} for one edit prompt."""
    from lessonlib.engines.llama import load_llm
    from lessonlib.models import llama_tokenizer, llm_prompts

    model = load_llm("auto")
    tokenizer = llama_tokenizer.load_tokenizer()
    ids = llm_prompts.prompts(tokenizer, "edit", prompt + 1)[prompt]
    stop = llama_tokenizer.end_of_turn(tokenizer)  # the reply ends there
    runs = {"plain": lambda i: generate(model, ids, new_tokens, stop=stop),
            "lookup": lambda i: lookup_generate(model, ids, new_tokens, k=k, stop=stop)}
    best = interleaved(runs, 1, repeats)
    (plain, plain_stats), (lookup, lookup_stats) = best["plain"][0], best["lookup"][0]
    return {"engine": model.engine, "prompt": llm_prompts.messages("edit", prompt + 1)[prompt][0]["content"],
            "reply": llama_tokenizer.decode(tokenizer, plain), "plain": plain_stats.tokens_per_second,
            "lookup": lookup_stats.tokens_per_second, "tau": lookup_stats.tau, "same": plain == lookup,
            "new_tokens": new_tokens, "k": k}


def excerpt(reply: str, limit: int = 400) -> str:
    """The first ``limit`` characters of a model's reply, as a cell prints it: cut at a line end where
    one is near, marked "…" where cut, and a code fence the cut left open closed, so the Persian build
    (``outputs.translate_output``) keeps every line of it verbatim."""
    if limit < 1:
        raise ValueError(f"limit must be a positive number of characters, got {limit!r}")
    text = reply if len(reply) <= limit else reply[:limit].rsplit("\n", 1)[0] + " …"
    fences = sum(1 for line in text.splitlines() if line.lstrip().startswith("```"))
    return text + ("\n```" if fences % 2 else "")


def stored() -> dict | None:
    """The committed ``bench llm`` report (outputs/benchmarks/llm.json), or None before its first run."""
    return record.read("llm")


def run_eagle3(new_tokens: int = 64, k: int = 2, repeats: int = 2, prompt: int = 0) -> dict:
    """{"engine", "plain", "eagle3" (tokens/s), "tau", "alpha", "draft", "verify" (one-token target
    steps a round), "same", "new_tokens", "k"}: plain greedy decoding and the shipped EAGLE-3
    head's chain of ``k`` drafts on one held-out chat prompt, taking turns, fastest of ``repeats``."""
    import functools

    from lessonlib.core import tree
    from lessonlib.decoding.llm_drafter import LlamaHeadDrafter, load_eagle3_drafter
    from lessonlib.decoding.tree_decode import tree_generate
    from lessonlib.engines.llama import load_llm
    from lessonlib.models import llama_tokenizer, llm_prompts

    model = load_llm("auto")
    head = load_eagle3_drafter(model).head  # its draft step on the target's engine
    tokenizer = llama_tokenizer.load_tokenizer()
    ids, stop = llm_prompts.prompts(tokenizer, "chat", prompt + 1)[prompt], llama_tokenizer.end_of_turn(tokenizer)
    chain = functools.partial(tree.draft_topk, branching=(1,) * k)
    runs = {"plain": lambda i: generate(model, ids, new_tokens, stop=stop),
            "eagle3": lambda i: tree_generate(model, LlamaHeadDrafter(head, model), ids, new_tokens, rule=chain,
                                              stop=stop)}
    best = interleaved(runs, 1, repeats)
    (plain, plain_stats), (spec, spec_stats) = best["plain"][0], best["eagle3"][0]
    step = plain_stats.target_forward_seconds
    return {"engine": model.engine, "plain": plain_stats.tokens_per_second, "eagle3": spec_stats.tokens_per_second,
            "tau": spec_stats.tau, "alpha": spec_stats.alpha, "draft": spec_stats.draft_seconds_per_round / step,
            "verify": spec_stats.verify_forward_seconds / step, "same": plain == spec, "new_tokens": new_tokens,
            "k": k}


def head_rows(report: dict, kind: str = "smollm2-eagle3", threads: str = "1",
              sampled: bool = False) -> dict[tuple[str, str], dict]:
    """{(prompt set, method): its summary} of one trained head's rows in a ``bench llm`` report at
    ``threads``: the methods named after ``kind`` (a real-LLM kind of ``core.kinds``: EAGLE-3 or
    Medusa); the greedy ones, or with ``sampled`` the ones at T = 1 (their prompt set is
    "<set> · T = 1"); empty when it has none."""
    from lessonlib.core import kinds

    k = kinds.kind(kind)
    methods = report.get("by_threads", {}).get(threads, {}).get("methods", {})
    return {(kind, name): row["spread"] for kind, by_method in methods.items() for name, row in by_method.items()
            if name.startswith((k.chain + " ", k.tree + " ")) and (" · T = " in kind) == sampled}


def show_rows(rows: dict[tuple[str, str], dict]) -> None:
    """Print one head's rows (``head_rows``), one line each: τ, α while decoding, a round's drafting
    in one-token target steps and the speedup, each median [q25, q75] over the prompts."""
    from lessonlib.course.claims import Interval
    from lessonlib.course.messages import say

    width = max([19, *(len(name) for _, name in rows)])  # the method column fits its longest name
    header = say("prompts  method              τ                   α (decoding)        draft / round        speedup")
    print(header.replace("method ", "method " + " " * (width - 19), 1))
    for (kind, name), s in rows.items():
        print(f"{kind:8s} {name:{width}s} {Interval.of(s['tau'])}   {Interval.of(s['alpha'])}   "
              f"{Interval.of(s['draft_cost_per_round']):.3f}   {Interval.of(s['speedup'], '×')}")


# the texts calibration measures α on (``models.llm_calibration``), from the most like training to the least
CALIBRATION_TEXTS = (
    ("self", N_("the target's own replies, every position of their windows")),
    ("self replies", N_("the same replies, their reply tokens alone")),
    ("edit replies", N_("its replies to the benchmark's edit prompts")),
    ("chat replies", N_("its replies to the benchmark's chat prompts")),
)


def trained(kind: str) -> str:
    """Printed lines of what a shipped drafter of the real LLM (a kind of ``core.kinds.LLM_KINDS``)
    was trained with, read from its metadata: parameters stored, tokens seen, hours, its held-out α at
    depth 1 on the corpora (teacher-forced: the target's argmax); then its calibration at T = 0, 0.7
    and 1 (``llm_calibration``) on each text of ``CALIBRATION_TEXTS`` it was measured on."""
    from lessonlib.core import kinds
    from lessonlib.course.messages import printed, say, translated
    from lessonlib.models.llm_store import read_head_meta

    k = kinds.kind(kind)
    meta = read_head_meta(k.checkpoint)
    cal = meta.get("calibration", {})
    lines = [say("{name}: {params:,} parameters stored, trained {hours:.1f} h on one CPU core over {tokens:,} tokens; "
                 "held-out α at depth 1 (teacher-forced) {corpora:.2f} on the corpora", name=k.report,
                 params=meta["params"], hours=meta["train_seconds"] / 3600, tokens=meta["tokens_seen"],
                 corpora=meta["heldout"]["alpha_by_depth"][0])]
    texts = [(translated(label), cal[key]) for key, label in CALIBRATION_TEXTS if key in cal]
    if texts:
        width = max(len(label) for label, _ in texts)
        lines.append(say("teacher-forced α = Σ min(p_T, q_T) at depth 1, at T = 0 / 0.7 / 1, on each text:"))
        lines += [printed(f"  {label:{width}s}  {a['0']:.2f} / {a['0.7']:.2f} / {a['1']:.2f}") for label, a in texts]
    return "\n".join(lines)


def alpha_against_text(rows: dict[tuple[str, str], dict], kind: str) -> list[str]:
    """Printed lines, one per prompt set of ``rows`` (``head_rows`` of ``kind``): α while decoding of
    the kind's chain of one (median [q25, q75] over the prompts) beside its calibration's
    teacher-forced α at T = 0 on the target's replies to the same set (``llm_calibration``). A chain
    of one judges a subset of those same agreements, the positions a round drafts for."""
    from lessonlib.core import kinds
    from lessonlib.course.claims import Interval
    from lessonlib.course.messages import say
    from lessonlib.models.llm_store import read_head_meta

    k, cal = kinds.kind(kind), read_head_meta(kinds.kind(kind).checkpoint).get("calibration", {})
    name = f"{k.chain} K=1"
    return [say("{set} prompts: α while decoding ({name}) {a:.2f}; teacher-forced on the target's replies to them "
                "{tf:.2f}", set=kind_set, name=name, a=Interval.of(row["alpha"]), tf=cal[f"{kind_set} replies"]["0"])
            for (kind_set, method), row in rows.items() if method == name and f"{kind_set} replies" in cal]


def step_weights(kind: str) -> int:
    """Weights one draft step of a shipped drafter of the real LLM reads, from its metadata: EAGLE-3's
    layer and the draft vocabulary's rows of the embedding (width C); the draft model's blocks and those
    rows folded with proj_out to its own width (``llm_draft.LlamaDraftModel.out_rows``)."""
    from lessonlib.core import kinds
    from lessonlib.models.llm_store import read_head_meta

    meta = read_head_meta(kinds.kind(kind).checkpoint)
    if meta["kind"] == "draft":
        d = meta["draft_config"]["n_embd"]
        return int(meta["params"] - meta["n_embd"] * d + meta["draft_vocab_size"] * d)
    if meta["kind"] != "eagle3":
        raise ValueError(f"kind must be the EAGLE-3 head or the draft model, got {kind!r}")
    return int(meta["params"] + meta["draft_vocab_size"] * meta["n_embd"])


def regime(sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8), context: int = 128, repeats: int = 5) -> dict:
    """The real LLM's regime on this machine, measured now: {"engine", "step_ms", "bound_ms",
    "bandwidth_gb_s", "r": {n: t(n) / t(1)}} -- the fastest forward over n new tokens after a cached
    ``context`` (the sizes taking turns, ``repeats`` rounds), and the bound = the weight bytes a
    step reads / this machine's read bandwidth (``bench.bandwidth.read_bandwidth``)."""
    from lessonlib.bench.bandwidth import read_bandwidth
    from lessonlib.decoding.timing import pass_times
    from lessonlib.engines.llama import load_llm

    model = load_llm("auto", block_size=context + max(sizes) + 8)
    nbytes = model.native.nbytes if model.engine == "native" else sum(p.numel() * 4 for p in model.parameters())
    best = {n: float("inf") for n in sizes}
    for _ in range(repeats):
        for n, s in pass_times(model, sizes, context=context, repeats=1).items():
            best[n] = min(best[n], s)
    bandwidth = read_bandwidth(256 << 20)
    return {"engine": model.engine, "step_ms": 1e3 * best[1], "bound_ms": 1e3 * nbytes / bandwidth,
            "bandwidth_gb_s": bandwidth / 1e9, "r": {n: best[n] / best[1] for n in sizes}}


def with_your_rule(verify_chain, new_tokens: int = 48, k: int = 2, temperature: float = 1.0, seed: int = 0,
                   prompt: int = 0) -> dict:
    """The real LLM sampling at ``temperature`` with the shipped EAGLE-3 head's chain of ``k``
    drafts drawn from its q, every round judged by ``verify_chain`` (exercise 1b's contract:
    ``decoding.chain_rule``): {"engine", "text", "tau", "alpha", "rounds", "tokens_per_second",
    "new_tokens", "k", "temperature"} for one held-out chat prompt (numpy seed ``seed``)."""
    import numpy as np

    from lessonlib.core.tree_sampled import SampledRule
    from lessonlib.decoding.chain_rule import chain_rule
    from lessonlib.decoding.llm_drafter import LlamaHeadDrafter, load_eagle3_drafter
    from lessonlib.decoding.tree_decode import tree_generate
    from lessonlib.engines.llama import load_llm
    from lessonlib.models import llama_tokenizer, llm_prompts

    model = load_llm("auto")
    head = load_eagle3_drafter(model).head
    tokenizer = llama_tokenizer.load_tokenizer()
    ids = llm_prompts.prompts(tokenizer, "chat", prompt + 1)[prompt]
    with chain_rule(verify_chain):
        out, stats = tree_generate(model, LlamaHeadDrafter(head, model), ids, new_tokens,
                                   rule=SampledRule((1,) * k), temperature=temperature,
                                   rng=np.random.default_rng(seed), stop=llama_tokenizer.end_of_turn(tokenizer))
    return {"engine": model.engine, "text": llama_tokenizer.decode(tokenizer, out), "tau": stats.tau,
            "alpha": stats.alpha, "rounds": stats.rounds, "tokens_per_second": stats.tokens_per_second,
            "new_tokens": new_tokens, "k": k, "temperature": temperature}
