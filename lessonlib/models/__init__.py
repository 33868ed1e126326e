"""torch models: the tiny GPT (``gpt``), CPU packing (``packing``), checkpoints, the EAGLE,
Medusa and MTP heads (``heads``), the corpora and tokenizer (``data``) and training
(``train``, ``train_heads``, ``distill``).

The names most notebooks need are re-exported here: ``models.load("target", pack=True)``.
Importing this package applies the CPU thread policy (``lessonlib.threads``: one thread unless
``LESSONLIB_THREADS`` says otherwise), so every notebook and benchmark runs under it.
"""
from lessonlib import threads as _threads
from lessonlib.models.checkpoints import (CHECKPOINTS, STORED_DTYPE, checkpoint_paths, default_device, load,
                                          load_state, read_meta, rebuild_command, round_trip, save, scaled_name)
from lessonlib.models.gpt import GPT, Block, GPTConfig, KVCache, config_dict, prefix_mask
from lessonlib.models.packing import PACK_MIN_WEIGHTS, PackedLinear, can_pack, pack_linears

_threads.apply()
