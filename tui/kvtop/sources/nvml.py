"""GPU readings from NVML (nvidia-ml-py): plain dataclasses out, never raises for NVML errors.

`NvmlSource.poll()` blocks (NVML calls can hang on a sick driver); `poll_async()` runs it in one
dedicated worker thread and answers with the previous reading marked stale when NVML does not
answer in time. No Textual, no SGLang knowledge.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, GpuStatus, NvmlReading
from kvtop.model.notes import gpu_span
from kvtop.sglang.bounds import MAX_GIB
from kvtop.sources.gpu_library import (
    KEEP_GOING,
    CallErrors,
    GpuLibrarySource,
    StaticFacts,
    whole,
    without_numbers,
)
from kvtop.sources.nvml_checks import (
    PERCENT_MAX,
    POWER_MAX_MW,
    TEMPERATURE_MAX_C,
    Refusals,
    count_drop_sentence,
    problem_sentence,
)

try:  # nvidia-ml-py is a dependency, but a broken install must not take kvtop down.
    import pynvml
except ImportError:  # pragma: no cover - exercised only without nvidia-ml-py
    pynvml = None

GIB = float(2**30)

_T = TypeVar("_T")


class _GpuLost(Exception):
    pass


class _GpuUnreadable(Exception):
    """A call every other reading of the GPU needs (its handle) failed."""

    def __init__(self, call: str, text: str) -> None:
        super().__init__(text)
        self.call = call


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _error_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # NVMLError.__str__ itself calls into the library
        return f"NVML error {getattr(exc, 'value', '?')}"


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


# NVML return codes used below (stable across NVML versions).
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
# What a call may answer with nothing wrong with the GPU: the card or driver lacks the feature,
# or this user may not read it. Any other error (Unknown Error 999 after an Xid 79, a timeout,
# a GPU that needs a reset) makes the GPU unreadable.
_BENIGN = (_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND)


def _named_error(exc: BaseException) -> str:
    """The error's words, with its NVML code when it is not merely "not supported"."""
    code = _code(exc)
    text = _error_text(exc)
    return text if code in _BENIGN or code is None else f"{text}, code {code}"


def _serious(exc: BaseException) -> bool:
    return _code(exc) not in _BENIGN


class _Errors(CallErrors):
    named = staticmethod(_named_error)
    is_serious = staticmethod(_serious)


def _unavailable_sentence(exc: BaseException) -> str:
    code = _code(exc)
    if code == _LIBRARY_NOT_FOUND:
        return (
            "NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver, or run "
            f"kvtop where the GPUs are; {KEEP_GOING}"
        )
    if code == _DRIVER_NOT_LOADED:
        return (
            "NVIDIA driver not loaded (NVML: Driver Not Loaded): load it (check with "
            f"nvidia-smi); kvtop retries each poll and {KEEP_GOING[6:]}"
        )
    if code == _NO_PERMISSION:
        return (
            "no permission to use NVML: run kvtop as a user who can open /dev/nvidia* "
            f"(or with sudo); {KEEP_GOING}"
        )
    if code == _LIB_RM_VERSION_MISMATCH:
        return (
            "NVIDIA driver and NVML library versions differ (a driver update without a reboot): "
            f"reboot or reload the nvidia kernel module; {KEEP_GOING}"
        )
    return (
        f"NVML failed ({_error_text(exc)}): check nvidia-smi; kvtop retries each poll and "
        f"{KEEP_GOING[6:]}"
    )


def _problem(samples: list[GpuSample], count: int, most: int) -> str | None:
    """The notice for this reading: GPUs lost, fewer GPUs than before, impossible numbers."""
    lost = [s.index for s in samples if s.status == GpuStatus.LOST]
    sentences: list[str | None] = []
    if lost:
        which = gpu_span(lost)
        if len(lost) == len(samples):
            every = "the only GPU" if len(lost) == 1 else f"all {len(lost)} GPUs"
            rest = f"that is {every} NVML sees: no GPU reading is left."
        else:
            rest = "the other GPUs keep updating."
        sentences.append(
            f"GPU {which}: lost (fallen off the bus); check nvidia-smi and dmesg for Xid "
            f"errors; {rest}"
        )
    sentences.append(_unreadable_sentence(samples))
    sentences.append(count_drop_sentence(count, most))
    sentences.append(problem_sentence({s.index: list(s.rejected) for s in samples if s.rejected}))
    found = [s for s in sentences if s]
    return " ".join(found) if found else None


def _failed_calls(sample: GpuSample) -> list[tuple[str, str]]:
    """The calls that made SAMPLE unreadable: its handle or memory, or an error with a code
    (not merely "not supported")."""
    return [
        (name, text)
        for name, text in sample.field_errors
        if name in ("handle", "memory") or ", code " in text
    ]


def _unreadable_sentence(samples: list[GpuSample]) -> str | None:
    """GPUs a call failed for (their handle, their memory, any call that is not merely "not
    supported"); refused numbers say so in their own sentence."""
    failed = [
        s
        for s in samples
        if s.status == GpuStatus.ERROR
        and not any(r.field.startswith("memory") for r in s.rejected)
        and _failed_calls(s)
    ]
    if not failed:
        return None
    why = "; ".join(
        f"GPU {s.index} {name}: {text}" if len(failed) > 1 else f"{name}: {text}"
        for s in failed[:3]
        for name, text in _failed_calls(s)[:2]
    )
    every = len(failed) == len(samples)
    rest = "no GPU reading is left" if every else "the other GPUs keep updating"
    return (
        f"GPU {gpu_span(s.index for s in failed)}: unreadable through NVML ({why}); no numbers "
        f"are shown for {'them' if len(failed) > 1 else 'it'} and {rest}. Check nvidia-smi and "
        "dmesg for Xid errors."
    )


def _gpu(util: Any) -> int | None:
    return None if util is None else int(util.gpu)


def _mem(util: Any) -> int | None:
    return None if util is None else int(util.memory)


def _watts(milliwatts: float | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def _process(info: Any, refusals: Refusals) -> GpuProcess:
    """One compute process; memory it cannot have used (above any GPU's size) is refused."""
    used = info.usedGpuMemory  # None: NVML_VALUE_NOT_AVAILABLE (pynvml maps it)
    if used is not None:
        used = refusals.number(f"process {int(info.pid)} memory", used, MAX_GIB * GIB)
    return GpuProcess(pid=int(info.pid), used_gib=None if used is None else used / GIB)


class NvmlSource(GpuLibrarySource):
    """Reads every GPU through NVML; one instance per app, polled from one thread at a time."""

    LIBRARY = "NVML"
    TOOL = "nvidia-smi"

    def __init__(
        self,
        process_interval_s: float = 2.0,
        call_timeout_s: float = 2.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(call_timeout_s, "kvtop-nvml")
        self.process_interval_s = process_interval_s
        self._clock = clock
        self._initialized = False
        self._static: dict[int, StaticFacts] = {}
        self._most_gpus = 0  # the most GPUs NVML has shown: fewer now means some went away
        self._mem_v2 = True
        self._proc_fn: str = "v3"
        self._reasons_fn: str = "event"
        self._procs: dict[int, tuple[GpuProcess, ...]] = {}
        self._procs_at: float | None = None

    def _forget_init(self) -> None:
        if self._initialized:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()
        self._initialized = False
        self._static.clear()
        self._procs.clear()
        self._procs_at = None

    def _poll(self) -> NvmlReading:
        if pynvml is None:
            return self._unavailable(
                f"nvidia-ml-py is not installed: pip install nvidia-ml-py; {KEEP_GOING}", True
            )
        if not self._initialized:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                return self._unavailable(
                    _unavailable_sentence(exc), _code(exc) == _LIBRARY_NOT_FOUND
                )
            self._initialized = True
            try:
                self._driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
            except pynvml.NVMLError:
                self._driver_version = None
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            # The driver went away under us: start over next poll.
            self._forget_init()
            return self._unavailable(_unavailable_sentence(exc))

        now = self._clock()
        refresh_procs = self._procs_at is None or now - self._procs_at >= self.process_interval_s
        for gone in [i for i in self._static if i >= count]:
            del self._static[gone]
        for gone in [i for i in self._procs if i >= count]:
            del self._procs[gone]

        samples = [self._sample(i, refresh_procs) for i in range(count)]
        if refresh_procs:
            self._procs_at = now
        self._most_gpus = max(self._most_gpus, count)
        return NvmlReading(
            gpus=tuple(samples),
            available=True,
            problem=_problem(samples, count, self._most_gpus),
            driver_version=self._driver_version,
        )

    # ---- one GPU -------------------------------------------------------------------------

    def _sample(self, index: int, refresh_procs: bool) -> GpuSample:
        try:
            return self._read_gpu(index, refresh_procs)
        except _GpuUnreadable as failed:
            return self._without_numbers(index, GpuStatus.ERROR, (failed.call, str(failed)))
        except _GpuLost as lost:
            return self._without_numbers(index, GpuStatus.LOST, ("gpu", str(lost)))

    def _without_numbers(self, index: int, status: GpuStatus, error: tuple[str, str]) -> GpuSample:
        self._procs.pop(index, None)
        return without_numbers(index, self._static.pop(index, None), status, error)

    @staticmethod
    def _call(fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if _code(exc) == _GPU_IS_LOST:
                raise _GpuLost(_error_text(exc)) from None
            raise

    def _field(self, errors: _Errors, name: str, fn: Callable[..., _T], *args: Any) -> _T | None:
        try:
            return self._call(fn, *args)
        except pynvml.NVMLError as exc:
            errors.add(name, exc)
            return None

    def _static_facts(self, index: int, handle: Any) -> StaticFacts:
        cached = self._static.get(index)
        if cached is not None:
            return cached
        errors = _Errors()
        name = self._field(errors, "name", pynvml.nvmlDeviceGetName, handle)
        uuid = self._field(errors, "uuid", pynvml.nvmlDeviceGetUUID, handle)
        pci = self._field(errors, "pci_bus_id", pynvml.nvmlDeviceGetPciInfo, handle)
        static = StaticFacts(
            name=_text(name) if name is not None else f"GPU {index}",
            uuid=_text(uuid) if uuid is not None else "",
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            errors=tuple(errors),
            serious=errors.serious,
        )
        if not errors:  # retry the facts that failed on the next poll
            self._static[index] = static
        return static

    def _memory(self, handle: Any) -> tuple[int, int, int, int | None]:
        """NVML's total, used, free and reserved memory in bytes (reserved: v2 only)."""
        if self._mem_v2:
            try:
                mem = self._call(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
                return mem.total, mem.used, mem.free, mem.reserved
            except pynvml.NVMLError as exc:
                if _code(exc) not in (_FUNCTION_NOT_FOUND, _NOT_SUPPORTED):
                    raise
                self._mem_v2 = False  # an older driver: v1 from now on
        mem = self._call(pynvml.nvmlDeviceGetMemoryInfo, handle)
        return mem.total, mem.used, mem.free, None

    def _clock_event_reasons(self, errors: _Errors, handle: Any) -> int | None:
        """The current clocks event reasons (NVML 12.535 and later), else the same bits under
        their older name, throttle reasons; None where the card or driver has neither."""
        if self._reasons_fn == "event":
            try:
                return int(self._call(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle))
            except pynvml.NVMLError as exc:
                if _code(exc) != _FUNCTION_NOT_FOUND:
                    errors.add("clock_event_reasons", exc)
                    return None
                self._reasons_fn = "throttle"  # an older driver: the older name from now on
            except AttributeError:  # an nvidia-ml-py without the new name
                self._reasons_fn = "throttle"
        reasons = self._field(
            errors,
            "clock_event_reasons",
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons,
            handle,
        )
        return None if reasons is None else int(reasons)

    def _processes(self, handle: Any, refusals: Refusals) -> tuple[GpuProcess, ...]:
        order = ["v3", "v2"] if self._proc_fn == "v3" else ["v2"]
        fns = {
            "v3": pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
            "v2": pynvml.nvmlDeviceGetComputeRunningProcesses_v2,
        }
        for i, version in enumerate(order):
            try:
                procs = self._call(fns[version], handle)
            except pynvml.NVMLError as exc:
                if _code(exc) == _FUNCTION_NOT_FOUND and i + 1 < len(order):
                    self._proc_fn = order[i + 1]
                    continue
                raise
            return tuple(_process(p, refusals) for p in procs)
        return ()  # pragma: no cover - the loop always returns or raises

    def _read_gpu(self, index: int, refresh_procs: bool) -> GpuSample:
        try:
            handle = self._call(pynvml.nvmlDeviceGetHandleByIndex, index)
        except pynvml.NVMLError as exc:  # every other call needs it: nothing can be read
            raise _GpuUnreadable("handle", _named_error(exc)) from None
        static = self._static_facts(index, handle)
        errors = _Errors(static.errors)
        errors.serious = static.serious
        refusals = Refusals()
        try:
            memory = refusals.memory(*self._memory(handle))
        except pynvml.NVMLError as exc:
            errors.add("memory", exc)
            errors.serious = True  # whatever the code: no memory, no picture of the GPU
            memory = None
        util = self._field(errors, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        temp = self._field(
            errors,
            "temperature",
            pynvml.nvmlDeviceGetTemperature,
            handle,
            pynvml.NVML_TEMPERATURE_GPU,
        )
        power = self._field(errors, "power", pynvml.nvmlDeviceGetPowerUsage, handle)
        limit = self._field(errors, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        reasons = self._clock_event_reasons(errors, handle)
        if refresh_procs or index not in self._procs:
            try:
                self._procs[index] = self._processes(handle, refusals)
            except pynvml.NVMLError as exc:
                errors.add("processes", exc)
                self._procs[index] = ()
        # Unreadable or impossible memory, or a call that failed for more than a missing
        # feature: an error, and no number stands in for it.
        status = GpuStatus.OK if memory is not None and not errors.serious else GpuStatus.ERROR
        total, used, free, reserved = memory if memory is not None else (0, 0, 0, None)
        cause = errors.first_serious
        refused_memory = [r for r in refusals.found if r.field.startswith("memory")]
        if memory is None and refused_memory:
            first = refused_memory[0]
            cause = ("memory", f"{first.field} {first.value} ({first.reason})")
        return GpuSample(
            index=index,
            name=static.name,
            uuid=static.uuid,
            pci_bus_id=static.pci_bus_id,
            total_gib=total / GIB,
            used_gib=used / GIB,
            free_gib=free / GIB,
            reserved_gib=None if reserved is None else reserved / GIB,
            utilization_pct=whole(refusals.number("utilization", _gpu(util), PERCENT_MAX)),
            memory_utilization_pct=whole(
                refusals.number("memory_utilization", _mem(util), PERCENT_MAX)
            ),
            temperature_c=whole(refusals.number("temperature", temp, TEMPERATURE_MAX_C)),
            power_w=_watts(refusals.number("power", power, POWER_MAX_MW)),
            power_limit_w=_watts(refusals.number("power_limit", limit, POWER_MAX_MW)),
            processes=self._procs[index],
            status=status,
            field_errors=tuple(errors),
            rejected=tuple(refusals.found),
            clock_event_reasons=reasons,
            cause=cause if status != GpuStatus.OK else None,
        )
