"""Fixtures and hooks every level shares; the helpers themselves are in tests/support."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import STORY_LOG


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


@pytest.fixture(scope="session")
def prometheus():  # type: ignore[no-untyped-def]
    """One real Prometheus for the session, with every target of
    tests/support/prometheus_server.SESSION_PLAN declared (their body servers start in the
    tests)."""
    from tests.support.prometheus_server import session_prometheus

    server = session_prometheus()
    yield server
    server.stop()
