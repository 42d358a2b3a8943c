"""Logs made from the shipped ones for checks that depend on the clock."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path


def log_dated_now(source: Path, target: Path) -> Path:
    """A copy of `source` with every `[YYYY-MM-DD HH:MM:SS` stamp moved by the same amount so
    that its last line is written now (local time, as SGLang writes it): a finished startup
    whose batch lines are current, for checks that date them."""
    stamp = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
    text = source.read_text()
    times = [datetime.fromisoformat(m) for m in stamp.findall(text)]
    shift = datetime.now().replace(microsecond=0) - max(times)

    def moved(match: re.Match[str]) -> str:
        return "[" + (datetime.fromisoformat(match.group(1)) + shift).isoformat(sep=" ")

    target.write_text(stamp.sub(moved, text))
    return target
