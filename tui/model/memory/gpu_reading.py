"""What one NVML reading is, as plain data: the GPUs' samples and whether NVML answered.

The NVML source (tui/sources/nvml.py) fills these in; the model and the views read them. They
live in the model so that the model imports nothing from the sources.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tui.model.str_enum import StrEnum


class GpuStatus(StrEnum):
    """Whether NVML could read a GPU: the word the JSON report's `status` writes."""

    OK = "ok"
    LOST = "lost"  # fallen off the bus
    ERROR = "error"  # memory unreadable (or impossible: used above total)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_gib: float | None


@dataclass(frozen=True, slots=True)
class RefusedValue:
    """A number NVML gave that no GPU can have (utilization 4294967295, used above total): not
    used, its cell stays blank. `value` is NVML's raw number (bytes, mW, %, °C) as text."""

    field: str
    value: str
    reason: str


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    total_gib: float
    used_gib: float
    free_gib: float
    reserved_gib: float | None
    utilization_pct: int | None
    memory_utilization_pct: int | None
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[GpuProcess, ...] = ()
    status: GpuStatus = GpuStatus.OK
    field_errors: tuple[tuple[str, str], ...] = ()
    rejected: tuple[RefusedValue, ...] = ()  # numbers refused (their fields are None or blank)

    def __post_init__(self) -> None:
        # A status given as its word ("lost") becomes the GpuStatus.
        object.__setattr__(self, "status", GpuStatus(self.status))


@dataclass(frozen=True, slots=True)
class NvmlReading:
    gpus: tuple[GpuSample, ...]
    available: bool
    problem: str | None
    driver_version: str | None
    stale: bool = False
    taken_at: float = field(default_factory=time.time)
