"""One GPU row's alert: its level and why, from the thresholds (tui/model/alerts.py).

Critical: the GPU is lost (or its memory unreadable), temperature or power at the critical
threshold. Warning: temperature or power at the warning threshold, or, once the server is
ready, free memory under the safe margin. The row's colour and glyph come from the level;
the reasons name each value that set it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.model.alerts import (
    CRITICAL,
    DEFAULT_THRESHOLDS,
    OK,
    Thresholds,
    free_after_startup_level,
    power_level,
    temperature_level,
    worst,
)
from tui.model.deployment import GpuView


@dataclass(frozen=True, slots=True)
class GpuAlert:
    level: str  # ok, warning, critical
    temperature: str
    power: str
    free: str
    reasons: tuple[str, ...] = ()


def gpu_alert(view: GpuView, ready: bool, t: Thresholds = DEFAULT_THRESHOLDS) -> GpuAlert:
    """`ready`: the server finished its startup (free memory is judged only then)."""
    sample = view.sample
    if view.lost:
        why = "lost (fallen off the bus)" if sample.status == "lost" else "memory unreadable"
        return GpuAlert(CRITICAL, OK, OK, OK, (why,))
    temperature = temperature_level(sample.temperature_c, t)
    power = power_level(sample.power_w, sample.power_limit_w, t)
    free = free_after_startup_level(view.memory.free_gib, t) if ready else OK
    reasons = []
    if temperature != OK:
        reasons.append(f"{sample.temperature_c} °C ({temperature})")
    if power != OK and sample.power_w is not None and sample.power_limit_w:
        share = 100 * sample.power_w / sample.power_limit_w
        reasons.append(
            f"{sample.power_w:.0f} W of {sample.power_limit_w:.0f} W ({share:.0f} %, {power})"
        )
    if free != OK and view.memory.free_gib is not None:
        reasons.append(
            f"{view.memory.free_gib:.1f} GiB free, under the {t.safe_margin_gib:g} GiB safe margin"
        )
    return GpuAlert(worst((temperature, power, free)), temperature, power, free, tuple(reasons))
