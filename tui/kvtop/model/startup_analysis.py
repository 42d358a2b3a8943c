"""The startup analysed, as a plain record: per-rank memory, sizing replayed, explanation and
findings. Built by tui/kvtop/model/analysis.py (the top of the model); a Snapshot carries it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.sizing.replay import CellSizeChoice, RankSizing, SizingExplanation
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.start_state import RankStartup, Startup


@dataclass(frozen=True, slots=True)
class Analysis:
    source: str
    lines_seen: int
    startup: Startup
    ranks: tuple[RankStartup, ...]
    breakdowns: tuple[MemoryBreakdown, ...]
    sizings: tuple[RankSizing, ...]
    cell: CellSizeChoice
    explanation: SizingExplanation | None
    insights: tuple[str, ...]
    next_step: str | None
    version: tuple[int, ...] | None
    # A start refused for memory (not_enough_memory): the mfs at which the KV
    # cache gets 0 GiB, from SGLang's hint or the log's free-memory readings; else None.
    minimum_viable_mfs: float | None = None
    # The SGLang version in the words every view shows: the server's own (or the user's
    # --sglang-version) when given, else the log's range ("0.5.3–0.5.8").
    version_shown: str = "unknown"
    # How times logged without a date were dated (None: every time had its date).
    dates_said: str | None = None
    undated_lines: int = 0
    # Lines in SGLang's shape that kvtop read nothing from: how many, and the first as logged.
    not_understood: int = 0
    first_not_understood: str | None = None

    @property
    def not_understood_said(self) -> str | None:
        """`3 SGLang lines not understood (first: …)`: lines in SGLang's shape kvtop read
        nothing from, so a blank is never mistaken for a log that said nothing."""
        if not self.not_understood:
            return None
        first = make_visible(self.first_not_understood or "")[:160]
        plural = "s" if self.not_understood != 1 else ""
        return (
            f"{self.not_understood:,} SGLang line{plural} not understood (first: {first}); "
            "their values are left out, not guessed"
        )
