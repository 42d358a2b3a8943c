"""This machine as the session sees it beside NVML: whose each GPU process is, host RAM, and
what NVML's reading says about the GPUs' health."""

from __future__ import annotations

import contextlib
import errno

import psutil

from kvtop.model.memory.gpu_reading import GpuStatus, NvmlReading
from kvtop.model.processes.record import ProcessFacts
from kvtop.model.snapshot import HostMemory, SourceHealth, SourceState
from kvtop.sources.host_processes import HostProcesses


class LocalHost:
    """The host kvtop runs on. A pid's rank, user and command line do not change, so each is
    looked up once and kept while the process holds GPU memory (tui/kvtop/sources/host_processes.py);
    its CPU and resident memory are read at every refresh."""

    def __init__(self) -> None:
        self._host = HostProcesses()
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
        records = self._host.read({p.pid for g in reading.gpus for p in g.processes})
        # NVML gives host pids: in a container without the host's PID namespace they are not
        # here, and ranks cannot be read from titles.
        return ProcessFacts(records, visible=all(r.here for r in records.values()))

    def prime(self, reading: NvmlReading | None) -> None:
        """Start the CPU counters of the host and of READING's processes, so that a snapshot
        a moment later (`--once`) has CPU percentages."""
        pids = {p.pid for g in reading.gpus for p in g.processes} if reading is not None else set()
        with contextlib.suppress(OSError):  # the reading proper says what failed
            self._host.prime(pids)

    def memory(self) -> HostMemory | None:
        """Host RAM; None (and `problem` says why) when it cannot be read now."""
        try:
            mem = psutil.virtual_memory()
        except OSError as exc:
            self._problems["memory"] = _host_problem("host RAM", exc)
            return None
        self._problems["memory"] = None
        cpu_swap = self._host.host()
        return HostMemory(
            total_gb=round(mem.total / 1e9, 2),
            used_gb=round((mem.total - mem.available) / 1e9, 2),
            available_gb=round(mem.available / 1e9, 2),
            cpu_percent=cpu_swap.cpu_percent,
            swap_total_gb=cpu_swap.swap_total_gb,
            swap_used_gb=cpu_swap.swap_used_gb,
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
