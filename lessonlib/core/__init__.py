"""numpy only (importing this never imports torch): sampling, the chain rule (``chain``,
``batched``), trees (``tree``), the speedup theory (``theory``), statistics (``stats``), toy
language models (``toy``), input validation (``validate``) and the array backend."""
from lessonlib.core.backend import describe
from lessonlib.core.batched import sample_rounds, simulate_rounds, verify_rounds
from lessonlib.core.chain import (
    draft_with_alpha,
    exact_output_distribution,
    exact_round_distribution,
    verify_chain,
    verify_greedy,
)
from lessonlib.core.sampling import (
    GREEDY_TEMPERATURE,
    acceptance_rate,
    residual,
    sample,
    softmax,
    top_k_filter,
    top_p_filter,
)
from lessonlib.core.stats import chi_square, tv_distance, tv_noise_floor, tv_null_quantile
from lessonlib.core.theory import (
    breakeven_alpha,
    expected_speedup,
    expected_tokens_per_verify,
    optimal_k,
    simulate_tokens_per_verify,
    wall_time_per_token,
)
from lessonlib.core.tree import tree_attention_mask, tree_position_ids

__all__ = [
    'GREEDY_TEMPERATURE', 'acceptance_rate', 'breakeven_alpha', 'chi_square', 'describe', 'draft_with_alpha',
    'exact_output_distribution', 'exact_round_distribution', 'expected_speedup', 'expected_tokens_per_verify',
    'optimal_k', 'residual', 'sample', 'sample_rounds', 'simulate_rounds', 'simulate_tokens_per_verify', 'softmax',
    'top_k_filter', 'top_p_filter', 'tree_attention_mask', 'tree_position_ids', 'tv_distance', 'tv_noise_floor',
    'tv_null_quantile', 'verify_chain', 'verify_greedy', 'verify_rounds', 'wall_time_per_token',
]
