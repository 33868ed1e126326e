"""The CPU thread policy (lessonlib.threads): its default, its override and bad values, and
importing lessonlib.models applies it."""
import os
import subprocess
import sys

import pytest
import torch

from lessonlib import threads


def test_thread_policy_default_override_and_bad_values(monkeypatch):
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    assert threads.policy() == threads.DEFAULT == 1
    assert threads.describe() == "1 torch thread (course default; LESSONLIB_THREADS overrides)"
    monkeypatch.setenv(threads.ENV_VAR, "2")
    assert threads.policy() == 2 and threads.describe() == "2 torch threads (LESSONLIB_THREADS=2)"
    for bad in ("two", "-1", "1.5"):
        monkeypatch.setenv(threads.ENV_VAR, bad)
        with pytest.raises(ValueError, match="LESSONLIB_THREADS must be an integer"):
            threads.policy()


def test_using_restores_the_thread_count():
    before = torch.get_num_threads()
    with threads.using(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n must be an integer"):
        with threads.using(0):
            pass


@pytest.mark.parametrize("env,expected", [(None, 1), ("2", 2)])
def test_importing_models_applies_the_policy(env, expected):
    environ = {k: v for k, v in os.environ.items() if k != threads.ENV_VAR}
    if env is not None:
        environ[threads.ENV_VAR] = env
    code = ("import torch; torch.set_num_threads(3); import lessonlib.models, lessonlib; "
            "print(torch.get_num_threads()); print(lessonlib.describe())")
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True).stdout
    count, line = out.splitlines()
    assert int(count) == expected
    assert f"{expected} torch thread" in line
