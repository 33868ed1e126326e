"""The checks cannot be fooled or broken by a student's code: they hand over copies and report an
in-place change by name (and stay correct afterwards), stop a call that hangs or a check that runs
too long with a clear ✗, show a student's exception as one message, and accept correct answers
written in other styles (float32, lists, numpy scalars, another tie reading, another solver)."""
import signal
import threading
import time

import numpy as np
import pytest

from lessonlib.core import sampling, theory, tree
from lessonlib.course import checks
from lessonlib.course.checks import framework, sandbox, wrong


@pytest.fixture
def tiny_limits(monkeypatch):
    monkeypatch.setattr(framework.LIMITS, "per_call_s", 0.2)
    monkeypatch.setattr(framework.LIMITS, "per_check_s", 0.6)


def passes(part, fn, capsys) -> str:
    assert checks.EXERCISES[part](fn) is fn
    out = capsys.readouterr().out
    assert out.startswith(f"✓ exercise {part}:"), out
    return out


def fails(part, fn, *pieces):
    with pytest.raises(checks.CheckFailed) as err:
        checks.EXERCISES[part](fn)
    message = str(err.value)
    assert message.startswith(f"✗ exercise {part}, case "), message
    for piece in pieces:
        assert piece in message, message
    return message


# ----------------------------------------------------------------------------- the checks own their data

def residual_ok(p, q):
    r = np.maximum(p - q, 0)
    return r / r.sum() if r.sum() > 0 else np.array(p)


def greedy_ok(p_rows, draft):
    best = np.argmax(p_rows, axis=-1)
    for j, x in enumerate(draft):
        if x != best[j]:
            return [int(t) for t in draft[:j]] + [int(best[j])]
    return [int(t) for t in draft] + [int(best[len(draft)])]


def correct_answer(part):
    from lessonlib.decoding import fallback

    return {"1a": residual_ok, "1c": greedy_ok, "4a": lambda parents: tree.tree_attention_mask(parents),
            "5a": lambda t, a, c, k=None: fallback.breakeven_temperature(t, a, c, k),
            "5c": lambda trace, b: fallback.throughput_by_phase(trace, b)}[part]


MUTATING = [w for w in wrong.CATALOGUE if "in place" in w.hint and w.exercise != "1b"]


@pytest.mark.parametrize("entry", MUTATING, ids=[f"{w.exercise}-{w.name}" for w in MUTATING])
def test_an_in_place_change_is_named_and_a_later_correct_answer_still_passes(entry, capsys):
    fails(entry.exercise, entry.fn, entry.hint, "work on a copy")
    passes(entry.exercise, correct_answer(entry.exercise), capsys)  # nothing the check keeps was corrupted


def test_a_verifier_that_writes_into_its_inputs_cannot_touch_the_shared_tables():
    before = checks.CHAIN_P.copy(), checks.CHAIN_Q.copy()
    for fn in (wrong.ex1.chain_residual_in_place, wrong.ex1.chain_correction_into_draft):
        fails("1b", fn, "in place")
    assert np.array_equal(checks.CHAIN_P, before[0]) and np.array_equal(checks.CHAIN_Q, before[1])
    assert not checks.CHAIN_P.flags.writeable  # a notebook cell cannot write into them either


def test_the_train_step_check_leaves_the_global_torch_rng_alone():
    import torch

    state = torch.random.get_rng_state()

    def stub(model, optimizer, x, y, teacher=None, kind="ce"):
        raise NotImplementedError

    checks.exercise_3c(stub)
    assert torch.equal(torch.random.get_rng_state(), state)


# ----------------------------------------------------------------------------- time limits

def spins(*args, **kwargs):
    while True:
        pass


def sleeps_and_swallows(*args, **kwargs):
    while True:
        try:
            time.sleep(10)
        except Exception:  # a student's catch-all cannot swallow the time limit
            pass


def slow_greedy(p_rows, draft):
    time.sleep(0.005)  # fine once, too slow for the 305 calls of the check
    return greedy_ok(p_rows, draft)


@pytest.mark.parametrize("part, fn", [("1a", spins), ("2a", sleeps_and_swallows), ("4c", spins)])
def test_a_call_that_never_returns_is_stopped_with_a_clear_message(part, fn, tiny_limits):
    start = time.monotonic()
    fails(part, fn, "did not return within 0.2 s", "loop that never ends")
    assert time.monotonic() - start < 2


def test_a_check_whose_calls_take_too_long_in_total_is_stopped(tiny_limits):
    start = time.monotonic()
    fails("1c", slow_greedy, "used up the check's time limit of 0.6 s")
    assert time.monotonic() - start < 2


def test_the_time_limit_also_works_off_the_main_thread(tiny_limits):
    caught = []
    worker = threading.Thread(target=lambda: caught.append(pytest.raises(checks.CheckFailed, checks.exercise_1a,
                                                                         spins)))
    worker.start()
    worker.join(5)
    assert not worker.is_alive() and "did not return within" in str(caught[0].value)


@pytest.fixture
def own_alarm():
    """SIGALRM to a handler that records its calls; pytest-timeout's alarm is put back afterwards."""
    fired: list = []
    outer_delay, _ = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    yield fired
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
    if outer_delay:
        signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - started), 1.0))


def test_an_outer_alarm_that_fires_during_a_call_does_not_cut_it_short(own_alarm):
    signal.setitimer(signal.ITIMER_REAL, 0.05)  # in place of pytest-timeout's (put back by the fixture)
    assert sandbox.limited(lambda: time.sleep(0.2) or 7, seconds=1.0) == 7
    assert own_alarm == [True] and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_check_leaves_the_alarm_as_it_found_it(tiny_limits, own_alarm):
    handler, (before, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    fails("1a", spins, "did not return within")
    after, _ = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's alarm (if any) still runs, not ours
    assert signal.getsignal(signal.SIGALRM) is handler and (0 < after <= before - 0.2 if before else after == 0)


def test_an_outer_alarm_survives_a_check_and_still_fires(tiny_limits, own_alarm):
    signal.setitimer(signal.ITIMER_REAL, 0.6)
    fails("1a", spins, "did not return within")
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    assert 0 < remaining < 0.6
    time.sleep(remaining + 0.2)
    assert own_alarm == [True]


# ----------------------------------------------------------------------------- a student's exception

def test_a_students_exception_is_one_message_with_its_line():
    def broken(p, q):
        return p[len(p) + 3]

    message = fails("1a", broken, "your function raised IndexError", "in broken, line ", "return p[len(p) + 3]")
    with pytest.raises(checks.CheckFailed) as err:
        checks.exercise_1a(broken)
    assert err.value._render_traceback_() == message.splitlines()  # what Jupyter shows: the message alone
    assert err.value.__cause__ is None and err.value.__suppress_context__


# ----------------------------------------------------------------------------- correct answers in other styles

def tokens_float32(alpha, k):
    a = np.asarray(alpha, dtype=np.float32)
    return sum(a ** j for j in range(k + 1))


def alpha_as_list(target, draft, tokens, temperature):
    from lessonlib.models import distill

    mean, per_position = distill.measure_alpha(target, draft, tokens, temperature)
    return [np.float64(mean), per_position.tolist()]


def greedy_tree_depth_first(parents, tokens, target_argmax):
    """The deepest accepted path found first depth-first (children in index order)."""
    best: list = []

    def visit(node, path):
        nonlocal best
        for child in np.flatnonzero(np.asarray(parents) == node):
            if tokens[child] == target_argmax[node + 1]:
                if len(path) + 1 > len(best):
                    best = path + [int(child)]
                visit(child, path + [int(child)])

    visit(-1, [])
    last = best[-1] if best else -1
    return [best, [int(tokens[i]) for i in best] + [int(target_argmax[last + 1])]]


def breakeven_own_solver(t, a, c, k=None):
    """Bisection for the break-even α instead of theory.breakeven_alpha; np.interp for the crossing."""
    from lessonlib.decoding import fallback

    fallback.breakeven_temperature(t, a, c, k)  # the input checks
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if k is not None and theory.expected_speedup(mid, k, c) < 1 else (lo, mid)
    a_star = c if k is None else hi
    t, a = np.asarray(t, float), np.asarray(a, float)
    below = np.flatnonzero(a <= a_star)
    if not len(below):
        return np.inf
    i = below[0]
    return float(t[0]) if i == 0 else float(np.interp(a_star, [a[i], a[i - 1]], [t[i], t[i - 1]]))


def tokens_float32_returned_as_float64(alpha, k):
    return np.asarray(sum(np.asarray(alpha, np.float32) ** j for j in range(k + 1)), dtype=np.float64)


def residual_isclose_guard_as_list(p, q):
    r = np.clip(p - q, 0, None)
    return list(p) if np.isclose(r.sum(), 0) else list(r / r.sum())


def mask_list_of_lists(parents):
    rows = []
    for i in range(len(parents)):
        row, j = [0] * len(parents), i
        while j >= 0:
            row[j], j = 1, parents[j]
        rows.append(row)
    return rows


def residual_float32(p, q):
    r = np.maximum(np.asarray(p, np.float32) - np.asarray(q, np.float32), 0)
    return r / r.sum() if r.sum() > 0 else np.asarray(p, np.float32)


@pytest.mark.parametrize("part, fn", [("2a", tokens_float32), ("1a", residual_float32), ("3b", alpha_as_list),
                                      ("4c", greedy_tree_depth_first), ("5a", breakeven_own_solver),
                                      ("2d", lambda a, c, k_max=32: np.int64(theory.optimal_k(a, c, k_max))),
                                      ("2a", tokens_float32_returned_as_float64),
                                      ("1a", residual_isclose_guard_as_list), ("4a", mask_list_of_lists),
                                      ("4b", lambda expand, b: list(checks.ex4.draft_topk_tree_reference(expand, b)))],
                         ids=["2a-float32", "1a-float32", "3b-list-pair", "4c-depth-first-tie", "5a-own-solver",
                              "2d-numpy-int", "2a-float32-math-float64-result", "1a-isclose-guard-list",
                              "4a-list-of-int-lists", "4b-list-pair"])
def test_a_correct_answer_in_another_style_passes(part, fn, capsys):
    passes(part, fn, capsys)


def test_a_near_miss_prints_enough_digits_to_see_the_difference():
    message = fails("2a", lambda a, k: np.asarray(theory.expected_tokens_per_verify(a, k)) + 3e-5)
    expected, got = (line.split(":", 1)[1].strip() for line in message.splitlines()[1:3])
    assert expected != got and float(got) - float(expected) == pytest.approx(3e-5, rel=1e-3)


def test_a_tie_between_equal_paths_is_decided_the_same_both_ways_where_the_readings_agree():
    parents, tokens, argmax = np.array([-1, -1, 0, 1]), np.array([5, 5, 2, 2]), np.array([5, 2, 2, 6, 7])
    assert tree.verify_tree_greedy(parents, tokens, argmax)[0] == greedy_tree_depth_first(parents, tokens, argmax)[0]
    last = next(w for w in wrong.entries("4c") if w.name == "last path on a tie")
    fails("4c", last.fn, "on a tie")  # the last of the equal paths is wrong in every reading


def test_the_residual_boundaries_catch_what_one_case_would_miss():
    p = np.full(8, 1 / 8)
    assert np.allclose(sampling.residual(p, p), p)
    fails("1a", wrong.ex1.residual_one_minus_overlap, "p == q, p summing to 1 - ")
    fails("1a", wrong.ex1.residual_small_mass_is_zero, "residual mass")
