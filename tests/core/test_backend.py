"""Backend selection: argument > $LESSONLIB_BACKEND > CUDA if available > numpy (CUDA mocked)."""
import numpy as np
import pytest
import torch

from lessonlib.core import backend
from lessonlib.core.backend import ENV_VAR, Backend, describe, select


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    return monkeypatch


def fake_cuda(monkeypatch, available):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")


@pytest.mark.parametrize("available,expected", [(False, "numpy"), (True, "torch-cuda")])
def test_automatic_choice_follows_cuda(no_env, available, expected):
    fake_cuda(no_env, available)
    assert select().name == expected


def test_env_var_overrides_automatic_choice(no_env):
    fake_cuda(no_env, True)
    no_env.setenv(ENV_VAR, "numpy")
    assert select().name == "numpy"
    no_env.setenv(ENV_VAR, "torch-cpu")
    assert select().name == "torch-cpu"


def test_argument_overrides_env_var(no_env):
    fake_cuda(no_env, False)
    no_env.setenv(ENV_VAR, "torch-cpu")
    assert select("numpy").name == "numpy"


def test_empty_env_var_means_automatic(no_env):
    fake_cuda(no_env, False)
    no_env.setenv(ENV_VAR, "")
    assert select().name == "numpy"


@pytest.mark.parametrize("via_env", [False, True])
def test_unknown_backend_is_rejected(no_env, via_env):
    if via_env:
        no_env.setenv(ENV_VAR, "jax")
    with pytest.raises(ValueError, match=ENV_VAR if via_env else "name"):
        select(None if via_env else "jax")


def test_cuda_requested_without_cuda_is_rejected(no_env):
    fake_cuda(no_env, False)
    with pytest.raises(ValueError, match="torch.cuda.is_available"):
        select("torch-cuda")
    no_env.setenv(ENV_VAR, "torch-cuda")
    with pytest.raises(ValueError, match=ENV_VAR):
        select()


def test_describe(no_env):
    fake_cuda(no_env, True)
    no_env.delenv("LESSONLIB_THREADS", raising=False)
    threads = "; 1 torch thread (course default; LESSONLIB_THREADS overrides)"  # lessonlib.threads
    assert describe() == "running on: CUDA (NVIDIA H200)" + threads
    assert describe("numpy") == "running on: CPU (numpy)" + threads
    assert describe(Backend("torch-cpu")) == "running on: CPU (torch)" + threads
    fake_cuda(no_env, False)
    assert describe() == "running on: CPU (numpy)" + threads


def test_arrays_land_on_the_backend():
    x = [[0.25, 0.75]]
    assert isinstance(Backend("numpy").asarray(x), np.ndarray)
    t = Backend("torch-cpu").asarray(x)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.device.type == "cpu"
    assert Backend("torch-cpu").asarray([1, 2], dtype="int64").dtype == torch.int64
    np.testing.assert_array_equal(backend.to_numpy(t), x)
    assert backend.array_namespace(t) is torch and backend.array_namespace(np.zeros(1)) is np


def test_uniforms_are_in_range_on_both_backends():
    rng = np.random.default_rng(0)
    for name in ("numpy", "torch-cpu"):
        u = backend.to_numpy(Backend(name).uniform((1000, 3), rng))
        assert u.shape == (1000, 3) and u.min() >= 0 and u.max() < 1
