"""One GPU process as this host shows it at one refresh: who it is (its rank from its title,
its user, command line, start time, ancestors, systemd unit) and what it uses now (CPU,
resident memory). Plain data: the sources fill it (tui/kvtop/sources/host_processes.py, the
demo), the snapshot reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtop.model.memory.process_owner import ProcessInfo
from kvtop.model.snapshot import ProcessUsage


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """One pid: its rank (None: its title names none), its user (None: unknown), what the
    host says about it (command line, start time, ancestors, unit), what it uses now, and
    whether its /proc entry is here at all (False: gone, hidden, another PID namespace; then
    nothing else is known)."""

    pid: int
    rank: str | None = None
    user: str | None = None
    info: ProcessInfo = field(default_factory=ProcessInfo)
    usage: ProcessUsage = field(default_factory=ProcessUsage)
    here: bool = True


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """The GPU processes' records by pid, and whether this host's process table shows them at
    all: NVML gives host pids, so in a container without the host's PID namespace they are
    not here and ranks cannot be read from titles."""

    records: Mapping[int, ProcessRecord] = field(default_factory=dict)
    visible: bool = True
