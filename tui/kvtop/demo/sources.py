"""The demo as the sources a session reads: the story's log, its GPUs, its server's /metrics and
its host, each with the surface of the real source it stands in for (the log reader's, the GPU
source's, the server readings', the host's), so the session runs the demo as it runs a server.

`install(session)` puts them in place of the session's own; `advance(session)` runs one round
of all of them at once, for the stills and the soak, which step the demo's clock themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from kvtop.demo.source import LOG_HEALTH, DemoSource
from kvtop.model.memory.gpu_reading import NvmlReading
from kvtop.model.server_target import ServerTarget
from kvtop.model.snapshot import SourceHealth
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from kvtop.sources.pacing import Lane
from kvtop.sources.server_readings import ServerReadings


class Session(Protocol):
    """What the demo puts its sources into: the session's sources and what they fold into
    (kvtop.session.Session; the demo may not import it)."""

    options: Any
    tracker: StartupTracker
    raw_lines: RawLines
    log: Any
    nvml: Any
    server: Any
    host: Any

    @property
    def clock(self) -> Callable[[], float]: ...

    def take_gpus(self, reading: NvmlReading) -> None: ...


class DemoLog:
    """The story's lines as they fall due, folded as a followed log's are."""

    # The story is this host's log as far as the views are concerned (its uptimes, its ages).
    from_this_host = True

    def __init__(self, demo: DemoSource, tracker: StartupTracker, raw_lines: RawLines) -> None:
        self.demo, self.tracker, self.raw_lines = demo, tracker, raw_lines
        self.health = LOG_HEALTH
        self.good_at: float | None = None

    def take(self, health: SourceHealth) -> None:
        self.health, self.good_at = health, time.monotonic()

    def fold_due(self) -> None:
        lines = self.demo.due_lines()
        if lines:
            fold_lines(lines, self.tracker, self.raw_lines)
        self.take(LOG_HEALTH)

    def read_file(self) -> None:
        """The one-shot report starts served: the whole startup is due now."""
        self.demo.finish_startup()
        self.fold_due()

    async def read_journal(self) -> None:
        return None  # the story is no journal

    async def follow(self, lane: Lane) -> None:
        try:
            while True:
                await lane.next()
                self.fold_due()
        finally:
            lane.leave()

    def state_now(self) -> tuple[str, ...]:
        return ()


class DemoGpus:
    """The simulated GPUs: what the story's start leaves on them now (a GpuSource)."""

    def __init__(self, demo: DemoSource, tracker: StartupTracker) -> None:
        self.demo, self.tracker = demo, tracker
        self._last: NvmlReading | None = None

    @property
    def last(self) -> NvmlReading | None:
        return self._last

    def poll(self) -> NvmlReading:
        self._last = self.demo.nvml_reading(self.tracker.current)
        return self._last

    async def poll_async(self) -> NvmlReading:
        return self.poll()  # computed, not read: nothing to wait for

    def close(self) -> None:
        return None


class DemoServer(ServerReadings):
    """The simulated server's /metrics, answering from the story: no address to show, no
    /server_info to read, scraped every refresh."""

    shows_target = False

    def __init__(self, demo: DemoSource) -> None:
        super().__init__()
        self.demo = demo

    async def scrape(
        self,
        target: ServerTarget,
        *,
        api_key: str | None,
        interval_s: float,
        restarts: int,
        wait_info: bool = False,
    ) -> None:
        self.take(*self.demo.metrics())

    def next_delay_s(self, interval_s: float) -> float:
        return interval_s


def install(session: Session, demo: DemoSource | None = None) -> DemoSource:
    """The demo's sources in place of `session`'s own (a new story unless `demo` is given)."""
    opts = session.options
    demo = demo or DemoSource(speed=opts.demo_speed, clock=session.clock)
    session.log = DemoLog(demo, session.tracker, session.raw_lines)
    session.nvml = DemoGpus(demo, session.tracker)
    session.server = DemoServer(demo)
    session.host = demo
    # The simulated server always has its /metrics (--no-metrics is about a real server).
    session.options = replace(opts, metrics=True, nvml=True)
    return demo


def advance(session: Session) -> None:
    """One round of every demo source at once: the lines due, the GPUs, /metrics."""
    log, gpus, server = session.log, session.nvml, session.server
    assert isinstance(log, DemoLog) and isinstance(gpus, DemoGpus)
    assert isinstance(server, DemoServer)
    log.fold_due()
    session.take_gpus(gpus.poll())
    server.take(*server.demo.metrics())
