"""The last lines of the log, as written: the events pane's raw view (tracebacks included).

Secrets (api_key='…' and the like in the server_args line) are redacted as a line is added, so
the raw view, a saved view and the copy key never hold one. Bounded in lines and in characters per line, so a server that logs for weeks (or one line of a
megabyte) costs at most MAX_LINES × MAX_LINE_CHARS characters.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kvtop.sglang.server_args import redact_line

MAX_LINES = 5000
MAX_LINE_CHARS = 2000  # longer lines are cut here, marked with a trailing " …"


class RawLines:
    """A ring of the latest `max_lines` log lines; `seen` counts every line ever added."""

    def __init__(self, max_lines: int = MAX_LINES, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self.max_lines = max_lines
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._max_chars = max_line_chars
        self.seen = 0

    def add(self, line: str | bytes) -> None:
        if isinstance(line, bytes):
            line = line[: self._max_chars * 4].decode("utf-8", errors="replace")
        line = line.rstrip("\r\n")
        # Only what the ring keeps is redacted: a megabyte line costs no more than a short
        # one. A secret cut at the end still goes (its quote unclosed, or a bare word), and
        # one past the cut is not kept at all.
        longer = len(line) > self._max_chars * 2
        if longer:
            line = line[: self._max_chars * 2]
        line = redact_line(line)  # no view, save or copy shows a secret
        if longer or len(line) > self._max_chars:
            line = line[: self._max_chars] + " …"
        self._lines.append(line)
        self.seen += 1

    def extend(self, lines: Iterable[str | bytes]) -> None:
        for line in lines:
            self.add(line)

    def lines(self) -> tuple[str, ...]:
        """Oldest first, as in the log."""
        return tuple(self._lines)

    def __len__(self) -> int:
        return len(self._lines)
