"""GPU readings from AMD GPUs through AMD's own Python binding (the `amdsmi` package).

`AmdsmiSource.poll()` reads every GPU amdsmi enumerates and hands back the same plain samples
the NVML source builds (NvmlReading, GpuSample, GpuProcess), so the model and the views need not
know the vendor. Like the NVML source it never raises for a library error: a failed call is
named in amdsmi's own words ("AMDSMI_STATUS_IO - I/O Error") in the sample's field errors, a
GPU that amdsmi no longer finds is lost, and a library that will not start is a sentence.

`amdsmi` is imported on the first poll only: the binding loads libamd_smi.so and binds every
function of it at import time, and an NVIDIA host never needs it. No Textual, no SGLang
knowledge.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from kvtop.model.memory.gpu_reading import (
    GpuProcess,
    GpuSample,
    GpuStatus,
    GpuVendor,
    NvmlReading,
)
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

GIB = float(2**30)

_T = TypeVar("_T")

# amdsmi status codes used below (amdsmi_wrapper.AMDSMI_STATUS_*, stable across releases).
_NOT_SUPPORTED = 2
_NOT_YET_IMPLEMENTED = 3
_NO_PERM = 10
_NOT_FOUND = 31
_DRIVER_NOT_LOADED = 34
# What a call may answer with nothing wrong with the GPU: the card or driver lacks the feature,
# or this user may not read it. Any other status (an I/O error, a DRM error, a timeout) makes
# the GPU unreadable.
_BENIGN = (_NOT_SUPPORTED, _NOT_YET_IMPLEMENTED, _NO_PERM)
# The one per-GPU status that means the GPU itself is gone: its handle no longer finds it.
_LOST = _NOT_FOUND

# amdsmi's "no value" in the dictionaries it returns (0xFFFF and the like become "N/A").
_NOT_AVAILABLE = "N/A"


class _GpuLost(Exception):
    pass


class _Unstartable(Exception):
    """amdsmi cannot be imported or started; the message is the sentence for the operator."""


class _Missing(_Unstartable):
    """amdsmi or its libamd_smi.so is not on this host: no AMD stack to retry."""


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) else None


def _words(exc: BaseException) -> str:
    """amdsmi's own words for the error: 'AMDSMI_STATUS_IO - I/O Error'."""
    info = getattr(exc, "get_error_info", None)
    if callable(info):
        with contextlib.suppress(Exception):
            return str(info())
    return str(exc) or type(exc).__name__


def _named_error(exc: BaseException) -> str:
    """The error's words, with its status code when it is not merely "not supported"."""
    code = _code(exc)
    text = _words(exc)
    return text if code in _BENIGN or code is None else f"{text}, code {code}"


def _serious(exc: BaseException) -> bool:
    return _code(exc) not in _BENIGN


class _Errors(CallErrors):
    named = staticmethod(_named_error)
    is_serious = staticmethod(_serious)


def _number(value: Any) -> int | None:
    """A number from amdsmi's dictionaries; "N/A" (and anything not a number) is None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


# Where the binding looks for libamd_smi.so (amdsmi_wrapper.find_smi_library), and the
# linker's usual directories for its bare-name attempt.
_SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib")


def _library_present() -> bool:
    """Whether a libamd_smi.so is where the binding would load it from. Checked before the
    import: the binding's import is the cost of a large module, paid on every NVIDIA host that
    has amdsmi installed but no ROCm otherwise."""
    dirs: list[str] = []
    for name in ("ROCM_HOME", "ROCM_PATH"):
        root = os.environ.get(name)
        if root:
            dirs.append(os.path.join(root, "lib"))
    dirs.append("/opt/rocm/lib")
    spec = importlib.util.find_spec("amdsmi")
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(spec.submodule_search_locations)
    dirs.extend(d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d)
    dirs.extend(_SYSTEM_LIB_DIRS)
    return any(os.path.exists(os.path.join(d, "libamd_smi.so")) for d in dirs)


def _import_amdsmi() -> ModuleType:
    """The amdsmi module, or _Unstartable saying why not.

    The binding prints "Could not load libamd_smi.so" on stdout before failing when the
    library is missing: that line would land in the middle of the screen, so stdout is held
    for the import and the failure is told as a sentence instead.
    """
    if importlib.util.find_spec("amdsmi") is None:
        raise _Missing(
            "amdsmi is not installed: pip install 'kvtop-sglang[amd]' (or amdsmi from ROCm); "
            + KEEP_GOING
        )
    if not _library_present():
        raise _Missing(
            "AMD SMI library not found (libamd_smi.so): install amd-smi-lib from ROCm, or set "
            f"ROCM_PATH to the ROCm directory; {KEEP_GOING}"
        )
    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held):
            return importlib.import_module("amdsmi")
    except ImportError:
        raise _Missing(
            "amdsmi is not installed: pip install 'kvtop-sglang[amd]' (or amdsmi from ROCm); "
            + KEEP_GOING
        ) from None
    except AttributeError as exc:  # the binding names a function the library lacks
        raise _Unstartable(
            f"libamd_smi.so is older than the amdsmi binding ({exc}): install the amdsmi "
            f"release that matches ROCm's; {KEEP_GOING}"
        ) from None
    except Exception:  # KeyError/OSError: the binding found no libamd_smi.so to load
        raise _Missing(
            "AMD SMI library not found (libamd_smi.so): install amd-smi-lib from ROCm, or set "
            f"ROCM_PATH to the ROCm directory; {KEEP_GOING}"
        ) from None


def _unavailable_sentence(exc: BaseException) -> str:
    code = _code(exc)
    words = _words(exc)
    if code == _DRIVER_NOT_LOADED:
        return (
            f"amdgpu driver not loaded (amdsmi: {words}): load it (check with amd-smi); kvtop "
            f"retries each poll and {KEEP_GOING[6:]}"
        )
    if code == _NO_PERM:
        return (
            f"no permission to use amdsmi ({words}): run kvtop as a user in the video and "
            f"render groups (who can open /dev/kfd and /dev/dri/*); {KEEP_GOING}"
        )
    return f"amdsmi failed ({words}): check amd-smi; kvtop retries each poll and {KEEP_GOING[6:]}"


def _problem(samples: list[GpuSample], count: int, most: int) -> str | None:
    """The notice for this reading: GPUs lost or unreadable, fewer GPUs than before, impossible
    numbers; in amdsmi's terms (amd-smi is the tool an operator checks with)."""
    sentences: list[str | None] = []
    lost = [s.index for s in samples if s.status == GpuStatus.LOST]
    if lost:
        rest = (
            "no GPU reading is left"
            if len(lost) == len(samples)
            else "the other GPUs keep updating"
        )
        sentences.append(
            f"GPU {gpu_span(lost)}: lost (amdsmi no longer finds it); check amd-smi and dmesg "
            f"for amdgpu errors; {rest}."
        )
    failed = [s for s in samples if s.status == GpuStatus.ERROR and s.cause is not None]
    if failed:
        why = "; ".join(
            f"GPU {s.index} {s.cause[0]}: {s.cause[1]}" if len(failed) > 1 else ": ".join(s.cause)
            for s in failed[:3]
            if s.cause
        )
        rest = (
            "no GPU reading is left"
            if len(failed) == len(samples)
            else "the other GPUs keep updating"
        )
        sentences.append(
            f"GPU {gpu_span(s.index for s in failed)}: unreadable through amdsmi ({why}); no "
            f"numbers are shown for {'them' if len(failed) > 1 else 'it'} and {rest}. Check "
            "amd-smi and dmesg."
        )
    sentences.append(count_drop_sentence(count, most, "amdsmi", "amd-smi and dmesg"))
    refused = {s.index: list(s.rejected) for s in samples if s.rejected}
    sentences.append(problem_sentence(refused, "amdsmi", "amd-smi"))
    return " ".join(s for s in sentences if s) or None


class AmdsmiSource(GpuLibrarySource):
    """Reads every AMD GPU through amdsmi; the same poll()/last/close() surface as NvmlSource.
    One instance per app, polled from one thread at a time."""

    LIBRARY = "amdsmi"
    TOOL = "amd-smi"

    def __init__(
        self,
        process_interval_s: float = 2.0,
        call_timeout_s: float = 2.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(call_timeout_s, "kvtop-amdsmi")
        self.process_interval_s = process_interval_s
        self._clock = clock
        self._amdsmi: ModuleType | None = None
        self._initialized = False
        self._static: dict[int, StaticFacts] = {}
        self._procs: dict[int, tuple[GpuProcess, ...]] = {}
        self._procs_at: float | None = None
        self._most_gpus = 0

    # ---- the library ---------------------------------------------------------------------

    def _forget_init(self) -> None:
        if self._initialized and self._amdsmi is not None:
            with contextlib.suppress(Exception):
                self._amdsmi.amdsmi_shut_down()
        self._initialized = False
        self._static.clear()
        self._procs.clear()
        self._procs_at = None

    def _start(self) -> ModuleType:
        if self._amdsmi is None:
            self._amdsmi = _import_amdsmi()
        amdsmi = self._amdsmi
        if not self._initialized:
            try:
                amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except amdsmi.AmdSmiException as exc:
                raise _Unstartable(_unavailable_sentence(exc)) from None
            self._initialized = True
        return amdsmi

    def _poll(self) -> NvmlReading:
        try:
            amdsmi = self._start()
        except _Unstartable as why:
            return self._unavailable(str(why), isinstance(why, _Missing))
        try:
            handles = amdsmi.amdsmi_get_processor_handles()
        except amdsmi.AmdSmiException as exc:
            self._forget_init()  # the driver went away under us: start over next poll
            return self._unavailable(_unavailable_sentence(exc))
        if self._driver_version is None and handles:
            with contextlib.suppress(amdsmi.AmdSmiException):
                version = amdsmi.amdsmi_get_gpu_driver_info(handles[0])["driver_version"]
                self._driver_version = None if version == _NOT_AVAILABLE else str(version)
        count = len(handles)
        now = self._clock()
        refresh_procs = self._procs_at is None or now - self._procs_at >= self.process_interval_s
        for cache in (self._static, self._procs):
            for gone in [i for i in cache if i >= count]:
                del cache[gone]
        samples = [self._sample(i, h, refresh_procs) for i, h in enumerate(handles)]
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

    def _sample(self, index: int, handle: Any, refresh_procs: bool) -> GpuSample:
        try:
            return self._read_gpu(index, handle, refresh_procs)
        except _GpuLost as lost:
            self._procs.pop(index, None)
            static = self._static.pop(index, None)
            return without_numbers(index, static, GpuStatus.LOST, ("gpu", str(lost)), GpuVendor.AMD)

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        assert self._amdsmi is not None
        try:
            return fn(*args)
        except self._amdsmi.AmdSmiLibraryException as exc:
            if _code(exc) == _LOST:
                raise _GpuLost(_named_error(exc)) from None
            raise

    def _field(self, errors: _Errors, name: str, fn: Callable[..., _T], *args: Any) -> _T | None:
        assert self._amdsmi is not None
        try:
            return self._call(fn, *args)
        except self._amdsmi.AmdSmiException as exc:
            errors.add(name, exc)
            return None

    def _static_facts(self, index: int, handle: Any) -> StaticFacts:
        cached = self._static.get(index)
        if cached is not None:
            return cached
        amdsmi = self._amdsmi
        assert amdsmi is not None
        errors = _Errors()
        asic = self._field(errors, "name", amdsmi.amdsmi_get_gpu_asic_info, handle)
        uuid = self._field(errors, "uuid", amdsmi.amdsmi_get_gpu_device_uuid, handle)
        bdf = self._field(errors, "pci_bus_id", amdsmi.amdsmi_get_gpu_device_bdf, handle)
        name = asic.get("market_name") if asic else None
        static = StaticFacts(
            name=str(name) if name and name != _NOT_AVAILABLE else f"GPU {index}",
            uuid=str(uuid or ""),
            pci_bus_id=str(bdf or ""),
            errors=tuple(errors),
            serious=errors.serious,
        )
        if not errors:  # retry the facts that failed on the next poll
            self._static[index] = static
        return static

    def _memory(self, handle: Any) -> tuple[int, int, int, None]:
        """VRAM total, used and free in bytes (amdsmi has no "reserved")."""
        amdsmi = self._amdsmi
        assert amdsmi is not None
        vram = amdsmi.AmdSmiMemoryType.VRAM
        total = int(self._call(amdsmi.amdsmi_get_gpu_memory_total, handle, vram))
        used = int(self._call(amdsmi.amdsmi_get_gpu_memory_usage, handle, vram))
        return total, used, max(total - used, 0), None

    def _temperature(self, errors: _Errors, handle: Any) -> int | None:
        """The hotspot (junction) temperature, else the edge one. MI300-series boards have no
        edge sensor (amdsmi answers "not supported"), and hotspot is the one the firmware
        throttles on; older boards without a hotspot reading fall back to edge."""
        amdsmi = self._amdsmi
        assert amdsmi is not None
        current = amdsmi.AmdSmiTemperatureMetric.CURRENT
        failures: list[BaseException] = []
        for sensor in (amdsmi.AmdSmiTemperatureType.HOTSPOT, amdsmi.AmdSmiTemperatureType.EDGE):
            try:
                return int(self._call(amdsmi.amdsmi_get_temp_metric, handle, sensor, current))
            except amdsmi.AmdSmiException as exc:
                failures.append(exc)
                if _code(exc) != _NOT_SUPPORTED:
                    break
        errors.add("temperature", failures[0] if _serious(failures[0]) else failures[-1])
        return None

    def _power(self, errors: _Errors, handle: Any) -> tuple[int | None, int | None]:
        """Socket power and the power cap, both in milliwatts. amdsmi gives the power in whole
        watts (socket_power, else the current or average one an older board fills) and the
        cap in microwatts."""
        amdsmi = self._amdsmi
        assert amdsmi is not None
        power_mw = None
        info = self._field(errors, "power", amdsmi.amdsmi_get_power_info, handle)
        if info is not None:
            for key in ("socket_power", "current_socket_power", "average_socket_power"):
                watts = _number(info.get(key))
                if watts is not None:
                    power_mw = watts * 1000
                    break
        cap = self._field(errors, "power_limit", amdsmi.amdsmi_get_power_cap_info, handle)
        cap_uw = _number(cap.get("power_cap")) if cap is not None else None
        return power_mw, None if cap_uw is None else cap_uw // 1000

    def _processes(self, handle: Any, refusals: Refusals) -> tuple[GpuProcess, ...]:
        """Each process's VRAM (memory_usage.vram_mem, bytes); GTT, system memory the GPU maps,
        is not the GPU's memory and is left out."""
        assert self._amdsmi is not None
        found = []
        for proc in self._call(self._amdsmi.amdsmi_get_gpu_process_list, handle):
            pid = int(proc["pid"])
            raw = _number(proc.get("memory_usage", {}).get("vram_mem"))
            vram = refusals.number(f"process {pid} memory", raw, MAX_GIB * GIB)
            found.append(GpuProcess(pid=pid, used_gib=None if vram is None else vram / GIB))
        return tuple(found)

    def _read_gpu(self, index: int, handle: Any, refresh_procs: bool) -> GpuSample:
        amdsmi = self._amdsmi
        assert amdsmi is not None
        static = self._static_facts(index, handle)
        errors = _Errors(static.errors)
        errors.serious = static.serious
        errors.first_serious = next((e for e in static.errors if ", code " in e[1]), None)
        refusals = Refusals()
        try:
            memory = refusals.memory(*self._memory(handle))
        except amdsmi.AmdSmiException as exc:
            errors.add("memory", exc)
            errors.serious = True  # whatever the code: no memory, no picture of the GPU
            errors.first_serious = errors.first_serious or ("memory", _named_error(exc))
            memory = None
        activity = self._field(errors, "utilization", amdsmi.amdsmi_get_gpu_activity, handle)
        gfx = _number(activity.get("gfx_activity")) if activity else None
        umc = _number(activity.get("umc_activity")) if activity else None
        temp = self._temperature(errors, handle)
        power_mw, cap_mw = self._power(errors, handle)
        if refresh_procs or index not in self._procs:
            try:
                self._procs[index] = self._processes(handle, refusals)
            except amdsmi.AmdSmiException as exc:
                errors.add("processes", exc)
                self._procs[index] = ()
        status = GpuStatus.OK if memory is not None and not errors.serious else GpuStatus.ERROR
        total, used, free, _ = memory if memory is not None else (0, 0, 0, None)
        cause = errors.first_serious
        refused_memory = [r for r in refusals.found if r.field.startswith("memory")]
        if memory is None and refused_memory:
            first = refused_memory[0]
            cause = ("memory", f"{first.field} {first.value} ({first.reason})")
        power = refusals.number("power", power_mw, POWER_MAX_MW)
        cap = refusals.number("power_limit", cap_mw, POWER_MAX_MW)
        return GpuSample(
            vendor=GpuVendor.AMD,
            index=index,
            name=static.name,
            uuid=static.uuid,
            pci_bus_id=static.pci_bus_id,
            total_gib=total / GIB,
            used_gib=used / GIB,
            free_gib=free / GIB,
            reserved_gib=None,
            utilization_pct=whole(refusals.number("utilization", gfx, PERCENT_MAX)),
            memory_utilization_pct=whole(refusals.number("memory_utilization", umc, PERCENT_MAX)),
            temperature_c=whole(refusals.number("temperature", temp, TEMPERATURE_MAX_C)),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if cap is None else cap / 1000.0,
            processes=self._procs[index],
            status=status,
            field_errors=tuple(errors),
            rejected=tuple(refusals.found),
            cause=cause if status != GpuStatus.OK else None,
        )
