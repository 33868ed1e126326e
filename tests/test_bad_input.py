"""Bad input at the library's boundaries and in the files it reads and writes (issue 29): a
ValueError naming the argument, the file and what to do; nothing silently clipped; a failed
write leaves the old file (or, for a checkpoint, the old pair or no pair). Tiny models only."""
from __future__ import annotations

import json
import os

import nbformat
import numpy as np
import pytest
import torch

from lessonlib import jsonio, paths
from lessonlib.bench import common, record
from lessonlib.core import theory
from lessonlib.course import translate
from lessonlib.course.skill import schema
from lessonlib.course.skill.recommend import recommend
from lessonlib.decoding import fallback, measures
from lessonlib.decoding.prompt_lookup import PromptLookupDrafter, lookup_generate
from lessonlib.models import GPT, GPTConfig, checkpoints


def tiny(seed=0, vocab=32, width=16, block=32):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=block, n_layer=1, n_head=2, n_embd=width)).eval()


LIBRARY = {  # the class of input, the call, what the message must name
    "config: width not divisible by heads": (lambda: GPTConfig(n_embd=10, n_head=3), "n_embd must be divisible"),
    "config: vocabulary 0": (lambda: GPTConfig(vocab_size=0), "vocab_size"),
    "config: -1 layers": (lambda: GPTConfig(n_layer=-1), "n_layer"),
    "config: bool heads": (lambda: GPTConfig(n_head=True, n_embd=4), "n_head"),
    "config: fractional width": (lambda: GPTConfig(n_embd=2.5), "n_embd"),
    "tau: negative emitted": (lambda: measures.tau(-3, 1), "emitted"),
    "tau: bool forwards": (lambda: measures.tau(3, True), "target_forwards"),
    "tau: fractional emitted": (lambda: measures.tau(2.5, 1), "emitted"),
    "alpha: NaN judged": (lambda: measures.alpha(1, float("nan")), "judged"),
    "summary: 2 values": (lambda: measures.summary([1.0, 2.0]), "at least 5"),
    "summary: inf": (lambda: measures.summary([1.0] * 4 + [float("inf")]), "finite"),
    "summary: text": (lambda: measures.summary(["a"] * 5), "values"),
    "summarise: 4 prompts": (lambda: measures.summarise([{"tau": 1.0}] * 4), "at least 5"),
    "theory: K 1e20": (lambda: theory.expected_tokens_per_verify(0.5, 1e20), "k must"),
    "theory: bool alpha": (lambda: theory.expected_tokens_per_verify(True, 3), "alpha"),
    "theory: text alpha": (lambda: theory.expected_speedup("0.5", 3, 0.1), "alpha"),
    "theory: text c": (lambda: theory.expected_speedup(0.5, 3, "x"), "c must"),
    "theory: huge k_max": (lambda: theory.optimal_k(0.5, 0.1, k_max=10**9), "k_max"),
    "theory: bool k_max": (lambda: theory.optimal_k(0.5, 0.1, k_max=True), "k_max"),
    "theory: huge simulation": (lambda: theory.simulate_tokens_per_verify(0.5, 10**6, 10**6,
                                                                          np.random.default_rng(0)), "n_rounds"),
    "theory: NaN speedup": (lambda: theory.alpha_for_speedup(float("nan"), 3, 0.1), "speedup"),
    "lookup: huge k": (lambda: PromptLookupDrafter(32, k=10**12), "k must"),
    "lookup: bool k": (lambda: PromptLookupDrafter(32, k=True), "k must"),
    "lookup: k past the context": (lambda: lookup_generate(tiny(), [1, 2, 3], 4, k=40), "k must"),
    "lookup: draft of another vocabulary": (lambda: lookup_generate(tiny(), [1, 2, 3], 4, draft=tiny(1, vocab=40)),
                                            "vocabulary"),
    "stream: prompt longer than the context": (lambda: fallback.ModelStream(tiny(), tiny(1), list(range(30)), 3, 0.0),
                                               "prompt_tokens must hold at most 29"),
    "stream: request longer than the context": (lambda: fallback.ModelStream(
        tiny(), tiny(1), [1], 3, 0.0, requests=[(4, list(range(30)))]), r"requests\[0\] prompt"),
    "stream: token outside the vocabulary": (lambda: fallback.ModelStream(tiny(), tiny(1), [1, 99], 3, 0.0),
                                             "prompt_tokens"),
    "stream: k past the context": (lambda: fallback.ModelStream(tiny(), tiny(1), [1], 31, 0.0), "k must"),
    "load: device gpu": (lambda: checkpoints.to_device(tiny(), "gpu"), "device"),
    "c: zero target step": (lambda: measures.cost_ratio(0.001, 0.0), "target_step_seconds"),
    "c: negative draft step": (lambda: measures.cost_ratio(-0.001, 0.01), "draft_step_seconds"),
    "speedup: NaN seconds": (lambda: measures.speedup(float("nan"), 0.01), "plain_seconds_per_token"),
    "forward bound: r 0": (lambda: measures.forward_bound(2.0, 3, 0.1, 0.0), "r must"),
    "skill: huge k_max": (lambda: recommend(0.5, 0.1, k_max=10**9), "k_max"),
    "skill: window 0": (lambda: recommend(0.5, 0.1, window=0), "window"),
    "skill: bool margin": (lambda: recommend(0.5, 0.1, margin=True), "margin"),
}


@pytest.mark.parametrize("name", list(LIBRARY))
def test_a_bad_argument_is_a_value_error_naming_it(name):
    call, message = LIBRARY[name]
    with pytest.raises(ValueError, match=message):
        call()


def test_a_prompt_that_fits_the_context_is_kept_whole():
    prompt = list(range(29))  # the context of 32 less a round's k = 3 drafts (the root sits at 28)
    stream = fallback.ModelStream(tiny(), tiny(1), prompt, 3, 0.0)
    assert stream.seq == prompt
    stream.speculate(0)  # the round fits without a refill: the prompt is still the sequence's start
    assert stream.seq[:29] == prompt


def test_an_empty_outputs_variable_is_an_error_not_the_current_folder(monkeypatch, tmp_path):
    for value in ("", "  "):
        monkeypatch.setenv("LESSONLIB_OUTPUTS", value)
        with pytest.raises(ValueError, match="LESSONLIB_OUTPUTS"):
            paths.outputs()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LESSONLIB_OUTPUTS", str(tmp_path / "file"))
    with pytest.raises(ValueError, match="folder"):
        paths.benchmarks()


# --- files: a failed write leaves what was there ---------------------------------------------

def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_failed_atomic_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    jsonio.write_atomic(path, "old\n")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        jsonio.write_atomic(path, "new\n")
    assert path.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_a_report_that_cannot_be_serialised_writes_neither_file(tmp_path):
    common.write_report("decode", {"ok": 1}, "old table\n", tmp_path)
    with pytest.raises(TypeError):
        common.write_report("decode", {"bad": object()}, "new table\n", tmp_path)
    kept = json.loads((tmp_path / "decode.json").read_text())
    assert kept["ok"] == 1 and "bad" not in kept  # the old report, with its run stamp
    assert (tmp_path / "decode.md").read_text() == "old table\n"


def test_a_failing_save_leaves_the_old_pair_or_no_pair(tmp_path, monkeypatch):
    old, new = tiny(0), tiny(1)
    checkpoints.save(old, "m", {"config": old.config.__dict__, "step": 1}, tmp_path)
    weights, meta = checkpoints.checkpoint_paths("m", tmp_path)
    before = weights.read_bytes(), meta.read_text()
    for bad_meta in ({"step": object()}, {"loss": float("nan")}, ["not", "a", "dict"]):  # fails before writing
        with pytest.raises(ValueError, match="meta"):
            checkpoints.save(new, "m", bad_meta, tmp_path)
        assert (weights.read_bytes(), meta.read_text()) == before
    with torch.no_grad():
        nan = tiny(2)
        next(nan.parameters())[0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        checkpoints.save(nan, "m", {"config": nan.config.__dict__}, tmp_path)
    assert (weights.read_bytes(), meta.read_text()) == before
    calls = []

    def replace_then_fail(src, dst):  # the weights are renamed into place, the metadata's rename fails
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        os.rename(src, dst)

    monkeypatch.setattr(os, "replace", replace_then_fail)
    with pytest.raises(OSError):
        checkpoints.save(new, "m", {"config": new.config.__dict__, "step": 2}, tmp_path)
    monkeypatch.undo()
    assert not meta.exists() and _leftovers(tmp_path) == []  # no pair: new weights never beside old metadata
    with pytest.raises(FileNotFoundError, match="rebuild it with"):
        checkpoints.load("m", "cpu", tmp_path)


def test_a_head_for_another_target_is_refused_naming_both_sides():
    target = tiny(0, width=16)
    good = {"kind": "eagle", "target": "target", "config": {**target.config.__dict__},
            "config_sha256": checkpoints.config_sha256(target.config.__dict__),
            "target_fingerprint": checkpoints.fingerprint(target)}
    assert checkpoints.check_beside(good, "eagle", target, ("eagle",)) == "eagle"
    with pytest.raises(ValueError, match="kind"):
        checkpoints.check_beside({k: v for k, v in good.items() if k != "kind"}, "eagle", target, ("eagle",))
    wide = {**good, "config": {**good["config"], "n_embd": 32}}
    wide["config_sha256"] = checkpoints.config_sha256(wide["config"])
    with pytest.raises(ValueError, match="width 32.*has 16"):
        checkpoints.check_beside(wide, "eagle", target, ("eagle",))
    target.checkpoint_name = "draft-kl"
    with pytest.raises(ValueError, match="trained for target 'target', not 'draft-kl'"):
        checkpoints.check_beside(good, "eagle", target, ("eagle",))


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "\x00\xff"])
def test_a_corrupt_record_names_the_file_and_the_rebuild_command(tmp_path, text):
    (tmp_path / "record.json").write_text(text, encoding="latin-1")
    with pytest.raises(ValueError, match=r"record\.json.*python -m lessonlib\.bench record"):
        record.load(tmp_path)


def test_a_benchmark_report_missing_fields_names_its_folder(tmp_path):
    (tmp_path / "tree.json").write_text('{"rows": []}')
    with pytest.raises(ValueError, match="lacks a field"):
        record.collect(tmp_path)


@pytest.mark.parametrize("text, message", [('{"temperatures": [0.0', "corrupt"), ("[]", "JSON object"),
                                           ('{"temperatures": [0, 1]}', "lack 'c'")])
def test_a_corrupt_measurements_file_names_the_file_and_the_notebook(tmp_path, text, message):
    path = tmp_path / "temperature.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        schema.load_measurements(path)
    assert str(path) in str(err.value) and "05_high_temperature" in str(err.value)


# --- translate build refuses a catalog it cannot use, before writing anything ---------------

def _course(root, catalog: str | None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Hello", id="c1"), nbformat.v4.new_markdown_cell("World", id="c2")]
    (root / "notebooks").mkdir()
    (root / "solutions").mkdir()
    nbformat.write(nb, root / "notebooks" / "00_x.ipynb")
    if catalog is not None:
        (root / "locale" / "fa").mkdir(parents=True)
        (root / "locale" / "fa" / "00_x.po").write_text(catalog, encoding="utf-8")


GOOD_PO = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
           'msgctxt "c1"\nmsgid "# Hello"\nmsgstr "# سلام"\n\nmsgctxt "c2"\nmsgid "World"\nmsgstr "جهان"\n')


@pytest.mark.parametrize("catalog, message", [
    ("", "does not cover"),  # empty
    (GOOD_PO[: GOOD_PO.index('msgctxt "c2"')], "does not cover"),  # truncated between entries
    (GOOD_PO[:-8], "does not parse"),  # truncated inside an entry
    (GOOD_PO.replace("msgstr \"جهان\"", "msgstrr \"جهان\""), "does not parse"),  # misspelt keyword
    (GOOD_PO.replace('msgctxt "c2"', 'msgctxt "c9"'), "does not cover"),  # misspelt cell id
])
def test_translate_build_refuses_a_catalog_it_cannot_use_and_writes_nothing(tmp_path, catalog, message):
    _course(tmp_path, catalog)
    with pytest.raises(ValueError, match=message):
        translate.main(["build", "--root", str(tmp_path)])
    assert not (tmp_path / "notebooks" / "fa").exists()


def test_translate_build_writes_from_a_good_catalog(tmp_path, capsys):
    _course(tmp_path, GOOD_PO)
    # a translation is used once approved against its English (the drift check: lessonlib.course.drift)
    assert translate.main(["approve", "00_x", "--root", str(tmp_path)]) == 0
    assert translate.main(["build", "--root", str(tmp_path)]) == 0
    assert "جهان" in (tmp_path / "notebooks" / "fa" / "00_x.ipynb").read_text(encoding="utf-8")
