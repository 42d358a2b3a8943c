"""A still of the demo: its snapshot at a fixed clock, and a feed that shows given snapshots.

Screenshots, UI tests and benchmarks use it: the same picture on every machine and every run.
It lives with the tests, not in the package: kvtop itself never runs on a still. Benchmarks and
scripts put tests/ on sys.path to import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from kvtop.demo.scenario import DemoScenario
from kvtop.demo.source import DemoSource
from kvtop.demo.sources import advance, install
from kvtop.model.snapshot import Snapshot
from kvtop.session import Options, Session
from kvtop.sglang.raw_lines import RawLines

# 2026-11-30 10:00:00 UTC: the demo's clock in stills (its log times, uptimes, NVML times).
STILL_EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=timezone.utc).timestamp()


def still_session(serving_s: float = 0.0, epoch: float = STILL_EPOCH) -> Session:
    """The demo's session one minute (plus `serving_s`) after the server got ready, at `epoch`."""
    now = [epoch]
    scenario = DemoScenario(clock=lambda: now[0])
    session = Session(Options(demo=True), clock=lambda: now[0])
    install(session, DemoSource(scenario))
    scenario.finish_startup()
    now[0] += serving_s
    advance(session)
    return session


def still_snapshot(serving_s: float = 0.0, epoch: float = STILL_EPOCH) -> Snapshot:
    """The demo one minute (plus `serving_s`) after the server got ready, at `epoch`."""
    return still_session(serving_s, epoch).snapshot()


def still_series(count: int, step_s: float = 5.0, epoch: float = STILL_EPOCH) -> list[Snapshot]:
    """`count` snapshots `step_s` apart, ending at `epoch` + one minute of serving (history)."""
    now = [epoch - (count - 1) * step_s]
    scenario = DemoScenario(clock=lambda: now[0])
    session = Session(Options(demo=True), clock=lambda: now[0])
    install(session, DemoSource(scenario))
    scenario.finish_startup()
    series = []
    for _ in range(count):
        advance(session)
        series.append(session.snapshot())
        now[0] += step_s
    return series


class StillFeed:
    """Hands the app the snapshots pushed to it, like Session.snapshots() but on demand."""

    def __init__(self, *snapshots: Snapshot, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.raw_lines = RawLines()  # a still has no log lines of its own
        self._queue: asyncio.Queue[Snapshot] = asyncio.Queue()
        for snapshot in snapshots:
            self._queue.put_nowait(snapshot)

    def push(self, snapshot: Snapshot) -> None:
        self._queue.put_nowait(snapshot)

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        while True:
            yield await self._queue.get()
