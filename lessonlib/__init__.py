"""lessonlib: the library behind the speculative decoding and EAGLE course.

The distribution-level algorithms are numpy (``sampling``, ``speculative``, ``theory``,
``stats``, ``tree``); ``batched`` runs many verification rounds at once on numpy or torch,
on the backend chosen in ``backend``. The models (``models``, ``train``, ``decode``) need
torch and are imported explicitly: ``from lessonlib import models``.

Letters: p = target, q = draft, K = draft length, alpha = acceptance rate,
c = draft/target cost ratio, tau = tokens per target pass.
"""
from .backend import describe
from .batched import sample_rounds, simulate_rounds, verify_rounds
from .sampling import (GREEDY_TEMPERATURE, acceptance_rate, residual, sample, softmax,
                       top_k_filter, top_p_filter)
from .speculative import (autoregressive_decode, draft_with_alpha, exact_output_distribution,
                          exact_round_distribution, speculative_decode, verify_chain, verify_greedy)
from .stats import chi_square, tv_distance, tv_noise_floor, tv_null_quantile
from .theory import (breakeven_alpha, expected_speedup, expected_tokens_per_verify, optimal_k,
                     simulate_tokens_per_verify, wall_time_per_token)
from .tree import tree_attention_mask, tree_position_ids
