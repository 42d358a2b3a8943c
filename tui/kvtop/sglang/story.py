"""Read a whole log's worth of lines into a StartupTracker, fast enough for million-line logs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kvtop.sglang.events import RankSeen
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker

# A long-running server writes almost nothing but batch lines. Only the latest per rank matters
# to a report, so runs of them are kept raw and only the tail of each run is parsed
# (measured: parsing every batch line made a 1M-line log take ~4 s instead of ~1 s).
_BATCH_TAIL = 256


def _is_batch(line: str) -> bool:
    return ("Decode batch" in line or "Prefill batch" in line) and "\r" not in line


def fold_lines(
    lines: Iterable[str | bytes],
    tracker: StartupTracker | None = None,
    raw: RawLines | None = None,
) -> StartupTracker:
    """Parse every line in order; returns the tracker (a new one unless given). `raw` keeps
    the latest lines as written (the events pane's log view)."""
    tracker = tracker or StartupTracker()
    pending: deque[str] = deque(maxlen=_BATCH_TAIL)
    skipped = 0

    def flush() -> None:
        nonlocal skipped
        for raw in pending:
            event = parse_line(raw)
            if event is not None:
                tracker.feed(event)
        tracker.current.batch_lines += skipped
        pending.clear()
        skipped = 0

    count = 0
    # Only the ring's worth of lines is kept raw: a C-level append per line, processed once.
    tail: deque[str | bytes] = deque(maxlen=raw.max_lines if raw is not None else 0)
    for line in lines:
        count += 1
        tail.append(line)
        if isinstance(line, str) and _is_batch(line):
            if len(pending) == _BATCH_TAIL:
                skipped += 1
            pending.append(line)
            continue
        event = parse_line(line)
        if event is None:
            continue
        if type(event) is RankSeen and event.prefix.rank in tracker.current.ranks:
            continue  # a rank already known says nothing new (most lines of a busy rank)
        if pending:
            flush()
        tracker.feed(event)
    if pending:
        flush()
    if raw is not None:
        raw.extend(tail)
        raw.seen += count - len(tail)
    tracker.lines_seen += count
    return tracker
