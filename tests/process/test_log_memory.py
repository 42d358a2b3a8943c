"""`--once` on a 3 GB log keeps its memory bounded, whatever its lines.

kvtop reads at most the last 1 GiB of a bigger file, from the first line break after the cut.
Looking for that line break once read the whole piece before it: a 3 GB file with no line
break held 2.16 GB. Every read is bounded now (a piece of a line skipped in 1 MiB steps, a line
read by its first 1 MiB), and the report says what was cut. The files are sparse: they take no
disk.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT, STORY_LOG

SIZE = 3 << 30
PEAK_MAX_MB = 200  # measured: about 37 MB either way (2.16 GB and 1.1 GB before)

# Run in a process of its own, so the peak is kvtop's alone (RUSAGE_CHILDREN keeps the largest
# child a process ever waited for).
_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout + done.stderr)
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"\\nEXIT {done.returncode} PEAK_KB {peak_kb}")
"""


def _once(log: Path) -> tuple[int, float, str]:
    """kvtop --once on LOG: its exit status, its peak RSS in MB and what it printed."""
    command = [sys.executable, "-m", "kvtop", "--no-gpus", "--no-metrics", "--once"]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command, "--width", "200", "--log-file", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    text, _, last = done.stdout.rpartition("\nEXIT ")
    code, _, peak = last.split()
    return int(code), int(peak) / 1024, text


def _sparse(path: Path, size: int) -> Path:
    with path.open("ab") as handle:
        handle.truncate(size)
    if path.stat().st_blocks * 512 > size // 2:
        pytest.skip("this file system stores sparse files whole")
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_a_3_gb_log_without_a_line_break(tmp_path: Path) -> None:
    log = _sparse(tmp_path / "no-break.log", SIZE)
    code, peak_mb, text = _once(log)
    assert peak_mb < PEAK_MAX_MB, f"peak RSS {peak_mb:.0f} MB"
    assert "Traceback" not in text
    assert code == 1  # nothing of SGLang's in it: the documented "unreadable" status
    assert "part of one line, with no line break: that line was cut" in " ".join(text.split())


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB")
def test_a_3_gb_log_ending_in_one_long_line(tmp_path: Path) -> None:
    """A startup, then a last line of half a gigabyte (no line break after it)."""
    log = tmp_path / "long-last-line.log"
    with log.open("wb") as handle:
        handle.truncate(SIZE - (512 << 20))
        handle.seek(0, 2)
        handle.write(STORY_LOG.read_bytes())
    _sparse(log, SIZE)
    code, peak_mb, text = _once(log)
    assert peak_mb < PEAK_MAX_MB, f"peak RSS {peak_mb:.0f} MB"
    assert "Traceback" not in text
    assert code == 0
    words = " ".join(text.split())
    assert "1 line longer than 1 MiB was cut: only the first 1 MiB of it was read." in words
    assert "the report covers its last 1 GiB only" in words
    assert "KimiK25" in words or "ready" in words  # the startup before it was read
