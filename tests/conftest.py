"""Shared paths for tests: fixtures live in tests/fixtures, the story log ships in tui/data."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
REAL_LOGS = FIXTURES / "sglang-logs"
STORY_LOG = ROOT / "tui" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
STORY_SIDECAR = FIXTURES / "kimi-k25-tp8-eagle3-hicache-0.5.8.json"


@pytest.fixture
def story_log() -> Path:
    return STORY_LOG
