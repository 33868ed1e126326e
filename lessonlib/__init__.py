"""lessonlib: the library behind the speculative decoding and EAGLE course.

Layers, each importing only the ones before it:

* ``core``     -- numpy only: sampling, the exact chain and tree rules, theory, statistics,
  toy models, validation (``import lessonlib.core`` never imports torch);
* ``models``   -- torch: the tiny GPT and its KV cache, CPU packing, checkpoints, heads,
  data, training;
* ``decoding`` -- real decoding loops (plain, chain, tree), the ``Drafter`` protocol, the
  fallback stream, the one clock (``timing``) and the one definition of every measured
  quantity (``measures``);
* ``bench``    -- ``python -m lessonlib.bench ...``;
* ``course``   -- exercise checks, the exercise generator, plots, widgets, the skill file.

Letters: p = target, q = draft, K = draft length, alpha = acceptance rate,
c = one draft step / one one-token target step, tau = tokens per target forward,
r(n) = a target forward over n tokens / a one-token step.
"""
from lessonlib.core import *  # noqa: F401,F403 (the numpy API at the top level, as before)
from lessonlib.decoding.reference import autoregressive_decode, speculative_decode  # noqa: F401
