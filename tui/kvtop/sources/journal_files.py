"""The journal's files on disk: is each one whole, and is the journal directory still there.

systemd skips a journal file whose header counts more bytes than the file holds ("Journal file
... is truncated, ignoring file."), so entries in a file cut short vanish without a word: the
reader just finds no entries. The header's check is the one sd-journal makes (the file format:
signature "LPKSHHRH", then header_size at byte 88 and arena_size at byte 96, little-endian).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

DEFAULT_JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")
SIGNATURE = b"LPKSHHRH"
_SIZES_AT = 88  # header_size, arena_size: two little-endian u64
_HEADER_READ = _SIZES_AT + 16
MAX_NAMED = 3  # damaged files named in one sentence


def journal_roots(directory: str | None) -> list[str]:
    """The directories a reader opens: --journal-dir, else the system's that exist."""
    if directory:
        return [directory]
    return [d for d in DEFAULT_JOURNAL_DIRS if os.path.isdir(d)]


def journal_files(roots: list[str], denied: list[str] | None = None) -> Iterator[str]:
    """Every .journal file in ROOTS and their machine-id folders. A folder that cannot be
    listed is skipped; one refused for want of rights is added to DENIED when given."""
    stack = [(root, 0) for root in roots]
    while stack:
        path, depth = stack.pop()
        try:
            entries = list(os.scandir(path))
        except PermissionError:
            if denied is not None:
                denied.append(path)
            continue
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".journal", ".journal~")):
                yield entry.path
            elif depth < 1 and entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, depth + 1))


def damage(path: str) -> str | None:
    """Why the journal file at PATH cannot be read whole (None: it can, or it is unreadable
    for another reason, such as permissions, which is told elsewhere)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_HEADER_READ)
    except OSError:
        return None
    if len(head) < len(SIGNATURE) or head[: len(SIGNATURE)] != SIGNATURE:
        return "not a journal file (no journal signature at its start)"
    if len(head) < _HEADER_READ:
        return f"cut short: {size:,} bytes, less than a journal header"
    header_size, arena_size = struct.unpack_from("<QQ", head, _SIZES_AT)
    if header_size + arena_size > size:
        return f"cut short: {size:,} bytes of the {header_size + arena_size:,} its header counts"
    return None


def damaged_files(directory: str | None) -> list[tuple[str, str]]:
    """(path, why) for each damaged journal file where the reader looks."""
    found = []
    for path in journal_files(journal_roots(directory)):
        why = damage(path)
        if why is not None:
            found.append((path, why))
    return sorted(found)


def damaged_sentence(damaged: list[tuple[str, str]]) -> str | None:
    """The notice for damaged files: which, why, and the check to run."""
    if not damaged:
        return None
    named = "; ".join(f"{path} ({why})" for path, why in damaged[:MAX_NAMED])
    more = len(damaged) - MAX_NAMED
    if more > 0:
        named += f"; and {more} more"
    if len(damaged) == 1:
        said = f"journal file {named} is damaged; systemd skips it, so its entries"
    else:
        said = f"journal files {named} are damaged; systemd skips them, so their entries"
    return f"{said} cannot be read: run journalctl --verify --file={damaged[0][0]}."


def removed_sentence(unit: str, gone: list[str]) -> str:
    where = ", ".join(gone)
    return (
        f"the journal directory {where} was removed while kvtop read {unit}: nothing new can "
        "be read. What was read stays on screen; kvtop reads on when it is back."
    )


def gone_roots(roots: list[str]) -> list[str]:
    """The roots that are no longer directories (all of ROOTS gone, else none)."""
    gone = [root for root in roots if not os.path.isdir(root)]
    return gone if roots and len(gone) == len(roots) else []
