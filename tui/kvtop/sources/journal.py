"""Read a systemd unit's log from the journal: its latest run first, then new lines as they come."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from kvtop.sources.journal_backend import JournalBackend
from kvtop.sources.journal_ctl import JournalctlJournal
from kvtop.sources.journal_entries import (
    COUNTER_LOOKBACK,
    EARLIER_ENTRIES,
    EARLIER_RUNS,
    EARLIER_WINDOW_S,
    JournalLine,
    entry_line,
    restart_counter_in,
    runs_before,
)
from kvtop.sources.journal_files import (
    damaged_files,
    damaged_sentence,
    gone_roots,
    journal_roots,
)
from kvtop.sources.journal_python import PythonJournal
from kvtop.sources.journal_sentences import (
    MAX_SIMILAR_UNITS,
    missing_sentence,
    permission_sentence,
    similar_units,
    unreadable_journal_files,
)

if TYPE_CHECKING:
    from kvtop.sources.pacing import Lane

__all__ = [
    "COUNTER_LOOKBACK",
    "EARLIER_ENTRIES",
    "EARLIER_RUNS",
    "EARLIER_WINDOW_S",
    "MAX_SIMILAR_UNITS",
    "JournalBackend",
    "JournalLine",
    "JournalSource",
    "missing_sentence",
    "normalize_unit",
    "permission_sentence",
    "restart_counter_in",
    "similar_units",
    "unreadable_journal_files",
]

# Permission problems and a missing journalctl are fixed by a person: retry slowly.
RETRY_S = 2.0
# How often the journal's files are checked for damage while following (a header read each).
DAMAGE_CHECK_S = 5.0
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


def normalize_unit(name: str) -> str:
    """ "sglang-kimi" -> "sglang-kimi.service"; a name with a unit suffix (".scope") is kept."""
    name = name.strip()
    _, dot, suffix = name.rpartition(".")
    if dot and suffix in _UNIT_SUFFIXES:
        return name
    return name + ".service"


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
        self.roots: list[str] = []  # the journal directories there when reading began
        self.invocation_id: str | None = None
        self.restarts_seen = 0
        # systemd's restart counter for the unit as it stood before the latest run (None: the
        # journal has no `Scheduled restart job` line for it within COUNTER_LOOKBACK lines).
        self.restart_counter: int | None = None
        self._superseded: set[str] = set()
        self._closed = False
        # Set by close() (and a readable journal): ends a wait at once.
        self.wake: asyncio.Event | None = None
        self._backend: JournalBackend = (
            PythonJournal(self) if self.backend_used == "python" else JournalctlJournal(self)
        )

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

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def retry_s(self) -> float:
        """How long a backend waits before trying again (read when it waits)."""
        return RETRY_S

    def check_files(self) -> None:
        """Blocking (a header read per journal file): note which files are damaged."""
        self._damaged = damaged_sentence(damaged_files(self.directory))
        self._files_checked_at = time.monotonic()

    def watch_files(self) -> list[str]:
        """Blocking: the journal directories that were removed (then nothing else is checked),
        and every DAMAGE_CHECK_S which files are damaged."""
        gone = gone_roots(self.roots)
        if not gone and time.monotonic() - self._files_checked_at >= DAMAGE_CHECK_S:
            self.check_files()
        return gone

    def start_watching(self) -> None:
        """Blocking: the directories to watch (those there now), and their files' state."""
        self.roots = journal_roots(self.directory)
        self.check_files()

    def close(self) -> None:
        """Stop following; `lines()` returns at its next wait. Call from the event loop's thread."""
        self._closed = True
        if self.wake is not None:
            self.wake.set()
        self._backend.close()

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
        return runs_before(await self._backend.entries_before(first), first)

    async def _lines(self, follow: bool) -> AsyncIterator[JournalLine]:
        self.wake = asyncio.Event()
        if self._closed:
            return
        batches = self._backend.batches(follow)
        try:
            async for batch in batches:
                for line in batch:
                    yield line
                    if self._closed:
                        return
        finally:
            await batches.aclose()

    async def sleep(self, seconds: float) -> None:
        """Wait SECONDS (the lane's beat when there is one); close() ends the wait at once."""
        if self.lane is not None:
            if not self._closed:
                await self.lane.wait_s(seconds)
            return
        # Waiting on an event rather than asyncio.sleep lets close() end the wait at once.
        assert self.wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout=seconds)

    def follow_lines(self, entries: list[dict[str, Any]]) -> list[JournalLine]:
        """Lines of live entries, noting restarts; late lines of a replaced run are dropped."""
        out = []
        for entry in entries:
            line = entry_line(entry)
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
        return out
