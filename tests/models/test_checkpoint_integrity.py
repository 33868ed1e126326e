"""Checkpoints carry a checksum, a config hash and (heads, MTP modules) the fingerprint of the
target they were trained on (issue 54, item 6): a flipped byte, an edited ``n_head`` or a head
beside another target of the same shape is refused by name, each with its control."""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest
import torch

from lessonlib import models
from lessonlib.models import GPT, GPTConfig, checkpoints, heads, mtp, train, train_heads

CONFIG = GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=32)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def gpt(seed: int, config: GPTConfig = CONFIG) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def flip_a_weight_byte(path: pathlib.Path) -> None:
    """Flip the lowest bit of one float16 weight (past the safetensors header): the file stays
    readable and finite, only its bytes differ."""
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    data[header + (len(data) - header) // 2 & ~1] ^= 1  # the low byte of a float16: a mantissa bit
    path.write_bytes(bytes(data))


def test_save_records_the_checksum_and_config_hash_of_what_it_wrote(tmp_path):
    model = gpt(0)
    meta = checkpoints.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    weights, meta_path = checkpoints.checkpoint_paths("tiny", tmp_path)
    assert json.loads(meta_path.read_text()) == meta
    assert meta["sha256"] == checkpoints.sha256_file(weights) == checkpoints.fingerprint(model)
    assert meta["config_sha256"] == checkpoints.config_sha256(models.config_dict(model.config))
    assert checkpoints.fingerprint(gpt(1)) != meta["sha256"]  # other weights, same shapes: another fingerprint


def test_a_flipped_byte_is_refused_naming_the_file_and_the_rebuild_command(tmp_path):
    model = gpt(0)
    models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    models.load("tiny", "cpu", tmp_path)  # control: the untouched pair loads
    weights, _ = checkpoints.checkpoint_paths("tiny", tmp_path)
    flip_a_weight_byte(weights)
    from safetensors.torch import load_file

    assert all(bool(torch.isfinite(v.float()).all()) for v in load_file(str(weights)).values())  # still loadable
    with pytest.raises(ValueError, match=r"tiny\.safetensors is corrupt or was replaced.*"
                                         r"rebuild it with: python -m lessonlib\.models\.train tiny"):
        models.load("tiny", "cpu", tmp_path)


def test_metadata_without_a_checksum_is_refused(tmp_path):
    model = gpt(0)
    meta = models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    meta_path = checkpoints.checkpoint_paths("tiny", tmp_path)[1]
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    with pytest.raises(ValueError, match=r"records no sha256.*rebuild it with"):
        models.load("tiny", "cpu", tmp_path)


def test_an_edited_n_head_with_the_same_shapes_is_refused(tmp_path):
    """n_head 2 -> 4 keeps every weight's shape (32 = 2 x 16 = 4 x 8): it would load and split
    the width into other heads. The config hash sees it; the unedited config loads (control)."""
    model = gpt(0)
    meta = models.save(model, "tiny", {"config": models.config_dict(model.config)}, tmp_path)
    models.load("tiny", "cpu", tmp_path)
    meta_path = checkpoints.checkpoint_paths("tiny", tmp_path)[1]
    edited = {**meta, "config": {**meta["config"], "n_head": 4}}
    GPT(GPTConfig(**edited["config"])).load_state_dict(checkpoints.load_state("tiny", tmp_path))  # shapes agree
    meta_path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=r"not the one it was saved with \(its config_sha256 does not match\); "
                                         r"rebuild it with"):
        models.load("tiny", "cpu", tmp_path)


def save_head(target: GPT, directory: pathlib.Path, **extra) -> None:
    head = heads.build("eagle", target.config)
    models.save(head, "eagle", {"kind": "eagle", "config": models.config_dict(target.config), "n_heads": None,
                                "target": "tiny"} | extra, directory)


def test_a_head_is_refused_beside_another_target_of_the_same_shape(tmp_path):
    trained_on, other = gpt(0), gpt(1)
    models.save(trained_on, "tiny", {"config": models.config_dict(CONFIG)}, tmp_path)
    save_head(trained_on, tmp_path, target_fingerprint=checkpoints.fingerprint(trained_on))
    heads.load_head("eagle", trained_on, tmp_path)  # controls: the target in memory,
    heads.load_head("eagle", models.load("tiny", "cpu", tmp_path), tmp_path)  # and loaded from its file
    for wrong in (other, GPT(CONFIG)):  # another trained target, an untrained one
        with pytest.raises(ValueError, match=r"'eagle' was trained on the target with fingerprint.*"
                                             r"another or untrained target.*rebuild it with"):
            heads.load_head("eagle", wrong, tmp_path)


def test_a_head_without_a_target_fingerprint_is_refused(tmp_path):
    target = gpt(0)
    save_head(target, tmp_path)
    with pytest.raises(ValueError, match=r"records no target_fingerprint.*python -m lessonlib\.models\.train_heads"):
        heads.load_head("eagle", target, tmp_path)


def test_the_shipped_checkpoints_carry_checksums_and_their_targets_fingerprints():
    """Every shipped pair (the real LLM's own format aside) verifies, and every head and MTP
    module names the shipped target's bytes; the migration script finds nothing to stamp."""
    assets = checkpoints.CHECKPOINTS
    names = [p.stem for p in assets.glob("*.json") if p.name != "tokenizer.json" and not p.name.startswith("smollm2-")]
    target_sha = checkpoints.sha256_file(assets / "target.safetensors")
    for name in names:
        meta = checkpoints.read_meta(name)
        checkpoints.verify(meta, assets / f"{name}.safetensors", "rebuild")
        assert meta["config_sha256"] == checkpoints.config_sha256(meta["config"]), name
        if meta.get("kind"):
            assert meta["target_fingerprint"] == target_sha, name
    spec = importlib.util.spec_from_file_location("checkpoint_checksums", ROOT / "scripts" / "checkpoint_checksums.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0


def test_the_migration_stamps_an_old_pair_and_its_head(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("checkpoint_checksums", ROOT / "scripts" / "checkpoint_checksums.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    target = gpt(0)
    models.save(target, "tiny", {"config": models.config_dict(CONFIG)}, tmp_path)
    save_head(target, tmp_path)
    for name in ("tiny", "eagle"):  # as saved before checksums: no integrity fields
        path = checkpoints.checkpoint_paths(name, tmp_path)[1]
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in meta.items() if "sha256" not in k and "fingerprint" not in k}))
    assert script.main(["--dir", str(tmp_path), "--check"]) == 1
    with pytest.raises(ValueError, match="records no"):
        models.load("tiny", "cpu", tmp_path)
    assert script.main(["--dir", str(tmp_path)]) == 0 and script.main(["--dir", str(tmp_path), "--check"]) == 0
    heads.load_head("eagle", models.load("tiny", "cpu", tmp_path), tmp_path)
    with pytest.raises(ValueError, match="fingerprint"):
        heads.load_head("eagle", gpt(1), tmp_path)


def test_shipped_mtp_modules_are_refused_beside_an_untrained_target_of_the_same_shape():
    target = models.load("target", "cpu")
    mtp.load_mtp("target-mtp", target)  # control
    with pytest.raises(ValueError, match=r"'target-mtp' was trained on the target with fingerprint.*"
                                         r"python -m lessonlib\.models\.train target"):
        mtp.load_mtp("target-mtp", GPT(target.config))


def test_train_and_train_heads_record_the_fingerprints_themselves(tmp_path, monkeypatch):
    """The trainers' own saves carry checksum, config hash and the target's fingerprint (no
    migration needed after a rebuild): a mini target, then an EAGLE head for it, one step each."""
    monkeypatch.setattr(train, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(train_heads, "heldout_agreement", lambda model, target: {k: [] for k in model.heads})
    monkeypatch.setattr(train, "bits_per_byte", lambda model, corpus: 0.0)  # the held-out pass is not the subject
    monkeypatch.setattr(train.data, "heldout_names", dict)  # nor the list of held-out files (reads the corpus)
    _, meta = train.train_model("mini", steps=1, out_dir=tmp_path)
    assert meta["sha256"] == checkpoints.sha256_file(tmp_path / "mini.safetensors")
    metas = train_heads.train_heads(("eagle",), steps=1, batch_size=1, target_name="mini", directory=tmp_path)
    assert metas["eagle"]["target_fingerprint"] == meta["sha256"]
    heads.load_head("eagle", models.load("mini", "cpu", tmp_path), tmp_path)
