"""Bound the SGLang version from which log formats a startup used (the log never states it)."""

from __future__ import annotations

from dataclasses import dataclass

from tui.sglang import events as ev

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


def evidence(event: ev.Event) -> tuple[Version, Version, str] | None:
    """The version range a line's format implies, with a short reason, or None if it says nothing.

    Ranges come from the wheel diffs in the SGLang reference (section a).
    """
    msg = event.message
    if isinstance(event, ev.InitEnd):
        if event.step == "parallel":
            return (0, 5, 20), NEWEST, "`Init parallel` lines"
        if event.elapsed_s is not None:
            return (0, 5, 9), (0, 5, 19), "`Init torch distributed ends. elapsed=`"
        if event.mem_usage_gib is not None:
            return (0, 4, 3), (0, 5, 8), "`Init torch distributed ends. mem usage=` without elapsed"
    if isinstance(event, ev.LoadWeightEnd):
        if event.elapsed_s is not None and event.dtype is None:
            return (0, 5, 10), NEWEST, "`Load weight end. elapsed=` without dtype"
        if event.elapsed_s is not None:
            return (0, 5, 9), (0, 5, 9), "`Load weight end. elapsed=` with dtype"
        if event.quant is not None and event.dtype is None:
            return (0, 5, 10), NEWEST, "`Load weight end. quant=` without dtype"
        if event.mem_usage_gib is not None and event.dtype is not None:
            return (0, 4, 3), (0, 5, 8), "`Load weight end. type=, dtype=` without elapsed"
        if event.mem_usage_gib is None and event.dtype is not None:
            return OLDEST, (0, 4, 1), "`Load weight end` without mem usage"
    if isinstance(event, ev.KvCacheAllocated) and not event.post_capture:
        if event.va_upper_bound or event.cache_name != "KV Cache":
            return (0, 5, 19), NEWEST, "named/VA `KV Cache` line"
        if event.dtype is not None:
            return (0, 5, 13), NEWEST, "`KV Cache is allocated. dtype:`"
        if event.tokens is not None:
            return (0, 4, 3), (0, 5, 12), "`KV Cache is allocated. #tokens:` without dtype"
    if isinstance(event, ev.GraphCaptureEnd):
        if "Time elapsed:" in msg:
            return OLDEST, (0, 5, 13), "`Capture ... graph end. Time elapsed:`"
        if "elapsed=" in msg:
            return (0, 5, 14), NEWEST, "`Capture ... CUDA graph end. elapsed=`"
    if isinstance(event, ev.ServerArgsLogged) and event.args is not None:
        if event.args.form == "dict":
            return (0, 5, 19), NEWEST, "`server_args={...}` dict form"
        return OLDEST, (0, 5, 16), "`server_args=ServerArgs(...)` form"
    if isinstance(event, ev.BatchStats):
        if msg.startswith(("Decode batch,", "Prefill batch,")):
            return (0, 5, 3), NEWEST, "`Decode batch,` with a comma"
        if msg.startswith(("Decode batch.", "Prefill batch.")):
            return OLDEST, (0, 5, 2), "`Decode batch.` with a period"
    if isinstance(event, ev.HostKvAllocated) and event.label is None:
        if event.tokens is None:
            return (0, 4, 10), (0, 5, 16), "`Allocating N GB host memory for hierarchical KV cache`"
        return (0, 5, 19), NEWEST, "`hierarchical KV host pool:` line"
    if isinstance(event, ev.Failure) and event.kind == "no_memory_for_kv":
        return (0, 5, 14), NEWEST, "`Loaded weights leave no GPU memory` failure"
    if isinstance(event, ev.Summary):
        if event.available_gpu_mem_gib is not None:
            return (0, 4, 10), NEWEST, "summary line with available_gpu_mem"
        if event.chunked_prefill_size is not None:
            return (0, 4, 1), (0, 4, 9), "summary line without available_gpu_mem"
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
