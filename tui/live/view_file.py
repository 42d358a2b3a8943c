"""The events pane's `s`: the lines on screen saved to a new file whose path the operator is
told (written by tui.saved_files, the only module that writes)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tui.saved_files import create_new, make_directory, temporary_directory


def save_dir(env: Mapping[str, str], cwd: str) -> Path:
    """$XDG_STATE_HOME/kvtop when set (or ~/.local/state/kvtop when it exists), else the
    current directory: a file an operator on SSH can find and `scp`."""
    state = env.get("XDG_STATE_HOME")
    if state:
        return Path(state) / "kvtop"
    home = env.get("HOME")
    if home and (Path(home) / ".local" / "state").is_dir():
        return Path(home) / ".local" / "state" / "kvtop"
    return Path(cwd)


def save_path(kind: str, now: datetime, env: Mapping[str, str], cwd: str) -> Path:
    """`kvtop-events-20261130-100000.txt` in save_dir."""
    return save_dir(env, cwd) / f"kvtop-{kind}-{now:%Y%m%d-%H%M%S}.txt"


@dataclass(frozen=True, slots=True)
class SavedView:
    path: str | None  # None: nothing could be written
    sentence: str


def save_view(kind: str, text: str, now: datetime, env: Mapping[str, str], cwd: str) -> SavedView:
    """`kvtop-events-20261130-100000.txt` in $XDG_STATE_HOME/kvtop (or ~/.local/state/kvtop,
    or the current directory: save_dir), else the temporary directory;
    never over a file (`-2`, `-3`... for two in one second)."""
    first = save_path(kind, now, env, cwd)
    places = [str(first.parent), temporary_directory()]
    errors = []
    for place in places:
        try:
            make_directory(place)
        except OSError as exc:
            errors.append(f"{place}: {(exc.strerror or str(exc)).lower()}")
            continue
        for attempt in range(1, 100):
            name = first.name if attempt == 1 else first.name.replace(".txt", f"-{attempt}.txt")
            path = os.path.abspath(os.path.join(place, name))
            try:
                create_new(path, text)
            except FileExistsError:
                continue
            except OSError as exc:
                errors.append(f"{path}: {(exc.strerror or str(exc)).lower()}")
                break
            return SavedView(path, f"Saved {text.count(chr(10))} lines to {path}")
    return SavedView(
        None,
        "Could not save the view (" + "; ".join(errors) + "). Set XDG_STATE_HOME to a writable "
        "directory, or start kvtop in one.",
    )
