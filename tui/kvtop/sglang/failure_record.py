"""A failure written into the start it ended: the phase it hit, the start's and the rank's first
failure, a later cause put in its place; and the rank a line speaks for."""

from __future__ import annotations

from kvtop.sglang import events as ev
from kvtop.sglang import lifecycle
from kvtop.sglang.failures import (
    LAUNCH,
    SERVING,
    failed_phase,
    inferred_open,
    last_phase,
    text_phase,
)
from kvtop.sglang.start_state import FAILED, RankStartup, Startup

MAX_FAILURES = 50


def rank_of(startup: Startup, prefix: ev.LinePrefix) -> RankStartup:
    """The rank PREFIX names (made at its first line), its first and last times noted."""
    rank = startup.ranks.get(prefix.rank)
    if rank is None:
        rank = RankStartup(rank=prefix.rank, tags=prefix.tags())
        startup.ranks[prefix.rank] = rank
    if prefix.timestamp is not None:
        if rank.first_seen is None:
            rank.first_seen = prefix.timestamp
        rank.last_seen = prefix.timestamp
    return rank


def phase_of(
    startup: Startup, event: ev.Failure, hint: str | None = None
) -> tuple[str | None, bool]:
    """The phase a failure hit, and whether the log's phase lines said so (then a traceback's
    frames cannot change it). Later failures of a failed start are its echoes: its phase."""
    if startup.failure is not None:
        return startup.failure.phase, True
    phase = failed_phase(startup, event)
    if phase is not None:
        # A pool no line began (after the weights loaded): the frames may name the step.
        return phase, not inferred_open(startup, event)
    return text_phase(event.message) or hint or last_phase(startup, event), False


def step_now(startup: Startup) -> str:
    """The step a start was in when it ended without a word of its own: "serving" after
    ready, else the slowest rank's step, "launch" before any."""
    if startup.finished:
        return SERVING
    step = lifecycle.current_step(startup)
    return step.phase if step is not None else LAUNCH


def record_failure(startup: Startup, failure: ev.Failure) -> None:
    startup.state = FAILED
    if startup.failure is None:
        startup.failure = failure
    if len(startup.failures) < MAX_FAILURES:
        startup.failures.append(failure)
    # Main-process lines carry no rank tag; only tie a failure to a rank that exists or is named.
    if failure.prefix.rank or "" in startup.ranks:
        rank = rank_of(startup, failure.prefix)
        if rank.failure is None:
            rank.failure = failure


def replace_failure(startup: Startup, old: ev.Failure, new: ev.Failure) -> None:
    if startup.failure is old:
        startup.failure = new
    for i in range(len(startup.failures) - 1, -1, -1):  # at most MAX_FAILURES
        if startup.failures[i] is old:
            startup.failures[i] = new
            break
    rank = startup.ranks.get(old.prefix.rank)
    if rank is not None and rank.failure is old:
        rank.failure = new
