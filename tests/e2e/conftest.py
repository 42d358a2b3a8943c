"""The fault host for the end-to-end tests that need fake GPUs: a healthy host per test
(tests/support/fault_host.py) on the fake libnvidia-ml.so.1 loaded into this process
(`fake_lib`, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_host import FaultHost


@pytest.fixture
def host(fake_lib: Path, tmp_path: Path) -> Iterator[FaultHost]:
    with FaultHost(tmp_path, fake_lib) as h:
        yield h
