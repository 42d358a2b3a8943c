"""The two boots `kvtop diff` compares, read from two logs, or the latest two boots of one log
or of a unit's journal."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from kvtop.model.analysis import Analysis, analyse
from kvtop.sglang.start_state import Startup
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.log_reader import read_once
from kvtop.sources.log_text import LogUnreadable


class DiffInputError(Exception):
    """A boot that cannot be read, in a sentence with the next step."""


@dataclass(frozen=True, slots=True)
class Boot:
    where: str
    analysis: Analysis


def _read(log_file: str | None, unit: str | None, journal_dir: str | None) -> StartupTracker:
    try:
        return read_once(log_file, unit, journal_dir)
    except LogUnreadable as exc:
        raise DiffInputError(str(exc)) from None


def _sized(startup: Startup) -> bool:
    return any(r.target.kv_tokens for r in startup.ranks.values())


def _boot(tracker: StartupTracker, startup: Startup, where: str) -> Boot:
    """One boot analysed on its own: the tracker as read (its notes about the log stay) with
    STARTUP as the start it reports on."""
    alone = copy.copy(tracker)
    alone.current = startup
    return Boot(where, analyse(alone, where))


def _latest(tracker: StartupTracker, where: str) -> Boot:
    """The latest boot of a log that sized its pool (a restart still starting: the one before)."""
    current, previous = tracker.current, tracker.previous
    if not _sized(current) and previous is not None and _sized(previous):
        return _boot(tracker, previous, where)
    if not current.ranks and not current.server_args:
        raise DiffInputError(
            f"{where}: no SGLang startup lines in it; give the server's log "
            "(for example `journalctl -u UNIT > log`)"
        )
    return _boot(tracker, current, where)


def two_logs(old: str, new: str) -> tuple[Boot, Boot]:
    """The latest boot of each log, OLD as A and NEW as B."""
    return _latest(_read(old, None, None), old), _latest(_read(new, None, None), new)


def latest_two(
    log_file: str | None, unit: str | None, journal_dir: str | None = None
) -> tuple[Boot, Boot]:
    """The boot before the latest as A, the latest as B, from one log or a unit's journal."""
    name = log_file or f"journal of {unit}"
    tracker = _read(log_file, unit, journal_dir)
    previous = tracker.previous
    if previous is None or not (previous.ranks or previous.server_args):
        raise DiffInputError(
            f"{name} holds one boot: give two logs (kvtop diff OLD.log NEW.log), or a log or "
            "unit that restarted"
        )
    return (
        _boot(tracker, previous, f"{name} (the boot before the latest)"),
        _boot(tracker, tracker.current, f"{name} (the latest boot)"),
    )
