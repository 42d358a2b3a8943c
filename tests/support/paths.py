"""Where the tests' data lives: fixtures in tests/fixtures, the story log ships in tui/kvtop/data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
REAL_LOGS = FIXTURES / "sglang-logs"
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
STORY_SIDECAR = FIXTURES / "kimi-k25-tp8-eagle3-hicache-0.5.8.json"
