"""Recent history for the sparklines, in fixed-size buffers (memory stays bounded for days).

A sparkline never joins two sources or bridges a gap as if it were data: a snapshot that comes
much later than the one before (a suspended terminal, a stalled feed) and a change of the KV
numbers' source (metrics to a log batch line, or back) put a GAP point in the buffers, which
the sparkline draws blank; the values after it are a new run. A value a source could not give
(a GPU that did not answer, no usage known) is NaN: blank where it has the cell to itself.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvtop import fmt
from kvtop.model.kv_usage import kv_now
from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.alert_rule import queue_since
from kvtop.model.status.freshness import STALE_INTERVALS

POINTS = 600  # ten minutes at 1 Hz; at faster refresh it simply covers less time
# The least range a sparkline is drawn over, per quantity (tui/kvtop/model/history.shown_range).
USED_FLOOR_GIB = 0.5
PERCENT_FLOOR = 5.0
# The break between two runs: never a value (every series is >= 0), drawn as a blank cell.
GAP = float("-inf")


def is_gap(value: float) -> bool:
    return value == GAP


@dataclass(frozen=True, slots=True)
class ShownRange:
    """The range a sparkline is drawn over (`low`..`high`) and the range of its values, which
    the label names: a line from 88.3 to 92.8 GiB fills the chart's height instead of being a
    flat top on a 0 … 141 GiB scale."""

    low: float
    high: float
    values_low: float
    values_high: float

    def text(self, unit: str, decimals: int = 1, edges: tuple[float, ...] = ()) -> str:
        """`88.3–92.8 GiB`; `90.1 GiB` when the values do not change (`%` sticks to them); a
        percentage never reads as one of `edges` (thresholds) it is not on (fmt.pct)."""
        sep = "" if unit == "%" else " "
        if unit == "%":
            low = fmt.pct(self.values_low, decimals, edges).removesuffix("%")
            high = fmt.pct(self.values_high, decimals, edges).removesuffix("%")
        else:
            low = f"{self.values_low:.{decimals}f}"
            high = f"{self.values_high:.{decimals}f}"
        return f"{low}{sep}{unit}" if low == high else f"{low}–{high}{sep}{unit}"


def shown_range(
    values: Iterable[float],
    floor: float,
    lowest: float = -math.inf,
    highest: float = math.inf,
) -> ShownRange | None:
    """The values' min..max, widened to at least `floor` around their middle (a flat line stays
    flat and in the middle; noise of a few MiB is not blown up to the full height), kept within
    the quantity's limits (`lowest`, `highest`: 0 and 100 for a percentage). None: no values."""
    finite = [v for v in values if math.isfinite(v)]  # GAP (-inf) and NaN are not values
    if not finite:
        return None
    values_low, values_high = min(finite), max(finite)
    low, high = values_low, values_high
    if high - low < floor:
        middle = (low + high) / 2
        low, high = middle - floor / 2, middle + floor / 2
        if low < lowest:
            low, high = lowest, high + (lowest - low)
        if high > highest:
            low, high = max(lowest, low - (high - highest)), highest
    return ShownRange(low, high, values_low, values_high)


@dataclass(frozen=True, slots=True)
class Series:
    """One buffer's values, oldest first, with the time span they cover (GAP between runs)."""

    values: tuple[float, ...]
    seconds: float

    def shown_range(
        self, floor: float, lowest: float = -math.inf, highest: float = math.inf
    ) -> ShownRange | None:
        return shown_range(self.values, floor, lowest, highest)

    @property
    def runs(self) -> int:
        """How many runs of readings the values hold (gaps and source changes split them)."""
        count, inside = 0, False
        for value in self.values:
            if is_gap(value):
                inside = False
            elif not inside:
                count, inside = count + 1, True
        return count


@dataclass(frozen=True, slots=True)
class KvHistory:
    """Earlier KV usage of a host (Prometheus' history of a host opened from the fleet):
    (timestamp, percent) points, oldest first, `step_s` apart; History.seed_token_usage takes it."""

    points: tuple[tuple[float, float], ...]
    step_s: float

    @classmethod
    def from_ratios(cls, points: Iterable[tuple[float, float]], step_s: float) -> KvHistory:
        """From 0..1 ratios (sglang:token_usage) to the percent the KV panel shows."""
        return cls(tuple((ts, ratio * 100.0) for ts, ratio in points), step_s)


@dataclass
class History:
    points: int = POINTS
    _times: deque[float] = field(init=False)
    _kv_times: deque[float] = field(init=False)
    _token_usage_pct: deque[float] = field(init=False)
    _gpu_used_gib: dict[str, deque[float]] = field(default_factory=dict)
    _gpu_util_pct: dict[str, deque[float]] = field(default_factory=dict)
    _last_taken_at: float | None = None
    _kv_source: str | None = None  # the source of the latest known KV usage
    _queued_since: float | None = None  # taken_at since which requests wait without a break

    def __post_init__(self) -> None:
        self._times = deque(maxlen=self.points)
        self._kv_times = deque(maxlen=self.points)
        self._token_usage_pct = deque(maxlen=self.points)

    def record(self, snapshot: Snapshot, interval_s: float | None = None) -> bool:
        """Append one point per series (once per snapshot); False when already recorded.
        `interval_s`: the refresh interval; a snapshot more than three intervals after the
        previous one leaves a gap (None: no gaps by time)."""
        taken_at = snapshot.taken_at
        if taken_at == self._last_taken_at:
            return False
        gap = (
            interval_s is not None
            and self._last_taken_at is not None
            and taken_at - self._last_taken_at > STALE_INTERVALS * interval_s
        )
        self._last_taken_at = taken_at
        if gap:
            self._break_all(taken_at)
        self._record_kv(snapshot, gap)
        self._times.append(taken_at)
        seen: set[str] = set()
        for gpu in snapshot.gpus:
            key = gpu.sample.uuid or str(gpu.sample.index)
            seen.add(key)
            used = self._gpu_used_gib.setdefault(key, deque(maxlen=self.points))
            util = self._gpu_util_pct.setdefault(key, deque(maxlen=self.points))
            used.append(gpu.sample.used_gib if gpu.sample.status == GpuStatus.OK else math.nan)
            value = gpu.sample.utilization_pct
            util.append(float(value) if value is not None else math.nan)
        # A GPU that went away keeps its buffer only while it might come back; a host with
        # GPUs swapped in and out must not accumulate buffers without bound.
        for key in list(self._gpu_used_gib):
            if key not in seen and len(self._gpu_used_gib) > max(len(seen), 1) * 2:
                del self._gpu_used_gib[key]
                self._gpu_util_pct.pop(key, None)
        return True

    def _break_all(self, taken_at: float) -> None:
        """A gap in time: every series gets a GAP point (the GPU ones stay aligned in time)."""
        self._times.append(taken_at)
        self._kv_times.append(taken_at)
        self._token_usage_pct.append(GAP)
        for buffer in (*self._gpu_used_gib.values(), *self._gpu_util_pct.values()):
            buffer.append(GAP)
        self._queued_since = None  # what the queue did meanwhile is unknown

    def _record_kv(self, snapshot: Snapshot, gap: bool) -> None:
        taken_at = snapshot.taken_at
        usage = kv_now(snapshot)
        known = usage.current and usage.source_kind != "none"
        source = usage.source_kind if known else None
        if source is not None and self._kv_source not in (None, source) and not gap:
            self._kv_times.append(taken_at)  # another source: its numbers start a new run
            self._token_usage_pct.append(GAP)
        if source is not None:
            self._kv_source = source
        pct = usage.usage_pct if known else None
        self._kv_times.append(taken_at)
        self._token_usage_pct.append(pct if pct is not None else math.nan)
        queued = usage.load.queued_requests if known else None
        self._queued_since = queue_since(self._queued_since, queued, taken_at)

    def seed_token_usage(self, points: Iterable[tuple[float, float]], step_s: float) -> int:
        """Put earlier KV usage (`points`: (timestamp, percent), e.g. Prometheus' history of a
        host opened from the fleet, `step_s` apart) before the points recorded so far; returns
        how many points it put in (GAPs included).

        Older points never come after newer ones: only points older than the oldest KV point
        kept go in, before it (the live points win where both cover the same time). The usual
        rules hold: a hole of more than STALE_INTERVALS steps (within the seed, or between the
        seed and the first live point) is a GAP, a value that is not a percentage (NaN, ±Inf,
        negative) is NaN (unknown), and the buffer keeps the newest `points` points.
        """
        first_live = self._kv_times[0] if self._kv_times else None
        limit = STALE_INTERVALS * step_s
        times: list[float] = []
        values: list[float] = []
        for taken_at, pct in sorted(points):
            if first_live is not None and taken_at >= first_live:
                break
            if times and taken_at == times[-1]:
                continue
            if times and taken_at - times[-1] > limit:
                times.append(taken_at)
                values.append(GAP)
            times.append(taken_at)
            values.append(pct if math.isfinite(pct) and pct >= 0 else math.nan)
        if not values:
            return 0
        if first_live is not None and first_live - times[-1] > limit:
            times.append(first_live)
            values.append(GAP)
        seeded = len(values)
        kv_times = deque(times, maxlen=self.points)
        kv_times.extend(self._kv_times)
        usage = deque(values, maxlen=self.points)
        usage.extend(self._token_usage_pct)
        self._kv_times, self._token_usage_pct = kv_times, usage
        return seeded

    def queued_for_s(self) -> float | None:
        """How long requests have been queued without the queue emptying (None: no queue, or
        not known), as of the latest snapshot."""
        if self._queued_since is None or self._last_taken_at is None:
            return None
        return self._last_taken_at - self._queued_since

    @staticmethod
    def _span(times: deque[float], count: int) -> float:
        if count < 2:
            return 0.0
        tail = list(times)[-count:]
        return tail[-1] - tail[0]

    def token_usage_pct(self) -> Series:
        values = tuple(self._token_usage_pct)
        return Series(values, self._span(self._kv_times, len(values)))

    def gpu_used_gib(self, key: str) -> Series:
        values = tuple(self._gpu_used_gib.get(key, ()))
        return Series(values, self._span(self._times, len(values)))

    def gpu_util_pct(self, key: str) -> Series:
        values = tuple(self._gpu_util_pct.get(key, ()))
        return Series(values, self._span(self._times, len(values)))

    def size(self) -> int:
        """Points kept over all buffers (the soak reports it)."""
        return (
            len(self._token_usage_pct)
            + sum(len(b) for b in self._gpu_used_gib.values())
            + sum(len(b) for b in self._gpu_util_pct.values())
        )
