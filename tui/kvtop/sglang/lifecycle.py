"""A start's lifecycle beyond its phases: the step in progress and since when, what each earlier
start of the same log or unit came to, and a crash loop called one.

Pure: it reads the start's data (kvtop.sglang.start_state); the tracker (kvtop.sglang.startup)
calls it, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kvtop.sglang.start_state import Phase, RankStartup, StartRecord, Startup

# The steps of a start in order, named as the events panel names its phases (and as
# `startup.failed_phase` names the phase a failure hit): "launch" is the time between the
# server_args line and the first rank line.
STEPS = ("launch", "init", "load weights", "memory pool", "cuda graph", "warmup")
SERVING = "serving"


@dataclass(frozen=True, slots=True)
class PhaseInProgress:
    """The step a start is in and since when (its first line), e.g. load weights since 09:02:11.

    `ranks_in_it` of `ranks` are in this step; the others are further on (the server waits for
    the slowest rank)."""

    phase: str
    since: datetime | None
    ranks_in_it: int
    ranks: int


def _step_after(name: str) -> tuple[str, bool] | None:
    """The step under way after a phase line of this name, and whether the line opens it."""
    if name.startswith("init ") and name.endswith(" begin"):
        return "init", True
    if name.startswith("init ") or name == "memory baseline":
        return "load weights", False
    if name == "load weights begin":
        return "load weights", True
    if name in ("load weights", "KV cache", "host KV cache"):
        return "memory pool", False
    if name == "memory pool" or name.endswith(" graph"):
        return "cuda graph", False
    if name == "summary":
        return "warmup", False
    return None  # a phase this module does not know: the known one before it decides


def _rank_step(phases: Sequence[Phase]) -> tuple[str, datetime | None] | None:
    """The step one rank is in, and the time of the line that began it."""
    known = [(p, step) for p in phases if (step := _step_after(p.name)) is not None]
    if not known:
        return None
    current = known[-1][1][0]
    since = None
    for phase, (named, opens) in reversed(known):
        if named != current:
            break
        since = phase.timestamp or since
        if opens:
            break
    return current, since


def _ranks_steps(ranks: Sequence[RankStartup]) -> list[tuple[str, datetime | None]]:
    return [step for rank in ranks if (step := _rank_step(rank.phases)) is not None]


def current_step(startup: Startup) -> PhaseInProgress | None:
    """The step the start is in (whatever its state): the slowest rank's; warmup once the
    summary line or uvicorn's `Uvicorn running on` was logged; launch before any rank line."""
    ranks = list(startup.ranks.values())
    if startup.listening_url or startup.summary is not None:
        since = startup.listening_at if startup.listening_url else None
        if since is None and startup.summary is not None:
            since = startup.summary.prefix.timestamp
        return PhaseInProgress("warmup", since, len(ranks), len(ranks))
    steps = _ranks_steps(ranks)
    if not steps:
        if startup.server_args is None and not ranks:
            return None
        return PhaseInProgress("launch", startup.started_at or startup.first_time, 0, len(ranks))
    slowest = min(STEPS.index(step) for step, _ in steps)
    name = STEPS[slowest]
    times = [since for step, since in steps if step == name and since is not None]
    in_it = sum(1 for step, _ in steps if step == name)
    return PhaseInProgress(name, min(times) if times else None, in_it, len(ranks))


def phase_in_progress(startup: Startup) -> PhaseInProgress | None:
    """The step in progress while the server is starting; None once ready, failed or stopped."""
    if startup.state != "starting":
        return None
    return current_step(startup)


def phase_reached(startup: Startup) -> str | None:
    """The phase a start was in when it ended: the failure helper's `failed_phase` when there is
    one, "serving" after ready, else the step it was in."""
    failed = getattr(startup, "failed_phase", None)
    if isinstance(failed, str) and failed:
        return failed
    if startup.ready_at is not None:
        return SERVING
    step = current_step(startup)
    return step.phase if step is not None else None


def record(startup: Startup) -> StartRecord:
    failure = startup.failure
    return StartRecord(
        started_at=startup.started_at or startup.first_time,
        last_time=startup.last_time,
        ready_at=startup.ready_at,
        stopped_at=startup.stopped_at,
        state=startup.state,
        failure_kind=failure.kind if failure is not None else None,
        phase=phase_reached(startup),
    )


# -- crash loops --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CrashLoop:
    """Starts in a row that never became ready: `restarts` of them before the latest start,
    `span_s` from the first of them to the latest start, the phase each ended in."""

    restarts: int
    span_s: float | None
    phases: tuple[str, ...]
    failed: bool  # at least one of them logged a failure (else they just ended: killed)
    text: str


def span_words(seconds: float) -> str:
    """30 min, 45 s, 2h14m: a span of minutes reads in minutes."""
    s = int(max(0, round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    hours, rest = divmod(s, 3600)
    return f"{hours}h{rest // 60:02d}m"


def _phases_words(phases: Sequence[str], verb: str) -> str:
    counts: dict[str, int] = {}
    for phase in phases:
        counts[phase] = counts.get(phase, 0) + 1
    if len(counts) == 1:
        return f"each {verb} in {phases[0]}"
    parts = ", ".join(f"{phase} ({n}×)" for phase, n in counts.items())
    return f"{verb} in {parts}"


def crash_loop(startup: Startup) -> CrashLoop | None:
    """Two or more earlier starts in a row (the latest ones) that never became ready and were
    not stopped by their operator: a crash loop, e.g. "restarted 5× in 30 min, each failing in
    load weights"."""
    run: list[StartRecord] = []
    for earlier in reversed(startup.earlier):
        if earlier.ready_at is not None or earlier.state == "stopped":
            break  # it served, or its operator stopped it: the loop (if any) began after it
        run.append(earlier)
    if len(run) < 2:
        return None
    run.reverse()
    phases = [r.phase or "launch" for r in run]
    failed = any(r.state == "failed" for r in run)
    if startup.state == "failed" and startup.ready_at is None:
        phases.append(phase_reached(startup) or "launch")
        failed = True
    began = run[0].started_at
    latest = startup.started_at or startup.first_time
    span = (latest - began).total_seconds() if began and latest and latest >= began else None
    words = f"restarted {len(run)}×"
    if span is not None:
        words += f" in {span_words(span)}"
    words += ", " + _phases_words(phases, "failing" if failed else "ending")
    return CrashLoop(len(run), span, tuple(phases), failed, words)
