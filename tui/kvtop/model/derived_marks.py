"""How a figure kvtop computed, rather than read from a log line, is shown.

The model decides which values are derived (tui/kvtop/sglang/start_state.py and the breakdowns
built from it); the text report and the formula screen only mark them, with the same mark and
the same footnote words. `--json` names them in the `derived` list of each object.
"""

from __future__ import annotations

from collections.abc import Iterable

MARK = "*"
FOOTNOTE_WORDS = "derived, not in the log"


def marked(text: str, derived: bool) -> str:
    """`11.18*` for a derived figure; a read one as it is."""
    return f"{text}{MARK}" if derived else text


def footnote(items: Iterable[tuple[str, str]]) -> str | None:
    """`* derived, not in the log: KV cache = K size + V size (5.00 + 5.00); …` (each item
    once), or None when nothing shown was derived."""
    said = dict.fromkeys(f"{label} = {how}" if how else label for label, how in items)
    if not said:
        return None
    return f"{MARK} {FOOTNOTE_WORDS}: " + "; ".join(said)
