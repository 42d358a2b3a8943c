"""The palette's Screenshot: the screen as an SVG file whose path the operator is told."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Protocol

from tui.saved_files import create_new, temporary_directory


class CanExport(Protocol):
    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str: ...


@dataclass(frozen=True, slots=True)
class Saved:
    path: str | None  # None: nothing could be written
    sentence: str


def screenshot_name(now: float | None = None) -> str:
    """kvtop-20260227-090312.svg: sorts by time, no characters a shell or Windows dislikes."""
    return time.strftime("kvtop-%Y%m%d-%H%M%S.svg", time.localtime(now))


def save_svg(app: CanExport, directory: str | None = None, now: float | None = None) -> Saved:
    """Write the SVG in `directory` (default: the current directory, else the temporary
    directory when that one is not writable, e.g. / under systemd or a read-only home)."""
    name = screenshot_name(now)
    places = [directory] if directory else [os.getcwd(), temporary_directory()]
    svg = app.export_screenshot()
    errors = []
    for place in places:
        for attempt in range(1, 100):
            named = name if attempt == 1 else name.replace(".svg", f"-{attempt}.svg")
            path = os.path.abspath(os.path.join(place, named))
            try:
                create_new(path, svg)  # never over a file
            except FileExistsError:
                continue  # two in the same second: kvtop-…-2.svg
            except OSError as exc:
                errors.append(f"{path}: {(exc.strerror or str(exc)).lower()}")
                break
            return Saved(path, f"screenshot saved: {path}")
    return Saved(
        None,
        "could not save the screenshot ("
        + "; ".join(errors)
        + "): start kvtop from a directory you can write to",
    )
