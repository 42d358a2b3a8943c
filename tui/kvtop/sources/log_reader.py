"""The server's log as the session reads it: a file or stdin read whole, a file followed, or
the systemd journal (the latest run, earlier runs as restarts, then followed), each line folded
into the startup tracker and the raw-lines ring; the log's state and age for the Snapshot."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import datetime
from typing import TYPE_CHECKING

from kvtop.model.snapshot import NOT_YET, SourceHealth, SourceState
from kvtop.sglang import line_dates
from kvtop.sglang.events import LinePrefix
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from kvtop.sglang.systemd_lines import parse_systemd_message
from kvtop.sources.log_follow import LogFollower
from kvtop.sources.log_text import LogUnreadable, log_lines
from kvtop.sources.pacing import Lane

if TYPE_CHECKING:  # the journal imports systemd: only when a unit is asked for
    from kvtop.sources.journal import JournalLine, JournalSource

# A log notice (truncated, rotated) stays on screen this long after it happened.
NOTICE_SHOW_S = 60.0
NO_LOG = SourceHealth("log", SourceState.OFF, "no log given.", asked_off=True)


def _reading(unit: str | None) -> SourceHealth:
    """Before the first read ends (a long journal takes a while): on its way, not absent."""
    name, what = ("journal", "the journal") if unit else ("log", "the log")
    return SourceHealth(name, SourceState.DEGRADED, f"reading {what}…", cause=NOT_YET)


class LogReader:
    """One log source feeding one tracker and its raw-lines ring."""

    def __init__(
        self,
        tracker: StartupTracker,
        raw_lines: RawLines,
        *,
        log_file: str | None = None,
        unit: str | None = None,
        journal_dir: str | None = None,
    ) -> None:
        self.tracker, self.raw_lines = tracker, raw_lines
        self.log_file, self.unit, self.journal_dir = log_file, unit, journal_dir
        self.health = NO_LOG if not (log_file or unit) else _reading(unit)
        self.good_at: float | None = None  # a read of the file or journal (not its latest line)
        self.follower: LogFollower | None = None
        self.journal: JournalSource | None = None
        self._notice: tuple[int, str | None] = (0, None)  # (count seen, latest text)
        self._notice_at = 0.0

    @property
    def from_this_host(self) -> bool:
        """This host's journal, not files copied from another host: the views may take the
        log's times as this host's (uptimes, ages)."""
        return bool(self.unit) and not self.journal_dir

    def take(self, health: SourceHealth) -> None:
        """Lines folded by another source (the demo's story): its state, read now."""
        self.health, self.good_at = health, time.monotonic()

    def _fold(self, lines: list[str | bytes] | list[str]) -> None:
        fold_lines(lines, self.tracker, self.raw_lines)

    def _fold_read_now(self, lines: list[str]) -> None:
        """Lines read as they came: a time logged without a date was written by now."""
        self.tracker.dates.written_by(datetime.now(), line_dates.READ_NOW)
        self._fold(lines)

    def _fold_journal(self, lines: list[JournalLine]) -> None:
        """The unit's lines in order: the server's through the log parser, systemd's own
        (PID 1's lines about the unit) as what systemd says about the run."""
        run: list[str] = []
        for line in lines:
            if not line.systemd:
                if line.realtime is not None and _undated(line.text):
                    # A time without a date: the journal's time of this entry dates it.
                    if run:
                        self._fold(run)
                        run = []
                    self.tracker.dates.written_by(_local(line.realtime), line_dates.JOURNAL)
                run.append(line.text)
                continue
            if run:
                self._fold(run)
                run = []
            self.raw_lines.add(f"systemd: {line.text}")
            event = parse_systemd_message(_journal_prefix(line.realtime), line.text)
            if event is not None:
                self.tracker.feed(event)
        if run:
            self._fold(run)

    def _take_counter(self, source: JournalSource) -> None:
        if source.restart_counter is not None:
            self.tracker.note_restart_counter(source.restart_counter)

    # -- once ---------------------------------------------------------------------------------
    def read_file(self) -> None:
        """The whole file (or stdin); raises LogUnreadable with the log marked off."""
        if not self.log_file:
            return
        self.tracker.dates.written_by(*_written_by(self.log_file))
        try:
            with log_lines(self.log_file) as lines:
                fold_lines(lines, self.tracker, self.raw_lines)
        except LogUnreadable as exc:
            self.health = SourceHealth("log", SourceState.OFF, str(exc))
            raise
        self.good_at = time.monotonic()
        # Read in part (an endless stream, or a huge file): the report says which part. A line
        # read by its start only is said too, but the log was read: it stays OK.
        words = " ".join(w for w in (lines.cut, lines.overlong_words) if w) or None
        self.health = SourceHealth(
            "log", SourceState.DEGRADED if lines.cut else SourceState.OK, words
        )

    async def read_journal(self) -> None:
        """The unit's latest run, its earlier runs as restarts before it."""
        from kvtop.sources.journal import JournalSource

        source = JournalSource(self.unit or "", directory=self.journal_dir)
        latest = [line async for line in source.read_latest()]
        if latest:
            await self._fold_earlier_runs(source, latest[0])
        self._take_counter(source)
        self._fold_journal(latest)
        if latest or not source.status:
            self.good_at = time.monotonic()
        self.health = SourceHealth(
            "journal",
            SourceState.DEGRADED if source.status else SourceState.OK,
            source.status or None,
        )

    async def _fold_earlier_runs(self, source: JournalSource, first: JournalLine) -> None:
        """The unit's runs before its latest are restarts, as the live view counts those it
        sees start; each one is a start of its own, whatever its first lines are."""
        for run in await source.read_earlier(first):
            self._fold_journal(run)
            self.tracker.begin_new_start()

    # -- live ---------------------------------------------------------------------------------
    async def follow(self, lane: Lane) -> None:
        """The journal or the file, line by line as they come, paced by `lane`."""
        try:
            if self.unit:
                from kvtop.sources.journal import JournalSource

                journal = self.journal = JournalSource(
                    self.unit, directory=self.journal_dir, lane=lane
                )
                self.health = SourceHealth("journal", SourceState.OK)
                run: str | None = None
                counted = False
                async for line in journal.lines():
                    if run is not None and line.invocation_id not in (None, run):
                        self.tracker.begin_new_start()  # a new invocation is a new start
                    run = line.invocation_id or run
                    if not counted and journal.restart_counter is not None:
                        counted = True
                        self._take_counter(journal)
                    self._fold_journal([line])
                return
            if not self.log_file:
                return
            follower = self.follower = LogFollower(self.log_file, lane=lane)
            self.health = SourceHealth("log", SourceState.OK)
            async for text in follower.lines():
                self._fold_read_now([text])
        finally:
            lane.leave()  # ended (stdin closed, no log): the ticks no longer wait for it

    def state_now(self) -> tuple[str, ...]:
        """Bring the health up to date (a followed file or the journal changes state without a
        new line: removed, truncated, unreachable); the log's notice while it is recent."""
        if self.journal is not None:
            status = self.journal.status
            self.health = SourceHealth(
                "journal", SourceState.DEGRADED if status else SourceState.OK, status
            )
            if not status:
                self.good_at = time.monotonic()
        follower = self.follower
        if follower is None:
            return ()
        status = follower.status
        self.health = SourceHealth(
            "log", SourceState.DEGRADED if status else SourceState.OK, status
        )
        if not status:  # read this tick (or waiting on a quiet file): fresh
            self.good_at = time.monotonic()
        notices = follower.notices
        key = (len(notices), notices[-1] if notices else None)
        if notices and key != self._notice:
            self._notice, self._notice_at = key, time.monotonic()
        if notices and time.monotonic() - self._notice_at < NOTICE_SHOW_S:
            return (f"log: {notices[-1]}",)
        return ()


def _local(realtime: datetime) -> datetime:
    """A journal entry's time as SGLang's own lines have it (local time, no zone)."""
    return realtime.astimezone().replace(tzinfo=None)


def _undated(text: str) -> bool:
    """The line may carry a time without a date (`[22:24:31]`, `[12-11 17:47:40]`, `22:24:31
    TP1]` with its bracket lost): cheap, and a false yes only costs a fold boundary."""
    return len(text) > 9 and ((text[0] == "[" and text[3] in ":-") or text[2] == ":")


def _written_by(log_file: str) -> tuple[datetime | None, str]:
    """The moment a file read whole was last written (its modification time), or now for
    stdin, with the words that say so."""
    if log_file == "-":
        return datetime.now(), line_dates.READ_NOW
    try:
        return datetime.fromtimestamp(os.stat(log_file).st_mtime), line_dates.FILE_TIME
    except (OSError, ValueError, OverflowError):
        return None, line_dates.TODAY


def _journal_prefix(realtime: datetime | None) -> LinePrefix:
    """A journal entry's time as SGLang's own lines have it (local time, no zone)."""
    if realtime is None:
        return LinePrefix(time_text=None, timestamp=None, rank="")
    local = _local(realtime)
    return LinePrefix(time_text=f"{local:%Y-%m-%d %H:%M:%S}", timestamp=local, rank="")


def read_once(
    log_file: str | None, unit: str | None, journal_dir: str | None = None
) -> StartupTracker:
    """A one-shot command's read (`kvtop plan`, `kvtop diff`): the whole log file, or the unit's
    journal (its latest run, earlier runs as restarts), folded into a new tracker. Raises
    LogUnreadable with a sentence: a file that cannot be read, or a journal that could not be
    read and gave no startup line."""
    tracker = StartupTracker()
    reader = LogReader(tracker, RawLines(), log_file=log_file, unit=unit, journal_dir=journal_dir)
    if log_file:
        reader.read_file()
    else:
        asyncio.run(reader.read_journal())
    if unit and reader.health.detail and not tracker.current.ranks:
        raise LogUnreadable(f"journal of {unit}: {reader.health.detail}")
    return tracker
