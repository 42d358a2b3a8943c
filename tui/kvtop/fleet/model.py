"""The fleet as `kvtop --prometheus` sees it: deployments, their hosts, each host's GPUs and KV.

Filled from a Prometheus server's answers (tui/kvtop/fleet/reader.py), shown by the fleet view
and written as JSON (schema kvtop-fleet/1). Pure data: numbers a host's exporters did not give
are None, never 0 (a host with only DCGM and SGLang metrics has no segments, no startup state).
Bytes for memory (Prometheus' base unit); the views turn them into GiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SCHEMA = "kvtop-fleet/1"
# The exporters a host can have, as the fleet view names them.
KVTOP, DCGM, SGLANG, NODE = "kvtop", "dcgm", "sglang", "node"
AMD = "amd"  # AMD's device metrics exporter (an AMD Instinct host's DCGM)
EXPORTERS = (KVTOP, DCGM, AMD, SGLANG, NODE)


@dataclass(frozen=True, slots=True)
class FleetGpu:
    index: int
    uuid: str | None = None
    name: str | None = None  # DCGM's modelName, else AMD's card name, else kvtop_gpu_info{name}
    total_bytes: float | None = None  # kvtop_gpu_total_bytes, else DCGM used + free + reserved
    # DCGM FB_USED (+ reserved), else kvtop_gpu_used_bytes, else total − free
    used_bytes: float | None = None
    free_bytes: float | None = None
    # kvtop_gpu_memory_bytes by segment (tui/kvtop/export/families.SEGMENTS); empty without kvtop.
    segments_bytes: Mapping[str, float] = field(default_factory=dict)
    reserve_bytes: float | None = None
    headroom_bytes: float | None = None  # kvtop_kv_headroom_bytes: free after startup
    ranks: tuple[str, ...] = ()
    # DCGM's GPU_UTIL, GPU_TEMP and POWER_USAGE, else AMD's gfx activity, junction (edge)
    # temperature and package power, else kvtop's own NVML families (a host without either);
    # the power limit from kvtop only (neither exporter's default families has it).
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    # kvtop_gpu_up 0: NVML on the host lost the GPU (its kvtop segments are then absent).
    lost: bool = False
    # The exporter its used/free memory, utilisation, temperature and power came from: DCGM,
    # else AMD's device metrics exporter, else kvtop's own readings (KVTOP); None: none had any.
    readings_from: str | None = None


@dataclass(frozen=True, slots=True)
class FleetKv:
    """The host's KV cache and load: SGLang's gauges (max over ranks for ratios, sums for
    requests) and kvtop's pool sizes; host RAM from the node exporter (HiCache)."""

    token_usage: float | None = None  # 0..1, sglang:token_usage
    used_tokens: float | None = None  # sglang:num_used_tokens
    pool_tokens: float | None = None  # kvtop_kv_pool_tokens, else sglang:max_total_num_tokens
    predicted_tokens: float | None = None  # kvtop_kv_pool_predicted_tokens
    running_reqs: float | None = None
    queued_reqs: float | None = None
    gen_throughput: float | None = None  # tokens/s
    host_ram_total_bytes: float | None = None
    host_ram_available_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class TargetState:
    """One scrape target of a host, as Prometheus last saw it."""

    exporter: str  # one of EXPORTERS (or the job's name for another job)
    instance: str
    up: bool
    last_scrape_age_s: float | None = None
    error: str | None = None  # Prometheus' lastError when down


@dataclass(frozen=True, slots=True)
class FleetHost:
    host: str  # the `host` target label (or what `instance` names)
    targets: tuple[TargetState, ...] = ()
    state: str | None = None  # kvtop_startup_state; None without a kvtop exporter
    model: str | None = None
    sglang_version: str | None = None
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    disaggregation_mode: str | None = None
    dist_init_addr: str | None = None
    hostname: str | None = None  # what kvtop on the host calls it
    restarts: int | None = None
    gpus: tuple[FleetGpu, ...] = ()
    kv: FleetKv = field(default_factory=FleetKv)
    # kvtop_source_up / kvtop_source_age_seconds: source -> (up, age_s)
    sources: Mapping[str, tuple[bool, float | None]] = field(default_factory=dict)
    mismatches: tuple[str, ...] = ()  # kvtop_mismatch{field} == 1
    # kvtop's own verdict on the host (kvtop_verdict{level} == 1) and its active alerts
    # (kvtop_alert{alert,severity,subject}); None / () from a kvtop without them.
    verdict: str | None = None
    kvtop_alerts: tuple[tuple[str, str, str], ...] = ()
    # kvtop_startup_phase_seconds: (rank, model, phase, seconds)
    phases: tuple[tuple[str, str, str, float], ...] = ()
    # kvtop_kv_headroom_bytes without a GPU (kvtop there reads no GPU: --no-gpus, NVML not
    # readable): what the log says stayed free on its reference rank (`log_headroom_rank`).
    log_headroom_bytes: float | None = None
    log_headroom_rank: str | None = None
    # Seconds since kvtop_info was last seen (None: seen in this refresh or never).
    last_seen_age_s: float | None = None

    @property
    def exporters(self) -> tuple[str, ...]:
        return tuple(e for e in EXPORTERS if any(t.exporter == e for t in self.targets))

    @property
    def up(self) -> bool:
        return any(t.up for t in self.targets)


@dataclass(frozen=True, slots=True)
class Deployment:
    """One server: a host's SGLang, or a multi-node one (same model and dist-init address,
    node_rank 0..N−1) with all its hosts, ordered by node_rank."""

    key: str
    model: str | None
    hosts: tuple[FleetHost, ...]
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    nnodes: int | None = None
    disaggregation_mode: str | None = None


@dataclass(frozen=True, slots=True)
class Fleet:
    taken_at: float
    prometheus_url: str
    deployments: tuple[Deployment, ...] = ()
    # Why the fleet is empty or partial, as a sentence with a next step (Prometheus down, slow,
    # refused the query, the selector matched nothing); None when the refresh went well.
    problem: str | None = None
    prometheus_version: str | None = None
    selector: str | None = None
    # Prometheus' warnings (partial data), as sent.
    warnings: tuple[str, ...] = ()

    @property
    def hosts(self) -> tuple[FleetHost, ...]:
        return tuple(h for d in self.deployments for h in d.hosts)
