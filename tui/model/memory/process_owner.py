"""Whose is each GPU process: the server's (a rank, or another SGLang process) or another's.

The rule (README "Memory that is not the server's"):
1. A process whose title names a rank (`sglang::scheduler_TP3`) or whose title or command
   line is SGLang's is the server's.
2. On a GPU with a rank (placed by title or by order) where no process is recognisably
   SGLang's (titles not visible, e.g. a container without the host PID namespace), the process
   holding the most memory is the rank's own (ties: the lowest pid).
3. On a GPU with a rank, every other process is another's ("other processes").
4. On a GPU without a rank, a process is another's only when kvtop can see it (its command
   line is readable) and it is not SGLang's; one it cannot see makes no claim either way.
Another's process that was already running when the rank measured its free memory before
loading is inside the rank's baseline (total − pre-load free): it is listed, and not counted a
second time in the "other processes" segment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tui.model.memory.gpu_reading import GpuProcess


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What the host says about a pid: its command line (None: not visible here) and when it
    started (epoch seconds, None: unknown)."""

    command: str | None = None
    started_at: float | None = None


def is_sglang(rank: str | None, info: ProcessInfo | None) -> bool:
    if rank is not None:
        return True
    command = info.command if info is not None else None
    return command is not None and "sglang" in command.lower()


def other_pids(
    processes: Sequence[GpuProcess],
    has_rank: bool,
    process_ranks: Mapping[int, str | None],
    infos: Mapping[int, ProcessInfo],
) -> frozenset[int]:
    """The pids on one GPU that are not the server's (rules 1–4 above)."""
    own = {p.pid for p in processes if is_sglang(process_ranks.get(p.pid), infos.get(p.pid))}
    if has_rank and not own and processes:
        largest = min(processes, key=lambda p: (-(p.used_gib or 0.0), p.pid))
        own = {largest.pid}
    rest = [p for p in processes if p.pid not in own]
    if has_rank:
        return frozenset(p.pid for p in rest)
    return frozenset(p.pid for p in rest if (info := infos.get(p.pid)) and info.command)


def other_processes_gib(
    processes: Iterable[GpuProcess],
    others: frozenset[int],
    infos: Mapping[int, ProcessInfo],
    baseline_at: float | None,
) -> float | None:
    """GiB held by the other processes not already in the baseline (started before
    `baseline_at`, the rank's pre-load reading); None when NVML gives one no memory figure."""
    total = 0.0
    for p in processes:
        if p.pid not in others:
            continue
        info = infos.get(p.pid)
        started = info.started_at if info is not None else None
        if baseline_at is not None and started is not None and started < baseline_at:
            continue  # in the baseline already
        if p.used_gib is None:
            return None
        total += p.used_gib
    return round(total, 4)
