"""A journal entry as kvtop reads it: its fields as a JournalLine, a unit's earlier runs, systemd's
restart counter; shared by both ways of reading the journal."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

# --once with --unit: the unit's runs before the latest count as restarts. They are
# read back from the latest run's first entry, at most this many runs, entries and seconds back,
# so a unit with years of history costs the same as a new one.
EARLIER_RUNS = 20
EARLIER_ENTRIES = 20_000
EARLIER_WINDOW_S = 24 * 3600
# How far back the restart counter is looked for before the latest run (PID 1's lines only).
COUNTER_LOOKBACK = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_RESTART_COUNTER = re.compile(r"Scheduled restart job, restart counter is at (\d{1,9})")


@dataclass(frozen=True, slots=True)
class JournalLine:
    """One journal entry of the unit: its MESSAGE as text, plus where and when it was logged."""

    text: str
    realtime: datetime | None
    invocation_id: str | None
    cursor: str | None
    # systemd's own line about the unit (PID 1's `UNIT=` entry), not the server's output.
    systemd: bool = False


def field_text(value: Any) -> str | None:
    if isinstance(value, list):  # a field logged twice: the first one is the one that was meant
        value = value[0] if value else None
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def message_text(value: Any) -> str:
    # journalctl -o json writes a MESSAGE that is not valid UTF-8 as a list of byte values.
    if isinstance(value, list) and value and all(isinstance(b, int) for b in value):
        value = bytes(value)
    elif isinstance(value, list):
        value = value[0] if value else ""
        if isinstance(value, list):
            value = bytes(value)
    return field_text(value) or ""


def _realtime(value: Any) -> datetime | None:
    try:
        return _EPOCH + timedelta(microseconds=int(value))
    except (TypeError, ValueError, OverflowError):
        return None


def realtime_us(value: Any) -> int | None:
    """An entry's __REALTIME_TIMESTAMP in µs since the epoch; None when it is not a number."""
    try:
        return int(field_text(value) or "")
    except ValueError:
        return None


def epoch_us(when: datetime | None) -> int | None:
    return None if when is None else (when - _EPOCH) // timedelta(microseconds=1)


def entry_line(entry: dict[str, Any]) -> JournalLine:
    systemd = field_text(entry.get("_PID")) == "1" and entry.get("UNIT") is not None
    # PID 1 names the run it speaks of in INVOCATION_ID (its own _SYSTEMD_* fields are its).
    invocation = entry.get("INVOCATION_ID") if systemd else entry.get("_SYSTEMD_INVOCATION_ID")
    return JournalLine(
        text=message_text(entry.get("MESSAGE")),
        realtime=_realtime(entry.get("__REALTIME_TIMESTAMP")),
        invocation_id=field_text(invocation),
        cursor=field_text(entry.get("__CURSOR")),
        systemd=systemd,
    )


def invocation_of(entry: dict[str, Any]) -> str | None:
    return entry_line(entry).invocation_id


def entries_after(entries: list[dict[str, Any]], after_us: int | None) -> list[dict[str, Any]]:
    """The entries logged after AFTER_US (all of them when None)."""
    if after_us is None:
        return entries
    return [e for e in entries if (realtime_us(e.get("__REALTIME_TIMESTAMP")) or 0) > after_us]


def runs_before(newest_first: list[dict[str, Any]], first: JournalLine) -> list[list[JournalLine]]:
    """Entries read back from before FIRST, grouped into runs (invocations), oldest first: at
    most EARLIER_RUNS of them, none of FIRST's run, none older than EARLIER_WINDOW_S."""
    first_us = epoch_us(first.realtime)
    runs: dict[str | None, list[JournalLine]] = {}
    for entry in newest_first:
        line = entry_line(entry)
        if line.cursor == first.cursor or (
            line.invocation_id is not None and line.invocation_id == first.invocation_id
        ):
            continue
        when = epoch_us(line.realtime)
        if first_us is not None and when is not None and when < first_us - EARLIER_WINDOW_S * 10**6:
            break
        if line.invocation_id not in runs and len(runs) >= EARLIER_RUNS:
            break
        runs.setdefault(line.invocation_id, []).append(line)
    return [list(reversed(lines)) for lines in reversed(runs.values())]


def restart_counter_in(entries: Iterable[dict[str, Any]]) -> int | None:
    """The newest `restart counter is at N` among PID 1's entries given newest first."""
    for entry in entries:
        found = _RESTART_COUNTER.search(message_text(entry.get("MESSAGE")))
        if found is not None:
            return int(found.group(1))
    return None
