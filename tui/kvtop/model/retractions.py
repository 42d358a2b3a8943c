"""Retractions while serving: running requests SGLang took back to the queue because the KV pool
could not hold the next decode step (they run again later, their KV computed again).

Two sources say the same: the log's retraction lines (sglang/retraction_record.py) and SGLang's
counter `sglang:num_retracted_requests_total` (0.5.8+). Both give a count since the server
started and a rate, retracted requests per minute over a window; metrics are preferred when
scraped, as for the KV usage (kv_usage.py). A counter gives a rate only over readings kvtop has
taken, so until its readings span MIN_SPAN_S the log's rate stands in where the log is read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from kvtop.sglang.metrics import MetricsSample
from kvtop.sglang.start_state import Startup

# The least span a counter's readings must cover to give a rate: two readings a second apart
# with one retraction between them are no "60 a minute".
MIN_SPAN_S = 60.0


@dataclass(frozen=True, slots=True)
class Retractions:
    """Requests retracted since the server started and how often lately."""

    count: int  # requests retracted since the server started (a log: since its start line)
    per_min: float | None  # retracted requests per minute over `window_s`; None: not known yet
    window_s: float  # the span the rate is measured over
    in_window: int | None  # requests retracted within that span
    latest_at: float | None  # epoch seconds of the latest retraction (None: not known)
    source: str  # where the count comes from: "metrics" or "log"
    rate_source: str | None  # where the rate comes from (None: no rate yet)
    new_token_ratio: float | None = None  # SGLang's, after the latest retraction (the log's)
    log_lines: int = 0  # retraction lines in the log (0.4.6's said `Decode out of memory`)


def window_text(seconds: float) -> str:
    """`5 min`, `1.5 min`, `45 s`."""
    if seconds >= 60:
        return f"{round(seconds / 60, 1):g} min"
    return f"{round(seconds):d} s"


def rate_text(found: Retractions) -> str:
    """`2.4/min over 5 min`; `rate not known yet` before a rate can be measured."""
    if found.per_min is None:
        return "rate not known yet"
    return f"{found.per_min:.1f}/min over {window_text(found.window_s)}"


def retractions_text(found: Retractions) -> str:
    """The report's and the KV panel's words: `12 retracted since start · 2.4/min over 5 min`."""
    return f"{found.count:,} retracted since start · {rate_text(found)}"


@dataclass(frozen=True, slots=True)
class _Rate:
    per_min: float | None
    window_s: float
    in_window: int | None
    source: str | None


def _log_known(startup: Startup) -> bool:
    """The log was read and dated: its retraction lines, or their absence, say something."""
    return startup.first_time is not None or startup.retractions.lines > 0


def _log_rate(startup: Startup, now: datetime, window_s: float) -> _Rate:
    """Over the whole window: a server that started within it retracted nothing before."""
    record = startup.retractions
    if record.lines and record.latest_at is None:
        return _Rate(None, window_s, None, None)  # lines without times: no rate
    n = record.requests_after(now - timedelta(seconds=window_s))
    return _Rate(n * 60.0 / window_s, window_s, n, "log")


class RetractionReadings:
    """The counter's readings over the latest window (one per snapshot), for its rate; one per
    session, like the watch that holds it."""

    def __init__(self) -> None:
        self._readings: deque[tuple[float, int]] = deque()
        self._grew_at: float | None = None

    def _note(self, total: int | None, now: float, window_s: float) -> None:
        readings = self._readings
        if total is None:
            readings.clear()
            return
        if readings and (total < readings[-1][1] or now <= readings[-1][0]):
            readings.clear()  # the counter started again (a restart), or the clock went back
            self._grew_at = None
        if readings and total > readings[-1][1]:
            self._grew_at = now
        readings.append((now, total))
        # Keep one reading at or before the window's start: the rate's base.
        while len(readings) > 1 and readings[1][0] <= now - window_s:
            readings.popleft()

    def _metrics_rate(self, now: float, window_s: float) -> _Rate | None:
        first_at, first_total = self._readings[0]
        span = min(window_s, now - first_at)
        if span < MIN_SPAN_S:
            return None
        n = self._readings[-1][1] - first_total
        return _Rate(n * 60.0 / span, span, n, "metrics")

    def look(
        self,
        startup: Startup,
        metrics: MetricsSample | None,
        taken_at: float,
        window_s: float,
    ) -> Retractions | None:
        """The retractions as of `taken_at` (kvtop's clock; the log's is local time, as
        SGLang's); None when no source knows of them."""
        total = metrics.retracted_requests_total if metrics is not None else None
        self._note(total, taken_at, window_s)
        record = startup.retractions
        log_known = _log_known(startup)
        now = datetime.fromtimestamp(taken_at)
        if total is None and not log_known:
            return None
        log_rate = _log_rate(startup, now, window_s) if log_known else None
        latest = record.latest_at.timestamp() if record.latest_at is not None else None
        if total is not None:
            rate = self._metrics_rate(taken_at, window_s) or log_rate
            count, source = total, "metrics"
            latest = latest if latest is not None else self._grew_at
        else:
            rate, count, source = log_rate, record.requests, "log"
        rate = rate or _Rate(None, window_s, None, None)
        return Retractions(
            count=count,
            per_min=rate.per_min,
            window_s=rate.window_s,
            in_window=rate.in_window,
            latest_at=latest,
            source=source,
            rate_source=rate.source,
            new_token_ratio=record.new_token_ratio,
            log_lines=record.lines,
        )
