"""Every GPU of the host, whoever made it: NVIDIA's through NVML, AMD's through AMD SMI.

Both libraries hand back the same plain reading (model/memory/gpu_reading.py), so the model and
the views never ask the vendor. NVML is asked first, as before; AMD SMI beside it until it is
found missing (amdsmi not installed, or no libamd_smi.so to load), after which it is not asked
again: an NVIDIA host pays one failed import at start. On a host with both vendors the AMD GPUs
follow the NVIDIA ones, numbered on from them.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

from kvtop.model.memory.gpu_reading import NvmlReading
from kvtop.sources.amdsmi_reader import AmdsmiSource
from kvtop.sources.gpu_library import KEEP_GOING
from kvtop.sources.nvml import NvmlSource

NO_GPU_LIBRARY = "no GPU library here: "
_TAILS = ("; " + KEEP_GOING, "; kvtop retries each poll and keeps going with logs and metrics.")


def _clause(problem: str | None, library: str) -> str:
    """A library's own sentence without its closing words, to be one clause of two."""
    text = problem or f"{library} is not here"
    for tail in _TAILS:
        if text.endswith(tail):
            return text[: -len(tail)]
    return text.rstrip(".")


def no_gpu_library(nvidia: NvmlReading, amd: NvmlReading) -> str:
    """One sentence naming both libraries and how to install each (their own words)."""
    return (
        f"{NO_GPU_LIBRARY}{_clause(nvidia.problem, 'NVML')}; "
        f"{_clause(amd.problem, 'AMD SMI')}; {KEEP_GOING}"
    )


class GpuSource(Protocol):
    """What the app polls for GPU readings (NvmlSource, AmdsmiSource, HostGpus, the demo's)."""

    @property
    def last(self) -> NvmlReading | None: ...

    def poll(self) -> NvmlReading: ...

    async def poll_async(self) -> NvmlReading: ...

    def close(self) -> None: ...


def combine(nvidia: NvmlReading, amd: NvmlReading | None) -> NvmlReading:
    """One reading of the host from each library's (`amd` None: AMD SMI is not asked)."""
    if amd is None or (amd.missing_library and not amd.gpus):
        if nvidia.missing_library and amd is not None:
            return replace(nvidia, problem=no_gpu_library(nvidia, amd))
        return nvidia
    if not nvidia.available and not amd.available:
        if nvidia.missing_library:
            return amd  # an AMD host whose AMD SMI failed: its own sentence
        problems = [p for p in (nvidia.problem, amd.problem) if p]
        return replace(nvidia, problem=" ".join(problems) or None, stale=nvidia.stale or amd.stale)
    if not nvidia.gpus and (amd.available or nvidia.missing_library):
        return amd
    if not amd.gpus:
        return nvidia
    offset = len(nvidia.gpus)
    moved = tuple(replace(g, index=g.index + offset) for g in amd.gpus)
    problems = [p for p in (nvidia.problem, amd.problem) if p]
    drivers = [
        f"{who} {version}"
        for who, version in (("NVIDIA", nvidia.driver_version), ("amdgpu", amd.driver_version))
        if version
    ]
    return NvmlReading(
        gpus=nvidia.gpus + moved,
        available=True,
        problem=" ".join(problems) or None,
        driver_version=", ".join(drivers) or None,
        stale=nvidia.stale or amd.stale,
        taken_at=min(nvidia.taken_at, amd.taken_at),
    )


# How often each GPU's process list is read again, in seconds (a process's arrival is seen
# within this; its memory at every refresh): the session's option and HostGpus's default.
PROCESS_INTERVAL_S = 2.0


class HostGpus:
    """NVML and AMD SMI polled together into one reading (see the module's words)."""

    def __init__(
        self,
        process_interval_s: float = PROCESS_INTERVAL_S,
        *,
        nvidia: NvmlSource | None = None,
        amd: AmdsmiSource | None = None,
    ) -> None:
        self.nvidia = nvidia or NvmlSource(process_interval_s=process_interval_s)
        self.amd: AmdsmiSource | None = amd or AmdsmiSource(process_interval_s=process_interval_s)
        self._last: NvmlReading | None = None
        self._amd_missing: NvmlReading | None = None  # AMD SMI's "not here", kept once found
        # NVML's "not here" once AMD SMI answered with GPUs: an AMD host, NVML not asked again.
        self._nvidia_missing: NvmlReading | None = None

    @property
    def last(self) -> NvmlReading | None:
        return self._last

    @property
    def call_timeout_s(self) -> float:
        """How long one poll may take before the last reading is handed back stale."""
        return self.nvidia.call_timeout_s

    @call_timeout_s.setter
    def call_timeout_s(self, seconds: float) -> None:
        self.nvidia.call_timeout_s = seconds
        if self.amd is not None:
            self.amd.call_timeout_s = seconds

    def _keep(self, nvidia: NvmlReading, amd: NvmlReading | None) -> NvmlReading:
        if amd is not None and amd.missing_library and self.amd is not None:
            self.amd.close()
            self.amd = None  # not on this host: not asked again
            self._amd_missing = amd
        if nvidia.missing_library and amd is not None and amd.gpus:
            self._nvidia_missing = nvidia
        reading = combine(nvidia, amd if amd is not None else self._amd_missing)
        self._last = reading
        return reading

    def poll(self) -> NvmlReading:
        nvidia = self._nvidia_missing or self.nvidia.poll()
        amd = self.amd.poll() if self.amd is not None else None
        return self._keep(nvidia, amd)

    def start_early(self) -> None:
        """Each library's first poll begun now (GpuLibrarySource.start_early)."""
        self.nvidia.start_early()
        if self.amd is not None:
            self.amd.start_early()

    async def early_reading(self, wait_s: float) -> NvmlReading | None:
        """The host's reading from the early polls (start_early) if NVML's comes within
        `wait_s`, joined as poll_async will join it for the session, which still takes those
        polls' answers (no second round): what the live view's first frame draws. None without
        early polls, or when the driver is slower (its first call loads it)."""
        if self.amd is None:
            nvidia = await self.nvidia.early_reading(wait_s)
            return None if nvidia is None else combine(nvidia, self._amd_missing)
        nvidia, amd = await asyncio.gather(
            self.nvidia.early_reading(wait_s), self.amd.early_reading(wait_s)
        )
        if nvidia is None or (amd is None and not nvidia.gpus):
            return None  # an AMD host's GPUs not read yet: nothing to draw, rather than none
        return combine(nvidia, amd)

    async def poll_async(self) -> NvmlReading:
        if self.amd is None:
            return self._keep(await self.nvidia.poll_async(), None)
        if self._nvidia_missing is not None:
            return self._keep(self._nvidia_missing, await self.amd.poll_async())
        nvidia, amd = await asyncio.gather(self.nvidia.poll_async(), self.amd.poll_async())
        return self._keep(nvidia, amd)

    def close(self) -> None:
        self.nvidia.close()
        if self.amd is not None:
            self.amd.close()
