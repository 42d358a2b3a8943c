"""Shared paths for tests: fixtures live in tests/fixtures, the story log ships in tui/data."""

from __future__ import annotations

import os
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


# -- no skips in CI --------------------------------------------------------------------------
# CI's machine has everything the suite needs (.ci/run installs it), so a test that skips there
# hides a broken set-up or a test that no longer runs. Under CI=true a skip fails the run; the
# skip reasons are printed by `-rs` in .ci/run.
def _skipped(config: pytest.Config) -> int:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return len(reporter.stats.get("skipped", [])) if reporter is not None else 0


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _in_ci() and _skipped(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    if _in_ci() and _skipped(config):
        terminalreporter.write_line(
            f"CI: {_skipped(config)} test(s) skipped (reasons above): on CI's machine every "
            "test must run, so this run fails."
        )


def log_dated_now(source: Path, target: Path) -> Path:
    """A copy of `source` with every `[YYYY-MM-DD HH:MM:SS` stamp moved by the same amount so
    that its last line is written now (local time, as SGLang writes it): a finished startup
    whose batch lines are current, for checks that date them."""
    import re
    from datetime import datetime

    stamp = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
    text = source.read_text()
    times = [datetime.fromisoformat(m) for m in stamp.findall(text)]
    shift = datetime.now().replace(microsecond=0) - max(times)

    def moved(match: re.Match[str]) -> str:
        return "[" + (datetime.fromisoformat(match.group(1)) + shift).isoformat(sep=" ")

    target.write_text(stamp.sub(moved, text))
    return target


@pytest.fixture(scope="session")
def prometheus():  # type: ignore[no-untyped-def]
    """One real Prometheus for the session, with every target of
    tests/prometheus_server.SESSION_PLAN declared (their body servers start in the tests)."""
    from prometheus_server import session_prometheus

    server = session_prometheus()
    yield server
    server.stop()
