"""Times without a date in the journal: each line is dated by the journal's own time of its
entry, across midnight too (`kvtop --once --unit`, real journal files)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.journal_tools import entry, invocation, journal_remote_missing, write_journal
from tests.support.paths import REAL_LOGS, ROOT

pytestmark = pytest.mark.skipif(
    journal_remote_missing() is not None, reason=str(journal_remote_missing())
)

# The tutorial's RTX 4090 D startup, every line `[HH:MM:SS]` only.
LINES = (REAL_LOGS / "80-minicpm5-rtx4090d-time-only-prefix.log").read_text().splitlines()
KVTOP_ONCE = (sys.executable, "-m", "kvtop", "--once", "--json", "--no-gpus", "--no-metrics")
# The day the journal received them (local time, as SGLang's own times are).
DAY = datetime(2026, 3, 1)


def _entries(lines: list[str], shift: timedelta) -> list[dict[str, str | bytes | int]]:
    """One entry per line, received when its own time says on DAY, moved by SHIFT (the lines'
    texts keep the times as logged)."""
    out = []
    for i, text in enumerate(lines):
        clock = datetime.strptime(text[1:9], "%H:%M:%S").time()
        at = datetime.combine(DAY, clock) + shift + timedelta(microseconds=i)
        out.append(entry("sglang-mini.service", invocation(5), text, int(at.timestamp() * 1e6)))
    return out


def _report(directory: Path) -> dict[str, object]:
    done = subprocess.run(
        [*KVTOP_ONCE, "--unit", "sglang-mini", "--journal-dir", str(directory)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_each_line_takes_its_entrys_date(tmp_path: Path) -> None:
    write_journal(tmp_path, _entries(LINES, timedelta(0)))
    report = _report(tmp_path)
    startup = report["startup"]
    assert isinstance(startup, dict)
    assert startup["state"] == "ready"
    assert startup["ready_at"] == "2026-03-01 22:25:37"
    source = report["source"]
    assert isinstance(source, dict) and source["undated_times"] is not None
    assert "journal" in source["undated_times"]["said"]


def test_a_line_logged_before_midnight_and_received_after_it(tmp_path: Path) -> None:
    """Lines logged 23:54:31–23:55:37 (times moved by hand, texts as logged) that the journal
    received five minutes later, after midnight: they belong to the day before their entries."""
    lines = [text.replace("[22:2", "[23:5") for text in LINES]
    write_journal(tmp_path, _entries(lines, timedelta(minutes=5)))
    report = _report(tmp_path)
    startup = report["startup"]
    assert isinstance(startup, dict)
    assert startup["ready_at"] == "2026-03-01 23:55:37"  # its entry: 2026-03-02 00:00:37
