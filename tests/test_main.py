"""The command-line demo: all PASS at the defaults, FAIL (exit 1) with a broken sampler."""
import subprocess
import sys

import numpy as np
import pytest

import lessonlib.__main__ as cli


def test_module_entry_point_passes_at_defaults():
    out = subprocess.run([sys.executable, "-m", "lessonlib", "--backend", "numpy"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for section in ("1. Distribution", "2. Acceptance", "3. Tokens per verify", "4. Theory", "5. Tree"):
        assert section in out.stdout
    assert "FAIL" not in out.stdout and "ALL PASS (8 checks)" in out.stdout
    assert "21 nodes, mask shape (21, 21)" in out.stdout


def test_larger_vocabulary_passes(capsys):
    assert cli.main(["--vocab", "64", "--samples", "50000", "--backend", "numpy"]) == 0
    assert "FAIL" not in capsys.readouterr().out


def test_torch_cpu_backend_passes(capsys):
    assert cli.main(["--samples", "5000", "--k", "2", "--backend", "torch-cpu"]) == 0
    assert "running on: CPU (torch)" in capsys.readouterr().out


def test_always_accept_sampler_makes_the_demo_fail(monkeypatch, capsys):
    """Negative control: a sampler that accepts every draft emits q, not p."""
    real = cli.simulate_rounds

    def always_accept(p, q, n, rng, backend):
        tokens, _ = real(p, q, n, rng, backend)
        drafts = np.stack([rng.choice(q.shape[1], n, p=row) for row in q], axis=1)
        return np.concatenate([drafts, tokens[:, -1:]], axis=1), np.full(n, q.shape[0])

    monkeypatch.setattr(cli, "simulate_rounds", always_accept)
    assert cli.main(["--backend", "numpy"]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") >= 4  # TV, chi-square, measured alpha, tokens per verify


@pytest.mark.parametrize("argv", [["--vocab", "1"], ["--alpha", "1.5"], ["--k", "0"], ["--backend", "jax"]])
def test_bad_arguments_exit_with_usage_error(argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
