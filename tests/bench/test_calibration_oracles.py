"""bench calibration against a case computed by hand (issue 54, item 7): the reliability table
reads the *draft's* top token, q(x) = 1 falls in the last bin, and Medusa's first head is read
at the position it predicts."""
import numpy as np
import pytest

from lessonlib.bench import calibration


def hand_case():
    """Three positions, V = 3, as probabilities (softmax(log p) = p). At position 0 the draft's
    top token (2, q .85) is not the target's (0, p .6): read on the target's top token the table
    would say q .05, p .6. At position 1 the draft is certain (q(x) = 1 exactly)."""
    p = np.array([[0.6, 0.2, 0.2], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    q = np.array([[0.05, 0.1, 0.85], [1.0, 0.0, 0.0], [0.3, 0.25, 0.45]])
    with np.errstate(divide="ignore"):
        return np.log(p), np.maximum(np.log(q), -1e4)  # exp(-1e4) is 0 in float64: q(x) = 1 exactly


def test_measure_against_the_hand_computed_table():
    r = calibration.measure(*hand_case())
    table = {(round(b["q_from"], 1), round(b["q_to"], 1)): (b["count"], b["mean_q"], b["mean_p"])
             for b in r["reliability"]}
    assert table.keys() == {(0.4, 0.5), (0.8, 0.9), (0.9, 1.0)}  # q(x) = 1 is in the last bin, not past it
    assert table[(0.4, 0.5)] == (1, pytest.approx(0.45), pytest.approx(0.8))
    assert table[(0.8, 0.9)] == (1, pytest.approx(0.85), pytest.approx(0.2))  # the draft's top token, p(2) = .2
    assert table[(0.9, 1.0)] == (1, pytest.approx(1.0), pytest.approx(0.5))
    assert r["calibration_error"] == pytest.approx((0.35 + 0.65 + 0.5) / 3)
    assert r["overconfidence"] == pytest.approx((0.65 + 0.5 - 0.35) / 3)
    # alpha at T = 1: sum_x min(p, q) per position (.35, .5, .65); at T = 0: argmax agreement (no, yes, yes)
    assert r["alpha"]["1"] == pytest.approx(0.5) and r["alpha"]["0"] == pytest.approx(2 / 3)
    assert r["positions"] == 3


def test_medusa_is_read_at_the_position_its_first_head_predicts(monkeypatch):
    """Head 1 at position s predicts token s + 2, the target's row at s + 1. An oracle head that
    outputs exactly the target's row at s + 1 must pair with the target's rows at agreement 1
    (a pairing one position off would agree on a fraction of positions)."""
    import torch

    class Oracle:  # head(target, h) -> (heads, B, T, V): head 0 at s is the target's logits at s + 1
        def __call__(self, target, h):
            logits = target.lm_head(h)  # (B, T, V): the target's own rows (lm_head applies ln_f)
            return torch.cat([logits[:, 1:], torch.zeros_like(logits[:, :1])], 1)[None]

    def load_head(name, target, directory):
        if name != "medusa":
            raise FileNotFoundError(name)  # skipped by pairs, as a missing checkpoint
        return Oracle()

    monkeypatch.setattr(calibration, "load_head", load_head)
    p, q = calibration.pairs(n_windows=1)["Medusa (head 1)"]
    assert p.shape == q.shape
    assert calibration.measure(p, q)["alpha"]["0"] == 1.0
    assert calibration.measure(p[1:], q[:-1])["alpha"]["0"] < 0.5  # the control: one position off
