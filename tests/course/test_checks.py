"""The exercise checks: each passes a correct answer, never awards ✓ to the library's reference,
falls back to it for a stub (also when the check cell is run again), and rejects every entry of
the catalogue of wrong implementations with a message that says what to fix."""
import functools
import re

import numpy as np
import pytest

from lessonlib.core import chain, sampling, theory, tree
from lessonlib.course import checks, gallery_detect
from lessonlib.course.checks import wrong


def references():
    """Part -> the library's implementation its check lends out for a stub."""
    from lessonlib.decoding import fallback
    from lessonlib.models import distill, train

    return {"1a": sampling.residual, "1b": chain.verify_chain, "1c": chain.verify_greedy, "1d": gallery_detect.detect,
            "2a": theory.expected_tokens_per_verify, "2b": theory.wall_time_per_token, "2c": theory.expected_speedup,
            "2d": theory.optimal_k, "3a": train.distillation_loss, "3b": distill.measure_alpha, "3c": train.train_step,
            "3d": checks.theory_best_loss, "4a": tree.tree_attention_mask, "4b": checks.ex4.draft_topk_tree_reference,
            "4c": tree.verify_tree_greedy, "4d": tree.verify_tree, "5a": fallback.breakeven_temperature,
            "5b": fallback.FallbackPolicy, "5c": fallback.throughput_by_phase}


PARTS = sorted(checks.EXERCISES)


def copy_of(reference):
    """The same answer under another identity: what a student's correct function looks like to a check."""
    if isinstance(reference, type):
        return type("StudentPolicy", (reference,), {})

    @functools.wraps(reference)
    def student(*args, **kwargs):
        return reference(*args, **kwargs)
    return student


def stub_for(part):
    if part == "5b":
        class Stub:
            def __init__(self, k, c, **settings):
                self.speculating = True

            def action(self):
                return "speculate"

            def record(self, accepted, drafted):
                raise NotImplementedError("exercise 5b: to do")

            def record_plain(self, n=1):
                pass
        return Stub

    def stub(*args, **kwargs):
        raise NotImplementedError(f"exercise {part}: to do")
    return stub


def test_every_part_has_a_check_and_a_reference():
    assert PARTS == sorted(references()) == [
        f"{n}{p}" for n, ps in [(1, "abcd"), (2, "abcd"), (3, "abcd"), (4, "abcd"), (5, "abc")] for p in ps]


@pytest.mark.parametrize("part", PARTS)
def test_a_correct_answer_passes_and_is_returned(part, capsys):
    answer = copy_of(references()[part])
    assert checks.EXERCISES[part](answer) is answer
    out = capsys.readouterr().out
    assert out.startswith(f"✓ exercise {part}:")
    for name in wrong.controls(part):  # the negative controls ran and were caught
        assert f"{name} (caught: case " in out
    if part == "1d":  # the detector's own false-alarm rate was measured, and every verdict says what it ran
        from lessonlib.course.checks import ex1_detect

        assert f"false alarms on the unseen exact samplers: 0 of {ex1_detect.FALSE_ALARM_RUNS} runs" in out
        assert "rounds run: 8014" in out and "unseen sampler 7" in out


@pytest.mark.parametrize("part", PARTS)
def test_the_reference_itself_never_gets_a_tick(part, capsys):
    reference = references()[part]
    assert checks.EXERCISES[part](reference) is reference
    out = capsys.readouterr().out
    assert "✓" not in out and "not implemented yet" in out and "still the library's reference" in out


@pytest.mark.parametrize("part", PARTS)
def test_a_stub_falls_back_and_running_the_check_cell_again_still_says_so(part, capsys):
    # the notebook does `name = checks.exercise_XY(name)`: the second run gets what the first returned
    name = checks.EXERCISES[part](stub_for(part))
    assert name is references()[part]
    first = capsys.readouterr().out
    assert "not implemented yet" in first and "using the reference" in first and "✓" not in first
    assert checks.EXERCISES[part](name) is name
    again = capsys.readouterr().out
    assert "not implemented yet" in again and "using the reference" in again and "✓" not in again


def test_a_non_function_is_a_type_error():
    with pytest.raises(TypeError, match="pass the function itself"):
        checks.exercise_1a(np.array([0.5, 0.5]))


# ----------------------------------------------------------------------------- the catalogue of wrong answers

CATALOGUE_IDS = [f"{w.exercise}-{w.name}" for w in wrong.CATALOGUE]


@pytest.mark.parametrize("entry", wrong.CATALOGUE, ids=CATALOGUE_IDS)
def test_every_wrong_implementation_is_rejected_with_its_hint(entry, capsys):
    with pytest.raises(checks.CheckFailed) as err:
        checks.EXERCISES[entry.exercise](entry.fn)
    message = str(err.value)
    assert message.startswith(f"✗ exercise {entry.exercise}, case ")
    assert entry.hint in message, message
    assert "✓" not in capsys.readouterr().out


def test_the_catalogue_covers_every_exercise_and_part():
    for exercise in "12345":
        assert len(wrong.entries(exercise)) >= 10, exercise
    for part in PARTS:
        assert wrong.entries(part), part
    assert len(set(CATALOGUE_IDS)) == len(CATALOGUE_IDS)
    assert all(w.hint and w.why for w in wrong.CATALOGUE)
    assert {w.exercise for w in wrong.CATALOGUE if w.control} >= {"1b", "3a", "3b", "3c", "4a", "4b", "4c", "4d",
                                                                   "5a", "5b", "5c"}


@pytest.mark.parametrize("part, name", [
    ("2d", "largest K among ties"), ("4b", "ties to the higher id"), ("5a", "strict <"), ("3c", "no zero_grad"),
    ("5b", "no hysteresis"), ("5b", "one probe decides"), ("5b", "the whole window judges"), ("5b", "never re-probes"),
    ("5b", "window kept at the switch-off"), ("5b", "window emptied at the switch-on"), ("1b", "one u per round"),
    ("1c", "compares with the next row"),
])
def test_each_stated_rule_has_a_wrong_implementation_that_breaks_it(part, name):
    assert name in [w.name for w in wrong.entries(part)]


def test_the_catalogue_renders_for_the_instructor_notes():
    text = wrong.markdown()
    assert text.count("\n") + 1 == len(wrong.CATALOGUE) + 2  # the score line, a blank line, the entries
    assert text.startswith(f"**Score: {len(wrong.CATALOGUE)} of {len(wrong.CATALOGUE)} wrong implementations")
    assert "- **1b** scalar-q residual: " in text


def test_the_wrong_policies_differ_from_a_correct_one_by_their_bug_only(capsys):
    assert checks.exercise_5b(wrong.ex5.Policy) is wrong.ex5.Policy  # the base they all override one step of
    assert capsys.readouterr().out.startswith("✓ exercise 5b:")


# ----------------------------------------------------------------------------- other correct answers pass


def tokens_np_where(alpha, k):
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(alpha == 1, k + 1.0, (1 - alpha ** (k + 1)) / (1 - alpha))  # 0-d array for a number


def tokens_numpy_scalar(alpha, k):
    return np.float64(sum(np.asarray(alpha, dtype=float) ** j for j in range(k + 1)))


def optimal_k_loop(alpha, c, k_max=32):
    best = 1
    for k in range(2, k_max + 1):
        if theory.expected_speedup(alpha, k, c) > theory.expected_speedup(alpha, best, c):
            best = k
    return best


def topk_argsort(expand, branching):
    parents, tokens, frontier = np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([-1])
    for k in branching:
        top = np.argsort(-expand(parents, tokens, frontier), axis=1, kind="stable")[:, :k]
        start = len(parents)
        parents, tokens = np.concatenate([parents, np.repeat(frontier, k)]), np.concatenate([tokens, top.ravel()])
        frontier = np.arange(start, len(parents))
    return parents, tokens


@pytest.mark.parametrize("part, answer", [("2a", tokens_np_where), ("2a", tokens_numpy_scalar),
                                          ("2d", optimal_k_loop), ("4b", topk_argsort)],
                         ids=["2a-np.where", "2a-numpy-scalar", "2d-strict-loop", "4b-argsort"])
def test_other_correct_answers_pass(part, answer, capsys):
    assert checks.EXERCISES[part](answer) is answer
    assert capsys.readouterr().out.startswith(f"✓ exercise {part}:")


# ----------------------------------------------------------------------------- messages


def test_failure_message_shows_expected_and_got():
    with pytest.raises(checks.CheckFailed) as err:
        checks.exercise_2a(wrong.entries("2a")[0].fn)  # one power short
    message = str(err.value)
    assert "alpha 0.8, K 4" in message and "expected: 3.3616" in message and "got:      2.952" in message
    assert "one power short" in message


def test_student_exception_names_the_case():
    def crashes(p, q):
        raise KeyError("oops")

    with pytest.raises(checks.CheckFailed, match="raised KeyError") as err:
        checks.exercise_1a(crashes)
    assert isinstance(err.value.student_error, KeyError)
    assert 'in crashes, line ' in str(err.value) and 'raise KeyError("oops")' in str(err.value)


def test_long_arrays_are_summarised_so_the_hint_stays_in_view():
    with pytest.raises(checks.CheckFailed) as err:
        checks.exercise_3b(wrong.ex3.alpha_tv_without_half)
    message = str(err.value)
    assert len(message) < 1000 and "..." in message and "first at index 0" in message
    assert message.splitlines()[-1].startswith("  hint: ")


def test_an_impossible_tree_output_is_named_by_its_tokens():
    def emits_nonsense(parents, tokens, p_rows, rng):
        return [], [3, 3, 3, 3]

    with pytest.raises(checks.CheckFailed, match=re.escape("emitted the tokens [3, 3, 3, 3] (5000 of 5000 rounds)")):
        checks.exercise_4d(emits_nonsense)


# ----------------------------------------------------------------------------- the statistical test itself


def test_chain_length_law_sums_to_one_and_matches_enumeration():
    law = checks.chain_length_probs(checks.CHAIN_P, checks.CHAIN_Q)
    assert law.sum() == pytest.approx(1.0, abs=1e-15)
    accepted, _ = chain.exact_round_distribution(checks.CHAIN_P, checks.CHAIN_Q)
    alphas = accepted.sum(axis=1)  # P(accept at j | reached j)
    assert law == pytest.approx([1 - alphas[0], alphas[0] * (1 - alphas[1]), alphas[0] * alphas[1]], abs=1e-15)


@pytest.mark.parametrize("name", list(checks.NEGATIVE_CONTROLS))
def test_negative_controls_fail_the_statistical_test(name):
    with pytest.raises(checks.CheckFailed):
        checks.chain_statistics(checks.NEGATIVE_CONTROLS[name])


def test_statistical_test_passes_the_reference_on_other_seeds():
    # each seed is a fresh draw; all four tests at level 1e-4 -> P(any failure) < 4e-4 per seed
    for seed in (10, 11):
        p_values = checks.chain_statistics(chain.verify_chain, seed=seed)
        assert min(p_values.values()) >= checks.CHAIN_LEVEL


def test_the_vectorised_scalar_q_bug_follows_its_exact_law_which_is_not_p():
    from lessonlib.core import stats

    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(8), size=2), rng.dirichlet(np.ones(8), size=1)
    law = wrong.scalar_q_first_token_law(p[0], q[0])
    first = wrong.first_tokens_scalar_q(p, q, 20000, np.random.default_rng(4))
    assert stats.chi_square(np.bincount(first, minlength=8), law)[1] > 1e-3
    assert np.abs(law - p[0]).sum() > 0.05


def test_instructor_notes_list_the_whole_catalogue():
    """solutions/README.md lists exactly the catalogue the checks use (regenerate it from
    ``wrong.markdown()`` when an entry is added)."""
    import pathlib

    from lessonlib.course.checks import wrong

    notes = (pathlib.Path(__file__).resolve().parents[2] / "solutions" / "README.md").read_text()
    listed = notes.split("<!-- BEGIN CATALOGUE -->\n")[1].split("\n<!-- END CATALOGUE -->")[0]
    assert listed == wrong.markdown().rstrip()
