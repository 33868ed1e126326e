"""Test-session setup.

**Outputs go to a temporary folder.** Notebook 05 writes the skill file and
``benchmarks/temperature.json``, the benchmarks write their JSON, the browser test its
screenshots -- all under ``lessonlib.paths.outputs()``, which reads ``LESSONLIB_OUTPUTS`` at call
time. Setting it here, when pytest imports this file (before any test or notebook is collected),
covers the library tests, the nbval kernels and the browser test's JupyterLab (both start with a
copy of ``os.environ``), so running the tests leaves ``git status`` unchanged. A value already in
the environment is kept: an instructor refreshing the shipped files runs
``LESSONLIB_OUTPUTS=outputs python -m pytest ...``.

**Per-test time limits** (pytest-timeout): a library test that hangs fails after
``LIBRARY_TIMEOUT_S`` seconds (``LESSONLIB_TEST_TIMEOUT`` overrides it: the mutation run uses
a tighter one). Notebook cells and the browser test keep the generous limit of pyproject.toml,
and a test that sets its own ``@pytest.mark.timeout`` keeps it."""
import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

if not os.environ.get("LESSONLIB_OUTPUTS"):
    _outputs = tempfile.mkdtemp(prefix="lessonlib-test-outputs-")
    os.environ["LESSONLIB_OUTPUTS"] = _outputs
    atexit.register(shutil.rmtree, _outputs, ignore_errors=True)

LIBRARY_TIMEOUT_S = float(os.environ.get("LESSONLIB_TEST_TIMEOUT", 300))  # the slowest library test takes ~10 s
HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        in_tests = HERE in pathlib.Path(str(item.path)).resolve().parents
        if in_tests and item.get_closest_marker("timeout") is None and item.get_closest_marker("browser") is None:
            item.add_marker(pytest.mark.timeout(LIBRARY_TIMEOUT_S))
