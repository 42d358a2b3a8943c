"""Which of NVML's numbers are readings: the range rule of the log and /metrics parsers
(tui/kvtop/sglang/bounds.py) applied to what the driver hands back.

A driver bug or a failing GPU can answer 4294967295 (0xFFFFFFFF, "not available" in a field
that has no such value) for utilization or temperature, or more memory in use than the GPU
has. Such a number is refused: its field stays blank, and the refusal (field, raw value,
reason) travels with the sample so the report can say what was left out.
"""

from __future__ import annotations

from kvtop.model.memory.gpu_reading import RefusedValue
from kvtop.sglang.bounds import MAX_GIB, refusal

GIB = 2**30
PERCENT_MAX = 100
# No GPU runs above these: thermal shutdown is near 100 °C, the largest boards draw ~1.2 kW.
TEMPERATURE_MAX_C = 150
POWER_MAX_MW = 10_000_000  # 10 kW


class Refusals:
    """Collects what one GPU's reading refused; `number()` hands back the value or None."""

    def __init__(self) -> None:
        self.found: list[RefusedValue] = []

    def refuse(self, field: str, raw: object, reason: str) -> None:
        self.found.append(RefusedValue(field, str(raw), reason))

    def number(self, field: str, raw: int | float | None, limit: float) -> int | float | None:
        """RAW when it can be a reading (within 0..limit), else None (and the refusal noted)."""
        if raw is None:
            return None
        why = refusal(raw, limit)
        if why is not None:
            self.refuse(field, raw, why)
            return None
        return raw

    def memory(
        self, total: int, used: int, free: int, reserved: int | None
    ) -> tuple[int, int, int, int | None] | None:
        """NVML's memory in bytes when it adds up, else None (each impossible part noted)."""
        before = len(self.found)
        if self.number("memory_total", total, MAX_GIB * GIB) is None:
            return None
        parts = {"memory_used": used, "memory_free": free, "memory_reserved": reserved}
        for field, value in parts.items():
            if value is None or self.number(field, value, MAX_GIB * GIB) is None:
                continue
            if value > total:
                self.refuse(field, value, f"more than the GPU's total ({total} bytes)")
        return None if len(self.found) > before else (total, used, free, reserved)


def problem_sentence(
    refused: dict[int, list[RefusedValue]], library: str = "NVML", tool: str = "nvidia-smi"
) -> str | None:
    """One sentence for the notice: which GPUs gave which impossible numbers (`library` and
    its `tool` name who gave them and what to check with)."""
    if not refused:
        return None
    parts = []
    for index, values in sorted(refused.items())[:3]:
        what = ", ".join(f"{v.field} {v.value} ({v.reason})" for v in values[:3])
        parts.append(f"GPU {index}: {what}")
    more = len(refused) - 3
    tail = f" and {more} more GPU{'s' if more != 1 else ''}" if more > 0 else ""
    return (
        f"{library} gave impossible numbers, refused and shown blank: {'; '.join(parts)}{tail}. "
        f"A driver bug or a failing GPU: check {tool} and dmesg."
    )


def count_drop_sentence(
    count: int,
    most: int,
    library: str = "NVML",
    check: str = "nvidia-smi and dmesg for Xid errors",
) -> str | None:
    """When the library now sees fewer GPUs than it did this session."""
    if count >= most:
        return None
    now = "no GPU" if count == 0 else f"{count} GPU{'s' if count != 1 else ''}"
    return (
        f"{library} sees {now} now, {most} before: GPUs fell off the bus or the driver was "
        f"reset. Check {check}."
    )
