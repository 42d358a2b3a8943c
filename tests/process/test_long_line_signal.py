"""SIGTERM during `kvtop --once` on a big log of long lines ends kvtop within a second.

`--once` ends at once on SIGTERM (cli's _stop_on_signals), but Python runs a signal handler
only between two steps of its own: one regex pass over a long line that never returns holds it
off. A log of 100 KB batch lines with "token" in them (the word that wakes the redaction of
secrets) and out-of-memory lines with a long run of digits once held kvtop for minutes a line;
every pass over a line is linear now, so the handler runs within moments wherever the read is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import ROOT

BATCH = (
    "[2026-01-10 10:00:00 TP0] Decode batch. #running-req: 12, #token: 5000, token usage: 0.03, "
    + "a" * 100_000
    + "\n"
)
# Parsed as it is read (the batch lines wait for the end, the redaction too): its sizes were
# tried from every digit of the run.
OOM = (
    "[2026-01-10 10:00:00 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    + "1" * 100_000
    + "\n"
)
BLOCK = OOM + BATCH * 9
BLOCKS = 60  # 60 MB: over 2 s of CPU for kvtop to read


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "big.log"
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(BLOCKS):
            handle.write(BLOCK)
    return path


def _log_position(pid: int, log: Path) -> int | None:
    """How far the process has read LOG (its descriptor's offset); None before it opened it."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != str(log):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    for row in info:
                        if row.startswith("pos:"):
                            return int(row.split()[1])
            except OSError:
                continue
    except OSError:
        return None
    return None


def _wait_until_reading(proc: subprocess.Popen[str], log: Path) -> int:
    """The offset once kvtop has read into LOG and is still short of its end."""
    size = log.stat().st_size
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "kvtop ended before it was seen reading the log"
        position = _log_position(proc.pid, log)
        if position is not None and 0 < position < size:
            return position
        time.sleep(0.005)
    raise AssertionError("kvtop was never seen reading the log")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigterm_while_reading_long_lines_ends_within_a_second(big_log: Path) -> None:
    log = str(big_log)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop", "--no-gpus", "--no-metrics", "--once", "--log-file", log],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        position = _wait_until_reading(proc, big_log)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            raise AssertionError("kvtop did not end within 10 s of SIGTERM") from None
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert position < big_log.stat().st_size  # the signal came while it was reading
    assert took < 1.5, f"kvtop took {took:.2f} s to end after SIGTERM"
    assert proc.returncode == 143, (proc.returncode, err)
    assert "stopped by SIGTERM before the report was ready" in err
    assert "Traceback" not in err
    assert out == ""
