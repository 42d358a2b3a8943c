"""Dates for times a log gives without one: `[22:24:31]` (a custom log format, or a copy
trimmed by its writer) and the diffusion runtime's `[12-11 17:47:40]` (no year).

Each such time takes the latest date that does not put it after the moment the line is known
to have been written by: the journal's own time of the entry, the time a followed line was
read, or, for a file read whole, the file's modification time (its last line's write). So a
log that runs past midnight dates 23:59:58 on one day and 00:00:03 on the next, and its
durations stay positive. A log longer than a day read whole can only be dated by its last day:
the earlier lines' times of day stay right, their dates may not, and the report says which
moment the dates came from.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta

from kvtop.sglang.events import LinePrefix

# How far a line's time may run ahead of the moment it was known to exist: the writer's and
# the reader's clocks, a line stamped when begun and written a moment later.
AHEAD_SLACK = timedelta(minutes=10)
# A time more than this before the line before it is on a later day (the log ran past midnight
# while the moment the dates come from cannot tell: a file longer than a day read whole).
_BACKWARDS = timedelta(hours=12)

_TIME_RE = re.compile(
    r"(?:(?P<month>\d\d)-(?P<day>\d\d) )?(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))?"
)

# Where the moment the dates come from was taken, in the report's words.
JOURNAL = "the journal's time of each line"
READ_NOW = "the time each line was read"
FILE_TIME = "the file's modification time"
TODAY = "today's date (nothing else was known)"


class LineDates:
    """Dates undated times, in log order; `said` is the sentence the report shows (None until a
    time needed a date)."""

    def __init__(self) -> None:
        self.bound: datetime | None = None  # the line was written by then (local time)
        self.basis = TODAY
        self.last: datetime | None = None
        self.dated = 0  # how many lines were given a date
        self.first: tuple[str, datetime] | None = None  # the first such time, as logged and dated

    def written_by(self, moment: datetime | None, basis: str) -> None:
        """The lines that follow were written by MOMENT (local time, no zone)."""
        self.bound = None if moment is None else moment.replace(tzinfo=None)
        self.basis = basis if moment is not None else TODAY

    def date(self, prefix: LinePrefix, now: datetime | None = None) -> LinePrefix:
        """PREFIX with its undated time given a date (unchanged when it has one, or when its
        time is not a time of day at all)."""
        if not prefix.undated or prefix.time_text is None:
            return prefix
        stamp = self._stamp(prefix.time_text, self.bound or now or datetime.now())
        if stamp is None:
            return prefix
        self.last = stamp
        self.dated += 1
        if self.first is None:
            self.first = (prefix.time_text, stamp)
        return replace(prefix, timestamp=stamp)

    def _stamp(self, text: str, bound: datetime) -> datetime | None:
        match = _TIME_RE.fullmatch(text)
        if match is None:
            return None
        try:
            stamp = bound.replace(
                hour=int(match["h"]),
                minute=int(match["m"]),
                second=int(match["s"]),
                microsecond=int((match["f"] or "0").ljust(6, "0")),
            )
            if match["month"] is not None:
                stamp = _latest_year(stamp, int(match["month"]), int(match["day"]), bound)
            elif stamp > bound + AHEAD_SLACK:
                stamp -= timedelta(days=1)  # written before midnight, read after it
        except ValueError:  # 25:61:61, 02-30: not a time
            return None
        if match["month"] is None and self.last is not None:
            while stamp < self.last - _BACKWARDS:
                stamp += timedelta(days=1)
        return stamp

    @property
    def said(self) -> str | None:
        if self.first is None:
            return None
        logged, stamp = self.first
        return (
            f"times logged without a date (first: {logged}) are dated by {self.basis}: "
            f"the first is {stamp:%Y-%m-%d %H:%M:%S}"
        )


def _latest_year(stamp: datetime, month: int, day: int, bound: datetime) -> datetime:
    """`12-11 17:47:40` in the latest year that does not put it after BOUND."""
    dated = stamp.replace(month=month, day=day)
    if dated > bound + AHEAD_SLACK:
        dated = dated.replace(year=dated.year - 1)
    return dated
