"""`kvtop --once --unit NAME --journal-dir DIR` on real journal files (systemd-journal-remote)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.journal_tools import (
    interleave,
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


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json", "--no-gpus", "--no-metrics", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two starts of sglang-kimi.service (the first with mem_fraction_static 0.85), plus noise."""
    story = STORY_LOG.read_text().splitlines()
    first = [line.replace("mem_fraction_static=0.88", "mem_fraction_static=0.85") for line in story]
    directory = tmp_path_factory.mktemp("journal")
    entries = interleave(
        sglang_entries("sglang-kimi.service", invocation(1), first, START_US),
        sglang_entries("nginx.service", invocation(3), ["GET / 200"] * 50, START_US + 500),
        sglang_entries("sglang-kimi.service", invocation(2), story, START_US + 10**9),
        sglang_entries("sglang-llama.service", invocation(4), ["hello"], START_US + 10**9 + 7),
    )
    write_journal(directory, entries)
    return directory


def test_latest_invocation_is_reported(journal_dir: Path) -> None:
    result = kvtop("--unit", "sglang-kimi", "--journal-dir", str(journal_dir))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["server_args"]["mem_fraction_static"] == 0.88  # the second start, not the first
    assert data["startup"]["state"] == "ready"
    assert len(data["ranks"]) == 8
    assert data["summary"]["max_total_num_tokens"] == 159277
    assert data["source"]["log"] == f"journal: sglang-kimi in {journal_dir}"
    assert {s["name"]: s["state"] for s in data["sources"]}["journal"] == "ok"


def test_unknown_unit_names_similar_units(journal_dir: Path) -> None:
    result = kvtop("--unit", "sglang-kim", "--journal-dir", str(journal_dir))
    assert result.returncode == 1, result.stderr  # no line of it read: UNKNOWN, exit 1
    data = json.loads(result.stdout)
    journal = next(s for s in data["sources"] if s["name"] == "journal")
    assert journal["state"] != "ok"
    assert (
        "sglang-kimi.service" in journal["detail"] and "sglang-llama.service" in journal["detail"]
    )
    assert data["ranks"] == []
