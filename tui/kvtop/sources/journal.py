"""Read a systemd unit's log from the journal: its latest run first, then new lines as they come."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from kvtop.sources.journal_files import (
    DEFAULT_JOURNAL_DIRS,
    damaged_files,
    damaged_sentence,
    gone_roots,
    journal_files,
    journal_roots,
    removed_sentence,
)

if TYPE_CHECKING:
    from kvtop.sources.pacing import Lane

# Entries per call into the reader thread: big enough to amortise the hop, small enough that a
# run of a hundred thousand lines reaches the caller in steps rather than all at the end.
BATCH_ENTRIES = 2000
# Permission problems and a missing journalctl are fixed by a person: retry slowly.
RETRY_S = 2.0
# With a reliable inotify descriptor this is only a safety net; without one it is the poll period.
SAFETY_POLL_S = 5.0
UNRELIABLE_POLL_S = 0.5
# How often the journal's files are checked for damage while following (a header read each).
DAMAGE_CHECK_S = 5.0
MAX_SIMILAR_UNITS = 8
# --once with --unit: the unit's runs before the latest count as restarts. They are
# read back from the latest run's first entry, at most this many runs, entries and seconds back,
# so a unit with years of history costs the same as a new one.
EARLIER_RUNS = 20
EARLIER_ENTRIES = 20_000
EARLIER_WINDOW_S = 24 * 3600
# journalctl -o json prints one entry per line; a traceback in one MESSAGE can be long.
JSON_LINE_LIMIT = 64 << 20
_UNIT_SUFFIXES = frozenset(
    [
        "service",
        "socket",
        "device",
        "mount",
        "automount",
        "swap",
        "target",
        "path",
        "timer",
        "slice",
        "scope",
    ]
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_T = TypeVar("_T")


def normalize_unit(name: str) -> str:
    """ "sglang-kimi" -> "sglang-kimi.service"; a name with a unit suffix (".scope") is kept."""
    name = name.strip()
    _, dot, suffix = name.rpartition(".")
    if dot and suffix in _UNIT_SUFFIXES:
        return name
    return name + ".service"


@dataclass(frozen=True, slots=True)
class JournalLine:
    """One journal entry of the unit: its MESSAGE as text, plus where and when it was logged."""

    text: str
    realtime: datetime | None
    invocation_id: str | None
    cursor: str | None
    # systemd's own line about the unit (PID 1's `UNIT=` entry), not the server's output.
    systemd: bool = False


def permission_sentence(unit: str) -> str:
    return (
        f"cannot read the journal for {unit}: permission denied. Add your user to the "
        "systemd-journal group (sudo usermod -aG systemd-journal $USER, then log in again), "
        "or run kvtop with sudo."
    )


def missing_sentence(unit: str, known_units: Iterable[str]) -> str:
    similar = similar_units(unit, known_units)
    return (
        f"no journal entries for {unit}. Units with a similar name: "
        f"{', '.join(similar) if similar else 'none'}"
    )


def similar_units(unit: str, known_units: Iterable[str]) -> list[str]:
    """Units sharing a word (3+ letters) with UNIT, case-insensitive: "sglang-kim" finds sglang-*."""
    stem = unit.lower().rpartition(".")[0] or unit.lower()
    words = [w for w in re.split(r"[^a-z0-9]+", stem) if len(w) >= 3]
    found = {
        name
        for name in known_units
        if isinstance(name, str) and name != unit and any(w in name.lower() for w in words)
    }
    return sorted(found)[:MAX_SIMILAR_UNITS]


def unreadable_journal_files(directory: str | None) -> bool:
    """True when some journal file (or a journal folder) exists that this user may not read.

    A reader opened without the rights does not fail: it silently sees only the files it may
    read (a user's own journal), so "no entries" has to be told apart from "not allowed".
    """
    roots = [directory] if directory else list(DEFAULT_JOURNAL_DIRS)
    denied: list[str] = []
    for path in journal_files(roots, denied):
        if denied or not os.access(path, os.R_OK):
            return True
    return bool(denied)


def _text(value: Any) -> str | None:
    if isinstance(value, list):  # a field logged twice: the first one is the one that was meant
        value = value[0] if value else None
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _message(value: Any) -> str:
    # journalctl -o json writes a MESSAGE that is not valid UTF-8 as a list of byte values.
    if isinstance(value, list) and value and all(isinstance(b, int) for b in value):
        value = bytes(value)
    elif isinstance(value, list):
        value = value[0] if value else ""
        if isinstance(value, list):
            value = bytes(value)
    return _text(value) or ""


def _realtime(value: Any) -> datetime | None:
    try:
        return _EPOCH + timedelta(microseconds=int(value))
    except (TypeError, ValueError, OverflowError):
        return None


def _realtime_us(value: Any) -> int | None:
    try:
        return int(_text(value) or "")
    except ValueError:
        return None


def _runs(newest_first: list[dict[str, Any]], first: JournalLine) -> list[list[JournalLine]]:
    """Entries read back from before FIRST, grouped into runs (invocations), oldest first: at
    most EARLIER_RUNS of them, none of FIRST's run, none older than EARLIER_WINDOW_S."""
    first_us = _us(first.realtime)
    runs: dict[str | None, list[JournalLine]] = {}
    for entry in newest_first:
        line = _line(entry)
        if line.cursor == first.cursor or (
            line.invocation_id is not None and line.invocation_id == first.invocation_id
        ):
            continue
        when = _us(line.realtime)
        if first_us is not None and when is not None and when < first_us - EARLIER_WINDOW_S * 10**6:
            break
        if line.invocation_id not in runs and len(runs) >= EARLIER_RUNS:
            break
        runs.setdefault(line.invocation_id, []).append(line)
    return [list(reversed(lines)) for lines in reversed(runs.values())]


def _us(when: datetime | None) -> int | None:
    return None if when is None else (when - _EPOCH) // timedelta(microseconds=1)


def _later(entries: list[dict[str, Any]], after_us: int | None) -> list[dict[str, Any]]:
    """The entries logged after AFTER_US (all of them when None)."""
    if after_us is None:
        return entries
    return [e for e in entries if (_realtime_us(e.get("__REALTIME_TIMESTAMP")) or 0) > after_us]


def _line(entry: dict[str, Any]) -> JournalLine:
    systemd = _text(entry.get("_PID")) == "1" and entry.get("UNIT") is not None
    # PID 1 names the run it speaks of in INVOCATION_ID (its own _SYSTEMD_* fields are its).
    invocation = entry.get("INVOCATION_ID") if systemd else entry.get("_SYSTEMD_INVOCATION_ID")
    return JournalLine(
        text=_message(entry.get("MESSAGE")),
        realtime=_realtime(entry.get("__REALTIME_TIMESTAMP")),
        invocation_id=_text(invocation),
        cursor=_text(entry.get("__CURSOR")),
        systemd=systemd,
    )


def _invocation_of(entry: dict[str, Any]) -> str | None:
    return _line(entry).invocation_id


# systemd's lines about the unit carry its name in UNIT= and come from PID 1 (what
# `journalctl -u UNIT` adds to the unit's own output).
def _systemd_match(unit: str) -> dict[str, str]:
    return {"UNIT": unit, "_PID": "1"}


def _journalctl_match(unit: str, invocation_id: str | None = None) -> list[str]:
    """journalctl's matches for the unit's output or PID 1's lines about it (`+` is OR)."""
    own = [f"_SYSTEMD_UNIT={unit}"]
    pid1 = [f"UNIT={unit}", "_PID=1"]
    if invocation_id is not None:
        own.append(f"_SYSTEMD_INVOCATION_ID={invocation_id}")
        pid1.append(f"INVOCATION_ID={invocation_id}")
    return [*own, "+", *pid1]


_RESTART_COUNTER = re.compile(r"Scheduled restart job, restart counter is at (\d{1,9})")
# How far back the restart counter is looked for before the latest run (PID 1's lines only).
COUNTER_LOOKBACK = 50


def restart_counter_in(entries: Iterable[dict[str, Any]]) -> int | None:
    """The newest `restart counter is at N` among PID 1's entries given newest first."""
    for entry in entries:
        found = _RESTART_COUNTER.search(_message(entry.get("MESSAGE")))
        if found is not None:
            return int(found.group(1))
    return None


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


def _choose_backend(backend: str) -> tuple[str, str | None]:
    if backend not in ("auto", "python", "journalctl"):
        raise ValueError(f"unknown journal backend {backend!r}: use auto, python or journalctl")
    if backend == "journalctl":
        return "journalctl", "journalctl was asked for"
    try:
        import systemd.journal  # noqa: F401
    except ImportError as exc:
        if backend == "python":
            raise ValueError(
                f"the systemd Python module cannot be imported ({exc}). Install it with "
                "`pip install systemd-python` (needs libsystemd-dev to build), or use the "
                "journalctl back-end."
            ) from None
        return "journalctl", f"the systemd Python module cannot be imported ({exc})"
    return "python", None


class JournalSource:
    """`async for line in JournalSource("sglang-kimi").lines():` the unit's latest run, then live.

    The latest run (invocation) is found from the end of the journal, so a unit with years of
    history costs the same as a new one. When the unit restarts, `restarts_seen` goes up,
    `invocation_id` changes and the new run's lines keep coming. `status` is None while all is
    well, else a sentence saying what is wrong and what to do. `backend_used` is "python"
    (systemd.journal) or "journalctl"; `backend_reason` says why journalctl was used.
    """

    def __init__(
        self,
        unit: str,
        directory: str | None = None,
        backend: str = "auto",
        lane: Lane | None = None,
    ) -> None:
        self.unit = normalize_unit(unit)
        # With a lane (the session's beat, see sources.pacing) new entries are read once per
        # tick instead of on each journal write, and close() takes effect at the next tick.
        self.lane = lane
        self.directory = directory
        self.backend_used, self.backend_reason = _choose_backend(backend)
        self._status: str | None = None
        self._damaged: str | None = None  # the sentence for damaged journal files
        self._files_checked_at = -DAMAGE_CHECK_S
        self._roots: list[str] = []  # the journal directories there when reading began
        self._cursor: str | None = None  # the last entry read, to read on after a reopen
        self._reader: Any = None
        self._last_realtime_us: int | None = None  # the last followed entry's time
        self._removed_since_start = False  # the journal directory went and came back
        self._fd = -1
        self._reliable = False
        self.invocation_id: str | None = None
        self.restarts_seen = 0
        # systemd's restart counter for the unit as it stood before the latest run (None: the
        # journal has no `Scheduled restart job` line for it within COUNTER_LOOKBACK lines).
        self.restart_counter: int | None = None
        self._superseded: set[str] = set()
        self._closed = False
        self._wake: asyncio.Event | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def status(self) -> str | None:
        """None while all is well, else what is wrong (damaged files first) and what to do."""
        said = [s for s in (self._damaged, self._status) if s]
        if not said:
            return None
        # Each sentence after the first begins with a capital ("... --verify. No journal ...").
        return " ".join([said[0], *(s[:1].upper() + s[1:] for s in said[1:])])

    @status.setter
    def status(self, value: str | None) -> None:
        self._status = value

    def _check_files(self) -> None:
        """Blocking (a header read per journal file): note which files are damaged."""
        self._damaged = damaged_sentence(damaged_files(self.directory))
        self._files_checked_at = time.monotonic()

    def _watch_files(self) -> list[str]:
        """Blocking: the journal directories that were removed (then nothing else is checked),
        and every DAMAGE_CHECK_S which files are damaged."""
        gone = gone_roots(self._roots)
        if not gone and time.monotonic() - self._files_checked_at >= DAMAGE_CHECK_S:
            self._check_files()
        return gone

    def _start_watching(self) -> None:
        """Blocking: the directories to watch (those there now), and their files' state."""
        self._roots = journal_roots(self.directory)
        self._check_files()

    def close(self) -> None:
        """Stop following; `lines()` returns at its next wait. Call from the event loop's thread."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def lines(self) -> AsyncIterator[JournalLine]:
        """The latest run's lines from its first entry, then new lines until close()."""
        async for line in self._lines(follow=True):
            yield line

    async def read_latest(self) -> AsyncIterator[JournalLine]:
        """The latest run's lines as they stand now, then stop (for one-shot reports)."""
        async for line in self._lines(follow=False):
            yield line

    async def read_earlier(self, first: JournalLine) -> list[list[JournalLine]]:
        """The unit's runs before the one that begins with FIRST (read_latest's first line),
        oldest first, each its lines in order (bounded: EARLIER_RUNS, EARLIER_ENTRIES,
        EARLIER_WINDOW_S). For one-shot reports, where they count as restarts; [] when the
        journal cannot say (then `status` is left as it was)."""
        if first.cursor is None:
            return []
        if self.backend_used == "python":
            try:
                entries = await asyncio.to_thread(self._python_back_from, first.cursor)
            except (OSError, ValueError):
                return []
        else:
            entries = await self._journalctl_back_from(first)
        return _runs(entries, first)

    def _python_back_from(self, cursor: str) -> list[dict[str, Any]]:
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

    async def _journalctl_back_from(self, first: JournalLine) -> list[dict[str, Any]]:
        command, first_us = self._journalctl(), _us(first.realtime)
        if command is None or first_us is None:
            return []
        until = f"--until=@{(first_us - 1) / 1e6:.6f}"  # --until is inclusive
        since = f"--since=@{(first_us - EARLIER_WINDOW_S * 10**6) / 1e6:.6f}"
        args = [*command, "-o", "json", "-r", "-n", str(EARLIER_ENTRIES), until, since]
        try:
            return await self._journalctl_list([*args, *_journalctl_match(self.unit)])
        except _JournalctlFailed:
            return []

    async def _lines(self, follow: bool) -> AsyncIterator[JournalLine]:
        self._wake = asyncio.Event()
        if self._closed:
            return
        batches: AsyncGenerator[list[JournalLine], None]
        if self.backend_used == "python":
            batches = self._python_batches(follow)
        else:
            batches = self._journalctl_batches(follow)
        try:
            async for batch in batches:
                for line in batch:
                    yield line
                    if self._closed:
                        return
        finally:
            await batches.aclose()

    async def _sleep(self, seconds: float) -> None:
        if self.lane is not None:
            if not self._closed:
                await self.lane.wait_s(seconds)
            return
        # Waiting on an event rather than asyncio.sleep lets close() end the wait at once.
        assert self._wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    def _follow_lines(self, entries: list[dict[str, Any]]) -> list[JournalLine]:
        """Lines of live entries, noting restarts; late lines of a replaced run are dropped."""
        out = []
        for entry in entries:
            line = _line(entry)
            inv = line.invocation_id
            if inv is not None and inv != self.invocation_id:
                if inv in self._superseded:
                    continue
                if self.invocation_id is not None:
                    self._superseded.add(self.invocation_id)
                    self.restarts_seen += 1
                self.invocation_id = inv
            out.append(line)
        if out:
            self.status = None
            self._cursor = out[-1].cursor or self._cursor
            when = _realtime_us(entries[-1].get("__REALTIME_TIMESTAMP"))
            self._last_realtime_us = when if when is not None else self._last_realtime_us
        return out

    # -- systemd.journal ---------------------------------------------------------------------

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
        self.restart_counter = self._counter_before(reader, invocation_id)
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
            if _invocation_of(entry) != invocation_id:
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

    async def _python_open(self, follow: bool) -> bool:
        """Open the reader (retrying while following); False when there is none to read."""
        while not self._closed:
            try:
                self._reader, self._fd, self._reliable = await self._call(self._open_reader)
                return True
            except OSError as exc:
                self.status = self._open_error(exc)
            if not follow:
                return False
            await self._sleep(RETRY_S)
        return False

    async def _python_batches(self, follow: bool) -> AsyncGenerator[list[JournalLine], None]:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvtop-journal")
        try:
            if not await self._python_open(follow):
                return
            await self._call(self._start_watching)
            reader = self._reader
            latest = await self._call(self._find_latest, reader)
            if latest is None:
                self.status = await self._call(self._explain_missing, reader)
                if not follow:
                    return
                await self._call(self._match_unit, reader, True)
            else:
                self.status = None
                self.invocation_id = _invocation_of(latest)
                await self._call(self._seek_run, reader, latest, self.invocation_id)
                while True:
                    batch = await self._call(self._read_batch, reader)
                    if batch:
                        self._cursor = _text(batch[-1].get("__CURSOR")) or self._cursor
                        yield [_line(entry) for entry in batch]
                    if len(batch) < BATCH_ENTRIES:
                        break
                if not follow:
                    return
                await self._call(self._match_unit, reader, False)
            async for lines in self._python_follow():
                yield lines
        finally:
            if self._reader is not None:
                self._executor.submit(self._reader.close)
            self._executor.shutdown(wait=False)

    async def _python_follow(self) -> AsyncGenerator[list[JournalLine], None]:
        """New entries as they come; a removed journal directory is said and waited for."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            ahead: list[dict[str, Any]] = []
            gone = await self._call(self._watch_files)
            if gone:
                self.status = removed_sentence(self.unit, gone)
                reopened = await self._python_reopen()
                if reopened is None:
                    return
                ahead = reopened
            batch = ahead + await self._call(self._read_batch, self._reader, True)
            lines = self._follow_lines(batch)
            if lines:
                yield lines
            if len(batch) < BATCH_ENTRIES:
                timeout = SAFETY_POLL_S if self._reliable else UNRELIABLE_POLL_S
                await self._wait_readable(loop, self._fd, timeout)

    async def _python_reopen(self) -> list[dict[str, Any]] | None:
        """Wait for the journal directory to come back, open it again and go on after the
        last entry read (the entries there first, as a batch); None once closed."""
        old, self._reader = self._reader, None
        await self._call(old.close)
        while not self._closed:
            await self._sleep(RETRY_S)
            if self._closed:  # closed while it slept
                continue
            if await self._call(gone_roots, self._roots):
                continue
            try:
                self._reader, self._fd, self._reliable = await self._call(self._open_reader)
            except OSError:
                continue
            self.status = None
            await self._call(self._check_files)
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
        assert self._wake is not None
        self._wake.clear()
        if self._closed:
            return
        if self.lane is not None:
            await self.lane.next()  # read at the tick; the reader's process() takes the events
            return
        try:
            loop.add_reader(fd, self._wake.set)
        except (NotImplementedError, ValueError, OSError):
            # A loop without add_reader (e.g. Windows' proactor): poll instead.
            await self._sleep(UNRELIABLE_POLL_S)
            return
        try:
            await self._sleep(timeout)
        finally:
            loop.remove_reader(fd)

    # -- journalctl --------------------------------------------------------------------------

    def _journalctl(self) -> list[str] | None:
        exe = shutil.which("journalctl")
        if exe is None:
            return None
        where = ["--directory", self.directory] if self.directory else []
        # --all: without it journalctl prints fields over 4 KiB (long tracebacks) as null.
        return [exe, *where, "--no-pager", "--all"]

    async def _journalctl_stream(self, args: list[str]) -> AsyncIterator[list[dict[str, Any]]]:
        """Entries printed by `journalctl ARGS` in batches as they arrive; raises on failure."""
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=JSON_LINE_LIMIT,
        )
        self._proc = proc
        assert proc.stdout is not None and proc.stderr is not None
        pending = b""
        try:
            if self._closed:
                proc.kill()
            while chunk := await proc.stdout.read(1 << 20):
                parts = (pending + chunk).split(b"\n")
                pending = parts.pop()
                batch = []
                for part in parts:
                    with contextlib.suppress(ValueError):
                        entry = json.loads(part)
                        if isinstance(entry, dict):
                            batch.append(entry)
                if batch:
                    yield batch
            err = await proc.stderr.read()
            await proc.wait()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            self._proc = None
        if proc.returncode != 0 and not self._closed:
            raise _JournalctlFailed(err.decode("utf-8", errors="replace").strip())

    async def _journalctl_list(self, args: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        async for batch in self._journalctl_stream(args):
            out.extend(batch)
        return out

    def _journalctl_error(self, exc: _JournalctlFailed) -> str:
        if unreadable_journal_files(self.directory):
            return permission_sentence(self.unit)
        said = str(exc).splitlines()[0] if str(exc) else "no message"
        return (
            f"journalctl failed for {self.unit}: {said}. Check the journal directory and "
            "try `journalctl -u UNIT` by hand; retrying every few seconds."
        )

    async def _journalctl_missing(self, base: list[str]) -> str:
        if unreadable_journal_files(self.directory):
            return permission_sentence(self.unit)
        proc = await asyncio.create_subprocess_exec(
            *base,
            "-F",
            "_SYSTEMD_UNIT",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        units = out.decode("utf-8", errors="replace").split()
        return missing_sentence(self.unit, units)

    async def _journalctl_batches(self, follow: bool) -> AsyncGenerator[list[JournalLine], None]:
        command = self._journalctl()
        if command is None:
            self.status = (
                f"cannot read the journal for {self.unit}: neither the systemd Python module "
                "nor journalctl is available. Install systemd-python (pip install "
                "systemd-python), or run kvtop on the host whose journal it should read."
            )
            return
        unit_match = _journalctl_match(self.unit)
        base = [*command, "-o", "json"]
        await asyncio.to_thread(self._start_watching)
        tail = await self._journalctl_tail(base, unit_match, follow)
        if tail is None:
            return
        cursor: str | None = None
        if not tail:
            self.status = await self._journalctl_missing(command)
        else:
            self.status = None
            cursor = _text(tail[-1].get("__CURSOR"))
            async for lines, later in self._journalctl_latest_start(base, unit_match, tail[-1]):
                yield lines
                cursor = later or cursor
        if follow:
            async for lines in self._journalctl_follow(base, unit_match, cursor):
                yield lines

    async def _journalctl_tail(
        self, base: list[str], unit_match: list[str], follow: bool
    ) -> list[dict[str, Any]] | None:
        """The unit's latest entry (none when it never logged); None: unreadable, not following."""
        while True:
            try:
                return await self._journalctl_list([*base, "-n", "1", *unit_match])
            except _JournalctlFailed as exc:
                self.status = self._journalctl_error(exc)
            if not follow or self._closed:
                return None
            await self._sleep(RETRY_S)
            if self._closed:
                return None

    async def _journalctl_latest_start(
        self, base: list[str], unit_match: list[str], latest: dict[str, Any]
    ) -> AsyncGenerator[tuple[list[JournalLine], str | None], None]:
        """The unit's latest start (its invocation), with each batch's cursor; only the latest
        entry when it carries no invocation id."""
        self.invocation_id = _invocation_of(latest)
        if self.invocation_id is None:
            yield [_line(latest)], None
            return
        run = [*base, *_journalctl_match(self.unit, self.invocation_id)]
        first = True
        try:
            async for batch in self._journalctl_stream(run):
                if first:
                    first = False
                    self.restart_counter = await self._journalctl_counter(base, batch[0])
                when = _realtime_us(batch[-1].get("__REALTIME_TIMESTAMP"))
                self._last_realtime_us = when if when is not None else self._last_realtime_us
                yield [_line(entry) for entry in batch], _text(batch[-1].get("__CURSOR"))
        except _JournalctlFailed as exc:
            self.status = self._journalctl_error(exc)

    async def _journalctl_counter(self, base: list[str], first: dict[str, Any]) -> int | None:
        """systemd's restart counter before the run that begins with FIRST."""
        when = _realtime_us(first.get("__REALTIME_TIMESTAMP"))
        if when is None:
            return None
        until = f"--until=@{(when - 1) / 1e6:.6f}"
        args = [*base, "-r", "-n", str(COUNTER_LOOKBACK), until, f"UNIT={self.unit}", "_PID=1"]
        try:
            return restart_counter_in(await self._journalctl_list(args))
        except _JournalctlFailed:
            return None

    async def _journalctl_follow(
        self, base: list[str], unit_match: list[str], cursor: str | None
    ) -> AsyncGenerator[list[JournalLine], None]:
        """What the unit logs from `cursor` on (journalctl -f), restarted whenever it stops."""
        # After the journal directory was removed and came back, the cursor names an entry of
        # files that are gone (journalctl then prints nothing): the unit's entries are read
        # from the start instead, and those not later than the last one read are dropped.
        after_us: int | None = None
        while not self._closed:
            if not await self._journal_dirs_back():
                return
            if self._removed_since_start:
                self._removed_since_start, cursor = False, None
                after_us = self._last_realtime_us
            # -n all: with -f journalctl would otherwise start at the last 10 entries, even
            # after --after-cursor.
            start = ["-n", "all"] + ([f"--after-cursor={cursor}"] if cursor else [])
            watcher = asyncio.create_task(self._watch_for_journalctl())
            try:
                async for batch in self._journalctl_stream([*base, "-f", *start, *unit_match]):
                    lines = self._follow_lines(_later(batch, after_us))
                    cursor = _text(batch[-1].get("__CURSOR")) or cursor
                    if lines:
                        yield lines
            except _JournalctlFailed as exc:
                self.status = self._journalctl_error(exc)
            finally:
                watcher.cancel()
            if self._closed:
                return
            if gone := await asyncio.to_thread(gone_roots, self._roots):
                self.status = removed_sentence(self.unit, gone)
                continue
            if self.status is None:
                self.status = (
                    f"journalctl stopped following {self.unit}; restarting it every few seconds."
                )
            await self._sleep(RETRY_S)

    async def _journal_dirs_back(self) -> bool:
        """Wait while the journal directory is removed (said in the status); False once closed."""
        removed = False
        while not self._closed and (gone := await asyncio.to_thread(gone_roots, self._roots)):
            # Said here too: the directory may go between the first read and following, before
            # journalctl -f ever ran (a removal it would have noticed).
            removed, self.status = True, removed_sentence(self.unit, gone)
            await self._sleep(RETRY_S)
        if removed and not self._closed:
            self.status = None
            self._removed_since_start = True
            await asyncio.to_thread(self._check_files)
        return not self._closed

    async def _watch_for_journalctl(self) -> None:
        """While journalctl -f runs (it goes silent when its directory is removed): check the
        directories and files every RETRY_S; a removed directory stops journalctl."""
        while True:
            await asyncio.sleep(RETRY_S)
            if await asyncio.to_thread(self._watch_files):
                proc = self._proc
                if proc is not None and proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                return


class _JournalctlFailed(Exception):
    """journalctl exited non-zero; the message is what it printed on stderr."""
