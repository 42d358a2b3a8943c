"""The events pane's `s`: the lines on screen saved to a new file whose path the operator is
told (written by kvtop.saved_files, the only module that writes)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from kvtop.saved_files import Saved, save_new, temporary_directory


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


def save_view(kind: str, text: str, now: datetime, env: Mapping[str, str], cwd: str) -> Saved:
    """`kvtop-events-20261130-100000.txt` in $XDG_STATE_HOME/kvtop (or ~/.local/state/kvtop,
    or the current directory: save_dir), else the temporary directory;
    never over a file (`-2`, `-3`... for two in one second)."""
    first = save_path(kind, now, env, cwd)
    lines = text.count("\n")
    return save_new(
        text,
        first.name,
        [str(first.parent), temporary_directory()],
        said=lambda path: f"Saved {lines} lines to {path}",
        refused=lambda errors: (
            f"Could not save the view ({errors}). Set XDG_STATE_HOME to a writable directory, "
            "or start kvtop in one."
        ),
        make_places=True,
    )
