"""The host's reading of the GPU processes (psutil) on real child processes: facts read once
per process, CPU % from the second reading on, a pid that is not here read as nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

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
        assert first.pid == child.pid and first.here
        assert first.usage.cpu_percent is None  # one reading: no CPU % yet
        assert first.usage.rss_gib is not None and 0 < first.usage.rss_gib < 1
        assert first.info.command is not None and "while True" in first.info.command
        assert first.user == psutil.Process().username()
        assert first.info.started_at == psutil.Process(child.pid).create_time()
        time.sleep(0.2)
        again = host.read({child.pid})[child.pid]
        # Read once for this process (same pid, same start time): the same facts, new usage.
        assert again.info is first.info
        assert again.usage.cpu_percent is not None and again.usage.cpu_percent >= 0
    finally:
        child.kill()
        child.wait()
    # Gone: nothing to read, and forgotten.
    gone = host.read({child.pid})[child.pid]
    assert (gone.info.command, gone.user, gone.usage.cpu_percent, gone.usage.rss_gib) == (None,) * 4
    assert not gone.here
    assert host.read(set()) == {}


def test_one_psutil_process_per_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Who a process is (rank, user, command line, start time, ancestors) is read through one
    psutil.Process of kvtop's, on the pid's first refresh only (psutil's own, inside its
    calls, are not kvtop's to count)."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    made: list[int | None] = []

    class Counting(psutil.Process):
        def __init__(self, pid: int | None = None) -> None:
            if sys._getframe(1).f_globals.get("__name__", "").startswith("kvtop."):
                made.append(pid)
            super().__init__(pid)

    try:
        _running(child)
        host = HostProcesses()
        monkeypatch.setattr(psutil, "Process", Counting)
        assert host.read({child.pid})[child.pid].info.command is not None
        assert made.count(child.pid) == 1
        made.clear()
        host.read({child.pid})
        assert made == []  # later refreshes read /proc/PID/stat only
    finally:
        monkeypatch.undo()
        child.kill()
        child.wait()


def test_a_pid_not_here_reads_as_nothing() -> None:
    pid = _absent_pid()
    record = HostProcesses().read({pid})[pid]
    assert (record.rank, record.user, record.info.command, record.info.started_at) == (None,) * 4
    assert (record.usage.cpu_percent, record.usage.rss_gib) == (None, None)
    assert record.pid == pid and not record.here


def test_host_cpu_from_the_second_reading() -> None:
    host = HostProcesses()
    assert host.host().cpu_percent is None  # psutil's first answer is no measurement
    time.sleep(0.1)
    second = host.host()
    assert second.cpu_percent is not None and 0 <= second.cpu_percent <= 100
    assert second.swap_total_gb is not None and second.swap_used_gb is not None
