"""llama.cpp as a peer (``bench.peers``), through llama-cpp-python, on the course's own models
exported to GGUF (``models.gguf_export``). Needs ``pip install -r requirements-peers.txt``
(llama-cpp-python builds from source; not in the default install).

What llama-cpp-python's speculative API supports (0.3.x): ``Llama(draft_model=...)`` takes any
``LlamaDraftModel``, a callable from the token ids so far to the proposed next tokens, and
verifies the proposal greedily in one batched ``decode`` (a draft token is kept while it equals
the target's greedy token; greedy sampling only is lossless -- it samples each position with the
target's sampler, not the accept/reject rule). It ships one proposer, ``LlamaPromptLookupDecoding``
(n-gram lookup in the prompt and output). A draft *model* is not shipped: ``draft_model`` below
is the adapter, a second ``Llama`` on the draft's GGUF that proposes ``k`` greedy tokens, its KV
cache kept across rounds by llama-cpp-python's own prefix reuse (``Llama.generate`` re-evaluates
only the tokens after the longest common prefix).
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import time
from collections.abc import Sequence

import numpy as np

INSTALL = "pip install -r requirements-peers.txt"
GREEDY = {"top_k": 1, "top_p": 1.0, "min_p": 0.0, "temp": 0.0, "repeat_penalty": 1.0}


def llama_cpp():
    """The ``llama_cpp`` module; ImportError naming the install otherwise."""
    try:
        import llama_cpp as module
    except ImportError as err:
        raise ImportError(f"the llama.cpp rows need llama-cpp-python: {INSTALL}") from err
    return module


def engine(path: str | pathlib.Path, threads: int, n_ctx: int, draft=None, logits_all: bool = False):
    """A ``llama_cpp.Llama`` on the GGUF at ``path`` with ``threads`` threads for steps and batches
    alike, a context of ``n_ctx`` tokens, quiet; ``draft`` a ``LlamaDraftModel`` for speculation."""
    lib = llama_cpp()
    return lib.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                     n_threads_batch=threads, draft_model=draft, logits_all=logits_all, verbose=False)


def draft_model(path: str | pathlib.Path, threads: int, n_ctx: int, k: int = 3):
    """A ``LlamaDraftModel`` proposing ``k`` greedy tokens of the GGUF model at ``path`` (the
    adapter the module docstring describes); ``.steps`` counts its one-token forwards."""
    lib = llama_cpp()
    from llama_cpp.llama_speculative import LlamaDraftModel

    class ModelDraft(LlamaDraftModel):
        def __init__(self) -> None:
            self.llm = engine(path, threads, n_ctx)
            self.k, self.steps = k, 0

        def reset(self) -> None:  # a new decode: forget the previous run's cache (no free prefill)
            self.llm.reset()

        def __call__(self, input_ids, /, **kwargs):
            room = n_ctx - len(input_ids)
            out = []
            for token in self.llm.generate(input_ids.tolist(), reset=True, **GREEDY):
                out.append(token)
                if len(out) >= min(self.k, room):
                    break
            self.steps += len(out)
            return np.array(out, dtype=np.intc)

    del lib
    return ModelDraft()


def lookup(k: int = 10, ngram: int = 2):
    """llama-cpp-python's own prompt lookup: up to ``k`` tokens after the last match of the
    final ``ngram`` (then shorter) tokens."""
    llama_cpp()
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return LlamaPromptLookupDecoding(max_ngram_size=ngram, num_pred_tokens=k)


def run(llm, prompt: Sequence[int], new_tokens: int) -> tuple[list[int], dict]:
    """(new tokens, stats) of one greedy decode of ``new_tokens`` after ``prompt``, timed end to end
    (prefill included) like ``bench.peer_hf.hf_run``. The cache starts empty every call (``reset``:
    no prefix reuse between timed runs); stats count the target's forwards (``decode`` calls, the
    prefill included) and tau = new tokens / forwards, as ``DecodeStats`` counts them (the
    prefill's forward gives the first token)."""
    llm.reset()
    if hasattr(llm.draft_model, "reset"):
        llm.draft_model.reset()
    forwards = [0]
    evaluate = type(llm).eval

    def counted(tokens):
        forwards[0] += 1
        return evaluate(llm, tokens)

    llm.eval = counted  # an instance attribute: generate's self.eval calls it
    out: list[int] = []
    start = time.perf_counter()
    try:
        for token in llm.generate(list(prompt), reset=True, **GREEDY):
            out.append(int(token))
            if len(out) == new_tokens:
                break
    finally:
        del llm.eval
    seconds = time.perf_counter() - start
    return out, {"seconds": seconds, "seconds_per_token": seconds / new_tokens, "target_forwards": forwards[0],
                 "tau": new_tokens / forwards[0]}


def step_times(llm, sizes: Sequence[int], context: Sequence[int], repeats: int = 20) -> dict[int, float]:
    """{n: fastest seconds of one ``decode`` over n new tokens after the cached ``context``}, the
    sizes taking turns (as ``decoding.timing.pass_times`` for lessonlib). With ``logits_all`` the
    engine computes logits for every new token, as a verify pass needs."""
    llm.reset()
    llm.eval(list(context))
    tokens = list(context[: max(sizes)])
    best = {n: float("inf") for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            llm.n_tokens = len(context)  # eval drops the cache past n_tokens first
            start = time.perf_counter()
            llm.eval(tokens[:n])
            best[n] = min(best[n], time.perf_counter() - start)
    return best


def logits(llm, tokens: Sequence[int]) -> np.ndarray:
    """(len(tokens), V) logits of a ``logits_all`` engine over ``tokens`` from an empty cache."""
    llm.reset()
    llm.eval(list(tokens))
    return np.array(llm.scores[: len(tokens)], dtype=np.float64)


def smollm2_f16() -> pathlib.Path:
    """The real LLM's GGUF with every quantized tensor dequantized to float16 -- the weights the
    native f16 engine reads (Q4_1 -> float32 -> float16, rounded to nearest, as ``models.gguf_load``
    and ``engines.llama`` do) -- written by llama.cpp's own ``llama_model_quantize`` into the
    course's cache folder once, atomically, keyed by the shipped file's sha256 and checked against
    the sha256 recorded beside it when read (a truncated or stale file is rebuilt)."""
    from lessonlib.jsonio import write_atomic
    from lessonlib.models import gguf_load

    lib, source = llama_cpp(), gguf_load.gguf_path()
    key = gguf_load.file_sha256(source)[:16]
    folder = gguf_load.cache_dir()
    path, sidecar = folder / f"smollm2-f16-{key}.gguf", folder / f"smollm2-f16-{key}.sha256"
    if path.is_file() and sidecar.is_file() and sidecar.read_text().strip() == gguf_load.file_sha256(path):
        return path
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}")
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = lib.LLAMA_FTYPE_MOSTLY_F16, True  # Q4_1 -> float32 -> float16
    params.nthread = 1
    try:
        if lib.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not convert {source} to float16")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    write_atomic(sidecar, gguf_load.file_sha256(path) + "\n")
    return path
