"""Whose is each GPU process: the server's (a rank, or another process of the server) or
another's. Decided from NVML's per-process list and each process's identity, never from when
it started (a process that started before the server may allocate its memory at any time).

The rule (docs/live-view.md, "Memory that is not the server's"):
1. A process whose title names a rank (`sglang::scheduler_TP3`) is the server's; so is its
   parent (the server's main process), anything that descends from a rank or from that main
   process, and anything in the same systemd service as a rank (`/proc/PID/cgroup`).
2. When no process on the host names a rank (titles not visible, e.g. a container without
   the host PID namespace), a process whose title or command line is SGLang's is the server's
   (unless it is an orphan: an `sglang::` child adopted by PID 1 or a subreaper),
   and on a GPU with a rank where none is, the process holding the most memory is the rank's
   own (ties: the lowest pid).
3. On a GPU with a rank, every other process is another's ("other processes"); one kvtop
   cannot see while ranks are named by title is, on a GPU with a rank, the largest such the
   rank's own as in rule 2.
4. On a GPU without a rank, a process is another's only when kvtop can see it (its command
   line is readable) and it is not the server's; one it cannot see makes no claim either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kvtop.model.memory.gpu_reading import GpuProcess


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What the host says about a pid: its command line (None: not visible here), when it
    started (epoch seconds, None: unknown; shown, never used to decide whose it is), its
    ancestors' pids (parent first), its systemd unit (None: not in one, or unknown) and whether
    it was adopted (its parent is PID 1 or a subreaper)."""

    command: str | None = None
    started_at: float | None = None
    ancestors: tuple[int, ...] = ()
    unit: str | None = None
    # Its parent is PID 1 or a subreaper (init, systemd, tini): whatever started it is gone.
    adopted: bool = False


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """The server as its processes show it: the pids whose titles name ranks, their parents
    (the server's main process) and the systemd services they run in."""

    ranks: frozenset[int] = frozenset()
    roots: frozenset[int] = frozenset()
    units: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        """True when some process on the host names a rank (rule 1 applies)."""
        return bool(self.ranks)


def _service(unit: str | None) -> str | None:
    """A system service's name; a user's manager (`user@1000.service`) or session scope holds
    whatever that user runs, so sharing it says nothing."""
    if unit is None or not unit.endswith(".service") or unit.startswith("user@"):
        return None
    return unit


def server_identity(
    process_ranks: Mapping[int, str | None], infos: Mapping[int, ProcessInfo]
) -> ServerIdentity:
    ranked = frozenset(pid for pid, rank in process_ranks.items() if rank is not None)
    roots = set()
    units = set()
    for pid in ranked:
        info = infos.get(pid)
        if info is None:
            continue
        if info.ancestors:
            roots.add(info.ancestors[0])
        if (unit := _service(info.unit)) is not None:
            units.add(unit)
    return ServerIdentity(ranked, frozenset(roots), frozenset(units))


def _by_command(info: ProcessInfo | None) -> bool:
    command = info.command if info is not None else None
    return command is not None and "sglang" in command.lower()


def orphaned(info: ProcessInfo | None) -> bool:
    """SGLang's own child process (its `sglang::` title) whose server's main process is gone (it
    was adopted by PID 1 or a subreaper; tui/kvtop/model/status/orphans.py names it)."""
    return (
        info is not None
        and info.adopted
        and info.command is not None
        and info.command.startswith("sglang::")
    )


def is_servers(
    pid: int, rank: str | None, info: ProcessInfo | None, server: ServerIdentity
) -> bool:
    """Rules 1 and 2: the process is the server's by its identity. By rule 2 an orphan (an
    SGLang child adopted by PID 1) never is: it may stand beside the rank's own process."""
    if rank is not None:
        return True
    if not server.known:
        return _by_command(info) and not orphaned(info)
    if pid in server.roots:
        return True
    if info is None:
        return False
    if server.ranks.intersection(info.ancestors) or server.roots.intersection(info.ancestors):
        return True
    unit = _service(info.unit)
    return unit is not None and unit in server.units


def _visible(info: ProcessInfo | None) -> bool:
    return info is not None and info.command is not None


def other_pids(
    processes: Sequence[GpuProcess],
    has_rank: bool,
    process_ranks: Mapping[int, str | None],
    infos: Mapping[int, ProcessInfo],
    server: ServerIdentity | None = None,
) -> frozenset[int]:
    """The pids on one GPU that are not the server's (rules 1–4 above)."""
    if server is None:
        server = server_identity(process_ranks, infos)
    own = {
        p.pid
        for p in processes
        if is_servers(p.pid, process_ranks.get(p.pid), infos.get(p.pid), server)
    }
    if has_rank and not own and processes:
        # Who the rank's own process is cannot be told by its identity: the largest (among
        # those kvtop cannot see, when it can see who the server is), never an orphan.
        candidates = [
            p
            for p in processes
            if (not server.known or not _visible(infos.get(p.pid)))
            and not orphaned(infos.get(p.pid))
        ]
        if candidates:
            largest = min(candidates, key=lambda p: (-(p.used_gib or 0.0), p.pid))
            own = {largest.pid}
    rest = [p for p in processes if p.pid not in own]
    if has_rank:
        return frozenset(p.pid for p in rest)
    return frozenset(p.pid for p in rest if _visible(infos.get(p.pid)))


def other_processes_gib(processes: Iterable[GpuProcess], others: frozenset[int]) -> float | None:
    """GiB held now by the processes that are not the server's, by NVML's per-process
    accounting; None when NVML gives one of them no memory figure."""
    total = 0.0
    for p in processes:
        if p.pid not in others:
            continue
        if p.used_gib is None:
            return None
        total += p.used_gib
    return round(total, 4)
