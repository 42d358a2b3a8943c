"""One SGLang server's /metrics and /server_info as kvtop keeps them between refreshes: the
latest sample and when it came, each read's state, /server_info once per server start (again
after the server did not answer, and at least every INFO_REFRESH_S), and a new client when the
server to scrape changes."""

from __future__ import annotations

import asyncio
import time

from kvtop.model.server_target import ServerTarget
from kvtop.model.snapshot import NOT_YET, UNREACHABLE, SourceHealth, SourceState
from kvtop.sglang.metrics import MetricsSample, ServerInfo
from kvtop.sources.metrics import MetricsSource

# After a failed scrape the last sample stays on screen this long (one slow scrape must not
# make the KV panel flicker), then the log's batch lines stand in: old numbers are not shown
# as current. A server that refuses or lacks /metrics ("off") loses its numbers at once.
METRICS_STALE_S = 10.0
# /server_info is read again at least this often while the server answers: a restart quicker
# than a scrape leaves no other trace, and a stale identity would keep a mismatch for good.
INFO_REFRESH_S = 30.0
WAITING = SourceHealth(
    "metrics", SourceState.DEGRADED, "waiting for the first scrape.", cause=NOT_YET
)


def age_s(good_at: float | None) -> float | None:
    """Seconds since a time.monotonic() stamp (None: no good reading yet)."""
    return None if good_at is None else max(0.0, time.monotonic() - good_at)


class ServerReadings:
    """The server's numbers and their state; `scrape()` once per refresh (or its backoff)."""

    # The views show where the server is (a simulated one has no address).
    shows_target = True

    def __init__(self) -> None:
        self.source: MetricsSource | None = None
        self.health = WAITING
        self.sample: MetricsSample | None = None
        self.good_at: float | None = None  # time.monotonic() of the latest scrape with a sample
        self.info: ServerInfo | None = None
        # A /server_info failure while /metrics is fine; read in a task of its own.
        self.info_health: SourceHealth | None = None
        self._info_task: asyncio.Task[None] | None = None
        self._info_generation = 0  # bumped by forget_server_info: a fetch in flight is for before
        self._info_for_restarts = 0
        self._info_at: float | None = None  # time.monotonic() of the /server_info held

    def take(self, sample: MetricsSample | None, health: SourceHealth) -> None:
        """A reading from elsewhere (the demo's simulated /metrics)."""
        self.health = health
        if sample is not None:
            self.sample, self.good_at = sample, time.monotonic()

    def client(self, target: ServerTarget, api_key: str | None, interval_s: float) -> MetricsSource:
        """The client for `target`: a new one (and no numbers yet) when the URL changed."""
        if self.source is None or self.source.url != target.url:
            old = self.source
            if old is not None:
                asyncio.get_running_loop().create_task(old.aclose())
            # The key goes only where the user sent it (see tui/kvtop/model/server_target.py).
            key = api_key if target.key_allowed else None
            self.source = MetricsSource(target.url, api_key=key, interval_s=interval_s)
            self.info = self.info_health = None
            self.good_at = None  # another server: its age starts with its first scrape
        return self.source

    async def scrape(
        self,
        target: ServerTarget,
        *,
        api_key: str | None,
        interval_s: float,
        restarts: int,
        wait_info: bool = False,
    ) -> None:
        """One scrape of /metrics; /server_info when it is due (`restarts`: the log's count of
        server starts, a new one reads it again)."""
        source = self.client(target, api_key, interval_s)
        reading = await source.scrape()
        if reading.sample is not None:
            self.sample, self.good_at = reading.sample, time.monotonic()
        elif reading.status == SourceState.OFF or (age_s(self.good_at) or 0.0) > METRICS_STALE_S:
            self.sample = None
        if reading.status == SourceState.OK:
            self.health = SourceHealth("metrics", SourceState.OK)
        else:
            self.health = SourceHealth(
                "metrics", reading.status, reading.problem, cause=reading.cause
            )
        if restarts != self._info_for_restarts:
            self._info_for_restarts = restarts
            self.forget_server_info()
        if reading.status != SourceState.OK and reading.cause == UNREACHABLE:
            # No answer: whatever answers next may be another start (or another server), so
            # its identity is read again when it answers.
            self.forget_server_info()
        elif self.info is not None and (age_s(self._info_at) or 0.0) > INFO_REFRESH_S:
            # A restart the log does not show and /metrics did not miss (quicker than a scrape
            # interval): the identity is read again now and then, as --once reads it each time.
            self.forget_server_info()
        if reading.status == SourceState.OK and self.info is None and source.server_info_due():
            # In a task of its own: a hung /server_info must not hold up the next scrape.
            if self._info_task is None or self._info_task.done():
                read = self._read_server_info(source, self._info_generation, target.key_withheld)
                self._info_task = asyncio.create_task(read)
            if wait_info:
                await self._info_task

    def forget_server_info(self) -> None:
        """Read /server_info again (the server started anew); a fetch in flight is discarded."""
        self.info = None
        self._info_at = None
        self._info_generation += 1

    async def _read_server_info(
        self, source: MetricsSource, generation: int, withheld: bool
    ) -> None:
        info = await source.server_info()
        if source is not self.source or generation != self._info_generation:
            return  # for a server --url was changed away from, or from before a restart
        self.info = info.info
        self._info_at = time.monotonic()
        if info.status == SourceState.OK or (info.status == SourceState.OFF and withheld):
            # withheld: the snapshot's note says why and what to do
            self.info_health = None
        else:
            self.info_health = SourceHealth("metrics", SourceState.DEGRADED, info.problem)

    def shown_health(self) -> SourceHealth:
        """The metrics source's state as shown: /server_info's failure while /metrics is fine."""
        if self.health.state == SourceState.OK and self.info_health is not None:
            return self.info_health
        return self.health

    @property
    def info_task(self) -> asyncio.Task[None] | None:
        """The /server_info read in flight or done (the session stops it on closing)."""
        return self._info_task

    def next_delay_s(self, interval_s: float) -> float:
        """Seconds to the next scrape: the refresh interval, longer while backing off."""
        source = self.source
        assert source is not None
        source.interval_s = interval_s
        return source.next_delay_s()

    async def close(self) -> None:
        """Close the client; stop `info_task` first."""
        if self.source is not None:
            await self.source.aclose()
