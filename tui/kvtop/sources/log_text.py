"""Read log text from a file or stdin as lines, never failing on bad bytes, never endlessly."""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, TextIO

from kvtop.sglang.log_line import MAX_LINE_CHARS  # the parser cuts every line to this anyway

# The most text one read of a log takes (`--once`): /dev/zero or an endless pipe ends here. A
# longer regular file is read from this far before its end (its latest runs); a stream is cut
# after this much, and either way the reader says so (LogText.cut).
MAX_LOG_CHARS = 1 << 30
# One read while looking for the first line break after a seek: the piece of a line skipped
# there is read in steps of this size, never whole (a 1 GiB piece once held 2 GB of memory).
_SKIP_BYTES = 1 << 20


class LogUnreadable(Exception):
    """The log could not be opened or read; the message is a sentence with a next step."""


def _skip_to_next_line(raw: BinaryIO) -> bool:
    """Read RAW up to and past its next line break, in bounded steps; False when none came."""
    while chunk := raw.read(_SKIP_BYTES):
        at = chunk.find(b"\n")
        if at >= 0:
            raw.seek(at + 1 - len(chunk), os.SEEK_CUR)
            return True
    return False


def _open_text(path: str, limit_chars: int) -> tuple[TextIO, bool | None]:
    """The text to read, and whether it starts part-way (a regular file over the limit): True
    after the first line break past the cut, None when no line break came after it."""
    if path == "-":
        if sys.stdin is None:  # started with file descriptor 0 closed (`kvtop <&-`)
            raise LogUnreadable(
                "stdin is closed, so there is no log to read: pipe the log in "
                "(journalctl -u UNIT -o cat | kvtop --once --log-file -) or give --log-file PATH."
            )
        return _text(sys.stdin.buffer), False
    if os.path.isdir(path):
        raise LogUnreadable(
            f"{path} is a directory, not a log file. Give the path of the SGLang log file "
            "itself (or pipe it in with --log-file -)."
        )
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed by log_lines)
    except FileNotFoundError:
        raise LogUnreadable(f"cannot read {path}: no such file. Check the path.") from None
    except PermissionError:
        raise LogUnreadable(
            f"cannot read {path}: permission denied. Run kvtop as a user who can read it "
            "(for example with sudo), or copy the log somewhere readable."
        ) from None
    except OSError as exc:
        raise LogUnreadable(f"cannot read {path}: {exc.strerror or exc}.") from None
    try:
        info = os.fstat(raw.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit_chars:
            size = info.st_size  # its latest runs are what a report is for
            raw.seek(size - limit_chars)
            # The first line there is a piece of one (its start is before the cut).
            return _text(raw), True if _skip_to_next_line(raw) else None
    except OSError:
        pass  # not seekable after all: read from the start, as a stream
    return _text(raw), False


def _text(raw: BinaryIO) -> TextIO:
    # newline=None splits tqdm's bare "\r" redraws into lines of their own as well.
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)


class LogText:
    """The lines of a log, at most `limit_chars` of text; `cut` says afterwards, in words, what
    was left out (None when nothing was)."""

    def __init__(
        self, handle: TextIO, path: str, limit_chars: int, from_middle: bool | None
    ) -> None:
        self._handle, self._path, self._limit = handle, path, limit_chars
        self.cut: str | None = None
        # Lines longer than MAX_LINE_CHARS, read by their start only (counted as they are read).
        self.overlong = 0
        if from_middle:
            self.cut = (
                f"{self._name} is longer than kvtop reads at once ({_size(limit_chars)}): the "
                f"report covers its last {_size(limit_chars)} only (its latest runs)."
            )
        elif from_middle is None:
            self.cut = (
                f"{self._name} is longer than kvtop reads at once ({_size(limit_chars)}) and "
                f"its last {_size(limit_chars)} are part of one line, with no line break: "
                "that line was cut and nothing of it was read."
            )

    @property
    def _name(self) -> str:
        return "stdin" if self._path == "-" else self._path

    def __iter__(self) -> Iterator[str]:
        try:
            yield from self._bounded()
        except OSError as exc:  # e.g. EIO on a failing disk, or a FIFO that vanished
            raise LogUnreadable(
                f"reading {self._path} failed part-way: {exc.strerror or exc}."
            ) from None

    def _bounded(self) -> Iterator[str]:
        """Lines of at most MAX_LINE_CHARS: a longer one keeps its start, the rest is skipped,
        so a 100 MB line never sits in memory whole; and no more than the limit in all."""
        handle, left = self._handle, self._limit
        while left > 0 and (line := handle.readline(min(MAX_LINE_CHARS, left))):
            left -= len(line)
            if len(line) == MAX_LINE_CHARS and not line.endswith("\n"):
                self.overlong += 1
                while left > 0 and (rest := handle.readline(min(MAX_LINE_CHARS, left))):
                    left -= len(rest)
                    if rest.endswith("\n"):
                        break
            yield line
        if left <= 0 and handle.read(1):
            self.cut = (
                f"{self._name} did not end within {_size(self._limit)} (an endless stream or "
                f"device?): the report covers its first {_size(self._limit)} only. For a long "
                "log, pass its latest part: tail -c 500M LOG | kvtop --once --log-file -"
            )

    @property
    def overlong_words(self) -> str | None:
        """The lines read by their start only, in words; None when there were none."""
        if not self.overlong:
            return None
        many = self.overlong > 1
        return (
            f"{self.overlong:,} line{'s' if many else ''} longer than {_size(MAX_LINE_CHARS)} "
            f"{'were' if many else 'was'} cut: only the first {_size(MAX_LINE_CHARS)} of "
            f"{'each' if many else 'it'} was read."
        )


def _size(chars: int) -> str:
    if chars >= 1 << 30:
        return f"{chars / (1 << 30):g} GiB"
    return f"{chars / (1 << 20):g} MiB"


@contextmanager
def log_lines(path: str, limit_chars: int = MAX_LOG_CHARS) -> Iterator[LogText]:
    """`with log_lines(path) as lines:` iterates the text of PATH ("-" for stdin), at most
    LIMIT_CHARS of it; `lines.cut` afterwards says what was left out."""
    handle, from_middle = _open_text(path, limit_chars)
    try:
        yield LogText(handle, path, limit_chars, from_middle)
    finally:
        if path != "-":
            handle.close()
