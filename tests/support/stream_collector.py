"""Collect what a following source yields in a background task, so a test can write meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
# The longest a test waits for what it asserts (a hang guard, not a speed check): a journal
# directory that comes back is seen within RETRY_S (2 s), then journalctl reads it anew, which
# took over 5 s on a machine loaded by several test runs.
WAIT_S = 15.0


class Collector(Generic[T]):
    def __init__(self, stream: AsyncIterator[T], close: Callable[[], None]) -> None:
        self.got: list[T] = []
        self._close = close
        self._task = asyncio.ensure_future(self._run(stream))

    async def _run(self, stream: AsyncIterator[T]) -> None:
        async for item in stream:
            self.got.append(item)

    async def until(self, check: Callable[[], bool]) -> None:
        async def poll() -> None:
            while not check():
                if self._task.done():
                    self._task.result()  # surface a crash instead of timing out
                await asyncio.sleep(0.01)

        await asyncio.wait_for(poll(), WAIT_S)

    async def at_least(self, n: int) -> list[T]:
        await self.until(lambda: len(self.got) >= n)
        return self.got

    async def stop(self) -> None:
        self._close()
        await asyncio.wait_for(self._task, WAIT_S)
