"""What NVML's and AMD SMI's sources share: a poll that never raises, one worker thread with a
deadline (a hung driver call hands back the last reading marked stale), and closing.

A library's source subclasses `GpuLibrarySource` and writes `_poll()` (one reading of every GPU)
and `_forget_init()` (shut the library down so the next poll starts it again), naming itself
(`LIBRARY`, as the sentences name it) and its command-line tool (`TOOL`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from kvtop.model.memory.gpu_reading import GpuSample, GpuStatus, GpuVendor, NvmlReading
from kvtop.sources.call_worker import DeadlinePoll

KEEP_GOING = "kvtop keeps going with logs and metrics."


@dataclass(frozen=True, slots=True)
class StaticFacts:
    """What a GPU is (read once, kept while it answers), and the calls that failed reading it."""

    name: str
    uuid: str
    pci_bus_id: str
    errors: tuple[tuple[str, str], ...]
    serious: bool = False  # one of them was not merely "not supported"


class CallErrors(list[tuple[str, str]]):
    """One GPU's failed calls, (name, error in the library's words); `serious` when one was not
    merely "not supported" (the GPU is then unreadable). A library's subclass names its errors
    (`named`) and says which are serious (`is_serious`)."""

    serious = False
    first_serious: tuple[str, str] | None = None  # the cause named when the GPU is unreadable
    named: Callable[[BaseException], str]
    is_serious: Callable[[BaseException], bool]

    def add(self, name: str, exc: BaseException) -> None:
        self.append((name, self.named(exc)))
        if self.is_serious(exc) and self.first_serious is None:
            self.first_serious = (name, self.named(exc))
        self.serious = self.serious or self.is_serious(exc)


def without_numbers(
    index: int,
    static: StaticFacts | None,
    status: GpuStatus,
    error: tuple[str, str],
    vendor: GpuVendor = GpuVendor.NVIDIA,
) -> GpuSample:
    """A GPU lost or unreadable: its name kept from an earlier poll, no number at all."""
    return GpuSample(
        vendor=vendor,
        index=index,
        name=static.name if static else "",
        uuid=static.uuid if static else "",
        pci_bus_id=static.pci_bus_id if static else "",
        total_gib=0.0,
        used_gib=0.0,
        free_gib=0.0,
        reserved_gib=None,
        utilization_pct=None,
        memory_utilization_pct=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        status=status,
        field_errors=(error,),
    )


def whole(value: float | None) -> int | None:
    return None if value is None else int(value)


class GpuLibrarySource:
    LIBRARY = "the GPU library"
    TOOL = "nvidia-smi"

    def __init__(self, call_timeout_s: float, thread_name: str) -> None:
        self.call_timeout_s = call_timeout_s
        self._deadline = DeadlinePoll(thread_name, call_timeout_s)
        self._lock = threading.Lock()
        self._last: NvmlReading | None = None
        self._driver_version: str | None = None

    @property
    def last(self) -> NvmlReading | None:
        return self._last

    def poll(self) -> NvmlReading:
        """One reading of every GPU (blocking). Never raises for the library's errors."""
        with self._lock:
            try:
                reading = self._poll()
            except Exception as exc:  # a binding bug must not end the app
                reading = self._failed(exc)
            self._last = reading
            return reading

    def _failed(self, exc: Exception) -> NvmlReading:
        return self._unavailable(
            f"{self.LIBRARY} failed unexpectedly ({exc!r}); kvtop retries each poll and "
            f"{KEEP_GOING[6:]}"
        )

    def _poll(self) -> NvmlReading:
        raise NotImplementedError

    def _forget_init(self) -> None:
        raise NotImplementedError

    def _unavailable(self, problem: str, missing_library: bool = False) -> NvmlReading:
        return NvmlReading(
            gpus=(),
            available=False,
            problem=problem,
            driver_version=self._driver_version,
            missing_library=missing_library,
        )

    def start_early(self) -> None:
        """Begin the first poll now, in the library's own thread, while the caller goes on
        (the live view imports its screen meanwhile): the first `poll_async()` takes its
        answer. A library's first call loads the driver (nvmlInit), which can take longer than
        everything else before the first frame; the library's calls do not hold the GIL."""
        self._deadline.timeout_s = self.call_timeout_s
        self._deadline.start(self.poll)

    async def early_reading(self, wait_s: float) -> NvmlReading | None:
        """The early poll's reading (start_early) if it comes within `wait_s`; the first
        `poll_async()` still takes it. None without an early poll, or when it is slower."""
        reading: NvmlReading | None = await self._deadline.early_answer(wait_s)
        return reading

    async def poll_async(self) -> NvmlReading:
        """poll() in the library's own worker thread; the previous reading, stale, if it
        takes longer than call_timeout_s (a hung driver call)."""
        self._deadline.timeout_s = self.call_timeout_s
        return await self._deadline.run(self.poll, self._stale)

    def _stale(self) -> NvmlReading:
        problem = (
            f"{self.LIBRARY} did not answer within {self.call_timeout_s:g} s (a hung driver "
            f"call); readings are stale. Check {self.TOOL} and dmesg; kvtop keeps the last "
            "readings and asks again."
        )
        if self._last is None:
            return NvmlReading(
                gpus=(),
                available=False,
                problem=problem,
                driver_version=self._driver_version,
                stale=True,
            )
        return replace(self._last, stale=True, problem=problem)

    def close(self) -> None:
        """Release the worker thread (without waiting for a hung call) and the library."""
        self._deadline.stop()
        if self._lock.acquire(blocking=False):
            try:
                self._forget_init()
            finally:
                self._lock.release()
