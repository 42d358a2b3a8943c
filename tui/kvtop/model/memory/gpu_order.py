"""The order of the overview's GPU rows: by NVML index, free, used memory or temperature."""

from __future__ import annotations

from collections.abc import Sequence

from kvtop.model.column_order import ColumnOrder, OrderCycle, sorted_by_number
from kvtop.model.memory.gpu_view import GpuView

# `o` cycles through these. Free: the GPU with the least first (the one nearest to running out);
# used and temperature: the most first, as htop and nvitop put the heaviest on top.
ORDERS = OrderCycle(
    ColumnOrder("index", descending=False),
    ColumnOrder("free", descending=False),
    ColumnOrder("used", descending=True),
    ColumnOrder("temperature", descending=True),
)
ORDER_KEYS = ORDERS.keys
order_named = ORDERS.named
next_order = ORDERS.after  # the order after a key in the cycle (index after the last one)


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
    return sorted_by_number(gpus, order, lambda g: _value(g, order.key), lambda g: g.sample.index)
