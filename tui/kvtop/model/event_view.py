"""The events pane's content, as plain lines: events or the raw log, filtered and searched.

Pure: the screen (tui/kvtop/live/screens/events.py) draws these lines, styles them by kind and scrolls;
saving and copying take the same lines, so what is saved is what is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtop.model.status.levels import Level
from kvtop.model.timeline import EventRow, Timeline
from kvtop.model.verdict import (
    ALERT_CLEARED,
    ALERT_RAISED,
    GPU_BACK,
    GPU_LOST,
    RESTART,
    SOURCE_BACK,
    SOURCE_DOWN,
    Seen,
)
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.events import Failure
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.prefix import split_prefix

EVENTS, LOG = "events", "log"
PLAIN, BAD, WARN, DIM = "", "bad", "warn", "dim"


@dataclass(frozen=True, slots=True)
class Line:
    text: str  # shown literally (control characters already made visible)
    kind: str = PLAIN  # PLAIN, BAD (a failure), WARN (its next step), DIM (folded rows)


@dataclass(frozen=True, slots=True)
class Filters:
    rank: str | None = None  # "TP3": rows and lines of that rank only
    phase: str | None = None  # an event's name ("load weights"): events mode only
    failures_only: bool = False
    # Only what kvtop saw (its timeline: alerts raised and cleared, sources down and back,
    # GPUs lost and back, restarts): events mode only.
    seen_only: bool = False

    def words(self) -> str:
        parts = [
            f"rank {self.rank}" if self.rank else "",
            f"phase {self.phase}" if self.phase else "",
        ]
        parts.append("failures only" if self.failures_only else "")
        parts.append("what kvtop saw only" if self.seen_only else "")
        return ", ".join(p for p in parts if p) or "none"

    @property
    def narrowed(self) -> bool:
        """A rank, a phase or failures only: the log's events, not kvtop's timeline."""
        return self.rank is not None or self.phase is not None or self.failures_only


def event_words(row: EventRow) -> str:
    """`09:58:41 TP0–7   draft extend graph (draft)  −0.14 GiB → 7.40 GiB free in 2.1 s`."""
    clock = row.time_text[-8:] if row.time_text else "--:--:--"
    words = f"{clock} {row.ranks:<7} {row.what}"
    if row.failure:
        return f"{words}: {make_visible(row.message)}"
    if row.delta_gib is not None:
        # The phase took memory: free memory went down by that much.
        sign = "−" if row.delta_gib >= 0 else "+"
        words += f"  {sign}{abs(row.delta_gib):.2f} GiB"
    if row.avail_gib is not None:
        words += f" → {row.avail_gib:.2f} GiB free"
    if row.duration_s is not None:
        words += f" in {row.duration_s:.1f} s"
    return words


def folded_words(folded: Sequence[EventRow]) -> str:
    """One line for the rows that moved nothing (−0.00 GiB in 0.0 s)."""
    names = ", ".join(f"{r.what} ({r.ranks})" for r in folded)
    many = "row" if len(folded) == 1 else "rows"
    return f"folded: {len(folded)} {many} with no memory moved and no time taken: {names}"


def _row_kept(row: EventRow, filters: Filters) -> bool:
    if filters.failures_only and not row.failure:
        return False
    if filters.phase is not None and row.what != filters.phase:
        return False
    return filters.rank is None or filters.rank in row.rank_set


_SEEN_WORDS = {
    ALERT_RAISED: "alert",
    ALERT_CLEARED: "cleared",
    SOURCE_DOWN: "source down",
    SOURCE_BACK: "source back",
    GPU_LOST: "GPU lost",
    GPU_BACK: "GPU back",
    RESTART: "restart",
}
SEEN_TITLE = "what kvtop saw, newest first (kvtop's clock)"


def seen_lines(seen: Sequence[Seen]) -> list[Line]:
    """kvtop's timeline, newest first: `10:02:11 ✖ alert  GPU 3 (TP3) is lost …`."""
    lines = []
    for item in reversed(seen):
        mark = item.level.glyph or "·"
        words = f"{item.time_text[-8:]} {mark} {_SEEN_WORDS.get(item.kind, item.kind):<11} "
        kind = (
            BAD if item.level == Level.CRITICAL else WARN if item.level == Level.WARNING else PLAIN
        )
        lines.append(Line(words + make_visible(item.text), kind))
    return lines


def event_lines(
    events: Timeline, filters: Filters = Filters(), seen: Sequence[Seen] = ()
) -> list[Line]:
    """Newest first; a failure's next step on the line under it; the folded rows last; then
    what kvtop saw (its timeline), unless a filter narrows the log's events; only that with
    `seen_only`."""
    if filters.seen_only:
        return seen_lines(seen) or [Line("kvtop has seen nothing change yet", DIM)]
    lines: list[Line] = []
    for row in events.rows:
        if not _row_kept(row, filters):
            continue
        lines.append(Line(event_words(row), BAD if row.failure else PLAIN))
        if row.failure and row.next_step:
            lines.append(Line("    → " + row.next_step, WARN))
    folded = [r for r in events.folded if _row_kept(r, filters)]
    if folded:
        lines.append(Line(folded_words(folded), DIM))
    if seen and not filters.narrowed:
        lines += [Line(""), Line(SEEN_TITLE, DIM), *seen_lines(seen)]
    return lines


def log_lines(raw: Sequence[str], filters: Filters = Filters()) -> list[Line]:
    """The raw log, oldest first, literally. A line without a prefix (a traceback's) belongs
    to the rank of the prefixed line before it; failures only keeps failure lines and the
    traceback lines that follow them."""
    lines: list[Line] = []
    rank, failing = "", False
    for text in raw:
        prefix, _ = split_prefix(text)
        if prefix.has_prefix:
            rank = prefix.rank
            failing = filters.failures_only and isinstance(parse_line(text), Failure)
        elif text.startswith("Traceback"):
            failing = True
        if filters.rank is not None and rank != filters.rank:
            continue
        if filters.failures_only and not failing:
            continue
        lines.append(Line(make_visible(text), BAD if failing else PLAIN))
    return lines


def ranks_of(rows: Sequence[EventRow]) -> list[str]:
    """The ranks to cycle through, TP0, TP1, ... in number order."""
    ranks = {r for row in rows for r in row.rank_set}
    return sorted(ranks, key=lambda r: (len(r), r))


def phases_of(rows: Sequence[EventRow]) -> list[str]:
    """Event names to cycle through, in the order first shown."""
    return list(dict.fromkeys(row.what for row in rows if not row.failure))


def cycled(options: Sequence[str], current: str | None) -> str | None:
    """The next option after `current`; after the last one, None (no filter)."""
    if not options:
        return None
    if current not in options:
        return options[0]
    at = options.index(current) + 1
    return options[at] if at < len(options) else None


def matches(lines: Sequence[Line], query: str) -> list[int]:
    """Indices of the lines containing `query`, case-insensitively (empty query: none)."""
    if not query:
        return []
    needle = query.casefold()
    return [i for i, line in enumerate(lines) if needle in line.text.casefold()]


def spans(text: str, query: str) -> list[tuple[int, int]]:
    """Where `query` occurs in `text` (case-insensitive), for highlighting."""
    if not query:
        return []
    found, needle, hay = [], query.casefold(), text.casefold()
    at = hay.find(needle)
    while at >= 0 and len(hay) == len(text):
        found.append((at, at + len(needle)))
        at = hay.find(needle, at + len(needle))
    return found


def next_match(found: Sequence[int], current: int | None, step: int) -> int | None:
    """The match after (step 1) or before (step -1) line `current`, wrapping around."""
    if not found:
        return None
    if current is None:
        return found[0] if step > 0 else found[-1]
    if step > 0:
        return next((i for i in found if i > current), found[0])
    return next((i for i in reversed(found) if i < current), found[-1])
