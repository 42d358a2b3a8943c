"""The state pool climbing while the running requests do not: slots not freed.

A hybrid model's state slots are held by running requests (SGLang's usage leaves the cached,
evictable states out), so with as many requests running the pool stays as full. A pool that
climbs while the running requests stay level or fall keeps slots that nothing runs in: a leak
that fills the pool until the server stops admitting requests and hangs. One look cannot see a
climb: the watch (watch.py) feeds each look here and keeps the readings of the window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvtop.model.kv_usage import KvUsage
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.model.status.server_status import duration_text

# A climb is judged against readings at least this share of the window old: the slots of one
# admitted prefill (new requests take their slots before they count as running) are no climb.
_LEAST_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class _Reading:
    at: float  # epoch seconds (the snapshot's time)
    usage_pct: float
    running: int
    slots_used: int | None


class StatePoolClimb:
    """The readings of the last `state_pool_window_s`, and the alert they raise."""

    def __init__(self) -> None:
        self._readings: deque[_Reading] = deque()
        self._restarts: int | None = None

    def look(self, kv: KvUsage, now: float, restarts: int, t: Thresholds) -> Alert | None:
        """Note this look's reading (a current one with the state pool and the running
        requests known) and say whether the pool climbed over the window while the running
        requests did not grow."""
        if self._restarts is not None and restarts != self._restarts:
            self._readings.clear()  # a new start: a new pool
        self._restarts = restarts
        pool = kv.state_pool
        running = kv.load.running_requests
        if kv.current and pool is not None and pool.usage_pct is not None and running is not None:
            if self._readings and now <= self._readings[-1].at:
                self._readings.clear()  # the clock went back: the readings say nothing now
            self._readings.append(_Reading(now, pool.usage_pct, running, pool.slots_used))
        while self._readings and now - self._readings[0].at > t.state_pool_window_s:
            self._readings.popleft()
        if not self._readings or self._readings[-1].at != now:
            return None  # nothing read now: no climb is seen
        return self._climb(self._readings[-1], t)

    def _climb(self, latest: _Reading, t: Thresholds) -> Alert | None:
        least_s = _LEAST_SHARE * t.state_pool_window_s
        before = [
            r for r in self._readings if latest.at - r.at >= least_s and r.running >= latest.running
        ]
        if not before:
            return None
        start = min(before, key=lambda r: (r.usage_pct, r.at))
        if latest.usage_pct - start.usage_pct < t.state_pool_climb_pct:
            return None
        return Alert(Level.WARNING, "state_pool_climbing", _text(start, latest, t), "state pool")


def _text(start: _Reading, latest: _Reading, t: Thresholds) -> str:
    if latest.running == start.running:
        running = f"stayed at {latest.running:,}"
    else:
        running = f"fell from {start.running:,} to {latest.running:,}"
    slots = ""
    if start.slots_used is not None and latest.slots_used is not None:
        slots = f", {start.slots_used:,} to {latest.slots_used:,} slots"
    return (
        f"state pool usage climbed from {start.usage_pct / 100:.2f} to "
        f"{latest.usage_pct / 100:.2f}{slots} over {duration_text(latest.at - start.at)} while "
        f"running requests {running}: slots are not being freed (a leak fills the pool and "
        f"the server stops admitting requests); warning from {t.state_pool_climb_pct:g} points "
        f"within {duration_text(t.state_pool_window_s)}"
    )
