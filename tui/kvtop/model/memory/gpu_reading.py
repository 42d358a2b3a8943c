"""What one GPU reading is, as plain data: the GPUs' samples and whether the library answered
(NVML, or AMD SMI: `vendor` says whose).

The NVML source (tui/kvtop/sources/nvml.py) fills these in; the model and the views read them. They
live in the model so that the model imports nothing from the sources.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvtop.model.str_enum import StrEnum


class GpuStatus(StrEnum):
    """Whether NVML could read a GPU: the word the JSON report's `status` writes."""

    OK = "ok"
    LOST = "lost"  # fallen off the bus
    # Unreadable: a call for this GPU failed (its handle, its memory, any call with an error
    # other than "not supported"), or its memory is impossible (used above total).
    ERROR = "error"


class GpuVendor(StrEnum):
    """Whose library read a GPU: the word the JSON report's `vendor` writes."""

    NVIDIA = "nvidia"  # NVML
    AMD = "amd"  # AMD SMI (amdsmi)

    @property
    def library(self) -> str:
        """The library that reads this vendor's GPUs, as the screens name it."""
        return "NVML" if self is GpuVendor.NVIDIA else "AMD SMI"

    @property
    def words(self) -> str:
        """The vendor and the library that read the GPU, as the GPU's detail view says."""
        return f"{'NVIDIA' if self is GpuVendor.NVIDIA else 'AMD'}, read by {self.library}"

    @property
    def kernel_log_hint(self) -> str:
        """Where a lost GPU's reason is logged, in the vendor's words."""
        if self is GpuVendor.NVIDIA:
            return "check dmesg for Xid errors"
        return "check dmesg for amdgpu errors"


def gpu_library(samples: Iterable[GpuSample]) -> str:
    """The library (or libraries) the readings came from: "NVML" when none says otherwise."""
    vendors = sorted({s.vendor for s in samples}, key=list(GpuVendor).index)
    return " and ".join(v.library for v in vendors) or GpuVendor.NVIDIA.library


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
    # NVML's current clocks event (throttle) reasons, a bitmask (None: not read or not supported).
    clock_event_reasons: int | None = None
    # The first failing check that made the GPU unreadable, (check, words): its memory refused,
    # else the first call that failed for more than a missing feature. A call merely "not
    # supported" or "not found" on this driver is in field_errors and never the cause.
    cause: tuple[str, str] | None = None
    vendor: GpuVendor = GpuVendor.NVIDIA

    def __post_init__(self) -> None:
        # A status given as its word ("lost") becomes the GpuStatus.
        object.__setattr__(self, "status", GpuStatus(self.status))
        object.__setattr__(self, "vendor", GpuVendor(self.vendor))


@dataclass(frozen=True, slots=True)
class NvmlReading:
    gpus: tuple[GpuSample, ...]
    available: bool
    problem: str | None
    driver_version: str | None
    stale: bool = False
    taken_at: float = field(default_factory=time.time)
    # The vendor's library is not on this host at all (not installed, or no libnvidia-ml /
    # libamd_smi to load): nothing to retry, and on a host of the other vendor nothing wrong.
    missing_library: bool = False


# NVML's clocks event reasons (nvmlClocksEventReason*, called throttle reasons before NVML
# 12.535; the bits are the same). Only these lower the clocks because something is wrong:
# heat, a hardware slowdown signal or the power brake. The software power cap (0x4: the GPU
# draws its enforced power limit) is normal under load and never an alert; idle, application
# clocks, sync boost and display clocks are settings, not trouble.
SLOWDOWN_REASONS = (
    (0x8, "HW slowdown"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
)


def slowdown_reasons(bits: int | None) -> tuple[str, ...]:
    """The reasons in BITS that mean trouble, in NVML's order (none for None)."""
    if not bits:
        return ()
    return tuple(name for bit, name in SLOWDOWN_REASONS if bits & bit)
