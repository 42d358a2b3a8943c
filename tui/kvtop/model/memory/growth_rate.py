"""How fast a memory figure grows over a session, in GiB/day, from a history kept bounded.

A leak shows as memory that climbs steadily for hours or days: too slow to see on a sparkline
of the last ten minutes, plain on a least-squares line through the session's readings. The
readings are kept in at most MAX_BUCKETS buckets: when they fill up, neighbours are merged
and each bucket covers twice the time, so a week at one reading a second costs as little
memory as the first few minutes. A bucket keeps its readings' mean time and mean value and
how many went in (the fit weighs it by that count), so merging changes the fit very little.

Pure: no clock, no Snapshot (tui/kvtop/model/status/memory_growth.py feeds it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_BUCKETS = 256
SECONDS_PER_DAY = 86_400.0
# A climb is a rate at least this many standard errors of the fit above zero: readings that
# breathe (the allocator caching and freeing) put a line's slope anywhere within a few.
CLEAR_OF_NOISE = 4.0


@dataclass(slots=True)
class _Bucket:
    start: float  # the time of its first reading
    time_sum: float
    value_sum: float
    count: int

    @property
    def at(self) -> float:
        return self.time_sum / self.count

    @property
    def value(self) -> float:
        return self.value_sum / self.count


def _merged(a: _Bucket, b: _Bucket) -> _Bucket:
    return _Bucket(a.start, a.time_sum + b.time_sum, a.value_sum + b.value_sum, a.count + b.count)


# A fit (slope per second and its standard error, or None) and the slopes of the two halves.
_Fitted = tuple[tuple[float, float | None] | None, tuple[float | None, float | None]]


@dataclass(slots=True)
class GrowthSeries:
    """(time, GiB) readings of one figure, oldest first, in at most `max_buckets` buckets."""

    max_buckets: int = MAX_BUCKETS
    _buckets: list[_Bucket] = field(default_factory=list)
    _width_s: float = 0.0  # a reading this close to the last bucket's start joins it
    first_at: float | None = None
    last_at: float | None = None
    last_value: float | None = None
    # The fit of the buckets (slope, its error, the two halves' slopes), made again only when a
    # bucket begins or the buckets are merged: a reading that joins the last bucket moves it by
    # less than a bucket's share of the span (under 1 % once a rate is given), and fitting 256
    # buckets for every GPU and rank at every refresh was the model's largest cost of a tick.
    _fit_for: tuple[int, float, float | None] | None = field(
        default=None, repr=False, compare=False
    )
    _fit_kept: _Fitted | None = field(default=None, repr=False, compare=False)

    def add(self, at: float, value: float) -> None:
        """One reading. A reading dated before the last one (the clock went back) starts the
        series again: the readings before say nothing about the rate now."""
        if self.last_at is not None and at < self.last_at:
            self.clear()
        if self.first_at is None:
            self.first_at = at
        self.last_at, self.last_value = at, value
        last = self._buckets[-1] if self._buckets else None
        if last is not None and at - last.start < self._width_s:
            last.time_sum += at
            last.value_sum += value
            last.count += 1
            return
        self._buckets.append(_Bucket(at, at, value, 1))
        if len(self._buckets) > self.max_buckets:
            self._compact()

    def _compact(self) -> None:
        """Neighbours merged: half the buckets, each covering twice the time."""
        b = self._buckets
        if self._width_s <= 0:
            # Until the first merge a bucket is one reading: the first width is twice the
            # readings' mean spacing.
            spacing = (b[-1].start - b[0].start) / max(1, len(b) - 1)
            self._width_s = spacing
        self._width_s *= 2
        pairs = [_merged(b[i], b[i + 1]) for i in range(0, len(b) - 1, 2)]
        if len(b) % 2:
            pairs.append(b[-1])
        self._buckets = pairs

    def clear(self) -> None:
        self._fit_for = self._fit_kept = None
        self._buckets = []
        self._width_s = 0.0
        self.first_at = self.last_at = self.last_value = None

    @property
    def span_s(self) -> float:
        """Seconds from the first reading to the latest."""
        if self.first_at is None or self.last_at is None:
            return 0.0
        return self.last_at - self.first_at

    @property
    def buckets(self) -> int:
        """Buckets kept (at most max_buckets): what the series costs in memory."""
        return len(self._buckets)

    def points(self) -> list[tuple[float, float, int]]:
        """(mean time, mean value, readings) per bucket, oldest first."""
        return [(b.at, b.value, b.count) for b in self._buckets]

    def first_value(self) -> float | None:
        return self._buckets[0].value if self._buckets else None

    def fitted(self) -> _Fitted:
        """The least-squares fit of the buckets and the slopes of the span's two halves, kept
        until a bucket begins or the buckets merge."""
        key = (len(self._buckets), self._width_s, self.first_at)
        if self._fit_kept is None or key != self._fit_for:
            points = self.points()
            middle = (self.first_at or 0.0) + self.span_s / 2
            halves = (
                slope_per_s([p for p in points if p[0] <= middle]),
                slope_per_s([p for p in points if p[0] > middle]),
            )
            self._fit_for, self._fit_kept = key, (_fit(points), halves)
        return self._fit_kept


def _fit(points: list[tuple[float, float, int]]) -> tuple[float, float | None] | None:
    """The weighted least-squares slope of value over time (value per second) and its standard
    error (None with two buckets only); None with fewer than two distinct times. A bucket of n
    readings weighs n: its mean is n times as sure as one reading."""
    n = sum(w for _, _, w in points)
    if n == 0 or len(points) < 2:
        return None
    mean_t = sum(t * w for t, _, w in points) / n
    mean_v = sum(v * w for _, v, w in points) / n
    var = sum(w * (t - mean_t) ** 2 for t, _, w in points)
    if var <= 0:
        return None
    slope = sum(w * (t - mean_t) * (v - mean_v) for t, v, w in points) / var
    if len(points) < 3:
        return slope, None
    residual = sum(w * (v - mean_v - slope * (t - mean_t)) ** 2 for t, v, w in points)
    return slope, math.sqrt(residual / (len(points) - 2) / var)


def slope_per_s(points: list[tuple[float, float, int]]) -> float | None:
    """The weighted least-squares slope of value over time (value per second); None with
    fewer than two distinct times."""
    fit = _fit(points)
    return None if fit is None else fit[0]


@dataclass(frozen=True, slots=True)
class GrowthRate:
    """One figure's growth over the session. `gib_per_day` None: the readings do not span
    `least_span_s` yet (a rate from minutes extrapolates noise to a day)."""

    gib_per_day: float | None
    span_s: float
    first_gib: float | None
    latest_gib: float | None
    # A climb: the rate clear of the readings' noise (CLEAR_OF_NOISE standard errors), and both
    # halves of the span growing at least half of it, not one step (the allocator caching a
    # larger batch once) that a line through the whole span would spread.
    steady: bool = False


@dataclass(frozen=True, slots=True)
class GpuGrowth:
    """One GPU's runtime memory growth, and its free memory now (for the time left)."""

    index: int
    ranks: tuple[str, ...]
    runtime: GrowthRate
    free_gib: float | None

    @property
    def days_until_full(self) -> float | None:
        """At the rate measured, days until the GPU has no free memory left (None: no rate,
        or not growing)."""
        rate = self.runtime.gib_per_day
        if rate is None or rate <= 0 or self.free_gib is None:
            return None
        return self.free_gib / rate


@dataclass(frozen=True, slots=True)
class RankGrowth:
    """One rank's host memory (RSS of its processes) growth."""

    rank: str
    pids: tuple[int, ...]
    host: GrowthRate


@dataclass(frozen=True, slots=True)
class MemoryGrowth:
    """The session's growth figures; `watched` False: one look (--once, --check), no history."""

    gpus: tuple[GpuGrowth, ...] = ()
    ranks: tuple[RankGrowth, ...] = ()
    least_span_s: float = 0.0
    watched: bool = False

    def gpu(self, index: int) -> GpuGrowth | None:
        return next((g for g in self.gpus if g.index == index), None)


NO_GROWTH = MemoryGrowth()


def growth_rate(series: GrowthSeries, least_span_s: float) -> GrowthRate:
    """The series' slope in GiB/day once it spans `least_span_s`, and whether both halves of
    the span grow too."""
    span = series.span_s
    if span < least_span_s or series.first_at is None:
        return GrowthRate(None, span, series.first_value(), series.last_value)
    fit, halves = series.fitted()
    if fit is None:
        return GrowthRate(None, span, series.first_value(), series.last_value)
    slope, error = fit
    per_day = slope * SECONDS_PER_DAY
    clear_of_noise = error is None or slope >= CLEAR_OF_NOISE * error
    steady = (
        per_day > 0
        and clear_of_noise
        and all(h is not None and h * SECONDS_PER_DAY >= per_day / 2 for h in halves)
    )
    return GrowthRate(per_day, span, series.first_value(), series.last_value, steady)
