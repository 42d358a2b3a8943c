"""The fleet's refresh loop: FleetReader.read() every interval, pausable, one fleet at a time.

The session of `kvtop --prometheus` (like tui/kvtop/session.py for one host): it owns the reader and
closes it when the loop ends. The reader never raises for a Prometheus problem (it returns a
Fleet with `problem` set), so the loop goes on through outages and shows the next good answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol

from kvtop.fleet.model import Fleet
from kvtop.model.history import KvHistory

if TYPE_CHECKING:
    from kvtop.fleet.prometheus_api import Series

DEFAULT_INTERVAL_S = 5.0  # Prometheus scrapes every 15 s by default; DCGM collects every 30 s
READ_TIMEOUT_S = 5.0
HISTORY_MINUTES = 10.0  # the KV sparkline of a host opened from the fleet starts this far back


class Reader(Protocol):
    """What the loop needs of kvtop.fleet.reader.FleetReader."""

    async def read(self) -> Fleet: ...

    async def history(self, host: str, what: str, minutes: float) -> Series | None: ...

    async def aclose(self) -> None: ...


def open_reader(
    url: str,
    *,
    selector: str | None = None,
    bearer_token: str | None = None,
    timeout_s: float = READ_TIMEOUT_S,
) -> Reader:
    """The Prometheus reader (imported here, on first use: the fleet's own source)."""
    from kvtop.fleet.reader import FleetReader

    return FleetReader(url, selector=selector, bearer_token=bearer_token, timeout_s=timeout_s)


class FleetFeed:
    """Fleets every `interval_s` (changeable live); while `paused`, no query is sent."""

    def __init__(
        self,
        reader: Reader,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self._paused = False
        self._monotonic = monotonic
        self._wake: asyncio.Event | None = None

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self.wake()

    def wake(self) -> None:
        """Cut the current wait short (resumed, interval changed)."""
        if self._wake is not None:
            self._wake.set()

    async def _wait(self, seconds: float | None) -> None:
        assert self._wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        self._wake.clear()  # after: a wake during the read ends the next wait at once

    async def fleets(self) -> AsyncIterator[Fleet]:
        self._wake = asyncio.Event()
        try:
            while True:
                if self._paused:
                    await self._wait(None)
                    continue
                began = self._monotonic()
                yield await self.reader.read()
                left = self.interval_s - (self._monotonic() - began)
                if left > 0:
                    await self._wait(left)
        finally:
            await self.reader.aclose()

    async def kv_history(self, host: str, minutes: float = HISTORY_MINUTES) -> KvHistory | None:
        """`host`'s KV usage over the last `minutes` (one query_range), in percent; None when
        Prometheus has none or could not answer (history is a nicety: its failure is no error
        on screen, the sparkline starts empty)."""
        from kvtop.fleet.prometheus_api import PrometheusError
        from kvtop.fleet.reader import history_step_s

        try:
            series = await self.reader.history(host, "kv_usage", minutes)
        except (PrometheusError, ValueError, KeyError, TypeError, IndexError):
            return None
        if series is None or not series.points:
            return None
        return KvHistory.from_ratios(series.points, history_step_s(minutes))

    async def read_once(self) -> Fleet:
        """One fleet (`--once`, `--check`), the reader closed after it."""
        try:
            return await self.reader.read()
        finally:
            await self.reader.aclose()
