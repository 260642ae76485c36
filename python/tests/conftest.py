"""Shared fixtures of the Python tests.

The tests import the package from python/ (PYTHONPATH set by CTest, or this
file's sys.path entry) and load the library named by TOKITAI_JIT_LIBRARY
(CTest sets the build's), else the usual search.

GPU tests carry ``@pytest.mark.gpu`` and skip, with the reason, without
PyTorch + a CUDA device. When TK_PYTEST_SKIPPED_RC is set and every test that
ran was skipped, the session exits with that code (CTest shows "Skipped").
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tokitai_jit as tj  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs PyTorch and a CUDA/HIP device")


_outcomes = {"passed": 0, "skipped": 0, "failed": 0}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.outcome == "skipped":  # a module skipped as a whole (test_gpu.py without torch)
        _outcomes["skipped"] += 1
    elif report.outcome == "failed":
        _outcomes["failed"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    rc = os.environ.get("TK_PYTEST_SKIPPED_RC")
    # 5 is pytest's "no tests collected": here, every GPU module skipped itself.
    if rc and exitstatus in (0, 5) and _outcomes["skipped"] > 0 and _outcomes["passed"] == 0 and _outcomes["failed"] == 0:
        session.exitstatus = int(rc)


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "cache"
    return str(d)


@pytest.fixture
def ctx(cache_dir):
    """A stub-backend context on a fresh cache (no GPU needed)."""
    c = tj.Context(backend="stub", cache_dir=cache_dir)
    yield c
    c.close()


@pytest.fixture
def offline(cache_dir):
    """An offline stub context: compiles into the cache, runs nothing."""
    c = tj.Context(backend="stub", target="stub", cache_dir=cache_dir)
    yield c
    c.close()
