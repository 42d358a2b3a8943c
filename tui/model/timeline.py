"""The events panel's rows: startup phases grouped across ranks, and failures with a next step."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tui.model.insights import next_step
from tui.sglang.events import Failure
from tui.sglang.failures import SERVING
from tui.sglang.startup import Phase, Startup


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


def _newest_first(item: _Dated) -> tuple[int, str]:
    when = item[0]
    return (1, when.isoformat()) if isinstance(when, datetime) else (0, str(when))


def recent_events(startup: Startup, limit: int = 50) -> list[EventRow]:
    """Newest first. One row per phase of one model across the ranks that logged it."""
    rows = [_phase_row(name, model, m) for (name, model), m in _phase_groups(startup).items()]
    rows += [_failure_row(failure, startup) for failure in startup.failures]
    if startup.ready_at is not None:
        rows.append(_ready_row(startup.ready_at))
    rows.sort(key=_newest_first, reverse=True)
    return [row for _, row in rows[:limit]]
