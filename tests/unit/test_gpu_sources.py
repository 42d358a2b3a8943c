"""The host's GPUs from both libraries' readings: which reading wins, how a host with both
vendors is numbered, and that a library found missing is not asked again.

The readings are plain data (no library is involved in combining them): the libraries
themselves are exercised through their real bindings over the fakes in
tests/process/test_amd_gpus.py and the NVML tests.
"""

from __future__ import annotations

from typing import Any

from kvtop.model.memory.gpu_reading import GpuSample, GpuVendor, NvmlReading, gpu_library
from kvtop.sources.gpu_sources import HostGpus, combine


def gpu(index: int, vendor: GpuVendor) -> GpuSample:
    return GpuSample(
        index=index,
        name="AMD Instinct MI300X" if vendor is GpuVendor.AMD else "NVIDIA H200",
        uuid=f"{vendor}-{index}",
        pci_bus_id="",
        total_gib=100.0,
        used_gib=1.0,
        free_gib=99.0,
        reserved_gib=None,
        utilization_pct=None,
        memory_utilization_pct=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        vendor=vendor,
    )


def reading(*gpus: GpuSample, problem: str | None = None, missing: bool = False) -> NvmlReading:
    return NvmlReading(
        gpus=gpus,
        available=bool(gpus) or (problem is None and not missing),
        problem=problem,
        driver_version=None,
        missing_library=missing,
    )


NVIDIA = reading(gpu(0, GpuVendor.NVIDIA), gpu(1, GpuVendor.NVIDIA))
AMD = reading(*(gpu(i, GpuVendor.AMD) for i in range(3)))
NO_NVML = reading(
    problem="NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver; kvtop keeps "
    "going with logs and metrics.",
    missing=True,
)
NO_AMD = reading(
    problem="amdsmi is not installed: pip install 'kvtop-sglang[amd]'; kvtop keeps going with "
    "logs and metrics.",
    missing=True,
)
NEITHER = (
    "no GPU library here: NVML library not found (libnvidia-ml.so.1): install the NVIDIA "
    "driver; amdsmi is not installed: pip install 'kvtop-sglang[amd]'; kvtop keeps going with "
    "logs and metrics."
)


def test_an_nvidia_host_is_nvmls_reading() -> None:
    assert combine(NVIDIA, NO_AMD) is NVIDIA
    assert combine(NVIDIA, None) is NVIDIA


def test_an_amd_host_is_amd_smis_reading() -> None:
    assert combine(NO_NVML, AMD) is AMD


def test_both_vendors_number_the_amd_gpus_after_the_nvidia_ones() -> None:
    both = combine(NVIDIA, AMD)
    assert [(g.index, g.vendor) for g in both.gpus] == [
        (0, GpuVendor.NVIDIA),
        (1, GpuVendor.NVIDIA),
        (2, GpuVendor.AMD),
        (3, GpuVendor.AMD),
        (4, GpuVendor.AMD),
    ]
    assert both.available and gpu_library(both.gpus) == "NVML and AMD SMI"


def test_neither_library_is_one_sentence() -> None:
    neither = combine(NO_NVML, NO_AMD)
    assert neither.problem == NEITHER and not neither.gpus


def test_a_failing_amd_driver_is_said_on_an_amd_host() -> None:
    """An AMD host (no NVML) whose amdgpu driver is not loaded: AMD SMI's own sentence."""
    down = reading(problem="amdgpu driver not loaded")
    assert combine(NO_NVML, down).problem == "amdgpu driver not loaded"


class Library:
    """A library's source that answers a fixed reading and counts its polls."""

    def __init__(self, answer: NvmlReading) -> None:
        self.answer, self.polls, self.closed = answer, 0, False

    def poll(self) -> NvmlReading:
        self.polls += 1
        return self.answer

    async def poll_async(self) -> NvmlReading:
        return self.poll()

    def close(self) -> None:
        self.closed = True


def host(nvidia: NvmlReading, amd: NvmlReading) -> tuple[HostGpus, Library, Library]:
    nv, am = Library(nvidia), Library(amd)
    fake: Any = (nv, am)  # the two sources' surface, without a library behind them
    return HostGpus(nvidia=fake[0], amd=fake[1]), nv, am


def test_a_missing_amd_library_is_not_asked_again() -> None:
    gpus, nv, am = host(NVIDIA, NO_AMD)
    for _ in range(3):
        assert gpus.poll().gpus == NVIDIA.gpus
    assert (nv.polls, am.polls, am.closed) == (3, 1, True)


def test_a_missing_nvml_on_an_amd_host_is_not_asked_again() -> None:
    gpus, nv, am = host(NO_NVML, AMD)
    for _ in range(3):
        assert gpus.poll().gpus == AMD.gpus
    assert (nv.polls, am.polls) == (1, 3)


def test_neither_stays_one_sentence_after_the_first_poll() -> None:
    gpus, _, _ = host(NO_NVML, NO_AMD)
    assert gpus.poll().problem == NEITHER
    assert gpus.poll().problem == NEITHER
