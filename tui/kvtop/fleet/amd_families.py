"""The families and labels of AMD's device metrics exporter (ROCm/device-metrics-exporter) that
the fleet reads on an AMD Instinct host without DCGM: their names, units and labels as the
exporter's own source and metrics list have them.

VRAM in MB as amdsmi counts them (bytes / 1024², so MiB, DCGM's unit); power in W; activity in
% (0-100); temperatures in °C. MI3xx boards give the junction temperature and the package
power; MI2xx boards the edge temperature and the average package power instead; both give
gpu_power_usage.

Labels on every GPU series by default: gpu_id (the GPU's index), card_model, serial_number,
hostname, gpu_partition_id, the partition types and deployment_mode; gpu_uuid and card_series
only where the exporter's config adds them.
"""

from __future__ import annotations

USED_VRAM = "gpu_used_vram"  # MiB
FREE_VRAM = "gpu_free_vram"  # MiB (the exporter's total − used)
TOTAL_VRAM = "gpu_total_vram"  # MiB
GFX_ACTIVITY = "gpu_gfx_activity"  # %
JUNCTION_TEMPERATURE = "gpu_junction_temperature"  # °C, MI3xx
EDGE_TEMPERATURE = "gpu_edge_temperature"  # °C, MI2xx
PACKAGE_POWER = "gpu_package_power"  # W, MI3xx
POWER_USAGE = "gpu_power_usage"  # W
AVERAGE_PACKAGE_POWER = "gpu_average_package_power"  # W, MI2xx

FAMILIES = (
    USED_VRAM,
    FREE_VRAM,
    TOTAL_VRAM,
    GFX_ACTIVITY,
    JUNCTION_TEMPERATURE,
    EDGE_TEMPERATURE,
    PACKAGE_POWER,
    POWER_USAGE,
    AVERAGE_PACKAGE_POWER,
)
# The first of each that a GPU has: kvtop's own AMD reader prefers the hotspot temperature and
# the socket power alike.
TEMPERATURES = (JUNCTION_TEMPERATURE, EDGE_TEMPERATURE)
POWERS = (PACKAGE_POWER, POWER_USAGE, AVERAGE_PACKAGE_POWER)

INDEX_LABEL = "gpu_id"
UUID_LABEL = "gpu_uuid"
HOST_LABELS = ("hostname",)
# The card's name: card_series ("AMD Instinct MI300X OAM") where configured, else card_model
# (a board part number such as 102-G30211-0C on Instinct cards).
NAME_LABELS = ("card_series", "card_model")
