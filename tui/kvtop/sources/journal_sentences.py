"""What kvtop says when a unit's journal cannot be read: no permission, no such unit (and the
units with a similar name)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from kvtop.sources.journal_files import DEFAULT_JOURNAL_DIRS, journal_files

MAX_SIMILAR_UNITS = 8


def permission_sentence(unit: str) -> str:
    return (
        f"cannot read the journal for {unit}: permission denied. Add your user to the "
        "systemd-journal group (sudo usermod -aG systemd-journal $USER, then log in again), "
        "or run kvtop with sudo."
    )


def missing_sentence(unit: str, known_units: Iterable[str]) -> str:
    similar = similar_units(unit, known_units)
    return (
        f"no journal entries for {unit}. Units with a similar name: "
        f"{', '.join(similar) if similar else 'none'}"
    )


def similar_units(unit: str, known_units: Iterable[str]) -> list[str]:
    """Units sharing a word (3+ letters) with UNIT, case-insensitive: "sglang-kim" finds sglang-*."""
    stem = unit.lower().rpartition(".")[0] or unit.lower()
    words = [w for w in re.split(r"[^a-z0-9]+", stem) if len(w) >= 3]
    found = {
        name
        for name in known_units
        if isinstance(name, str) and name != unit and any(w in name.lower() for w in words)
    }
    return sorted(found)[:MAX_SIMILAR_UNITS]


def unreadable_journal_files(directory: str | None) -> bool:
    """True when some journal file (or a journal folder) exists that this user may not read.

    A reader opened without the rights does not fail: it silently sees only the files it may
    read (a user's own journal), so "no entries" has to be told apart from "not allowed".
    """
    roots = [directory] if directory else list(DEFAULT_JOURNAL_DIRS)
    denied: list[str] = []
    for path in journal_files(roots, denied):
        if denied or not os.access(path, os.R_OK):
            return True
    return bool(denied)
