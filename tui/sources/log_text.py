"""Read log text from a file or stdin as lines, never failing on bad bytes."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from tui.sglang.log_line import MAX_LINE_CHARS  # the parser cuts every line to this anyway


class LogUnreadable(Exception):
    """The log could not be opened or read; the message is a sentence with a next step."""


def _open_text(path: str) -> TextIO:
    if path == "-":
        if sys.stdin is None:  # started with file descriptor 0 closed (`kvtop <&-`)
            raise LogUnreadable(
                "stdin is closed, so there is no log to read: pipe the log in "
                "(journalctl -u UNIT -o cat | kvtop --once --log-file -) or give --log-file PATH."
            )
        # newline=None splits tqdm's bare "\r" redraws into lines of their own as well.
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline=None)
    if os.path.isdir(path):
        raise LogUnreadable(
            f"{path} is a directory, not a log file. Give the path of the SGLang log file "
            "itself (or pipe it in with --log-file -)."
        )
    try:
        return open(path, encoding="utf-8", errors="replace", newline=None)
    except FileNotFoundError:
        raise LogUnreadable(f"cannot read {path}: no such file. Check the path.") from None
    except PermissionError:
        raise LogUnreadable(
            f"cannot read {path}: permission denied. Run kvtop as a user who can read it "
            "(for example with sudo), or copy the log somewhere readable."
        ) from None
    except OSError as exc:
        raise LogUnreadable(f"cannot read {path}: {exc.strerror or exc}.") from None


@contextmanager
def log_lines(path: str) -> Iterator[Iterator[str]]:
    """`with log_lines(path) as lines:` iterates the text of PATH ("-" for stdin)."""
    handle = _open_text(path)
    try:
        yield _guarded(handle, path)
    finally:
        if path != "-":
            handle.close()


def _bounded(handle: TextIO) -> Iterator[str]:
    """Lines of at most MAX_LINE_CHARS: a longer one keeps its start, the rest is skipped, so a
    100 MB line never sits in memory whole."""
    while line := handle.readline(MAX_LINE_CHARS):
        if len(line) == MAX_LINE_CHARS and not line.endswith("\n"):
            while (rest := handle.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                pass
        yield line


def _guarded(handle: TextIO, path: str) -> Iterator[str]:
    try:
        yield from _bounded(handle)
    except OSError as exc:  # e.g. EIO on a failing disk, or a FIFO that vanished
        raise LogUnreadable(f"reading {path} failed part-way: {exc.strerror or exc}.") from None
