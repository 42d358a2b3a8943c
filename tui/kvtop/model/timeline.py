"""The events panel's rows: startup phases grouped across ranks, and failures with a next step."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from kvtop.model.status.insights import next_step
from kvtop.sglang.events import Failure
from kvtop.sglang.failures import SERVING
from kvtop.sglang.start_state import Phase, Startup

NOISE_GIB = 0.005  # shown as 0.00 GiB
NOISE_S = 0.05  # shown as 0.0 s


@dataclass(frozen=True, slots=True)
class EventRow:
    time_text: str
    ranks: str  # "TP0", "TP0–7" or "8 ranks"
    what: str  # phase name, "(draft)" for the draft model
    delta_gib: float | None  # memory the phase took (largest over the ranks)
    avail_gib: float | None  # free after it (smallest over the ranks)
    duration_s: float | None
    failure: bool = False
    message: str = ""  # the log line's text, shown literally
    next_step: str | None = None
    rank_set: tuple[str, ...] = ()  # every rank the row stands for (the events pane's filter)

    @property
    def noise(self) -> bool:
        """A phase that moved nothing worth a row: −0.00 GiB in 0.0 s (folded, counted)."""
        if self.failure or self.avail_gib is not None:
            return False  # a failure, or a phase that says what was left free
        if self.delta_gib is None and self.duration_s is None:
            return False  # a milestone without numbers (host KV cache)
        return abs(self.delta_gib or 0.0) < NOISE_GIB and (self.duration_s or 0.0) < NOISE_S


def _ranks_label(ranks: list[str]) -> str:
    if len(ranks) == 1:
        return ranks[0]
    numbers = []
    for rank in ranks:
        digits = rank[2:] if rank.startswith("TP") else ""
        if not digits.isdigit():
            return f"{len(ranks)} ranks"
        numbers.append(int(digits))
    numbers.sort()
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"TP{numbers[0]}–{numbers[-1]}"
    return f"{len(ranks)} ranks"


_Dated = tuple[datetime | str, EventRow]  # a row with what it sorts by


def _phase_groups(startup: Startup) -> dict[tuple[str, str], list[tuple[str, Phase]]]:
    """(phase, model) -> (rank, phase) for every rank that logged it; begin lines left out."""
    groups: dict[tuple[str, str], list[tuple[str, Phase]]] = {}
    for rank in startup.ranks.values():
        for phase in rank.phases:
            if phase.name.endswith(" begin"):
                continue  # the end line carries the memory and the duration
            groups.setdefault((phase.name, phase.model), []).append((rank.rank, phase))
    return groups


def _log_order(startup: Startup) -> dict[int, int]:
    """id(phase) -> its place in its rank's log: the order of phases logged in one second."""
    return {id(p): i for rank in startup.ranks.values() for i, p in enumerate(rank.phases)}


def _phase_row(name: str, model: str, members: list[tuple[str, Phase]]) -> _Dated:
    """One phase of one model across its ranks: the most memory it took, the least left free."""
    latest = max(members, key=lambda m: (m[1].timestamp or datetime.min, m[0]))[1]
    deltas = [p.delta_gib for _, p in members if p.delta_gib is not None]
    avails = [p.avail_gib for _, p in members if p.avail_gib is not None]
    durations = [p.duration_s for _, p in members if p.duration_s is not None]
    row = EventRow(
        time_text=latest.time_text or "",
        ranks=_ranks_label(sorted({r for r, _ in members})),
        what=name + (" (draft)" if model == "draft" else ""),
        delta_gib=max(deltas) if deltas else None,
        avail_gib=min(avails) if avails else None,
        duration_s=max(durations) if durations else None,
        message=latest.message,
        rank_set=tuple(sorted({r for r, _ in members})),
    )
    return latest.timestamp or latest.time_text or "", row


def _failure_row(failure: Failure, startup: Startup) -> _Dated:
    prefix = failure.prefix
    what = failure.kind.replace("_", " ")
    if failure.phase:  # "out of memory in decode graph", "scheduler exception while serving"
        what += " while serving" if failure.phase == SERVING else f" in {failure.phase}"
    row = EventRow(
        time_text=prefix.time_text or "",
        ranks=prefix.rank or "server",
        what=what,
        delta_gib=None,
        avail_gib=None,
        duration_s=None,
        failure=True,
        message=failure.reported,  # the line and the cause its traceback named, literally
        next_step=next_step(failure, startup),
    )
    return prefix.timestamp or prefix.time_text or "", row


def _ready_row(ready_at: datetime) -> _Dated:
    row = EventRow(
        ready_at.strftime("%Y-%m-%d %H:%M:%S"),
        "server",
        "ready",
        None,
        None,
        None,
        message="The server is fired up and ready to roll!",
    )
    return ready_at, row


# Within one second: phases in their log order, then failures in theirs, then the ready line
# (a failure ends a phase; ready comes after everything else).
_Sequenced = tuple[tuple[int, str, int, int], EventRow]


def _when_key(when: datetime | str) -> tuple[int, str]:
    return (1, when.isoformat()) if isinstance(when, datetime) else (0, str(when))


def _sequenced(startup: Startup) -> list[_Sequenced]:
    """Every row with its (timestamp, sequence) sort key."""
    order = _log_order(startup)
    keyed: list[_Sequenced] = []
    for (name, model), members in _phase_groups(startup).items():
        when, row = _phase_row(name, model, members)
        seq = max(order.get(id(p), 0) for _, p in members)
        keyed.append(((*_when_key(when), 0, seq), row))
    for i, failure in enumerate(startup.failures):
        when, row = _failure_row(failure, startup)
        if not row.rank_set and failure.prefix.rank:
            row = replace(row, rank_set=(failure.prefix.rank,))
        keyed.append(((*_when_key(when), 1, i), row))
    if startup.ready_at is not None:
        when, row = _ready_row(startup.ready_at)
        keyed.append(((*_when_key(when), 2, 0), row))
    return keyed


@dataclass(frozen=True, slots=True)
class Timeline:
    """The events, newest first, with the noise rows (nothing moved) folded and counted."""

    rows: tuple[EventRow, ...]
    folded: tuple[EventRow, ...] = ()


def timeline(startup: Startup, *, fold_noise: bool = True) -> Timeline:
    """Newest first by (timestamp, sequence): rows logged in the same second keep their log
    order, reversed. One row per phase of one model across the ranks that logged it."""
    keyed = sorted(_sequenced(startup), key=lambda item: item[0], reverse=True)
    rows = tuple(row for _, row in keyed)
    if not fold_noise:
        return Timeline(rows)
    return Timeline(tuple(r for r in rows if not r.noise), tuple(r for r in rows if r.noise))


def recent_events(startup: Startup, limit: int = 50) -> list[EventRow]:
    """Newest first, noise rows folded (see `timeline`)."""
    return list(timeline(startup).rows[:limit])
