"""`kvtop --once` on a log whose every line has a time without a date: read whole, dated by
the file's modification time, and said so in the report, the JSON and its notes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from tests.support.paths import REAL_LOGS, ROOT

LOG = REAL_LOGS / "80-minicpm5-rtx4090d-time-only-prefix.log"
ONCE = (sys.executable, "-m", "kvtop", "--once", "--no-gpus", "--no-metrics", "--log-file")


def _copy_written_at(tmp_path: Path, when: datetime) -> Path:
    log = tmp_path / "server.log"
    shutil.copy(LOG, log)
    os.utime(log, (when.timestamp(), when.timestamp()))
    return log


def test_the_json_dates_the_log_by_the_file_and_says_so(tmp_path: Path) -> None:
    log = _copy_written_at(tmp_path, datetime(2026, 6, 3, 8, 0))  # the morning after
    done = subprocess.run(
        [*ONCE, str(log), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    report = json.loads(done.stdout)
    assert report["startup"]["state"] == "ready"
    assert report["startup"]["ready_at"] == "2026-06-02 22:25:37"
    assert report["ranks"][0]["target"]["kv_tokens"] == 251788
    said = report["source"]["undated_times"]["said"]
    assert said == (
        "times logged without a date (first: 22:24:31) are dated by the file's modification "
        "time: the first is 2026-06-02 22:24:31"
    )
    assert said in report["notes"]
    assert report["source"]["not_understood"]["count"] == 0


def test_the_text_report_says_how_the_times_were_dated(tmp_path: Path) -> None:
    log = _copy_written_at(tmp_path, datetime(2026, 6, 2, 23, 0))
    done = subprocess.run(
        [*ONCE, str(log), "--width", "200"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "· ready" in done.stdout
    assert (
        "note: times logged without a date (first: 22:24:31) are dated by the file's "
        "modification time: the first is 2026-06-02 22:24:31" in done.stdout
    )
