"""The only files kvtop writes, and only when the operator asks in the live view: the palette's
Screenshot (a new SVG) and Save theme to config (config.toml). Everything else only reads
(docs/reliability.md, "Read-only"); the static scan in tests/process/test_read_only.py lets this
module alone write."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def temporary_directory() -> str:
    """Where a file goes when the current directory is not writable ($TMPDIR, /tmp, ...;
    Python's choice, which probes the directory with a file of its own)."""
    return tempfile.gettempdir()


def create_new(path: str, text: str) -> None:
    """Write `text` to a file that must not exist yet (FileExistsError: it does; OSError)."""
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(text)


def replace_whole(target: Path, text: str) -> None:
    """Write `text` over `target` whole or not at all: a temporary file in the same directory
    renamed over it, with the old file's mode (a new one: 0666 less the umask). OSError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".config.toml.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def make_directory(path: str) -> None:
    """The directory a saved file goes in, with its parents, if missing (OSError)."""
    Path(path).mkdir(parents=True, exist_ok=True)
