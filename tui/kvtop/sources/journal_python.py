"""The journal read through systemd's Python module (systemd-python): an sd-journal reader on a
thread of its own, woken by the journal's inotify descriptor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from kvtop.sources.journal_entries import (
    COUNTER_LOOKBACK,
    EARLIER_ENTRIES,
    JournalLine,
    entry_line,
    field_text,
    invocation_of,
    restart_counter_in,
)
from kvtop.sources.journal_files import gone_roots, removed_sentence
from kvtop.sources.journal_sentences import (
    missing_sentence,
    permission_sentence,
    unreadable_journal_files,
)

if TYPE_CHECKING:
    from kvtop.sources.journal_backend import JournalHost

# Entries per call into the reader thread: big enough to amortise the hop, small enough that a
# run of a hundred thousand lines reaches the caller in steps rather than all at the end.
BATCH_ENTRIES = 2000
# With a reliable inotify descriptor this is only a safety net; without one it is the poll period.
SAFETY_POLL_S = 5.0
UNRELIABLE_POLL_S = 0.5
_T = TypeVar("_T")


def _keep(value: Any) -> Any:
    return value


# Raw values: MESSAGE is decoded here with replacement (the module's default would hand back
# bytes on bad UTF-8), and the timestamp stays in µs so both back-ends share one conversion.
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "MESSAGE": _keep,
    "__REALTIME_TIMESTAMP": _keep,
    "__MONOTONIC_TIMESTAMP": _keep,
    "_BOOT_ID": _keep,
}


# systemd's lines about the unit carry its name in UNIT= and come from PID 1 (what
# `journalctl -u UNIT` adds to the unit's own output).
def _systemd_match(unit: str) -> dict[str, str]:
    return {"UNIT": unit, "_PID": "1"}


class PythonJournal:
    """The unit's entries through systemd.journal.Reader, for SOURCE (what is common: the status,
    the journal's files, restarts, waits)."""

    def __init__(self, source: JournalHost) -> None:
        self.source = source
        self.unit = source.unit
        self.directory = source.directory
        self._cursor: str | None = None  # the last entry read, to read on after a reopen
        self._reader: Any = None
        self._fd = -1
        self._reliable = False
        self._executor: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Nothing runs of its own: the reader is closed when batches() ends."""

    async def entries_before(self, first: JournalLine) -> list[dict[str, Any]]:
        """The unit's entries before FIRST, newest first; [] when the journal cannot say."""
        assert first.cursor is not None
        try:
            return await asyncio.to_thread(self._back_from, first.cursor)
        except (OSError, ValueError):
            return []

    def _back_from(self, cursor: str) -> list[dict[str, Any]]:
        """Blocking: the unit's entries before CURSOR, newest first, at most EARLIER_ENTRIES."""
        reader, _, _ = self._open_reader()
        try:
            self._add_unit_match(reader)
            reader.seek_cursor(cursor)
            out: list[dict[str, Any]] = []
            while len(out) < EARLIER_ENTRIES:
                entry = reader.get_previous()
                if not entry:
                    break
                out.append(entry)
            return out
        finally:
            reader.close()

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        # One dedicated thread: sd-journal objects are not thread-safe, and close() queued
        # behind a running call can never free the reader under it.
        assert self._executor is not None
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    def _open_reader(self) -> tuple[Any, int, bool]:
        from systemd import journal

        if self.directory:
            reader = journal.Reader(path=self.directory, converters=_CONVERTERS)
        else:
            reader = journal.Reader(converters=_CONVERTERS)
        # The inotify watches start now, before the first read, so nothing written while the
        # latest run is being read can slip between the read and the follow.
        fd = reader.fileno()
        return reader, fd, bool(reader.reliable_fd())

    def _open_error(self, exc: OSError) -> str:
        if isinstance(exc, PermissionError):
            return permission_sentence(self.unit)
        if isinstance(exc, FileNotFoundError) and self.directory:
            return (
                f"cannot read the journal for {self.unit}: {self.directory} does not exist. "
                "Check the journal directory."
            )
        where = f" in {self.directory}" if self.directory else ""
        return (
            f"cannot open the journal{where} for {self.unit}: {exc.strerror or exc}. "
            "Check that the journal is there and readable."
        )

    def _add_unit_match(self, reader: Any, invocation_id: str | None = None) -> None:
        """The unit's output, or PID 1's lines about it (journalctl -u's view)."""
        reader.flush_matches()
        if invocation_id is None:
            reader.add_match(_SYSTEMD_UNIT=self.unit)
            reader.add_disjunction()
            reader.add_match(**_systemd_match(self.unit))
            return
        reader.add_match(_SYSTEMD_UNIT=self.unit, _SYSTEMD_INVOCATION_ID=invocation_id)
        reader.add_disjunction()
        reader.add_match(**_systemd_match(self.unit), INVOCATION_ID=invocation_id)

    def _find_latest(self, reader: Any) -> dict[str, Any] | None:
        self._add_unit_match(reader)
        reader.seek_tail()
        return reader.get_previous() or None

    def _seek_run(self, reader: Any, latest: dict[str, Any], invocation_id: str | None) -> None:
        if invocation_id is None:
            # No invocation id (systemd before 232, or an imported journal): start at the last
            # entry rather than guess where the run began.
            reader.seek_cursor(latest["__CURSOR"])
            return
        self.source.restart_counter = self._counter_before(reader, invocation_id)
        # journald indexes every field value, so this match walks only this run's entries.
        self._add_unit_match(reader, invocation_id)
        reader.seek_head()

    def _counter_before(self, reader: Any, invocation_id: str) -> int | None:
        """Blocking: systemd's restart counter from PID 1's lines about the unit before the
        run INVOCATION_ID began (the newest of the last COUNTER_LOOKBACK of them)."""
        reader.flush_matches()
        reader.add_match(**_systemd_match(self.unit), INVOCATION_ID=invocation_id)
        reader.add_disjunction()
        reader.add_match(_SYSTEMD_UNIT=self.unit, _SYSTEMD_INVOCATION_ID=invocation_id)
        reader.seek_head()
        first = reader.get_next()
        if not first:
            return None
        reader.flush_matches()
        reader.add_match(**_systemd_match(self.unit))
        reader.seek_cursor(first["__CURSOR"])
        entries = []
        for _ in range(COUNTER_LOOKBACK):
            entry = reader.get_previous()
            if not entry:
                break
            if invocation_of(entry) != invocation_id:
                entries.append(entry)
        return restart_counter_in(entries)

    def _explain_missing(self, reader: Any) -> str:
        if unreadable_journal_files(self.directory):
            return permission_sentence(self.unit)
        return missing_sentence(self.unit, reader.query_unique("_SYSTEMD_UNIT"))

    def _match_unit(self, reader: Any, from_head: bool) -> None:
        # Changing the matches keeps the reader's position: the next entry read is the unit's
        # next one after the last entry of the run, whatever its invocation.
        self._add_unit_match(reader)
        if from_head:
            # With no entry yet there is no position; from the tail, entries that arrive
            # later are never reached, from the head they are (and the match index keeps
            # this cheap).
            reader.seek_head()

    @staticmethod
    def _read_batch(reader: Any, process: bool = False) -> list[dict[str, Any]]:
        if process:
            reader.process()  # take in appended entries and new files, clear the fd's event
        out = []
        for _ in range(BATCH_ENTRIES):
            entry = reader.get_next()
            if not entry:
                break
            out.append(entry)
        return out

    async def _open(self, follow: bool) -> bool:
        """Open the reader (retrying while following); False when there is none to read."""
        source = self.source
        while not source.closed:
            try:
                self._reader, self._fd, self._reliable = await self._call(self._open_reader)
                return True
            except OSError as exc:
                source.status = self._open_error(exc)
            if not follow:
                return False
            await source.sleep(source.retry_s)
        return False

    async def batches(self, follow: bool) -> AsyncGenerator[list[JournalLine], None]:
        """The latest run's lines in batches, then (following) new ones until closed."""
        source = self.source
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvtop-journal")
        try:
            if not await self._open(follow):
                return
            await self._call(source.start_watching)
            reader = self._reader
            latest = await self._call(self._find_latest, reader)
            if latest is None:
                source.status = await self._call(self._explain_missing, reader)
                if not follow:
                    return
                await self._call(self._match_unit, reader, True)
            else:
                source.status = None
                source.invocation_id = invocation_of(latest)
                await self._call(self._seek_run, reader, latest, source.invocation_id)
                while True:
                    batch = await self._call(self._read_batch, reader)
                    if batch:
                        self._cursor = field_text(batch[-1].get("__CURSOR")) or self._cursor
                        yield [entry_line(entry) for entry in batch]
                    if len(batch) < BATCH_ENTRIES:
                        break
                if not follow:
                    return
                await self._call(self._match_unit, reader, False)
            async for lines in self._follow():
                yield lines
        finally:
            if self._reader is not None:
                self._executor.submit(self._reader.close)
            self._executor.shutdown(wait=False)

    async def _follow(self) -> AsyncGenerator[list[JournalLine], None]:
        """New entries as they come; a removed journal directory is said and waited for."""
        source = self.source
        loop = asyncio.get_running_loop()
        while not source.closed:
            ahead: list[dict[str, Any]] = []
            gone = await self._call(source.watch_files)
            if gone:
                source.status = removed_sentence(self.unit, gone)
                reopened = await self._reopen()
                if reopened is None:
                    return
                ahead = reopened
            batch = ahead + await self._call(self._read_batch, self._reader, True)
            lines = source.follow_lines(batch)
            if lines:
                self._cursor = lines[-1].cursor or self._cursor
                yield lines
            if len(batch) < BATCH_ENTRIES:
                timeout = SAFETY_POLL_S if self._reliable else UNRELIABLE_POLL_S
                await self._wait_readable(loop, self._fd, timeout)

    async def _reopen(self) -> list[dict[str, Any]] | None:
        """Wait for the journal directory to come back, open it again and go on after the
        last entry read (the entries there first, as a batch); None once closed."""
        source = self.source
        old, self._reader = self._reader, None
        await self._call(old.close)
        while not source.closed:
            await source.sleep(source.retry_s)
            if source.closed:  # closed while it slept
                continue
            if await self._call(gone_roots, source.roots):
                continue
            try:
                self._reader, self._fd, self._reliable = await self._call(self._open_reader)
            except OSError:
                continue
            source.status = None
            await self._call(source.check_files)
            return await self._call(self._resume, self._reader)
        return None

    def _resume(self, reader: Any) -> list[dict[str, Any]]:
        """Position a new reader after the last entry read: the unit's entries from there on
        (all of them when that entry is gone with its files). Returns an entry read ahead."""
        self._match_unit(reader, True)
        if self._cursor is None:
            return []
        try:
            reader.seek_cursor(self._cursor)
        except (OSError, ValueError):
            return []  # from the unit's first entry in the files now there
        entry = reader.get_next()
        if entry and entry.get("__CURSOR") != self._cursor:
            return [entry]  # the seek landed past it: this one is new
        return []

    async def _wait_readable(
        self, loop: asyncio.AbstractEventLoop, fd: int, timeout: float
    ) -> None:
        source = self.source
        wake = source.wake
        assert wake is not None
        wake.clear()
        if source.closed:
            return
        if source.lane is not None:
            await source.lane.next()  # read at the tick; the reader's process() takes the events
            return
        try:
            loop.add_reader(fd, wake.set)
        except (NotImplementedError, ValueError, OSError):
            # A loop without add_reader (e.g. Windows' proactor): poll instead.
            await source.sleep(UNRELIABLE_POLL_S)
            return
        try:
            await source.sleep(timeout)
        finally:
            loop.remove_reader(fd)
