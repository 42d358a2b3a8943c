"""The one filter for text from outside (log, server, Prometheus, process table, host name):
control characters made visible, so no string can drive the terminal or hide what it says.

An escape sequence (`\\x1b[2J`, a colour code, an OSC 52 clipboard write or OSC 0 title change)
must never reach the terminal as such: it is shown as its Unicode control picture (␛[2J)
instead. Characters that reorder or hide text without being controls (the bidirectional
overrides and isolates, zero-width spaces and joiners, the byte-order mark, the line and
paragraph separators) are shown as their code (`\\u202e`) the same way. The filter runs where a
string enters kvtop, after any decoding (a repr's `\\x1b` is an escape only once decoded).
"""

from __future__ import annotations

import re

# C0 (but the tab), DEL, C1, and the invisible formatting characters that can reorder or hide
# text: ALM, ZWSP..RLM, LS/PS, LRE..RLO, WJ..invisible operators, LRI..PDI, the BOM.
_INVISIBLE = "\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_CONTROL = re.compile(rf"[\x00-\x08\x0a-\x1f\x7f-\x9f{_INVISIBLE}]")
_PICTURES: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20)}
_PICTURES[0x7F] = "␡"
_PICTURES.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})  # C1: no pictures exist
_PICTURES[0x09] = " "  # a tab is only spacing
for _code in (0x061C, 0x2028, 0x2029, 0xFEFF, *range(0x200B, 0x2010), *range(0x202A, 0x202F)):
    _PICTURES[_code] = f"\\u{_code:04x}"
for _code in (*range(0x2060, 0x2065), *range(0x2066, 0x206A)):
    _PICTURES[_code] = f"\\u{_code:04x}"


def make_visible(text: str) -> str:
    """`text` with every C0/C1 control character (and DEL), bidirectional override or isolate
    and zero-width character replaced by a visible stand-in."""
    if _CONTROL.search(text) is None and "\t" not in text:
        return text
    return text.translate(_PICTURES)


def visible_or_none(value: object) -> str | None:
    """A string from outside, filtered; None for anything that is not a string."""
    return make_visible(value) if isinstance(value, str) else None
