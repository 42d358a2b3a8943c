"""`kvtop diff --unit NAME`: the unit's latest run against the run before it, from real journal
files (systemd-journal-remote)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.journal_tools import (
    invocation,
    journal_remote_missing,
    sglang_entries,
    write_journal,
)
from tests.support.paths import ROOT, STORY_LOG

pytestmark = pytest.mark.skipif(
    journal_remote_missing() is not None, reason=str(journal_remote_missing())
)

START_US = 1_772_183_000_000_000  # 2026-02-27, after the test boot
DIFF = (sys.executable, "-m", "kvtop", "diff")


def test_the_units_last_restart(tmp_path: Path) -> None:
    """Two invocations of sglang-kimi: mem_fraction_static 0.85 then 0.88 (the first run's
    argument edited by hand, its numbers as logged)."""
    story = STORY_LOG.read_text().splitlines()
    first = [line.replace("mem_fraction_static=0.88", "mem_fraction_static=0.85") for line in story]
    entries = sglang_entries("sglang-kimi.service", invocation(1), first, START_US)
    entries += sglang_entries("sglang-kimi.service", invocation(2), story, START_US + 10**9)
    write_journal(tmp_path, entries)
    done = subprocess.run(
        [*DIFF, "--json", "--unit", "sglang-kimi", "--journal-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["a"]["where"] == "journal of sglang-kimi (the boot before the latest)"
    assert (report["a"]["mem_fraction_static"], report["b"]["mem_fraction_static"]) == (0.85, 0.88)
    assert {"name": "mem_fraction_static", "a": "0.85", "b": "0.88"} in report[
        "server_args_changed"
    ]
