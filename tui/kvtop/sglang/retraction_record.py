"""The retractions of one start, folded from its retraction lines (retraction_lines.py).

Every TP rank of a scheduler group logs the same retraction (the group retracts together), and
each DP group with attention data parallelism retracts on its own: the server's count is the
largest rank's count within a DP group, added over the DP groups, as SGLang's own counter
(`sglang:num_retracted_requests_total`, one per DP group) counts them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from kvtop.sglang import events as ev

# Retraction lines kept with their times per rank, for the rate over a window: a storm logs a
# few a second, so this covers many minutes of one; the counts since the start are kept whole.
MAX_TIMED_LINES = 4096


@dataclass(slots=True)
class _RankRetractions:
    group: int | None  # the rank's DP group (None: no DP tag)
    requests: int = 0
    tokens_gained: int = 0
    timed: deque[tuple[datetime, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_TIMED_LINES)
    )


@dataclass(slots=True)
class RetractionRecord:
    """What the retraction lines of one start said: requests retracted, pool tokens gained, the
    latest time and new_token_ratio."""

    lines: int = 0
    latest_at: datetime | None = None
    # SGLang's new_token_ratio after the latest retraction: the share of each request's
    # max_new_tokens it now reserves before admitting more (raised by every retraction).
    new_token_ratio: float | None = None
    _ranks: dict[str, _RankRetractions] = field(default_factory=dict)

    def add(self, event: ev.Retraction) -> None:
        prefix = event.prefix
        rank = self._ranks.get(prefix.rank)
        if rank is None:
            rank = self._ranks[prefix.rank] = _RankRetractions(prefix.dp)
        self.lines += 1
        n = event.retracted_reqs or 0
        rank.requests += n
        rank.tokens_gained += event.new_tokens_gained or 0
        if prefix.timestamp is not None:
            rank.timed.append((prefix.timestamp, n))
            if self.latest_at is None or prefix.timestamp >= self.latest_at:
                self.latest_at = prefix.timestamp
        if event.ratio_after is not None:
            self.new_token_ratio = event.ratio_after

    def _by_group(self, per_rank: dict[str, int]) -> int:
        groups: dict[int | None, int] = {}
        for name, value in per_rank.items():
            group = self._ranks[name].group
            groups[group] = max(groups.get(group, 0), value)
        return sum(groups.values())

    @property
    def requests(self) -> int:
        """Requests retracted since the start (as far as this log goes)."""
        return self._by_group({name: r.requests for name, r in self._ranks.items()})

    @property
    def tokens_gained(self) -> int:
        """Pool tokens the retractions freed (0.5.x lines; 0 where the lines do not say)."""
        return self._by_group({name: r.tokens_gained for name, r in self._ranks.items()})

    def requests_after(self, cutoff: datetime) -> int:
        """Requests retracted by lines timed after `cutoff` (lines without a time not counted)."""
        counts = {}
        for name, rank in self._ranks.items():
            total = 0
            for at, n in reversed(rank.timed):  # log order: the newest last
                if at <= cutoff:
                    break
                total += n
            counts[name] = total
        return self._by_group(counts)
