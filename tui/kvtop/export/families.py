"""The names `kvtop --export` publishes and `kvtop --prometheus` reads back: one list for both.

A contract with users' dashboards and alert rules (docs/exporter.md): families and label values are
added, never renamed. Base units (bytes, seconds); label values are bounded enums or stable ids.
"""

from __future__ import annotations

# kvtop_gpu_memory_bytes{gpu,uuid,segment}: the stacked bar's segments; per GPU they add up to
# kvtop_gpu_total_bytes (a segment not known on a GPU is left out, never sent as 0).
SEGMENTS = (
    "baseline",
    "weights",
    "kv_cache",
    "draft_weights",
    "draft_kv",
    "mamba",
    "cuda_graphs",
    "runtime",
    "other_processes",
    "free",
)
# The GpuMemory field behind each segment (tui/kvtop/model/memory/gpu_memory.py). "mamba" carries the Mamba
# state and the other caches beside the KV pool (mamba_gib + other_caches_gib).
SEGMENT_FIELDS = {
    "baseline": ("baseline_gib",),
    "weights": ("weights_gib",),
    "kv_cache": ("kv_cache_gib",),
    "draft_weights": ("draft_weights_gib",),
    "draft_kv": ("draft_kv_gib",),
    "mamba": ("mamba_gib", "other_caches_gib"),
    "cuda_graphs": ("graphs_gib",),
    "runtime": ("runtime_gib",),
    "other_processes": ("other_processes_gib",),
    "free": ("free_gib",),
}

# kvtop_startup_state{state}: 1 for the current state, 0 for the others.
STATES = ("waiting", "starting", "ready", "failed", "stopped")
# kvtop_source_up{source} / kvtop_source_age_seconds{source}.
SOURCES = ("gpus", "log", "metrics")

GPU_MEMORY = "kvtop_gpu_memory_bytes"
GPU_RESERVE = "kvtop_gpu_reserve_bytes"
GPU_TOTAL = "kvtop_gpu_total_bytes"
# NVML's own readings of each GPU, labelled {gpu,uuid} as the families above, so that a host
# without DCGM is complete: memory in use (total - free: NVML's used plus the driver's reserve,
# as the stacked bar counts it), temperature, power draw and its enforced limit, and the share
# of the last sample period a kernel ran (0-1, NVML's utilization.gpu / 100).
GPU_USED = "kvtop_gpu_used_bytes"
GPU_TEMPERATURE = "kvtop_gpu_temperature_celsius"
GPU_POWER = "kvtop_gpu_power_draw_watts"
GPU_POWER_LIMIT = "kvtop_gpu_power_limit_watts"
GPU_UTILIZATION = "kvtop_gpu_utilization_ratio"
# kvtop_gpu_info{gpu,uuid,name,pci_bus_id,vendor}: 1 per GPU NVML or AMD SMI names (the card's
# model, as DCGM's modelName label has it; vendor "nvidia" or "amd"), so the fleet can name a
# host's GPUs without DCGM.
GPU_INFO = "kvtop_gpu_info"
GPU_INFO_LABELS = ("name", "pci_bus_id", "vendor")
KV_POOL_TOKENS = "kvtop_kv_pool_tokens"
KV_POOL_PREDICTED_TOKENS = "kvtop_kv_pool_predicted_tokens"
KV_HEADROOM = "kvtop_kv_headroom_bytes"
# A hybrid model's recurrent-state (Mamba) pool in use, 0-1, from the same reading as the KV
# usage (SGLang's /metrics or the log's batch line); absent for a model without one.
STATE_POOL_USAGE = "kvtop_state_pool_usage_ratio"
# The KV pool's share holding radix-cached prefixes SGLang evicts on demand, 0-1, beside the
# used share (SGLang's sglang:kv_evictable_tokens over the pool, 0.5.12+).
KV_EVICTABLE = "kvtop_kv_evictable_ratio"
STARTUP_PHASE_SECONDS = "kvtop_startup_phase_seconds"
STARTUP_STATE = "kvtop_startup_state"
RESTARTS = "kvtop_restarts_total"
# Requests SGLang retracted while serving (the KV pool full at a decode step): a mirror of its
# sglang:num_retracted_requests_total, or the log's count where it has no such counter (it
# starts again at 0 when the server does); and retracted requests per minute over kvtop's
# window (Thresholds.retractions_window_s), the rate the retractions_frequent alert judges.
RETRACTED_REQUESTS = "kvtop_retracted_requests_total"
RETRACTIONS_PER_MINUTE = "kvtop_retractions_per_minute"
SOURCE_UP = "kvtop_source_up"
SOURCE_AGE = "kvtop_source_age_seconds"
MISMATCH = "kvtop_mismatch"
# kvtop_alert{alert,severity,subject}: 1 per active alert of the verdict (the alert's kind, its
# level, what it is about); kvtop_verdict{level}: 1 for the verdict's level, 0 for the others.
ALERT = "kvtop_alert"
ALERT_LABELS = ("alert", "severity", "subject")
VERDICT = "kvtop_verdict"
VERDICT_LEVELS = ("ok", "warning", "critical", "unknown")
INFO = "kvtop_info"
# kvtop_info's labels, in the order docs/exporter.md lists them; dist_init_addr joins a
# multi-node deployment's nodes (empty when the server runs on one node).
INFO_LABELS = (
    "sglang_version",
    "model",
    "tp",
    "dp",
    "pp",
    "nnodes",
    "node_rank",
    "disaggregation_mode",
    "hostname",
    "dist_init_addr",
)

# What the fleet view reads from the other exporters.
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"  # MiB
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # °C
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
DCGM_HOST_LABELS = ("Hostname", "hostname")  # every release up to 4.5.3 / main from 2026-05
NODE_MEM_TOTAL = "node_memory_MemTotal_bytes"
NODE_MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
# kvtop_gpu_up{gpu,uuid}: 1 while NVML reads the GPU, 0 when it lost it (its segments are then
# left out, never sent as 0).
GPU_UP = "kvtop_gpu_up"
