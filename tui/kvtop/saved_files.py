"""The only files kvtop writes, and only when the operator asks in the live view: the palette's
Screenshot (a new SVG), the events pane's saved view (a new text file), both through the one
save_new, and Save theme to config (config.toml, replaced whole). Everything else only reads
(docs/reliability.md, "Read-only"); the static scan in tests/process/test_read_only.py lets this module
alone write."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Names tried in one place before the next: NAME, NAME-2 ... NAME-99 (two saves in one second).
_ATTEMPTS = 99


@dataclass(frozen=True, slots=True)
class Saved:
    """A file saved on the operator's request, or why none was: the sentence the toast says."""

    path: str | None  # None: nothing could be written
    sentence: str


def temporary_directory() -> str:
    """Where a file goes when the current directory is not writable ($TMPDIR, /tmp, ...;
    Python's choice, which probes the directory with a file of its own)."""
    return tempfile.gettempdir()


def save_new(
    text: str,
    name: str,
    places: Sequence[str],
    *,
    said: Callable[[str], str],
    refused: Callable[[str], str],
    make_places: bool = False,
) -> Saved:
    """Write `text` to a new file `name` in the first of `places` that takes it, never over a
    file: `name` taken, then NAME-2.EXT, NAME-3.EXT... (two saves in one second). A place that
    refuses (OSError) hands over to the next one; with `make_places` a missing place is made
    first. `said(path)` is the sentence for the file written; `refused(errors)` the one when no
    place took it, `errors` being each refusal as "PATH: reason", joined by "; ". The file is
    0600 whatever the umask."""
    errors = []
    for place in places:
        if make_places:
            try:
                Path(place).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                errors.append(f"{place}: {_reason(exc)}")
                continue
        for attempt in range(1, _ATTEMPTS + 1):
            path = os.path.abspath(os.path.join(place, _numbered(name, attempt)))
            try:
                # Never over a file, and readable by its owner only: a view of a log may hold
                # what the log's own permissions keep from others.
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(text)
            except FileExistsError:
                continue
            except OSError as exc:
                errors.append(f"{path}: {_reason(exc)}")
                break
            return Saved(path, said(path))
    return Saved(None, refused("; ".join(errors)))


def _numbered(name: str, attempt: int) -> str:
    """kvtop-20260227-090312.svg, then kvtop-20260227-090312-2.svg, -3..."""
    if attempt == 1:
        return name
    stem, dot, extension = name.rpartition(".")
    return f"{stem}-{attempt}.{extension}" if dot else f"{name}-{attempt}"


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


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
