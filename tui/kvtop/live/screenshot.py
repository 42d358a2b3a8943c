"""The palette's Screenshot: the screen as an SVG file whose path the operator is told (written
by kvtop.saved_files, the only module that writes)."""

from __future__ import annotations

import os
import time
from typing import Protocol

from kvtop.saved_files import Saved, save_new, temporary_directory


class CanExport(Protocol):
    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str: ...


def screenshot_name(now: float | None = None) -> str:
    """kvtop-20260227-090312.svg: sorts by time, no characters a shell or Windows dislikes."""
    return time.strftime("kvtop-%Y%m%d-%H%M%S.svg", time.localtime(now))


def save_svg(app: CanExport, directory: str | None = None, now: float | None = None) -> Saved:
    """Write the SVG in `directory` (default: the current directory, else the temporary
    directory when that one is not writable, e.g. / under systemd or a read-only home)."""
    places = [directory] if directory else [os.getcwd(), temporary_directory()]
    return save_new(
        app.export_screenshot(),
        screenshot_name(now),
        places,
        said=lambda path: f"screenshot saved: {path}",
        refused=lambda errors: (
            f"could not save the screenshot ({errors}): start kvtop from a directory you can "
            "write to"
        ),
    )
