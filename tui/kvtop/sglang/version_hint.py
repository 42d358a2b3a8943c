"""Bound the SGLang version from which log formats a startup used (the log never states it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvtop.sglang import events as ev

Version = tuple[int, int, int]
OLDEST: Version = (0, 3, 0)
NEWEST: Version = (0, 9, 999)


@dataclass(frozen=True, slots=True)
class VersionRange:
    low: Version
    high: Version
    basis: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.basis != ()

    def text(self) -> str:
        if not self.known:
            return "unknown"
        low, high = _fmt(self.low), _fmt(self.high)
        if self.low == self.high:
            return low
        if self.high == NEWEST:
            return f"≥{low}"
        if self.low == OLDEST:
            return f"≤{high}"
        return f"{low}–{high}"


def _fmt(version: Version) -> str:
    return ".".join(str(part) for part in version)


UNKNOWN = VersionRange(OLDEST, NEWEST)


Evidence = tuple[Version, Version, str]  # lowest and highest version, and why


def _init_end(event: ev.InitEnd) -> Evidence | None:
    if event.step == "parallel":
        return (0, 5, 20), NEWEST, "`Init parallel` lines"
    if event.elapsed_s is not None:
        return (0, 5, 9), (0, 5, 19), "`Init torch distributed ends. elapsed=`"
    if event.mem_usage_gib is not None:
        return (0, 4, 3), (0, 5, 8), "`Init torch distributed ends. mem usage=` without elapsed"
    return None


def _load_weight_end(event: ev.LoadWeightEnd) -> Evidence | None:
    timed, typed = event.elapsed_s is not None, event.dtype is not None
    if timed:
        if not typed:
            return (0, 5, 10), NEWEST, "`Load weight end. elapsed=` without dtype"
        return (0, 5, 9), (0, 5, 9), "`Load weight end. elapsed=` with dtype"
    if event.quant is not None and not typed:
        return (0, 5, 10), NEWEST, "`Load weight end. quant=` without dtype"
    if typed and event.mem_usage_gib is not None:
        return (0, 4, 3), (0, 5, 8), "`Load weight end. type=, dtype=` without elapsed"
    if typed:
        return OLDEST, (0, 4, 1), "`Load weight end` without mem usage"
    return None


def _kv_cache(event: ev.KvCacheAllocated) -> Evidence | None:
    if event.post_capture:
        return None
    if event.va_upper_bound or event.cache_name != "KV Cache":
        return (0, 5, 19), NEWEST, "named/VA `KV Cache` line"
    if event.dtype is not None:
        return (0, 5, 13), NEWEST, "`KV Cache is allocated. dtype:`"
    if event.tokens is not None:
        return (0, 4, 3), (0, 5, 12), "`KV Cache is allocated. #tokens:` without dtype"
    return None


def _graph_capture_end(event: ev.GraphCaptureEnd) -> Evidence | None:
    if "Time elapsed:" in event.message:
        return OLDEST, (0, 5, 13), "`Capture ... graph end. Time elapsed:`"
    if "elapsed=" in event.message:
        return (0, 5, 14), NEWEST, "`Capture ... CUDA graph end. elapsed=`"
    return None


def _server_args(event: ev.ServerArgsLogged) -> Evidence | None:
    if event.args is None:
        return None
    if event.args.form == "dict":
        return (0, 5, 19), NEWEST, "`server_args={...}` dict form"
    return OLDEST, (0, 5, 16), "`server_args=ServerArgs(...)` form"


def _batch(event: ev.BatchStats) -> Evidence | None:
    if event.message.startswith(("Decode batch,", "Prefill batch,")):
        return (0, 5, 3), NEWEST, "`Decode batch,` with a comma"
    if event.message.startswith(("Decode batch.", "Prefill batch.")):
        return OLDEST, (0, 5, 2), "`Decode batch.` with a period"
    return None


def _host_kv(event: ev.HostKvAllocated) -> Evidence | None:
    if event.label is not None:
        return None
    if event.tokens is None:
        return (0, 4, 10), (0, 5, 16), "`Allocating N GB host memory for hierarchical KV cache`"
    return (0, 5, 19), NEWEST, "`hierarchical KV host pool:` line"


def _failure(event: ev.Failure) -> Evidence | None:
    if ev.NO_MEMORY_FOR_KV in event.message:
        return (0, 5, 14), NEWEST, "`Loaded weights leave no GPU memory` failure"
    return None


def _summary(event: ev.Summary) -> Evidence | None:
    if event.available_gpu_mem_gib is not None:
        return (0, 4, 10), NEWEST, "summary line with available_gpu_mem"
    if event.chunked_prefill_size is not None:
        return (0, 4, 1), (0, 4, 9), "summary line without available_gpu_mem"
    return None


# The lines whose format changed between versions, each with what its form says.
_EVIDENCE: tuple[tuple[type[ev.Event], Callable[[Any], Evidence | None]], ...] = (
    (ev.InitEnd, _init_end),
    (ev.LoadWeightEnd, _load_weight_end),
    (ev.KvCacheAllocated, _kv_cache),
    (ev.GraphCaptureEnd, _graph_capture_end),
    (ev.ServerArgsLogged, _server_args),
    (ev.BatchStats, _batch),
    (ev.HostKvAllocated, _host_kv),
    (ev.Failure, _failure),
    (ev.Summary, _summary),
)


def evidence(event: ev.Event) -> Evidence | None:
    """The version range a line's format implies, with a short reason, or None if it says nothing.

    Ranges come from the wheel diffs in the SGLang reference (section a).
    """
    for kind, read in _EVIDENCE:
        if isinstance(event, kind):
            found = read(event)
            if found is not None:
                return found
    return None


def narrow(current: VersionRange, event: ev.Event) -> VersionRange:
    """Intersect the current range with what this event implies; contradictions are ignored."""
    found = evidence(event)
    if found is None:
        return current
    low, high, reason = found
    new_low, new_high = max(current.low, low), min(current.high, high)
    if new_low > new_high or reason in current.basis:
        return current
    return VersionRange(new_low, new_high, (*current.basis, reason))
