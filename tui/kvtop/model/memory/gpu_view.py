"""One GPU as every view draws it (its NVML reading, the ranks on it, its memory segments and
processes), and the GPUs as NVML alone shows them: what the live view's first frame draws
before the log, the host's processes and the rest of the model are read.

Light on purpose: dataclasses, the NVML reading and the memory segments only (the live view
imports this before its first frame; tui/kvtop/model/snapshot.py names these classes too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvtop.model.memory.gpu_memory import GpuMemory, lost_memory, reconcile
from kvtop.model.memory.gpu_reading import GpuSample, GpuStatus, NvmlReading


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """What one process uses on the host now: CPU since the previous reading (% of one core;
    None before a second reading or when unreadable) and resident memory (None: unreadable)."""

    cpu_percent: float | None = None
    rss_gib: float | None = None


@dataclass(frozen=True, slots=True)
class GpuProcessView:
    pid: int
    used_gib: float | None
    rank: str | None
    user: str | None = None
    command: str | None = None  # its command line, when visible here
    other: bool = False  # not the server's (tui/kvtop/model/memory/process_owner.py)
    # What the host says of it (tui/kvtop/sources/host_processes.py): when it started (epoch
    # seconds), its CPU use since the previous reading (% of one core, as top and nvitop; None
    # before a second reading) and its resident memory. None where the host cannot tell.
    started_at: float | None = None
    cpu_percent: float | None = None
    rss_gib: float | None = None
    # Its parent is PID 1 or a subreaper: the process that started it is gone (orphans.py).
    adopted: bool = False

    @property
    def readable(self) -> bool:
        """The host shows this process here (its command line could be read): False for a
        process of another PID namespace (a container) or one hidden from this user."""
        return self.command is not None


@dataclass(frozen=True, slots=True)
class GpuView:
    sample: GpuSample
    ranks: tuple[str, ...]
    memory: GpuMemory
    processes: tuple[GpuProcessView, ...]

    @property
    def lost(self) -> bool:
        """NVML lost the GPU or cannot read its memory: no numbers for it."""
        return self.sample.status != GpuStatus.OK


def titled_ranks(sample: GpuSample, rank_of_pid: Mapping[int, str | None]) -> tuple[str, ...]:
    """The ranks the titles of a GPU's processes name (`sglang::scheduler_TP3`), sorted."""
    return tuple(sorted({r for p in sample.processes if (r := rank_of_pid.get(p.pid))}))


def nvml_views(reading: NvmlReading, rank_of_pid: Mapping[int, str]) -> tuple[GpuView, ...]:
    """Each GPU as NVML alone shows it: used and free (the log's segments are not known yet),
    the ranks its processes' titles name (`rank_of_pid`), and its processes without the host's
    facts. Whose each process is (the server's or another's) is not judged yet, so no memory is
    set apart as other processes'."""
    views = []
    for sample in reading.gpus:
        ranks = titled_ranks(sample, rank_of_pid)
        processes = tuple(
            GpuProcessView(p.pid, p.used_gib, rank_of_pid.get(p.pid)) for p in sample.processes
        )
        if sample.status != GpuStatus.OK:
            memory = lost_memory()
        else:
            memory = reconcile(sample.total_gib, sample.free_gib, None, None)
        views.append(GpuView(sample, ranks, memory, processes))
    return tuple(views)
