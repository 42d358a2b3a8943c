"""Control characters in text from outside made visible, so no log line can drive the terminal.

An escape sequence in a log message (`\\x1b[2J`, a colour code, an OSC title change) must never
reach the terminal as such: it is shown as its Unicode control picture (␛[2J) instead.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_PICTURES = {c: chr(0x2400 + c) for c in range(0x20)}
_PICTURES[0x7F] = "␡"
_PICTURES.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})  # C1: no pictures exist
_PICTURES[0x09] = " "  # a tab is only spacing


def make_visible(text: str) -> str:
    """`text` with every C0/C1 control character (and DEL) replaced by a visible stand-in."""
    if _CONTROL.search(text) is None and "\t" not in text:
        return text
    return text.translate(_PICTURES)
