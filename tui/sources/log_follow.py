"""Follow a growing log file (or stdin) like `tail -F`, yielding complete lines without blocking."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import stat
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.sources.pacing import Lane

CHUNK_BYTES = 1 << 20
# The longest line passed on (its first bytes); the parser reads at most 1M characters anyway.
MAX_LINE_BYTES = 4 << 20
MAX_NOTICES = 50
# Permission problems are fixed by a person, not by the next write: retry slowly.
PERMISSION_RETRY_S = 2.0
_BREAK = re.compile(rb"\r\n|\r|\n")


class _LineSplitter:
    """Bytes in, text lines out, splitting on "\\n", "\\r\\n" and bare "\\r" like newline=None.

    A line longer than MAX_LINE_BYTES keeps its first MAX_LINE_BYTES and the rest is skipped up
    to its line break, so a 100 MB line costs a few MB, not 100 (and not a quadratic re-join).
    """

    def __init__(self) -> None:
        self._pending = b""
        self._skipping = False  # inside the over-long rest of a line

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        if self._skipping:
            end = _BREAK.search(data)
            if end is None:
                return lines
            lines.append(_decode(self._pending))
            self._pending, self._skipping = b"", False
            data = data[end.end() :]
        buf = self._pending + data
        # A "\r" at the end may be the first half of "\r\n": hold it for the next read.
        tail = b"\r" if buf.endswith(b"\r") else b""
        parts = _BREAK.split(buf[: len(buf) - len(tail)])
        self._pending = parts.pop() + tail
        if len(self._pending) > MAX_LINE_BYTES:
            self._pending, self._skipping = self._pending[:MAX_LINE_BYTES], True
        lines.extend(_decode(part) for part in parts)
        return lines

    def flush(self) -> list[str]:
        """The held-back partial line, for when its file is finished for good."""
        rest, self._pending, self._skipping = self._pending, b"", False
        if rest.endswith(b"\r"):
            return [_decode(rest[:-1])]
        return [_decode(rest)] if rest else []


def _decode(raw: bytes) -> str:
    # Splitting on bytes is safe: "\r" and "\n" never occur inside a UTF-8 sequence.
    return raw.decode("utf-8", errors="replace") + "\n"


class LogFollower:
    """`async for line in LogFollower(path).lines():` follows PATH ("-" for stdin) until close().

    Lines end with "\\n", as from a text file opened with newline=None, so they can be fed
    to the same parsers as `log_text.log_lines`. `status` is None while all is well, else a
    sentence saying what is wrong and what to do; `notices` lists truncations and rotations.

    Without a `lane` it polls every `poll_interval_s`; with one (the session's beat, see
    sources.pacing) it reads once per tick and its slow retries count in ticks, and close()
    takes effect at the next tick.
    """

    def __init__(
        self,
        path: str,
        poll_interval_s: float = 0.25,
        from_start: bool = True,
        lane: Lane | None = None,
    ) -> None:
        self.path = path
        self.poll_interval_s = poll_interval_s
        self.lane = lane
        self.from_start = from_start
        self.status: str | None = None
        self.notices: list[str] = []
        self._closed = False
        self._wake: asyncio.Event | None = None

    def close(self) -> None:
        """Stop following; `lines()` returns at its next wait."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()

    def _notice(self, text: str) -> None:
        self.notices.append(text)
        del self.notices[:-MAX_NOTICES]

    async def _sleep(self, seconds: float) -> None:
        if self.lane is not None:
            if self._closed:
                return
            if seconds <= self.poll_interval_s:
                await self.lane.next()
            else:
                await self.lane.wait_s(seconds)
            return
        # Waiting on an event rather than asyncio.sleep lets close() end the wait at once.
        assert self._wake is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)

    async def lines(self) -> AsyncIterator[str]:
        self._wake = asyncio.Event()
        if self._closed:
            return
        source = self._stdin_lines() if self.path == "-" else self._file_lines()
        async for line in source:
            yield line
            if self._closed:
                return

    # -- stdin ---------------------------------------------------------------------------

    async def _stdin_lines(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        # A daemon thread, not the default executor: a read blocked on a quiet pipe must not
        # keep the process alive after the app quits.
        threading.Thread(
            target=_pump_stdin, args=(loop, queue), name="kvtop-stdin", daemon=True
        ).start()
        splitter = _LineSplitter()
        while not self._closed:
            get = asyncio.ensure_future(queue.get())
            woke = asyncio.ensure_future(self._wake.wait())  # type: ignore[union-attr]
            await asyncio.wait({get, woke}, return_when=asyncio.FIRST_COMPLETED)
            woke.cancel()
            if not get.done():
                get.cancel()
                return
            chunk = get.result()
            if chunk is None:
                for line in splitter.flush():
                    yield line
                self.status = "stdin closed: no more log lines will arrive"
                return
            for line in splitter.feed(chunk):
                yield line

    # -- files ---------------------------------------------------------------------------

    async def _file_lines(self) -> AsyncIterator[str]:
        splitter = _LineSplitter()
        held = _HeldFile()
        try:
            while not self._closed:
                if held.fd is None and not await self._open(held):
                    continue
                assert held.fd is not None
                data = await _read_new(held)
                if data:
                    held.offset += len(data)
                    for line in splitter.feed(data):
                        yield line
                    continue

                # Nothing new: find out whether the file was truncated, replaced or removed.
                if os.fstat(held.fd).st_size < held.offset:
                    self._notice(
                        f"log file {self.path} was truncated; reading it again from the start"
                    )
                    for line in splitter.flush():
                        yield line
                    os.lseek(held.fd, 0, os.SEEK_SET)
                    held.offset = 0
                    continue
                now = _identity(self.path, held.ino)
                if now != held.ino:
                    async for line in _drain_and_close(held, splitter):
                        yield line
                    self._note_rotation(now)
                    continue
                await self._sleep(self.poll_interval_s)
        finally:
            if held.fd is not None:
                os.close(held.fd)

    async def _open(self, held: _HeldFile) -> bool:
        """Open the path (again); when it cannot be, say why, wait a while and return False."""
        path = self.path
        try:
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY)
        except FileNotFoundError:
            held.first_open = False  # when it appears, all of it is new
            self.status = (
                f"log file {path} was removed; waiting for it to come back"
                if held.seen_file
                else f"log file {path} does not exist yet; waiting for it to "
                "appear (check the path if it never does)"
            )
            await self._sleep(self.poll_interval_s)
            return False
        except PermissionError:
            self.status = (
                f"cannot read {path}: permission denied. Run kvtop as a user who "
                "can read it (for example with sudo), or make it readable "
                "(chmod o+r); retrying every few seconds."
            )
            await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))
            return False
        except OSError as exc:
            self.status = (
                f"cannot open {path}: {exc.strerror or exc}. Check the path; "
                "retrying every few seconds."
            )
            await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))
            return False
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            os.close(fd)
            self.status = (
                f"{path} is a directory, not a log file. Give the path of the "
                "log file itself; retrying every few seconds."
            )
            await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))
            return False
        held.fd, held.ino, held.offset = fd, (st.st_dev, st.st_ino), 0
        # Skipping old text only makes sense for the file that was there at start; a file that
        # appears later is all new.
        if held.first_open and not self.from_start:
            held.offset = os.lseek(fd, 0, os.SEEK_END)
        held.first_open = False
        held.seen_file = True
        self.status = None
        return True

    def _note_rotation(self, now: tuple[int, int] | None) -> None:
        if now is None:
            self.status = f"log file {self.path} was removed; waiting for it to come back"
        else:
            self._notice(
                f"log file {self.path} was replaced (rotated); reading the new file from its start"
            )


@dataclass(slots=True)
class _HeldFile:
    """The log file as last opened: its descriptor, its identity and how far it was read."""

    fd: int | None = None
    ino: tuple[int, int] | None = None  # (device, inode)
    offset: int = 0
    first_open: bool = True
    seen_file: bool = False


async def _read_new(held: _HeldFile) -> bytes:
    # A regular file that has not grown has nothing new: no hop to a thread and back at every
    # tick (fstat answers from the open file). A size of 0 is read anyway: some files (procfs,
    # FUSE) report 0 and still have text.
    assert held.fd is not None
    info = os.fstat(held.fd)
    unchanged = stat.S_ISREG(info.st_mode) and info.st_size == held.offset != 0
    return b"" if unchanged else await asyncio.to_thread(os.read, held.fd, CHUNK_BYTES)


def _identity(path: str, held: tuple[int, int] | None) -> tuple[int, int] | None:
    """(device, inode) of what is at `path` now: None when removed, `held` when unknowable."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return held  # e.g. a permission change on the directory: keep the open file
    return (st.st_dev, st.st_ino)


async def _drain_and_close(held: _HeldFile, splitter: _LineSplitter) -> AsyncIterator[str]:
    """The rest of a replaced or removed file, then close it: no line is lost to a rotation."""
    assert held.fd is not None
    while data := await asyncio.to_thread(os.read, held.fd, CHUNK_BYTES):
        for line in splitter.feed(data):
            yield line
    for line in splitter.flush():
        yield line
    os.close(held.fd)
    held.fd = None


def _pump_stdin(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]) -> None:
    stream = sys.stdin.buffer
    # read1 returns whatever the pipe has, so tqdm's "\r" redraws arrive without a "\n".
    read1 = getattr(stream, "read1", None)
    while True:
        try:
            chunk = read1(CHUNK_BYTES) if read1 is not None else stream.readline()
        except (OSError, ValueError):
            chunk = b""
        try:
            loop.call_soon_threadsafe(queue.put_nowait, chunk or None)
        except RuntimeError:  # the loop has closed: nobody is listening any more
            return
        if not chunk:
            return
