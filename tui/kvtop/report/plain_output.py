"""The report on a standard output that cannot take Unicode (PYTHONIOENCODING=ascii, a Latin-1
locale): the same text with ASCII glyphs, never a UnicodeEncodeError."""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, TextIO

from kvtop.model.snapshot import SourceState

if TYPE_CHECKING:  # Rich is imported when a text report is written, not before
    from rich.console import Console

# The report's own glyphs in ASCII. One character for one wherever a glyph can sit in a table
# cell (Rich has laid the columns out already; the report never cuts a cell, so "…" is only
# ever a title's or a quoted line's); the prose-only signs get two or three. Rich draws its table boxes in ASCII by itself once the
# stream's encoding is not UTF.
GLYPHS = str.maketrans(
    {
        SourceState.OK.mark: "*",
        SourceState.DEGRADED.mark: "~",
        SourceState.OFF.mark: "o",
        "•": "*",
        "·": "|",
        "×": "x",
        "…": "~",
        "—": "-",
        "–": "-",
        "−": "-",
        "±": "+/-",
        "≈": "~",
        "≥": ">=",
        "≤": "<=",
        "→": "->",
        "␛": "^",
        "▓": "#",
        "█": "#",
        "░": ".",
        "▒": ":",
        "\ufffd": "?",
    }
)
# What a stream must be able to encode to get the report as it is.
SAMPLE = SourceState.OK.mark + "·—…"


def takes_unicode(stream: TextIO) -> bool:
    """True when STREAM's encoding can write the report's glyphs."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        codecs.lookup(encoding)
        SAMPLE.encode(encoding)
    except (LookupError, UnicodeEncodeError):
        return False
    return True


def plain(text: str) -> str:
    """TEXT with the report's glyphs in ASCII."""
    return text.translate(GLYPHS)


class PlainWriter:
    """A text stream that writes through to STREAM with ASCII glyphs; any other character the
    encoding lacks (a model name in Cyrillic, say) becomes "?" rather than an error."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            self.encoding = "ascii"

    def write(self, text: str) -> int:
        safe = plain(text).encode(self.encoding, errors="replace").decode(self.encoding)
        return self._stream.write(safe)

    def __getattr__(self, name: str) -> object:  # flush, isatty, fileno, ...
        return getattr(self._stream, name)


def write_json(data: object) -> None:
    """A report's JSON on stdout; on a stream that cannot take the characters, \\u escapes (the
    same JSON)."""
    import json
    import sys

    json.dump(data, sys.stdout, indent=2, ensure_ascii=not takes_unicode(sys.stdout))
    sys.stdout.write("\n")


def stdout_console(width: int | None) -> Console:
    """A Rich console on stdout for a text report: `width` columns (--width, else the report
    width rule), ASCII glyphs where the stream cannot take Unicode, no highlighting."""
    import sys

    from rich.console import Console

    from kvtop.report.width import report_width

    out = sys.stdout if takes_unicode(sys.stdout) else PlainWriter(sys.stdout)
    return Console(
        file=out,  # type: ignore[arg-type]  # PlainWriter: write() here, the rest of TextIO its stream's
        highlight=False,
        soft_wrap=False,
        width=report_width(width),
    )
