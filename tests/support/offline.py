"""kvtop as a user runs it on a log alone: `python -m kvtop --no-gpus --no-metrics ARGS` (no GPU
and no server of this machine can enter the result)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def offline(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "--no-gpus", "--no-metrics", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout_s,
    )
