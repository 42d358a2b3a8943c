"""The host's reading of the GPU processes (psutil) on real child processes: facts read once
per process, CPU % from the second reading on, a pid that is not here read as nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from kvtop.sources.host_processes import HostProcesses


def _absent_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def _running(child: subprocess.Popen[bytes]) -> None:
    """Until the child runs its loop (past fork and exec: a GPU process always is)."""
    deadline = time.monotonic() + 10
    while "while True" not in " ".join(psutil.Process(child.pid).cmdline()):
        assert time.monotonic() < deadline, "the child never started its loop"
        time.sleep(0.01)
    while psutil.Process(child.pid).memory_info().rss == 0:
        assert time.monotonic() < deadline, "the child never had memory"
        time.sleep(0.01)


def test_facts_once_usage_every_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        _running(child)
        host = HostProcesses()
        first = host.read({child.pid})[child.pid]
        known, usage = first
        assert usage.cpu_percent is None  # one reading: no CPU % yet
        assert usage.rss_gib is not None and 0 < usage.rss_gib < 1
        assert known.info.command is not None and "while True" in known.info.command
        assert known.user == psutil.Process().username()
        assert known.info.started_at == psutil.Process(child.pid).create_time()
        time.sleep(0.2)
        again, usage = host.read({child.pid})[child.pid]
        assert again is known  # read once for this process (same pid, same start time)
        assert usage.cpu_percent is not None and usage.cpu_percent >= 0
    finally:
        child.kill()
        child.wait()
    # Gone: nothing to read, and forgotten.
    gone, usage = host.read({child.pid})[child.pid]
    assert (gone.info.command, gone.user, usage.cpu_percent, usage.rss_gib) == (None,) * 4
    assert host.read(set()) == {}


def test_a_pid_not_here_reads_as_nothing() -> None:
    pid = _absent_pid()
    known, usage = HostProcesses().read({pid})[pid]
    assert (known.rank, known.user, known.info.command, known.info.started_at) == (None,) * 4
    assert (usage.cpu_percent, usage.rss_gib) == (None, None)


def test_host_cpu_from_the_second_reading() -> None:
    host = HostProcesses()
    assert host.host().cpu_percent is None  # psutil's first answer is no measurement
    time.sleep(0.1)
    second = host.host()
    assert second.cpu_percent is not None and 0 <= second.cpu_percent <= 100
    assert second.swap_total_gb is not None and second.swap_used_gb is not None
