"""Follow a growing log file (or stdin) like `tail -F`, yielding complete lines without blocking."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.sources.log_stream import (
    CHUNK_BYTES,
    OPENED,
    Ended,
    Item,
    LineSplitter,
    Opener,
    path_opener,
    start_pump,
)

if TYPE_CHECKING:
    from kvtop.sources.pacing import Lane

MAX_NOTICES = 50
# Permission problems are fixed by a person, not by the next write: retry slowly.
PERMISSION_RETRY_S = 2.0
# A file rewritten in place (truncated and written again between two reads) is told by its
# content, not its size: its first bytes, and the bytes just before where kvtop had read to.
HEAD_BYTES, TAIL_BYTES = 1024, 256
TRUNCATED, REWRITTEN = "truncated", "rewritten"


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
        if self.path == "-":
            source = self._stream_lines(_stdin_opener, "stdin", STDIN_ENDED)
        else:
            source = self._file_lines()
        async for line in source:
            yield line
            if self._closed:
                return

    # -- streams: stdin, pipes, FIFOs, devices ---------------------------------------------------

    async def _stream_lines(self, opener: Opener, name: str, ended: str) -> AsyncIterator[str]:
        """Lines from a stream read in a thread of its own (see sources.log_stream); ENDED is
        the status once it ends."""
        queue = start_pump(opener, name)
        splitter = LineSplitter()
        while not self._closed:
            items = await self._stream_items(queue)
            for item in items:
                if item is OPENED:
                    self.status = None
                elif isinstance(item, Ended):
                    for line in splitter.flush():
                        yield line
                    self.status = (
                        ended
                        if item.problem is None
                        else (
                            f"reading {self.path} failed: {item.problem}. No more log lines will "
                            "arrive; what was read stays on screen."
                        )
                    )
                    return
                else:
                    assert isinstance(item, bytes)
                    for line in splitter.feed(item):
                        yield line

    async def _stream_items(self, queue: asyncio.Queue[Item]) -> list[Item]:
        """What the stream's thread has handed over: on the beat, everything since the last
        tick; without a lane, as soon as there is something (or nothing, once closed)."""
        items: list[Item] = []
        if self.lane is not None:
            await self.lane.next()
        else:
            assert self._wake is not None  # made by lines(), which reads through here
            get = asyncio.ensure_future(queue.get())
            woke = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait({get, woke}, return_when=asyncio.FIRST_COMPLETED)
            woke.cancel()
            if not get.done():
                get.cancel()
                return []
            # The first item, then what came after it: putting it back in the queue would put
            # it behind what the thread handed over meanwhile.
            items.append(get.result())
        while not queue.empty():
            items.append(queue.get_nowait())
        return items

    async def _path_stream_lines(self, fifo: bool) -> AsyncIterator[str]:
        path = self.path
        if await asyncio.to_thread(_endless_device, path):  # a read that may block: a thread
            async for line in self._idle_on_endless_device():
                yield line
            return
        if fifo:
            self.status = (
                f"{path} is a FIFO with no writer yet: its log lines appear once a program "
                "opens it and writes the log into it"
            )
        ended = (
            f"{path} ended: the program writing it closed it, so no more log lines will "
            "arrive; what was read stays on screen"
        )
        async for line in self._stream_lines(path_opener(path), "log-stream", ended):
            yield line

    async def _idle_on_endless_device(self) -> AsyncIterator[str]:
        """The path is a device that never ends and holds no log (/dev/zero, /dev/urandom, a
        log replaced by a link to one): said once, nothing read (reading it would burn a core
        for ever); the path is looked at every few seconds, and a log file put back there is
        followed again."""
        self.status = (
            f"{self.path} is a device that never ends ({os.path.realpath(self.path)}), not a "
            "log: nothing is read from it. Give the SGLang log's path, or put the log back."
        )
        while not self._closed:
            await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))
            if _stream_kind(self.path) is None:
                self.status = None
                async for line in self._file_lines():
                    yield line
                return

    # -- files ---------------------------------------------------------------------------

    async def _file_lines(self) -> AsyncIterator[str]:
        kind = _stream_kind(self.path)
        if kind is not None:  # not seekable: read as a stream, like stdin
            async for line in self._path_stream_lines(fifo=kind == stat.S_IFIFO):
                yield line
            return
        splitter = LineSplitter()
        held = _HeldFile()
        try:
            while not self._closed:
                if held.fd is None and not await self._open(held):
                    if held.stream_kind is not None:
                        break
                    continue
                try:
                    data, change = await _read_new(held)
                except OSError as exc:
                    await self._read_failed(held, exc)
                    continue
                if data:
                    for line in splitter.feed(data):
                        yield line
                    continue
                if change is not None:
                    self._notice(_CHANGE_NOTICE[change].format(path=self.path))
                    for line in splitter.flush():
                        yield line
                    held.restart()
                    continue
                # Nothing new: find out whether the file was replaced or removed.
                now = _identity(self.path, held.ino)
                if now != held.ino:
                    async for line in _drain_and_close(held, splitter):
                        yield line
                    self._note_rotation(now)
                    continue
                await self._sleep(self.poll_interval_s)
        finally:
            held.close()
        if held.stream_kind is not None:  # a stream took the file's place before it was opened
            async for line in self._path_stream_lines(fifo=held.stream_kind == stat.S_IFIFO):
                yield line

    async def _read_failed(self, held: _HeldFile, exc: OSError) -> None:
        """A read failed (EIO on a failing disk, a vanished network file): say so, open the
        file again after a while, from where kvtop had read to."""
        self.status = (
            f"reading {self.path} failed: {exc.strerror or exc}. Check the disk or the mount; "
            "retrying every few seconds."
        )
        offset = held.offset
        held.close()
        held.resume_at = offset
        await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))

    async def _open(self, held: _HeldFile) -> bool:
        """Open the path (again); when it cannot be, say why, wait a while and return False."""
        path = self.path
        try:
            # O_NONBLOCK: a FIFO that appears at the path must not block the open.
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | os.O_NONBLOCK)
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
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            os.close(fd)
            held.stream_kind = stat.S_IFMT(st.st_mode)
            return False
        if stat.S_ISDIR(st.st_mode):
            os.close(fd)
            self.status = (
                f"{path} is a directory, not a log file. Give the path of the "
                "log file itself; retrying every few seconds."
            )
            await self._sleep(max(self.poll_interval_s, PERMISSION_RETRY_S))
            return False
        # What the file kvtop read before began and ended with: a replacement that holds the
        # same text (`sed -i`, a deleted log restored, a copy moved in place) is read on from
        # where kvtop had read to, not again from its start (which would count a restart).
        before = held.text_read() if held.seen_file and not held.resume_at else None
        held.opened(fd, (st.st_dev, st.st_ino))
        # Skipping old text only makes sense for the file that was there at start; a file that
        # appears later is all new.
        if held.first_open and not self.from_start:
            await asyncio.to_thread(held.position_at, os.lseek(fd, 0, os.SEEK_END))
        elif held.resume_at:
            await asyncio.to_thread(held.position_at, held.resume_at)
        elif before is not None:
            read_to = await asyncio.to_thread(_same_text_until, fd, before, st.st_size)
            if read_to:
                await asyncio.to_thread(held.position_at, read_to)
                self._notice(SAME_TEXT_NOTICE.format(path=path))
        held.first_open = False
        held.seen_file = True
        held.resume_at = 0
        self.status = None
        return True

    def _note_rotation(self, now: tuple[int, int] | None) -> None:
        if now is None:
            self.status = f"log file {self.path} was removed; waiting for it to come back"
        else:
            self._notice(
                f"log file {self.path} was replaced (rotated); reading the new file from its start"
            )


STDIN_ENDED = "stdin closed: no more log lines will arrive"
SAME_TEXT_NOTICE = (
    "log file {path} was replaced by a file with the text already read (sed -i, a restore); "
    "reading on after it, not again from its start"
)


def _same_text_until(fd: int, before: tuple[bytes, bytes, int], size: int) -> int:
    """Blocking: where to read on in a replacement file that begins with the text kvtop had
    read (its first bytes, and the bytes before where it had read to when it is that long):
    that offset, the new file's size when it is shorter (all of it was read), else 0."""
    head, tail, offset = before
    if not head or os.pread(fd, len(head), 0) != head:
        return 0
    if size < offset:
        return size
    if tail and os.pread(fd, len(tail), offset - len(tail)) != tail:
        return 0
    return offset


_CHANGE_NOTICE = {
    TRUNCATED: "log file {path} was truncated; reading it again from the start",
    REWRITTEN: "log file {path} was rewritten in place (new text from its start); reading it "
    "again from the start as a new run",
}


def _endless_device(path: str) -> bool:
    """A character device that is not a terminal: /dev/zero, /dev/urandom and the like never
    end and never hold a log (a terminal, /dev/stdin on a pipe or /dev/tty may)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if not stat.S_ISCHR(mode):
        return False
    try:
        with open(path, "rb", buffering=0) as device:
            # /dev/null ends at once: an empty log, not an endless one.
            return not device.isatty() and device.read(1) != b""
    except OSError:
        return False


def _stream_kind(path: str) -> int | None:
    """The file type (stat.S_IFIFO, S_IFCHR, ...) of what is at PATH when it is neither a
    regular file nor a directory (nothing to seek or poll: a stream); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return stat.S_IFMT(mode)


@dataclass(slots=True)
class _HeldFile:
    """The log file as last opened: its descriptor, its identity, how far it was read, and
    what its text looked like (its first bytes, the last bytes read) to tell a rewrite."""

    fd: int | None = None
    ino: tuple[int, int] | None = None  # (device, inode)
    offset: int = 0
    first_open: bool = True
    seen_file: bool = False
    stream_kind: int | None = None  # a stream was found at the path: read it as one
    resume_at: int = 0  # reopened after a failed read: carry on from here
    head: bytes = b""
    tail: bytes = b""
    seen: tuple[int, int] | None = None  # (size, mtime in ns) at the latest look

    def text_read(self) -> tuple[bytes, bytes, int] | None:
        """The first bytes read, the latest ones and where reading got to (None: none read)."""
        return (self.head, self.tail, self.offset) if self.head else None

    def opened(self, fd: int, ino: tuple[int, int]) -> None:
        self.fd, self.ino = fd, ino
        self.restart()

    def restart(self) -> None:
        """Read from the start again (a new file, or this one truncated or rewritten)."""
        if self.fd is not None:
            os.lseek(self.fd, 0, os.SEEK_SET)
        self.offset, self.head, self.tail, self.seen = 0, b"", b"", None

    def position_at(self, offset: int) -> None:
        """Carry on from OFFSET (the end at start, or where a failed read left off)."""
        assert self.fd is not None
        self.offset = os.lseek(self.fd, offset, os.SEEK_SET)
        self.head = os.pread(self.fd, min(HEAD_BYTES, self.offset), 0)
        start = max(0, self.offset - TAIL_BYTES)
        self.tail = os.pread(self.fd, self.offset - start, start)

    def took(self, data: bytes) -> None:
        """DATA was read at `offset`: remember the first and the latest bytes."""
        start = self.offset
        if len(self.head) < HEAD_BYTES and start <= len(self.head) < start + len(data):
            self.head += data[len(self.head) - start : HEAD_BYTES - start]
        self.tail = (self.tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]
        self.offset += len(data)

    def rewritten(self) -> bool:
        """The text kvtop has read is no longer where it was: the file was written anew."""
        assert self.fd is not None
        if self.head and os.pread(self.fd, len(self.head), 0) != self.head:
            return True
        at = self.offset - len(self.tail)
        return bool(self.tail) and os.pread(self.fd, len(self.tail), at) != self.tail

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


async def _read_new(held: _HeldFile) -> tuple[bytes, str | None]:
    """New bytes (b"" when none), or the change found instead: TRUNCATED or REWRITTEN."""
    # A regular file that has not changed has nothing new: no hop to a thread and back at every
    # tick (fstat answers from the open file). A size of 0 is read anyway: some files (procfs,
    # FUSE) report 0 and still have text.
    assert held.fd is not None
    info = os.fstat(held.fd)
    look = (info.st_size, info.st_mtime_ns)
    if look == held.seen and info.st_size == held.offset != 0:
        return b"", None
    held.seen = look
    return await asyncio.to_thread(_read_checked, held, info.st_size)


def _read_checked(held: _HeldFile, size: int) -> tuple[bytes, str | None]:
    """In a thread: the file's new bytes, unless what was read before has changed."""
    assert held.fd is not None
    if held.offset and size >= held.offset and held.rewritten():
        return b"", REWRITTEN
    data = os.read(held.fd, CHUNK_BYTES)
    if data:
        held.took(data)
        return data, None
    if os.fstat(held.fd).st_size < held.offset:
        return b"", TRUNCATED
    return b"", None


def _identity(path: str, held: tuple[int, int] | None) -> tuple[int, int] | None:
    """(device, inode) of what is at `path` now: None when removed, `held` when unknowable."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return held  # e.g. a permission change on the directory: keep the open file
    return (st.st_dev, st.st_ino)


async def _drain_and_close(held: _HeldFile, splitter: LineSplitter) -> AsyncIterator[str]:
    """The rest of a replaced or removed file, then close it: no line is lost to a rotation."""
    assert held.fd is not None
    while data := await asyncio.to_thread(os.read, held.fd, CHUNK_BYTES):
        for line in splitter.feed(data):
            yield line
    for line in splitter.flush():
        yield line
    held.close()


def _stdin_opener() -> tuple[Callable[[int], bytes], Callable[[], None]]:
    if sys.stdin is None:
        raise ValueError("stdin is closed")
    stream = sys.stdin.buffer
    # read1 returns whatever the pipe has, so tqdm's "\r" redraws arrive without a "\n".
    read1 = getattr(stream, "read1", None)
    # Without read1, a line at a time, at most N bytes of it: one endless line holds no more.
    return (read1 if read1 is not None else (lambda n: stream.readline(n))), (lambda: None)
