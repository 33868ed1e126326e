"""Every check passes the reference, falls back to it for a stub, and fails plausible wrong answers."""
import numpy as np
import pytest

from lessonlib import checks, sampling, speculative, theory

REFERENCES = {
    "1a": sampling.residual,
    "1b": speculative.verify_chain,
    "1c": speculative.verify_greedy,
    "2a": theory.expected_tokens_per_verify,
    "2b": theory.wall_time_per_token,
    "2c": theory.expected_speedup,
    "2d": theory.optimal_k,
}


def check_for(exercise):
    return getattr(checks, f"exercise_{exercise}")


@pytest.mark.parametrize("exercise", REFERENCES)
def test_reference_passes_and_is_returned(exercise, capsys):
    assert check_for(exercise)(REFERENCES[exercise]) is REFERENCES[exercise]
    assert capsys.readouterr().out.startswith(f"✓ exercise {exercise}:")


@pytest.mark.parametrize("exercise", REFERENCES)
def test_stub_says_not_implemented_and_returns_the_reference(exercise, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"exercise {exercise}: to do")

    assert check_for(exercise)(stub) is REFERENCES[exercise]
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "using the reference" in out


def test_a_non_function_is_a_type_error():
    with pytest.raises(TypeError, match="pass the function itself"):
        checks.exercise_1a(np.array([0.5, 0.5]))


# ----------------------------------------------------------------------------- wrong answers


def _norm(x):
    return x / x.sum()


def residual_unnormalised(p, q):
    return np.maximum(p - q, 0)


def residual_sign_swapped(p, q):
    r = np.maximum(q - p, 0)
    return r / r.sum() if r.sum() > 0 else p


def residual_abs(p, q):
    return _norm(np.abs(p - q))


def residual_no_zero_mass_guard(p, q):
    r = np.maximum(p - q, 0)
    with np.errstate(invalid="ignore"):
        return r / r.sum()


def residual_in_place(p, q):
    p -= q
    np.maximum(p, 0, out=p)
    return p / p.sum() if p.sum() > 0 else p + q


def residual_of_the_overlap(p, q):
    return _norm(np.minimum(p, q))


def _sample(dist, rng):
    return int(rng.choice(len(dist), p=dist))


def chain_always_accept(p_rows, q_rows, draft, rng):
    return [int(x) for x in draft] + [_sample(p_rows[len(draft)], rng)]


def _chain(name, accept_prob, correction, bonus_row=lambda K: K):
    """A verify_chain with one part swapped out: ``correction(p, q, x)`` is the law drawn from at
    a rejection of x; ``bonus_row(K)`` the row of the bonus token (None: no bonus)."""
    def verify(p_rows, q_rows, draft, rng):
        out = []
        for j, x in enumerate(draft):
            if rng.random() >= accept_prob(p_rows[j], q_rows[j], x):
                return out + [_sample(correction(p_rows[j], q_rows[j], x), rng)]
            out.append(int(x))
        row = bonus_row(len(draft))
        return out if row is None else out + [_sample(p_rows[row], rng)]
    verify.__name__ = name
    return verify


def ratio(p, q, x):
    return p[x] / q[x]


def residual(p, q, x):
    return sampling.residual(p, q)


def scalar_q_residual(p, q, x):
    """The seed text's bug: subtract the scalar q(x) from the whole of p."""
    r = np.maximum(p - q[x], 0)
    return _norm(r) if r.sum() > 0 else p


chain_scalar_q = _chain("chain_scalar_q", ratio, scalar_q_residual)
chain_inverted_ratio = _chain("chain_inverted_ratio", lambda p, q, x: q[x] / p[x] if p[x] > 0 else 0.0, residual)
chain_correction_from_p = _chain("chain_correction_from_p", ratio, lambda p, q, x: p)
chain_bonus_from_wrong_row = _chain("chain_bonus_from_wrong_row", ratio, residual, bonus_row=lambda K: K - 1)
chain_no_bonus = _chain("chain_no_bonus", ratio, residual, bonus_row=lambda K: None)


def chain_keeps_going_after_rejection(p_rows, q_rows, draft, rng):
    out = []
    for j, x in enumerate(draft):
        if rng.random() < p_rows[j][x] / q_rows[j][x]:
            out.append(int(x))
        else:
            out.append(_sample(sampling.residual(p_rows[j], q_rows[j]), rng))
    return out + [_sample(p_rows[len(draft)], rng)]


def _greedy(name, bonus_row):
    """A verify_greedy that stops at the first mismatch with the target's argmax there, and
    after K matches adds the argmax of row ``bonus_row(K)`` (None: no bonus)."""
    def verify(p_rows, draft):
        best = np.argmax(p_rows, axis=-1)
        for j, x in enumerate(draft):
            if x != best[j]:
                return [int(t) for t in draft[:j]] + [int(best[j])]
        row = bonus_row(len(draft))
        return [int(t) for t in draft] + ([] if row is None else [int(best[row])])
    verify.__name__ = name
    return verify


greedy_no_bonus = _greedy("greedy_no_bonus", lambda K: None)
greedy_bonus_off_by_one = _greedy("greedy_bonus_off_by_one", lambda K: K - 1)


def greedy_emits_draft_at_mismatch(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    out = []
    for j, x in enumerate(draft):
        out.append(int(x))
        if x != best[j]:
            return out
    return out + [int(best[len(draft)])]


def greedy_skips_mismatch(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    return [int(x) for x, b in zip(draft, best) if x == b] + [int(best[len(draft)])]


def tokens_off_by_one(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    return sum(alpha ** j for j in range(k))


def tokens_closed_form_without_alpha_one(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_linear(alpha, k):
    return 1 + k * np.asarray(alpha, dtype=float)


def tokens_scalar_only(alpha, k):
    if alpha == 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_infinite_k(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(alpha < 1, 1 / np.where(alpha < 1, 1 - alpha, 1), k + 1.0)


E = theory.expected_tokens_per_verify


def wall_ignores_c(a, k, c):
    return 1 / E(a, k)


def wall_k_plus_one_drafts(a, k, c):
    return ((k + 1) * c + 1) / E(a, k)


def wall_inverted(a, k, c):
    return E(a, k) / (k * c + 1)


def speedup_ignores_c(a, k, c):
    return E(a, k)


def speedup_one_draft_cost(a, k, c):
    return E(a, k) / (1 + c)


def speedup_subtracts_c(a, k, c):
    return E(a, k) * (1 - k * c) if k * c < 1 else 0.0


def speedup_off_by_one(a, k, c):
    return E(a, k - 1) / (k * c + 1) if k > 1 else 1 / (c + 1)


def optimal_k_zero_based(alpha, c, k_max=32):
    return int(np.argmax([theory.expected_speedup(alpha, k, c) for k in range(1, k_max + 1)]))


def optimal_k_of_tokens(alpha, c, k_max=32):
    return max(range(1, k_max + 1), key=lambda k: theory.expected_tokens_per_verify(alpha, k))


def optimal_k_ignores_k_max(alpha, c, k_max=32):
    return max(range(1, 33), key=lambda k: theory.expected_speedup(alpha, k, c))


def optimal_k_returns_speedup(alpha, c, k_max=32):
    return max(theory.expected_speedup(alpha, k, c) for k in range(1, k_max + 1))


def optimal_k_ignores_c(alpha, c, k_max=32):
    return max(range(1, k_max + 1), key=lambda k: theory.expected_speedup(alpha, k, 0.0))


WRONG = {
    "1a": [residual_unnormalised, residual_sign_swapped, residual_abs, residual_no_zero_mass_guard,
           residual_in_place, residual_of_the_overlap],
    "1b": [chain_scalar_q, chain_always_accept, chain_inverted_ratio, chain_correction_from_p,
           chain_bonus_from_wrong_row, chain_no_bonus, chain_keeps_going_after_rejection],
    "1c": [greedy_no_bonus, greedy_emits_draft_at_mismatch, greedy_bonus_off_by_one, greedy_skips_mismatch],
    "2a": [tokens_off_by_one, tokens_closed_form_without_alpha_one, tokens_linear, tokens_scalar_only, tokens_infinite_k],
    "2b": [wall_ignores_c, wall_k_plus_one_drafts, wall_inverted],
    "2c": [speedup_ignores_c, speedup_one_draft_cost, speedup_subtracts_c, speedup_off_by_one],
    "2d": [optimal_k_zero_based, optimal_k_of_tokens, optimal_k_ignores_k_max, optimal_k_returns_speedup,
           optimal_k_ignores_c],
}
CASES = [(ex, fn) for ex, fns in WRONG.items() for fn in fns]


@pytest.mark.parametrize("exercise, wrong", CASES, ids=[f"{ex}-{fn.__name__}" for ex, fn in CASES])
def test_wrong_implementation_fails_with_a_readable_message(exercise, wrong, capsys):
    with pytest.raises(checks.CheckFailed) as err:
        check_for(exercise)(wrong)
    message = str(err.value)
    assert message.startswith(f"✗ exercise {exercise}, case ")
    assert "✓" not in capsys.readouterr().out


def test_failure_message_shows_expected_and_got():
    with pytest.raises(checks.CheckFailed) as err:
        checks.exercise_2a(tokens_off_by_one)
    message = str(err.value)
    assert "alpha 0.8, K 4" in message and "expected: 3.3616" in message and "got:      2.952" in message
    assert "one power short" in message


def test_student_exception_names_the_case():
    def crashes(p, q):
        raise KeyError("oops")

    with pytest.raises(checks.CheckFailed, match="raised KeyError") as err:
        checks.exercise_1a(crashes)
    assert isinstance(err.value.__cause__, KeyError)


# ----------------------------------------------------------------------------- the statistical test itself


def test_chain_length_law_sums_to_one_and_matches_enumeration():
    law = checks.chain_length_probs(checks.CHAIN_P, checks.CHAIN_Q)
    assert law.sum() == pytest.approx(1.0, abs=1e-15)
    accepted, _ = speculative.exact_round_distribution(checks.CHAIN_P, checks.CHAIN_Q)
    alphas = accepted.sum(axis=1)  # P(accept at j | reached j)
    assert law == pytest.approx([1 - alphas[0], alphas[0] * (1 - alphas[1]), alphas[0] * alphas[1]], abs=1e-15)


@pytest.mark.parametrize("name", list(checks.NEGATIVE_CONTROLS))
def test_negative_controls_fail_the_statistical_test(name):
    with pytest.raises(checks.CheckFailed):
        checks.chain_statistics(checks.NEGATIVE_CONTROLS[name])


def test_statistical_test_passes_the_reference_on_other_seeds():
    # each seed is a fresh draw; all four tests at level 1e-4 -> P(any failure) < 4e-4 per seed
    for seed in (10, 11, 12):
        p_values = checks.chain_statistics(speculative.verify_chain, seed=seed)
        assert min(p_values.values()) >= checks.CHAIN_LEVEL
