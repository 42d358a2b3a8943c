"""Recent history for the sparklines, in fixed-size buffers (memory stays bounded for days)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tui.model.deployment import Snapshot
from tui.model.kv_usage import kv_usage

POINTS = 600  # ten minutes at 1 Hz; at faster refresh it simply covers less time


@dataclass(frozen=True, slots=True)
class Series:
    """One buffer's values, oldest first, with the time span they cover."""

    values: tuple[float, ...]
    seconds: float


@dataclass
class History:
    points: int = POINTS
    _times: deque[float] = field(init=False)
    _token_usage_pct: deque[float] = field(init=False)
    _gpu_used_gib: dict[str, deque[float]] = field(default_factory=dict)
    _gpu_util_pct: dict[str, deque[float]] = field(default_factory=dict)
    _last_taken_at: float | None = None

    def __post_init__(self) -> None:
        self._times = deque(maxlen=self.points)
        self._token_usage_pct = deque(maxlen=self.points)

    def record(self, snapshot: Snapshot) -> bool:
        """Append one point per series (once per snapshot); False when already recorded."""
        if snapshot.taken_at == self._last_taken_at:
            return False
        self._last_taken_at = snapshot.taken_at
        self._times.append(snapshot.taken_at)
        usage = kv_usage(snapshot).usage_pct
        self._token_usage_pct.append(usage if usage is not None else float("nan"))
        seen: set[str] = set()
        for gpu in snapshot.gpus:
            key = gpu.sample.uuid or str(gpu.sample.index)
            seen.add(key)
            used = self._gpu_used_gib.setdefault(key, deque(maxlen=self.points))
            util = self._gpu_util_pct.setdefault(key, deque(maxlen=self.points))
            used.append(gpu.sample.used_gib if gpu.sample.status == "ok" else float("nan"))
            value = gpu.sample.utilization_pct
            util.append(float(value) if value is not None else float("nan"))
        # A GPU that went away keeps its buffer only while it might come back; a host with
        # GPUs swapped in and out must not accumulate buffers without bound.
        for key in list(self._gpu_used_gib):
            if key not in seen and len(self._gpu_used_gib) > max(len(seen), 1) * 2:
                del self._gpu_used_gib[key]
                self._gpu_util_pct.pop(key, None)
        return True

    def _span(self, count: int) -> float:
        if count < 2:
            return 0.0
        times = list(self._times)[-count:]
        return times[-1] - times[0]

    def token_usage_pct(self) -> Series:
        return Series(tuple(self._token_usage_pct), self._span(len(self._token_usage_pct)))

    def gpu_used_gib(self, key: str) -> Series:
        values = tuple(self._gpu_used_gib.get(key, ()))
        return Series(values, self._span(len(values)))

    def gpu_util_pct(self, key: str) -> Series:
        values = tuple(self._gpu_util_pct.get(key, ()))
        return Series(values, self._span(len(values)))

    def size(self) -> int:
        """Points kept over all buffers (the soak reports it)."""
        return (
            len(self._token_usage_pct)
            + sum(len(b) for b in self._gpu_used_gib.values())
            + sum(len(b) for b in self._gpu_util_pct.values())
        )
