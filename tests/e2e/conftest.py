"""The fault host for the end-to-end tests that need fake GPUs: the fake libnvidia-ml.so.1,
loaded once per process (loading it is one-way), and a healthy host per test
(tests/support/fault_host.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_host import FaultHost, preload_fake_nvml


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return preload_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def host(fake_lib: Path, tmp_path: Path) -> Iterator[FaultHost]:
    with FaultHost(tmp_path, fake_lib) as h:
        yield h
