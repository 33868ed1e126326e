"""torch models, written to be read: the tiny GPT (``gpt``), checkpoints, the EAGLE,
Medusa and MTP heads (``heads``), the corpora and tokenizer (``data``) and training
(``loop``, ``provenance``, ``train``, ``train_heads``, ``distill``).

The names most notebooks need are re-exported here: ``models.load("target")`` is the readable
model; the fast paths that decode with the same weights are engines (``lessonlib.engines``).
Importing this package applies the CPU thread policy (``lessonlib.threads``: one thread unless
``LESSONLIB_THREADS`` says otherwise), so every notebook and benchmark runs under it.
"""
from lessonlib import threads as _threads

# the package's API, re-exported (noqa: F401): notebooks, benchmarks and tests use these names
from lessonlib.models.checkpoints import (  # noqa: F401
    CHECKPOINTS,
    STORED_DTYPE,
    default_device,
    load,
    load_state,
    read_meta,
    round_trip,
    save,
    scaled_name,
)
from lessonlib.models.gpt import GPT, Block, GPTConfig, KVCache, config_dict, prefix_mask  # noqa: F401

_threads.apply()
