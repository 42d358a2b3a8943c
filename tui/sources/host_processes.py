"""The GPU processes as this host sees them (psutil): who each is, once per process, and what
each uses now, once per refresh, for the pids NVML lists and no others.

A process's rank, user and command line do not change while it lives, so they are read once
and kept by (pid, start time): a pid the kernel hands to a new process (pid reuse) is read
again. Its CPU and resident memory are read at every refresh; CPU % is the share of one core
used since the previous refresh (top's and nvitop's %CPU), so a process's first reading has
none.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from tui.model.memory.process_owner import ProcessInfo
from tui.model.snapshot import ProcessUsage
from tui.sources.gpu_processes import info_of_pid, rank_of_pid, user_of_pid

GIB = 1024**3
GB = 1e9

# What psutil raises for a process that is gone, hidden (hidepid, another PID namespace) or
# whose /proc entry cannot be read now.
_UNREADABLE = (psutil.Error, ProcessLookupError, PermissionError, ValueError, OSError)


@dataclass(slots=True)
class _Known:
    """One process as first read: psutil's handle (it keeps the CPU times of the previous
    reading, for the next CPU %) and the facts that do not change."""

    proc: psutil.Process | None
    rank: str | None
    user: str | None
    info: ProcessInfo
    measured: bool = False  # its CPU counter has a previous reading to measure from


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
        self._known: dict[tuple[int, float | None], _Known] = {}
        self._cpu_primed = False

    def read(self, pids: set[int]) -> dict[int, tuple[_Known, ProcessUsage]]:
        """Each pid's facts and its usage now. A pid that cannot be read here (gone, hidden,
        another PID namespace) gets empty facts and no usage, and is asked again next time."""
        seen: dict[int, tuple[_Known, ProcessUsage]] = {}
        keep: set[tuple[int, float | None]] = set()
        for pid in pids:
            try:
                proc = psutil.Process(pid)  # reads its start time: the cache's key
                started: float | None = proc.create_time()
            except _UNREADABLE:
                proc, started = None, None
            if proc is None:
                seen[pid] = (_Known(None, None, None, ProcessInfo()), ProcessUsage())
                continue
            key = (pid, started)
            known = self._known.get(key)
            if known is None:
                known = _Known(proc, rank_of_pid(pid), user_of_pid(pid), info_of_pid(pid))
                self._known[key] = known
            keep.add(key)
            seen[pid] = (known, _usage(known))
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
        total: float | None = None
        used: float | None = None
        try:
            swap = psutil.swap_memory()
            total, used = round(swap.total / GB, 2), round(swap.used / GB, 2)
        except _UNREADABLE:
            pass  # no swap figures this time: shown as unknown
        return HostCpuSwap(cpu, total, used)

    def prime(self, pids: set[int]) -> None:
        """Start the CPU counters (the host's and these processes'), so that a reading a moment
        later (`--once`) has a CPU % to give."""
        self.read(pids)
        self.host()


def _usage(known: _Known) -> ProcessUsage:
    """CPU % since the previous reading of this process (None on its first) and resident
    memory; nothing when it cannot be read now."""
    proc = known.proc
    if proc is None:
        return ProcessUsage()
    try:
        with proc.oneshot():  # one read of /proc/PID/stat for both
            cpu = proc.cpu_percent(interval=None)
            rss = proc.memory_info().rss
    except _UNREADABLE:
        return ProcessUsage()
    measured, known.measured = known.measured, True
    # psutil's first answer for a handle is 0.0, not a reading.
    return ProcessUsage(round(cpu, 1) if measured else None, round(rss / GIB, 4))
