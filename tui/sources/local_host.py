"""This machine as the session sees it beside NVML: whose each GPU process is, host RAM, and
what NVML's reading says about the GPUs' health."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

import psutil

from tui.model.memory.gpu_reading import GpuStatus, NvmlReading
from tui.model.memory.process_owner import ProcessInfo
from tui.model.snapshot import HostMemory, SourceHealth, SourceState
from tui.sources.gpu_processes import info_of_pid, pids_visible, rank_of_pid, user_of_pid


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """The GPU processes' ranks (from their titles), users and command lines, and whether this
    host's process table shows them at all (a container without the host's PID namespace)."""

    ranks: dict[int, str | None] = field(default_factory=dict)
    users: dict[int, str | None] = field(default_factory=dict)
    infos: dict[int, ProcessInfo] = field(default_factory=dict)
    visible: bool = True


class LocalHost:
    """The host kvtop runs on. A pid's rank, user and command line do not change, so each is
    looked up once and kept while the pid holds GPU memory."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[str | None, str | None, ProcessInfo]] = {}
        self._problems: dict[str, str | None] = {"processes": None, "memory": None}

    @property
    def problem(self) -> str | None:
        """Why the latest reading of this host failed (sentences), None when none did."""
        return " ".join(p for p in self._problems.values() if p) or None

    def processes(self, reading: NvmlReading | None) -> ProcessFacts:
        try:
            facts = self._processes(reading)
        except OSError as exc:  # out of descriptors (EMFILE), /proc gone: a reading missed
            self._problems["processes"] = _host_problem("the GPU processes' owners", exc)
            return ProcessFacts()
        self._problems["processes"] = None
        return facts

    def _processes(self, reading: NvmlReading | None) -> ProcessFacts:
        if reading is None:
            return ProcessFacts()
        pids = {p.pid for g in reading.gpus for p in g.processes}
        cache = self._cache
        for pid in cache.keys() - pids:
            del cache[pid]  # gone: a long session must not keep every pid it ever saw
        for pid in pids - cache.keys():
            cache[pid] = (rank_of_pid(pid), user_of_pid(pid), info_of_pid(pid))
        ranks = {pid: cache[pid][0] for pid in pids}
        return ProcessFacts(
            ranks=ranks,
            users={pid: cache[pid][1] for pid in pids},
            infos={pid: cache[pid][2] for pid in pids},
            visible=pids_visible(ranks) if ranks else True,
        )

    def memory(self) -> HostMemory | None:
        """Host RAM; None (and `problem` says why) when it cannot be read now."""
        try:
            mem = psutil.virtual_memory()
        except OSError as exc:
            self._problems["memory"] = _host_problem("host RAM", exc)
            return None
        self._problems["memory"] = None
        return HostMemory(
            total_gb=round(mem.total / 1e9, 2),
            used_gb=round((mem.total - mem.available) / 1e9, 2),
            available_gb=round(mem.available / 1e9, 2),
        )

    @staticmethod
    def nvml_health(reading: NvmlReading | None) -> SourceHealth:
        """NVML's state from its latest reading (None: GPU readings are off)."""
        if reading is None:
            return SourceHealth(
                "nvml",
                SourceState.OFF,
                "GPU readings are off (--no-gpus, or the demo).",
                asked_off=True,
            )
        if not reading.available:
            return SourceHealth("nvml", SourceState.OFF, reading.problem)
        if reading.stale or reading.problem or any(g.status != GpuStatus.OK for g in reading.gpus):
            return SourceHealth(
                "nvml", SourceState.DEGRADED, reading.problem or "a GPU is not answering."
            )
        return SourceHealth("nvml", SourceState.OK)


def _host_problem(what: str, exc: OSError) -> str:
    """One sentence for a reading of this host that failed; running out of descriptors (an
    exporter flooded with connections) says what to do."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return (
            f"kvtop cannot read {what}: it has run out of open files ({exc.strerror}); "
            "raise its limit (LimitNOFILE= in its unit, ulimit -n) or find what holds them."
        )
    reason = (exc.strerror or type(exc).__name__).lower()
    return f"kvtop cannot read {what} ({reason}); it tries again at the next refresh."
