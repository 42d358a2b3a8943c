"""One beat for every source: a refresh wakes the process once, not once per source.

Why: on the 2-core VMs kvtop is measured on, a thread that wakes after sleeping a second runs
20-40× slower for its first milliseconds (measured: a 46 µs loop takes 0.5-1.9 ms right after a
1 s sleep; a bare 1 s `select` costs 4.8 ms of CPU per wake-up). Five sources waking at their own
moments cost more than their work. The session ticks once per refresh; each source loop waits in
`Lane.next()` between rounds, so all of them run back to back in one burst, and the session
waits (briefly) for that burst to settle before it takes the snapshot.

A source that is still busy from an earlier tick (a hung driver call, a slow server) is not
waited for: the snapshot shows what there is, and the source joins the next tick when it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class Pacer:
    """The session calls `tick()` once a refresh and then `await settled(timeout)`."""

    def __init__(self) -> None:
        self._beat = asyncio.Event()
        self._waiting: set[Lane] = set()
        self._released: set[Lane] = set()  # released by the latest tick, round not yet done
        self._settled = asyncio.Event()
        self._settled.set()
        self._progress = asyncio.Event()  # set (and replaced) whenever a source ends its round
        self.interval_s = 1.0  # the session keeps it current; sources use it for slow retries

    def lane(self, name: str) -> Lane:
        return Lane(self, name)

    def tick(self) -> None:
        """Let every waiting source run one round."""
        beat, self._beat = self._beat, asyncio.Event()
        self._released = set(self._waiting)
        self._waiting.clear()
        if self._released:
            self._settled.clear()
        beat.set()

    async def settled(self, timeout_s: float) -> bool:
        """True when every source this tick released has finished its round; False at timeout."""
        if self._settled.is_set():
            return True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout_s)
        return self._settled.is_set()

    async def done(self, name: str, timeout_s: float) -> bool:
        """True when the source `name` has finished the round this tick gave it (or was not
        given one); False at timeout. The first frame waits for the GPUs alone this way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(lane.name == name for lane in self._released):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)
        return True

    @property
    def busy(self) -> list[str]:
        """Names of the sources the latest tick is still waiting for."""
        return sorted(lane.name for lane in self._released)

    def _done(self, lane: Lane) -> None:
        self._released.discard(lane)
        if not self._released:
            self._settled.set()
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()


class Lane:
    """One source's place in the beat."""

    def __init__(self, pacer: Pacer, name: str) -> None:
        self.pacer = pacer
        self.name = name

    async def next(self) -> None:
        """This round is done: wait for the next tick."""
        pacer = self.pacer
        pacer._done(self)
        pacer._waiting.add(self)
        beat = pacer._beat
        try:
            await beat.wait()
        finally:
            pacer._waiting.discard(self)  # cancelled while waiting: not part of any tick

    async def wait_s(self, seconds: float) -> None:
        """Wait at least about `seconds` (a slow retry), counted in ticks."""
        # Ticks come every interval with some jitter: half an interval early counts as due.
        due = time.monotonic() + seconds - self.pacer.interval_s / 2
        await self.next()
        while time.monotonic() < due:
            await self.next()

    def leave(self) -> None:
        """The source has ended: the tick no longer waits for it."""
        self.pacer._waiting.discard(self)
        self.pacer._done(self)
