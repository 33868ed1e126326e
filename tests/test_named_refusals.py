"""Bad input is refused by name (issue 54, item 5): one test per class the second probe found
silent or unclear, each with a control that the valid input still works."""
from __future__ import annotations

import numpy as np
import pytest

from lessonlib import threads
from lessonlib.core import sampling, tree, tree_sampled
from lessonlib.core.tree_sampled import SampledRule, draft_sampled, draft_sampled_dynamic, verify_tree_sampled
from lessonlib.decoding.decode import next_token
from lessonlib.decoding.round import Sampling
from lessonlib.models import checkpoints

V = 4
Q = np.array([0.4, 0.3, 0.2, 0.1])


def _expand(parents, tokens, nodes):  # every node: the same draft law
    return np.log(np.tile(Q, (len(nodes), 1)))


def _probs(logq):
    return np.exp(logq)


# --- core.tree_sampled ------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["no", 0, 1, None, np.array([True])])
def test_replacement_must_be_a_bool_everywhere(bad):
    rng = np.random.default_rng(0)
    for call in (lambda: draft_sampled(_expand, _probs, rng, (2,), replacement=bad),
                 lambda: draft_sampled_dynamic(_expand, _probs, rng, 2, 2, 4, replacement=bad),
                 lambda: SampledRule((2,), replacement=bad),
                 lambda: verify_tree_sampled([-1], [0], np.tile(Q, (2, 1)), Q[None], rng, replacement=bad)):
        with pytest.raises(ValueError, match="replacement must be True or False"):
            call()
    assert len(draft_sampled(_expand, _probs, rng, (2,), replacement=False)[0]) == 2  # control


def test_siblings_must_share_one_q_row_and_not_repeat_without_replacement():
    rng = np.random.default_rng(0)
    p = np.tile(Q, (3, 1))
    other = np.array([0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="q_rows: the children of node -1 carry different q rows"):
        verify_tree_sampled([-1, -1], [0, 1], p, np.stack([Q, other]), rng)
    with pytest.raises(ValueError, match="tokens: node -1 has a token twice"):
        verify_tree_sampled([-1, -1], [0, 0], p, np.stack([Q, Q]), rng, replacement=False)
    verify_tree_sampled([-1, -1], [0, 0], p, np.stack([Q, Q]), rng, replacement=True)  # with replacement: fine


@pytest.mark.parametrize("probs, named", [(lambda logq: logq, "probability rows"),  # log-probabilities
                                          (lambda logq: np.full_like(logq, np.nan), "finite"),
                                          (lambda logq: np.exp(logq) / 2, "sum to 1|probability rows")])
def test_a_probs_that_returns_no_probabilities_is_refused(probs, named):
    rng = np.random.default_rng(0)
    for draw in (lambda: draft_sampled(_expand, probs, rng, (2, 1)),
                 lambda: draft_sampled_dynamic(_expand, probs, rng, 2, 2, 4)):
        with pytest.raises(ValueError, match=named):
            draw()


def test_rng_none_is_a_named_refusal():
    for draw in (lambda: draft_sampled(_expand, _probs, None, (2,)),
                 lambda: draft_sampled_dynamic(_expand, _probs, None, 2, 2, 4)):
        with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
            draw()


@pytest.mark.parametrize("kwargs, named", [({"branching": (0,)}, "branching"), ({"branching": (-1, 2)}, "branching"),
                                           ({"branching": (1.5,)}, "branching"),
                                           ({"dynamic": (2, 2)}, "dynamic must be"),
                                           ({"dynamic": (2, 0, 4)}, "top_k")])
def test_a_sampled_rule_is_refused_when_built(kwargs, named):
    with pytest.raises(ValueError, match=named):
        SampledRule(**kwargs)
    assert SampledRule(dynamic=(2, 2, 4)).dynamic == (2, 2, 4)  # control


# --- NaN -------------------------------------------------------------------------------------

def test_nan_logits_at_t0_are_refused_not_token_0():
    row = np.array([np.nan, 1.0, 3.0, 2.0])
    for temperature in (0.0, Sampling(0.0), Sampling(0.0, top_k=2)):
        with pytest.raises(ValueError, match="NaN"):
            next_token(row, temperature, None)
    assert next_token(np.array([0.0, 1.0, 3.0, 2.0]), 0.0, None) == 2  # control


@pytest.mark.parametrize("draft", [lambda e: tree.draft_topk(e, (2, 2)), lambda e: tree.draft_dynamic(e, 2, 2, 4)])
def test_nan_draft_log_probs_are_refused(draft):
    def nan_expand(parents, tokens, nodes):
        out = _expand(parents, tokens, nodes)
        out[:, 1] = np.nan
        return out

    with pytest.raises(ValueError, match="NaN"):
        draft(nan_expand)
    assert len(draft(_expand)[0]) in (4, 6)  # control: 2 + 2 x 2 static nodes, 4 dynamic ones


def test_process_takes_an_integer_valued_float_top_k():
    logits = np.log(Q)
    assert np.array_equal(sampling.process(logits, 1.0, top_k=2.0), sampling.process(logits, 1.0, top_k=2))
    with pytest.raises(ValueError, match="top_k must be an integer"):
        sampling.process(logits, 1.0, top_k=2.5)


# --- names and folders -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../assets/target", "a/b", "..", ".hidden", "", "x\\y", None, "/abs"])
def test_a_checkpoint_name_cannot_leave_its_folder(name, tmp_path):
    with pytest.raises(ValueError, match="checkpoint name"):
        checkpoints.load(name, "cpu", directory=tmp_path)
    with pytest.raises(ValueError, match="checkpoint name"):
        checkpoints.checkpoint_paths(name, tmp_path)
    assert checkpoints.checkpoint_paths("draft-kl.v2", tmp_path)[0] == tmp_path / "draft-kl.v2.safetensors"


def test_gguf_export_refuses_an_escaping_name_and_follows_lessonlib_outputs(tmp_path, monkeypatch, capsys):
    from lessonlib import cli
    from lessonlib.models import gguf_export

    def refused(argv):
        try:
            code = cli.run(gguf_export.main, argv, prog="gguf_export")
        except SystemExit as stop:
            code = stop.code
        return code, capsys.readouterr().err

    code, err = refused(["../assets/target", "--out", str(tmp_path / "d")])
    assert code == 2 and "NAME" in err and "../assets/target" in err
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path / "file"))
    code, err = refused(["target"])
    assert code == 2 and "LESSONLIB_OUTPUTS" in err


def test_lessonlib_threads_has_a_sane_maximum(monkeypatch):
    monkeypatch.setenv("LESSONLIB_THREADS", "99999")
    with pytest.raises(ValueError, match="LESSONLIB_THREADS must be an integer from 0"):
        threads.policy()
    monkeypatch.setenv("LESSONLIB_THREADS", str(threads.maximum()))
    assert threads.policy() == threads.maximum() <= 1024


def test_tree_sampled_module_exports_the_check():
    assert tree_sampled.check_replacement(np.bool_(True)) is True
