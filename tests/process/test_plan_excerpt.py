"""`kvtop plan --from-log` on a log that starts after the weights: the plan, and its JSON's
`calibration` naming what the log measured and what was estimated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import REAL_LOGS

EXCERPT = REAL_LOGS / "05-pr11830-single-gpu-b200.log"


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
    )


def test_json_says_what_was_calibrated_and_what_estimated() -> None:
    done = _plan("--from-log", str(EXCERPT), "--gpu-memory", "179", "--json")
    assert done.returncode in (0, 1), done.stderr
    body = json.loads(done.stdout)
    calibration = body["calibration"]
    assert calibration["from"] == str(EXCERPT)
    assert "bytes per token (KV line)" in calibration["calibrated"]
    assert "CUDA graphs" in calibration["calibrated"]
    assert "free memory after startup" in calibration["calibrated"]
    assert calibration["estimated"] == ["free memory before the weights", "weights per rank"]


def test_text_names_the_estimated_figures() -> None:
    done = _plan("--from-log", str(EXCERPT), "--gpu-memory", "179", "--width", "200")
    assert done.returncode in (0, 1), done.stderr
    assert "estimated: free memory before the weights, weights per rank" in done.stdout
