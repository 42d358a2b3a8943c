"""The journal read through `journalctl -o json` (fixed options, an argv list, no shell): when the
systemd Python module is missing, or journalctl was asked for."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from kvtop.sources.journal_entries import (
    COUNTER_LOOKBACK,
    EARLIER_ENTRIES,
    EARLIER_WINDOW_S,
    JournalLine,
    entries_after,
    entry_line,
    epoch_us,
    field_text,
    invocation_of,
    realtime_us,
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

# journalctl -o json prints one entry per line; a traceback in one MESSAGE can be long.
JSON_LINE_LIMIT = 64 << 20


def journalctl_match(unit: str, invocation_id: str | None = None) -> list[str]:
    """journalctl's matches for the unit's output or PID 1's lines about it (`+` is OR)."""
    own = [f"_SYSTEMD_UNIT={unit}"]
    pid1 = [f"UNIT={unit}", "_PID=1"]
    if invocation_id is not None:
        own.append(f"_SYSTEMD_INVOCATION_ID={invocation_id}")
        pid1.append(f"INVOCATION_ID={invocation_id}")
    return [*own, "+", *pid1]


class JournalctlFailed(Exception):
    """journalctl exited non-zero; the message is what it printed on stderr."""


class JournalctlJournal:
    """The unit's entries from journalctl's JSON, for SOURCE (what is common: the status, the
    journal's files, restarts, waits)."""

    def __init__(self, source: JournalHost) -> None:
        self.source = source
        self.unit = source.unit
        self.directory = source.directory
        self._proc: asyncio.subprocess.Process | None = None
        self._last_realtime_us: int | None = None  # the last followed entry's time
        self._removed_since_start = False  # the journal directory went and came back

    def close(self) -> None:
        """End the journalctl that runs now, if any (a follow waits on it)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    def _command(self) -> list[str] | None:
        exe = shutil.which("journalctl")
        if exe is None:
            return None
        where = ["--directory", self.directory] if self.directory else []
        # --all: without it journalctl prints fields over 4 KiB (long tracebacks) as null.
        return [exe, *where, "--no-pager", "--all"]

    async def entries_before(self, first: JournalLine) -> list[dict[str, Any]]:
        """The unit's entries before FIRST, newest first; [] when the journal cannot say."""
        command, first_us = self._command(), epoch_us(first.realtime)
        if command is None or first_us is None:
            return []
        until = f"--until=@{(first_us - 1) / 1e6:.6f}"  # --until is inclusive
        since = f"--since=@{(first_us - EARLIER_WINDOW_S * 10**6) / 1e6:.6f}"
        args = [*command, "-o", "json", "-r", "-n", str(EARLIER_ENTRIES), until, since]
        try:
            return await self._list([*args, *journalctl_match(self.unit)])
        except JournalctlFailed:
            return []

    async def _stream(self, args: list[str]) -> AsyncIterator[list[dict[str, Any]]]:
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
            if self.source.closed:
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
        if proc.returncode != 0 and not self.source.closed:
            raise JournalctlFailed(err.decode("utf-8", errors="replace").strip())

    async def _list(self, args: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        async for batch in self._stream(args):
            out.extend(batch)
        return out

    def _error(self, exc: JournalctlFailed) -> str:
        if unreadable_journal_files(self.directory):
            return permission_sentence(self.unit)
        said = str(exc).splitlines()[0] if str(exc) else "no message"
        return (
            f"journalctl failed for {self.unit}: {said}. Check the journal directory and "
            "try `journalctl -u UNIT` by hand; retrying every few seconds."
        )

    async def _missing(self, base: list[str]) -> str:
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

    async def batches(self, follow: bool) -> AsyncGenerator[list[JournalLine], None]:
        """The latest run's lines in batches, then (following) new ones until closed."""
        source = self.source
        command = self._command()
        if command is None:
            source.status = (
                f"cannot read the journal for {self.unit}: neither the systemd Python module "
                "nor journalctl is available. Install systemd-python (pip install "
                "systemd-python), or run kvtop on the host whose journal it should read."
            )
            return
        unit_match = journalctl_match(self.unit)
        base = [*command, "-o", "json"]
        await asyncio.to_thread(source.start_watching)
        tail = await self._tail(base, unit_match, follow)
        if tail is None:
            return
        cursor: str | None = None
        if not tail:
            source.status = await self._missing(command)
        else:
            source.status = None
            cursor = field_text(tail[-1].get("__CURSOR"))
            async for lines, later in self._latest_start(base, tail[-1]):
                yield lines
                cursor = later or cursor
        if follow:
            async for lines in self._follow(base, unit_match, cursor):
                yield lines

    async def _tail(
        self, base: list[str], unit_match: list[str], follow: bool
    ) -> list[dict[str, Any]] | None:
        """The unit's latest entry (none when it never logged); None: unreadable, not following."""
        source = self.source
        while True:
            try:
                return await self._list([*base, "-n", "1", *unit_match])
            except JournalctlFailed as exc:
                source.status = self._error(exc)
            if not follow or source.closed:
                return None
            await source.sleep(source.retry_s)
            if source.closed:
                return None

    async def _latest_start(
        self, base: list[str], latest: dict[str, Any]
    ) -> AsyncGenerator[tuple[list[JournalLine], str | None], None]:
        """The unit's latest start (its invocation), with each batch's cursor; only the latest
        entry when it carries no invocation id."""
        source = self.source
        source.invocation_id = invocation_of(latest)
        if source.invocation_id is None:
            yield [entry_line(latest)], None
            return
        run = [*base, *journalctl_match(self.unit, source.invocation_id)]
        first = True
        try:
            async for batch in self._stream(run):
                if first:
                    first = False
                    source.restart_counter = await self._counter(base, batch[0])
                when = realtime_us(batch[-1].get("__REALTIME_TIMESTAMP"))
                self._last_realtime_us = when if when is not None else self._last_realtime_us
                yield [entry_line(entry) for entry in batch], field_text(batch[-1].get("__CURSOR"))
        except JournalctlFailed as exc:
            source.status = self._error(exc)

    async def _counter(self, base: list[str], first: dict[str, Any]) -> int | None:
        """systemd's restart counter before the run that begins with FIRST."""
        when = realtime_us(first.get("__REALTIME_TIMESTAMP"))
        if when is None:
            return None
        until = f"--until=@{(when - 1) / 1e6:.6f}"
        args = [*base, "-r", "-n", str(COUNTER_LOOKBACK), until, f"UNIT={self.unit}", "_PID=1"]
        try:
            return restart_counter_in(await self._list(args))
        except JournalctlFailed:
            return None

    async def _follow(
        self, base: list[str], unit_match: list[str], cursor: str | None
    ) -> AsyncGenerator[list[JournalLine], None]:
        """What the unit logs from `cursor` on (journalctl -f), restarted whenever it stops."""
        source = self.source
        # After the journal directory was removed and came back, the cursor names an entry of
        # files that are gone (journalctl then prints nothing): the unit's entries are read
        # from the start instead, and those not later than the last one read are dropped.
        after_us: int | None = None
        while not source.closed:
            if not await self._journal_dirs_back():
                return
            if self._removed_since_start:
                self._removed_since_start, cursor = False, None
                after_us = self._last_realtime_us
            # -n all: with -f journalctl would otherwise start at the last 10 entries, even
            # after --after-cursor.
            start = ["-n", "all"] + ([f"--after-cursor={cursor}"] if cursor else [])
            watcher = asyncio.create_task(self._watch())
            try:
                async for batch in self._stream([*base, "-f", *start, *unit_match]):
                    later = entries_after(batch, after_us)
                    lines = source.follow_lines(later)
                    cursor = field_text(batch[-1].get("__CURSOR")) or cursor
                    if lines:
                        when = realtime_us(later[-1].get("__REALTIME_TIMESTAMP"))
                        self._last_realtime_us = (
                            when if when is not None else self._last_realtime_us
                        )
                        yield lines
            except JournalctlFailed as exc:
                source.status = self._error(exc)
            finally:
                watcher.cancel()
            if source.closed:
                return
            if gone := await asyncio.to_thread(gone_roots, source.roots):
                source.status = removed_sentence(self.unit, gone)
                continue
            if source.status is None:
                source.status = (
                    f"journalctl stopped following {self.unit}; restarting it every few seconds."
                )
            await source.sleep(source.retry_s)

    async def _journal_dirs_back(self) -> bool:
        """Wait while the journal directory is removed (said in the status); False once closed."""
        source = self.source
        removed = False
        while not source.closed and (gone := await asyncio.to_thread(gone_roots, source.roots)):
            # Said here too: the directory may go between the first read and following, before
            # journalctl -f ever ran (a removal it would have noticed).
            removed, source.status = True, removed_sentence(self.unit, gone)
            await source.sleep(source.retry_s)
        if removed and not source.closed:
            source.status = None
            self._removed_since_start = True
            await asyncio.to_thread(source.check_files)
        return not source.closed

    async def _watch(self) -> None:
        """While journalctl -f runs (it goes silent when its directory is removed): check the
        directories and files every RETRY_S; a removed directory stops journalctl."""
        while True:
            await asyncio.sleep(self.source.retry_s)
            if await asyncio.to_thread(self.source.watch_files):
                proc = self._proc
                if proc is not None and proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                return
