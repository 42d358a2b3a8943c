"""One host of the fleet as a Snapshot, so the single-host overview draws its GPUs (pure).

`kvtop --prometheus` opens a host's GPUs "with the same overview as the single-host view, fed
from Prometheus": this turns the FleetHost Prometheus gave into the Snapshot the overview
screen takes. What it has no source for stays unknown:
- each GPU's sample from the FleetGpu (bytes → GiB), its bar from kvtop's segments
  (tui/kvtop/export/families.SEGMENT_FIELDS; "mamba" holds the Mamba state and the other
  caches together); without a kvtop exporter only used and free are known, like a GPU with no
  log (a host with only DCGM or AMD's device metrics exporter shows used/free bars);
- no log: an empty analysis (nothing from the log is claimed);
- the KV numbers as a /metrics sample, so the KV panel shows usage, pool and load;
- host RAM from the node exporter; one source per scrape target (kvtop, dcgm, amd, sglang, node),
  so the status line's markers say where the numbers come from.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from kvtop.export.families import SEGMENT_FIELDS
from kvtop.fleet.alerts import host_alerts
from kvtop.fleet.model import EXPORTERS, FleetGpu, FleetHost, FleetKv
from kvtop.fleet.summary import GIB, gb, gpu_exporters_text, gpu_free_bytes, gpu_used_bytes
from kvtop.model.analysis import Analysis, analyse
from kvtop.model.memory.gpu_memory import GpuMemory, RankMapping
from kvtop.model.memory.gpu_reading import GpuSample, GpuStatus
from kvtop.model.snapshot import GpuView, HostMemory, Snapshot, SourceHealth, SourceState
from kvtop.model.status.judge import named_alerts
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds
from kvtop.model.verdict import Verdict
from kvtop.sglang.metrics import MetricsSample
from kvtop.sglang.start_state import READY
from kvtop.sglang.startup import StartupTracker

SOURCE = "prometheus"  # the analysis' source, and the rank mapping's word (RankMapping)
_NO_MEMORY = "memory"  # GpuSample.field_errors' name when Prometheus has no memory numbers


@cache
def no_log_analysis(ready: bool = False) -> Analysis:
    """The analysis of no log at all: nothing is claimed about the startup, except, for a host
    kvtop's exporter calls ready, that it is (so the GPU rows judge free memory after startup
    against the safe margin, as kvtop_kv_headroom_bytes does)."""
    analysis = analyse(StartupTracker(), SOURCE)
    if not ready:
        return analysis
    return replace(analysis, startup=replace(analysis.startup, state=READY))


def _gib(value: float | None) -> float | None:
    return None if value is None else round(value / GIB, 4)


def gpu_memory(gpu: FleetGpu) -> GpuMemory:
    """The stacked bar: kvtop's segments when it exports them, else in use and free."""
    total = _gib(gpu.total_bytes)
    if total is None:
        return GpuMemory(*(None,) * 12)
    seg = {name: _gib(value) for name, value in gpu.segments_bytes.items()}
    free = seg.get("free", _gib(gpu_free_bytes(gpu)))
    if not gpu.segments_bytes:
        used = _gib(gpu_used_bytes(gpu))
        return GpuMemory(total, *(None,) * 6, used, free, None, None, None)
    # Each segment into its GpuMemory field (the first of SEGMENT_FIELDS: "mamba" holds the
    # other caches too, so other_caches_gib stays unknown).
    fields = {
        SEGMENT_FIELDS[name][0]: value for name, value in seg.items() if name in SEGMENT_FIELDS
    }
    fields["free_gib"] = free
    reserve = _gib(gpu.reserve_bytes)
    return GpuMemory(
        total_gib=total,
        baseline_gib=fields.get("baseline_gib"),
        weights_gib=fields.get("weights_gib"),
        kv_cache_gib=fields.get("kv_cache_gib"),
        draft_weights_gib=fields.get("draft_weights_gib"),
        draft_kv_gib=fields.get("draft_kv_gib"),
        graphs_gib=fields.get("graphs_gib"),
        runtime_gib=fields.get("runtime_gib"),
        free_gib=free,
        reserve_gib=reserve,
        reserve_starts_at_gib=None if reserve is None else round(total - reserve, 4),
        other_processes_gib=fields.get("other_processes_gib"),
        mamba_gib=fields.get("mamba_gib"),
    )


def gpu_sample(gpu: FleetGpu) -> GpuSample:
    """NVML's reading as Prometheus has it; no memory numbers: an unreadable GPU ("error")."""
    total, free = _gib(gpu.total_bytes), _gib(gpu_free_bytes(gpu))
    used = _gib(gpu_used_bytes(gpu))
    if gpu.lost or total is None or free is None or used is None:
        known, total, used, free = False, 0.0, 0.0, 0.0  # zeros, as NVML's lost GPUs have
    else:
        known = True
    why = (
        "Prometheus has no memory numbers for this GPU "
        "(no DCGM, AMD device metrics or kvtop exporter sample)"
    )
    return GpuSample(
        index=gpu.index,
        name=gpu.name or "GPU",
        uuid=gpu.uuid or "",
        pci_bus_id="",
        total_gib=total,
        used_gib=used,
        free_gib=free,
        reserved_gib=None,
        utilization_pct=None if gpu.utilization_pct is None else round(gpu.utilization_pct),
        memory_utilization_pct=None,
        temperature_c=None if gpu.temperature_c is None else round(gpu.temperature_c),
        power_w=gpu.power_w,
        power_limit_w=gpu.power_limit_w,
        status=GpuStatus.LOST if gpu.lost else GpuStatus.OK if known else GpuStatus.ERROR,
        field_errors=() if known or gpu.lost else ((_NO_MEMORY, why),),
    )


def gpu_view(gpu: FleetGpu) -> GpuView:
    sample = gpu_sample(gpu)
    memory = gpu_memory(gpu) if sample.status == GpuStatus.OK else GpuMemory(*(None,) * 12)
    return GpuView(sample=sample, ranks=gpu.ranks, memory=memory, processes=())


# /metrics' names (tui/kvtop/sglang/metrics.py, without "sglang:") for the KV panel.
_KV_METRICS = (
    ("token_usage", "token_usage"),
    ("num_used_tokens", "used_tokens"),
    ("max_total_num_tokens", "pool_tokens"),
    ("num_running_reqs", "running_reqs"),
    ("num_queue_reqs", "queued_reqs"),
    ("gen_throughput", "gen_throughput"),
)


def kv_metrics(kv: FleetKv) -> MetricsSample | None:
    """The host's KV numbers as a scrape of /metrics (None when Prometheus has none)."""
    values = {name: getattr(kv, attr) for name, attr in _KV_METRICS}
    known = {name: float(v) for name, v in values.items() if v is not None and v == v}
    return MetricsSample(values=known, per_rank={}) if known else None


def host_memory(kv: FleetKv) -> HostMemory | None:
    total, available = gb(kv.host_ram_total_bytes), gb(kv.host_ram_available_bytes)
    if total is None or available is None:
        return None
    return HostMemory(
        total_gb=round(total, 2),
        used_gb=round(total - available, 2),
        available_gb=round(available, 2),
    )


def host_sources(host: FleetHost) -> tuple[SourceHealth, ...]:
    """One marker per exporter Prometheus scrapes for the host: ok when every target of it is
    up, else degraded with Prometheus' lastError."""
    found = []
    for exporter in (*EXPORTERS, *sorted({t.exporter for t in host.targets} - set(EXPORTERS))):
        targets = [t for t in host.targets if t.exporter == exporter]
        if not targets:
            continue
        down = [t for t in targets if not t.up]
        ages = [t.last_scrape_age_s for t in targets if t.last_scrape_age_s is not None]
        detail = None
        if down:
            detail = "; ".join(f"{t.instance}: {t.error or 'down'}" for t in down)
        found.append(
            SourceHealth(
                exporter,
                SourceState.DEGRADED if down else SourceState.OK,
                detail,
                max(ages) if ages else None,
            )
        )
    return tuple(found)


def _notes(host: FleetHost) -> tuple[str, ...]:
    notes = []
    if not any(t.exporter == "kvtop" for t in host.targets):
        source = gpu_exporters_text(host)
        notes.append(
            f"{host.host} has no kvtop exporter: only used and free memory are known"
            f"{f' ({source})' if source else ''}; run kvtop --export there for the breakdown."
        )
    if (host.node_rank or 0) >= 1 and host.kv.token_usage is None:
        notes.append(
            f"{host.host} is node {host.node_rank} of {host.nnodes or '?'}: SGLang serves its "
            "KV numbers (/metrics) on node 0 only; the fleet's deployment row shows them."
        )
    if host.mismatches:
        notes.append(
            f"kvtop on {host.host} sees its sources disagree about {', '.join(host.mismatches)}: "
            "run kvtop there to see how."
        )
    return tuple(notes)


def _local(alert: Alert, host: FleetHost) -> Alert:
    """The fleet's alert about `gpu-node-01 GPU 5` as the host's own view names it: `GPU 5`."""
    prefix = f"{host.host} "
    if alert.subject.startswith(prefix):
        return replace(alert, subject=alert.subject[len(prefix) :])
    return alert


def fleet_snapshot(
    host: FleetHost, taken_at: float, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> Snapshot:
    """The overview's Snapshot of one host of the fleet, as Prometheus had it at `taken_at`;
    its verdict is the fleet's for the host (tui/kvtop/fleet/alerts.host_alerts), its subjects as
    the host's own view names them (the GPU rows colour theirs)."""
    alerts = tuple(_local(a, host) for a in host_alerts(host, thresholds))
    gpus = tuple(gpu_view(g) for g in sorted(host.gpus, key=lambda g: g.index))
    return Snapshot(
        taken_at=taken_at,
        analysis=no_log_analysis(host.state == READY),
        gpus=gpus,
        rank_mapping=RankMapping.PROMETHEUS if any(g.ranks for g in gpus) else RankMapping.NONE,
        metrics=kv_metrics(host.kv),
        server_info=None,
        host=host_memory(host.kv),
        sources=host_sources(host),
        notes=_notes(host),
        verdict=Verdict(
            alerts[0].level if alerts else Level.OK,
            alerts,
            named_alerts(alerts, alerts[0].level) if alerts else "fine",
        ),
    )
