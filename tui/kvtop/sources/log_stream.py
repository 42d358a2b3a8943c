"""Read a stream (stdin, a pipe, a FIFO, a character device) in a thread of its own.

A stream cannot be polled like a file (no size, no seek) and a read on a quiet one blocks: the
reads happen in a daemon thread, so nothing of kvtop ever waits on them (not the screen, not
`q`: a thread blocked on a FIFO without a writer does not keep the process alive). The thread
hands over at most QUEUE_CHUNKS chunks ahead of the reader: an endless stream (/dev/zero) costs
a few MB, not all the memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

CHUNK_BYTES = 1 << 20
QUEUE_CHUNKS = 4
# The longest line passed on (its first bytes); the parser reads at most 1M characters anyway.
MAX_LINE_BYTES = 4 << 20
_BREAK = re.compile(rb"\r\n|\r|\n")


class LineSplitter:
    """Bytes in, text lines out, splitting on "\\n", "\\r\\n" and bare "\\r" like newline=None.

    A line longer than MAX_LINE_BYTES keeps its first MAX_LINE_BYTES and the rest is skipped up
    to its line break, so a 100 MB line costs a few MB, not 100 (and not a quadratic re-join).
    """

    def __init__(self) -> None:
        # The unfinished line, in the pieces it came in: each read is scanned once, never the
        # whole held line again (re-joining it at every read made a long line quadratic: an
        # 8 MiB line took 2.5 s in 8 KiB reads).
        self._pieces: list[bytes] = []
        self._held = 0  # bytes in _pieces
        self._skipping = False  # inside the over-long rest of a line

    @property
    def _pending(self) -> bytes:
        return b"".join(self._pieces)

    def _hold(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._held += len(piece)
        if self._held > MAX_LINE_BYTES:
            self._pieces, self._held = [self._pending[:MAX_LINE_BYTES]], MAX_LINE_BYTES
            self._skipping = True

    def _take(self, last: bytes) -> bytes:
        """The held line completed by LAST; nothing is held after it."""
        line = b"".join([*self._pieces, last])
        self._pieces, self._held = [], 0
        return line

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        if self._skipping:
            end = _BREAK.search(data)
            if end is None:
                return lines
            lines.append(_decode(self._take(b"")))
            self._skipping = False
            data = data[end.end() :]
        if not data:
            return lines
        # A "\r" held at the end of the last read may be the first half of "\r\n": it goes in
        # front of this read, so the pair is seen whole.
        if self._pieces and self._pieces[-1].endswith(b"\r"):
            self._pieces[-1] = self._pieces[-1][:-1]
            self._held -= 1
            data = b"\r" + data
        # A "\r" at the end may be the first half of "\r\n": hold it for the next read.
        tail = b"\r" if data.endswith(b"\r") else b""
        parts = _BREAK.split(data[: len(data) - len(tail)])
        if len(parts) > 1:
            lines.append(_decode(self._take(parts[0])))
            lines.extend(_decode(part) for part in parts[1:-1])
        self._hold(parts[-1] + tail)
        return lines

    def flush(self) -> list[str]:
        """The held-back partial line, for when its file is finished for good."""
        rest = self._take(b"")
        self._skipping = False
        if rest.endswith(b"\r"):
            return [_decode(rest[:-1])]
        return [_decode(rest)] if rest else []


def _decode(raw: bytes) -> str:
    # Splitting on bytes is safe: "\r" and "\n" never occur inside a UTF-8 sequence.
    return raw.decode("utf-8", errors="replace") + "\n"


class Opened:
    """The stream is open (a FIFO: a writer has connected)."""


OPENED = Opened()


@dataclass(frozen=True, slots=True)
class Ended:
    """The stream is finished: at its end (problem None), or a read failed (why, in words)."""

    problem: str | None = None


Item = bytes | Opened | Ended
# Opens the stream (it may block: a FIFO waits for its writer) and returns (read, close).
Opener = Callable[[], tuple[Callable[[int], bytes], Callable[[], None]]]


def path_opener(path: str) -> Opener:
    def open_path() -> tuple[Callable[[int], bytes], Callable[[], None]]:
        raw = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the pump)
        return (lambda n: raw.read(n) or b""), raw.close

    return open_path


def start_pump(opener: Opener, name: str) -> asyncio.Queue[Item]:
    """Start the reading thread; its chunks, then one Ended, arrive in the returned queue."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Item] = asyncio.Queue(maxsize=QUEUE_CHUNKS)
    threading.Thread(
        target=_pump, args=(loop, queue, opener), name=f"kvtop-{name}", daemon=True
    ).start()
    return queue


def _pump(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Item], opener: Opener) -> None:
    def put(item: Item) -> bool:
        # Waits while the queue is full: the reader sets the pace. False once the loop has
        # closed or is closing: nobody is listening any more.
        put_item = queue.put(item)
        try:
            done = asyncio.run_coroutine_threadsafe(put_item, loop)
        except RuntimeError:
            put_item.close()
            return False
        try:
            done.result()
        except concurrent.futures.CancelledError:
            return False
        return True

    try:
        read, close = opener()
    except (OSError, ValueError) as exc:
        put(Ended(_why(exc)))
        return
    try:
        if not put(OPENED):
            return
        while True:
            try:
                chunk = read(CHUNK_BYTES)
            except (OSError, ValueError) as exc:
                put(Ended(_why(exc)))
                return
            if not chunk:
                put(Ended())
                return
            if not put(chunk):
                return
    finally:
        close()


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return "the stream was closed"
