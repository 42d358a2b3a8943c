"""The two sides of reading a unit's journal: what a backend does (journal_python.py,
journal_ctl.py) and what it asks of the JournalSource that does what is common."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kvtop.sources.journal_entries import JournalLine
    from kvtop.sources.pacing import Lane


class JournalBackend(Protocol):
    """One way of reading the unit's entries."""

    def batches(self, follow: bool) -> AsyncGenerator[list[JournalLine], None]:
        """The latest run's lines in batches from its first entry, then (following) new ones
        until the source is closed, saying on the source what is wrong."""
        ...

    async def entries_before(self, first: JournalLine) -> list[dict[str, Any]]:
        """The unit's entries before FIRST (which has a cursor), newest first, at most
        EARLIER_ENTRIES; [] when the journal cannot say."""
        ...

    def close(self) -> None:
        """Stop what the backend runs of its own now (a journalctl child)."""
        ...


class JournalHost(Protocol):
    """What a backend reads and sets on its JournalSource: the unit, the status, the run being
    read, the journal's files, the waits."""

    unit: str
    directory: str | None
    lane: Lane | None
    status: str | None
    invocation_id: str | None
    restart_counter: int | None
    roots: list[str]
    wake: asyncio.Event | None

    @property
    def closed(self) -> bool: ...

    @property
    def retry_s(self) -> float: ...

    def check_files(self) -> None: ...

    def watch_files(self) -> list[str]: ...

    def start_watching(self) -> None: ...

    async def sleep(self, seconds: float) -> None: ...

    def follow_lines(self, entries: list[dict[str, Any]]) -> list[JournalLine]: ...
