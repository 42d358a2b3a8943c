"""The order of the overview's GPU rows: by NVML index, free, used memory or temperature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtop.model.snapshot import GpuView


@dataclass(frozen=True, slots=True)
class GpuOrder:
    """One way to sort the rows: its name, the column it marks and which end comes first."""

    key: str  # "index", "free", "used", "temperature"
    descending: bool  # True: the largest value first

    @property
    def arrow(self) -> str:
        return "▼" if self.descending else "▲"


# `o` cycles through these. Free: the GPU with the least first (the one nearest to running out);
# used and temperature: the most first, as htop and nvitop put the heaviest on top.
ORDERS = (
    GpuOrder("index", descending=False),
    GpuOrder("free", descending=False),
    GpuOrder("used", descending=True),
    GpuOrder("temperature", descending=True),
)
ORDER_KEYS = tuple(order.key for order in ORDERS)


def order_named(key: str) -> GpuOrder:
    return next((o for o in ORDERS if o.key == key), ORDERS[0])


def next_order(key: str) -> str:
    """The order after `key` in the cycle (index after the last one)."""
    position = ORDER_KEYS.index(key) if key in ORDER_KEYS else -1
    return ORDER_KEYS[(position + 1) % len(ORDER_KEYS)]


def _value(gpu: GpuView, key: str) -> float | None:
    if gpu.lost:
        return None
    if key == "free":
        return gpu.memory.free_gib
    if key == "used":
        return gpu.sample.used_gib
    if key == "temperature":
        return None if gpu.sample.temperature_c is None else float(gpu.sample.temperature_c)
    return float(gpu.sample.index)


def sorted_gpus(gpus: Sequence[GpuView], key: str) -> tuple[GpuView, ...]:
    """The GPUs in `key`'s order; GPUs without the value (lost, no sensor) last, each group
    and every tie by NVML index."""
    order = order_named(key)
    if order.key == "index":
        return tuple(sorted(gpus, key=lambda g: g.sample.index))
    sign = -1.0 if order.descending else 1.0

    def rank(gpu: GpuView) -> tuple[int, float, int]:
        value = _value(gpu, order.key)
        if value is None:
            return (1, 0.0, gpu.sample.index)
        return (0, sign * value, gpu.sample.index)

    return tuple(sorted(gpus, key=rank))
