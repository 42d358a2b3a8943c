"""The GPU processes as this host sees them (psutil): who each is, once per process, and what
each uses now, once per refresh, for the pids NVML lists and no others.

A process's rank, user and command line do not change while it lives, so they are read once
(one psutil.Process, tui/kvtop/sources/gpu_processes.py) and kept by (pid, start time): a pid the kernel hands to a new process (pid reuse) is
read again. Its CPU and resident memory are read at every refresh from /proc/PID/stat (see
`_stat`); CPU % is the share of one core used since the previous refresh (top's and nvitop's
%CPU), so a process's first reading has none.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

import psutil

from kvtop.model.processes.record import ProcessRecord
from kvtop.model.snapshot import ProcessUsage
from kvtop.sources.gpu_processes import record_of_pid

GIB = 1024**3
GB = 1e9
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

# What psutil raises for a process that is gone, hidden (hidepid, another PID namespace) or
# whose /proc entry cannot be read now.
_UNREADABLE = (psutil.Error, ProcessLookupError, PermissionError, ValueError, OSError)


@dataclass(frozen=True, slots=True)
class _Stat:
    """What /proc/PID/stat says now: the start time in clock ticks since boot (the process's
    identity beside its pid), CPU time used so far (ticks) and resident memory (bytes)."""

    started_ticks: int
    cpu_ticks: int
    rss_bytes: int


def _stat(pid: int) -> _Stat | None:
    """/proc/PID/stat read and parsed here rather than through psutil: one read of one small
    file per process and refresh. psutil's Process() (for the start time), cpu_percent() and
    memory_info() read it (and statm) through layers that cost about 0.8 ms per process on the
    test VM against 0.1 ms here (docs/performance.md), and this runs for every GPU process at
    every refresh. None: not readable here (gone, hidden, another PID namespace)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": fields after
    # the last ")" are numbers. utime and stime are fields 14 and 15, starttime 22, rss 24.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return _Stat(
            int(fields[19]), int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE_BYTES
        )
    except (IndexError, ValueError):
        return None


@dataclass(slots=True)
class _Known:
    """One process as first read (the facts that do not change), and its CPU time at the
    previous reading (for the next CPU %)."""

    record: ProcessRecord
    cpu_ticks: int | None = None
    read_at: float | None = None  # time.monotonic() of that reading


@dataclass(frozen=True, slots=True)
class HostCpuSwap:
    """The host's CPU busy since the previous reading (% of all cores; None the first time)
    and its swap in decimal GB (None: not readable)."""

    cpu_percent: float | None
    swap_total_gb: float | None
    swap_used_gb: float | None


class HostProcesses:
    """The per-process cache and readings; one per session."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int], _Known] = {}
        self._cpu_primed = False

    def read(self, pids: set[int]) -> dict[int, ProcessRecord]:
        """Each pid's record: who it is and its usage now. A pid that cannot be read here
        (gone, hidden, another PID namespace) gets an empty record, not `here`, and is asked
        again next time."""
        seen: dict[int, ProcessRecord] = {}
        keep: set[tuple[int, int]] = set()
        now = time.monotonic()
        for pid in pids:
            stat = _stat(pid)
            if stat is None:
                seen[pid] = ProcessRecord(pid, here=False)
                continue
            key = (pid, stat.started_ticks)  # a pid reused by a new process is read again
            known = self._known.get(key)
            if known is None:
                known = _Known(record_of_pid(pid))
                self._known[key] = known
            keep.add(key)
            seen[pid] = replace(known.record, usage=_usage(known, stat, now))
        for key in self._known.keys() - keep:
            del self._known[key]  # gone: a long session must not keep every pid it ever saw
        return seen

    def host(self) -> HostCpuSwap:
        """The host's CPU since the previous call and its swap; the first call's CPU is None."""
        try:
            cpu: float | None = psutil.cpu_percent(interval=None)
        except _UNREADABLE:
            cpu = None
        if not self._cpu_primed:
            self._cpu_primed, cpu = True, None  # psutil's first answer is 0.0, not a reading
        total, used = _swap_gb()
        return HostCpuSwap(cpu, total, used)

    def prime(self, pids: set[int]) -> None:
        """Start the CPU counters (the host's and these processes'), so that a reading a moment
        later (`--once`) has a CPU % to give."""
        self.read(pids)
        self.host()


def _swap_gb() -> tuple[float | None, float | None]:
    """Swap's total and used (total − free) in GB from /proc/meminfo, as psutil and free(1)
    count it. Read here because psutil.swap_memory() also parses /proc/vmstat for swap-in and
    swap-out counts kvtop does not show: 0.5 ms a refresh on the test VM against 0.1 ms."""
    total = free = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"SwapTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"SwapFree:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        return None, None
    if total is None or free is None:
        return None, None
    return round(total / GB, 2), round((total - free) / GB, 2)


def _usage(known: _Known, stat: _Stat, now: float) -> ProcessUsage:
    """CPU % of one core since the previous reading of this process (None on its first, as
    top's first screen) and resident memory; the reading is kept for the next one."""
    cpu = None
    if known.cpu_ticks is not None and known.read_at is not None and now > known.read_at:
        used_s = (stat.cpu_ticks - known.cpu_ticks) / CLOCK_TICKS
        cpu = round(max(0.0, 100.0 * used_s / (now - known.read_at)), 1)
    known.cpu_ticks, known.read_at = stat.cpu_ticks, now
    return ProcessUsage(cpu, round(stat.rss_bytes / GIB, 4))
