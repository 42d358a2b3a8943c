"""The server's identity (/server_info) is read again whenever it may have changed: after the
server did not answer (a restart, or another server on the port when it answers again) and at
least every INFO_REFRESH_S while it answers (a restart quicker than a scrape). A stale identity
would keep a mismatch with the log for good, and after the server was gone.

Real HTTP on loopback: the fault matrix's FakeSGLang that can go away and come back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from kvtop.model.server_target import FROM_FLAG, ServerTarget
from kvtop.sources import server_readings
from kvtop.sources.server_readings import ServerReadings
from tests.support.fault_host import FaultServer
from tests.support.sglang_http import Deployment, build_server_info


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Deployment(version="0.5.8")) as fake:
        yield fake  # type: ignore[misc]


def _target(server: FaultServer) -> ServerTarget:
    return ServerTarget(server.url, FROM_FLAG, True, False, True)


def _info_of(pool: int) -> dict[str, object]:
    return build_server_info(Deployment(version="0.5.8", max_total_num_tokens=pool))


async def _scrape_until(readings: ServerReadings, target: ServerTarget, pool: int) -> None:
    """Scrape as the session does until /server_info says `pool` tokens (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        await readings.scrape(target, api_key=None, interval_s=0.05, restarts=0, wait_info=True)
        info = readings.info
        if info is not None and info.max_total_num_tokens == pool:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"/server_info never said {pool:,} tokens; last: {readings.info}")


async def test_identity_is_read_again_after_the_server_did_not_answer(
    server: FaultServer,
) -> None:
    readings, target = ServerReadings(), _target(server)
    server.server_info_override = _info_of(655_360)  # another server than the log's
    await _scrape_until(readings, target, 655_360)
    server.pause()
    await readings.scrape(target, api_key=None, interval_s=0.05, restarts=0)
    assert readings.info is None  # no answer: no identity to hold against the log
    server.server_info_override = None  # the log's server again, started anew
    server.resume()
    await _scrape_until(readings, target, 159_277)


async def test_identity_is_read_again_while_the_server_answers(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_readings, "INFO_REFRESH_S", 0.2)
    readings, target = ServerReadings(), _target(server)
    server.server_info_override = _info_of(655_360)
    await _scrape_until(readings, target, 655_360)
    server.server_info_override = None  # restarted between two scrapes: /metrics never missed
    await _scrape_until(readings, target, 159_277)
    asked = sum(1 for path, _ in server.requests if path == "/server_info")
    assert asked < 40  # read again now and then, not at every scrape
