"""The verdict: one judgement of a Snapshot, and what kvtop saw happen, for every view.

Made once per Snapshot by tui/kvtop/model/status/watch.py; the live header, the report, the JSON,
`kvtop --check`, the exporter and the fleet show it and judge nothing themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kvtop.model.memory.growth_rate import NO_GROWTH, MemoryGrowth
from kvtop.model.status.levels import Alert, Level
from kvtop.model.str_enum import StrEnum


@dataclass(frozen=True, slots=True)
class Verdict:
    """The level (the worst active alert's, or unknown when nothing could be read), the active
    alerts worst first (each with `since`), and the words `kvtop --check` prints."""

    level: Level
    alerts: tuple[Alert, ...]
    summary: str
    # How long requests have waited without the queue emptying (None: empty or not watched).
    queued_for_s: float | None = None
    # How fast the server's memory grows over the session (GPU runtime, ranks' host memory);
    # NO_GROWTH for one look, which has no history.
    growth: MemoryGrowth = NO_GROWTH

    def kinds(self) -> frozenset[str]:
        return frozenset(a.kind for a in self.alerts)

    def level_of(self, kind: str) -> Level:
        """The worst level among the active alerts of one kind (ok when none)."""
        found = [a.level for a in self.alerts if a.kind == kind]
        return max(found, key=_RANK.__getitem__, default=Level.OK)

    def count_text(self) -> str:
        """`1 alert`, `3 alerts`; empty when none."""
        n = len(self.alerts)
        return "" if n == 0 else f"{n} alert{'s' if n != 1 else ''}"

    def glyph_counts(self) -> str:
        """`✖1 ▲2`: the active alerts by level, as the fleet's alerts column (empty when none)."""
        counts = [
            (level, sum(1 for a in self.alerts if a.level == level))
            for level in (Level.CRITICAL, Level.WARNING)
        ]
        return " ".join(f"{level.glyph}{n}" for level, n in counts if n)


_RANK = {Level.OK: 0, Level.UNKNOWN: 0, Level.WARNING: 1, Level.CRITICAL: 2}

# Before a Snapshot is judged (a Snapshot made by hand in a test): nothing said.
UNJUDGED = Verdict(Level.UNKNOWN, (), "not judged")


class SeenKind(StrEnum):
    """What kvtop saw happen, in the order it saw it (the timeline); its value is the JSON's
    `timeline[].kind`."""

    ALERT_RAISED = "alert_raised"
    ALERT_CLEARED = "alert_cleared"
    SOURCE_DOWN = "source_down"
    SOURCE_BACK = "source_back"
    GPU_LOST = "gpu_lost"
    GPU_BACK = "gpu_back"
    RESTART = "restart"


ALERT_RAISED = SeenKind.ALERT_RAISED
ALERT_CLEARED = SeenKind.ALERT_CLEARED
SOURCE_DOWN = SeenKind.SOURCE_DOWN
SOURCE_BACK = SeenKind.SOURCE_BACK
GPU_LOST = SeenKind.GPU_LOST
GPU_BACK = SeenKind.GPU_BACK
RESTART = SeenKind.RESTART
SEEN_KINDS = tuple(SeenKind)


@dataclass(frozen=True, slots=True)
class Seen:
    """One change kvtop saw: when (epoch seconds, kvtop's clock), what, about what, in words,
    and the level it came with (ok for something that came back)."""

    at: float
    kind: SeenKind
    subject: str
    text: str
    level: Level = Level.OK

    @property
    def time_text(self) -> str:
        return local_time(self.at)


def local_time(epoch_s: float) -> str:
    """`2026-12-02 09:12:03` in this host's local time, as SGLang stamps its log lines."""
    try:
        return datetime.fromtimestamp(epoch_s).isoformat(sep=" ", timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "?"
