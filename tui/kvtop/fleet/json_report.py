"""The JSON form of the fleet (schema kvtop-fleet/1): deployments[] with hosts[], each with
gpus[] and kv (docs/fleet.md lists every field).

GiB to 4 digits as in kvtop/1 (tui/kvtop/report/json_report.py); a number Prometheus did not give is
null, never 0. A GPU's `breakdown` uses the key names of kvtop/1's gpus[].breakdown.
"""

from __future__ import annotations

import math

from kvtop.export.families import SEGMENT_FIELDS
from kvtop.fleet.alerts import FleetAlerts, fleet_alerts
from kvtop.fleet.model import SCHEMA, Deployment, Fleet, FleetGpu, FleetHost, FleetKv
from kvtop.fleet.summary import (
    deployment_headroom,
    deployment_restarts,
    deployment_state,
    gb,
    gib,
    gpu_free_bytes,
    gpu_used_bytes,
    worst_headroom,
)
from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds

# kvtop/1's breakdown keys, one per exported segment (mamba_gib holds the Mamba state and the
# other caches beside the KV pool: the exporter sends them as one segment).
BREAKDOWN_KEYS = {name: fields[0] for name, fields in SEGMENT_FIELDS.items()}


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _int(value: float | None) -> int | None:
    return None if value is None or not math.isfinite(value) else round(value)


def finite(data: object) -> object:
    """`data` with every NaN or ±Inf as null: JSON has no spelling for them (Python's
    `Infinity` is not JSON), and Prometheus may hold them in any gauge."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def alert_json(alert: Alert) -> dict[str, object]:
    return {"level": alert.level, "kind": alert.kind, "subject": alert.subject, "text": alert.text}


def _breakdown_json(gpu: FleetGpu) -> dict[str, object]:
    data: dict[str, object] = {"total_gib": _r(gib(gpu.total_bytes))}
    for segment, key in BREAKDOWN_KEYS.items():
        data[key] = _r(gib(gpu.segments_bytes.get(segment)))
    data["reserve_gib"] = _r(gib(gpu.reserve_bytes))
    return data


def gpu_json(gpu: FleetGpu) -> dict[str, object]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        # "lost": kvtop on the host lost it through NVML (kvtop_gpu_up 0), as kvtop/1's status.
        "status": GpuStatus.LOST if gpu.lost else GpuStatus.OK,
        "total_gib": _r(gib(gpu.total_bytes)),
        "used_gib": _r(gib(gpu_used_bytes(gpu))),
        "free_gib": _r(gib(gpu_free_bytes(gpu))),
        "reserve_gib": _r(gib(gpu.reserve_bytes)),
        "headroom_gib": _r(gib(gpu.headroom_bytes)),
        "utilization_pct": _r(gpu.utilization_pct, 1),
        "temperature_c": _r(gpu.temperature_c, 1),
        "power_w": _r(gpu.power_w, 1),
        "power_limit_w": _r(gpu.power_limit_w, 1),
        "ranks": list(gpu.ranks),
        # Whose used/free, utilisation, temperature and power these are: "dcgm", "amd" (AMD's
        # device metrics exporter), "kvtop" (its own readings), null (none).
        "readings_from": gpu.readings_from,
        # Without a kvtop exporter every segment is null (DCGM and AMD's exporter give used and
        # free only).
        "breakdown": _breakdown_json(gpu),
    }


def kv_json(kv: FleetKv) -> dict[str, object]:
    return {
        "token_usage": _r(kv.token_usage, 6),
        "used_tokens": _int(kv.used_tokens),
        "pool_tokens": _int(kv.pool_tokens),
        "predicted_tokens": _int(kv.predicted_tokens),
        "running_reqs": _int(kv.running_reqs),
        "queued_reqs": _int(kv.queued_reqs),
        "gen_throughput": _r(kv.gen_throughput, 2),
        # Host RAM (node exporter) in decimal GB, as kvtop/1's host.total_gb.
        "host_ram_total_gb": _r(gb(kv.host_ram_total_bytes), 2),
        "host_ram_available_gb": _r(gb(kv.host_ram_available_bytes), 2),
    }


def host_json(deployment: Deployment, host: FleetHost, found: FleetAlerts) -> dict[str, object]:
    room = worst_headroom(host)
    return {
        "host": host.host,
        "hostname": host.hostname,
        "node_rank": host.node_rank,
        "state": host.state,
        "model": host.model,
        "sglang_version": host.sglang_version,
        "tp": host.tp,
        "dp": host.dp,
        "pp": host.pp,
        "nnodes": host.nnodes,
        "disaggregation_mode": host.disaggregation_mode,
        "dist_init_addr": host.dist_init_addr,
        "restarts": host.restarts,
        "exporters": list(host.exporters),
        "targets": [
            {
                "exporter": t.exporter,
                "instance": t.instance,
                "up": t.up,
                "last_scrape_age_s": _r(t.last_scrape_age_s, 1),
                "error": t.error,
            }
            for t in host.targets
        ],
        # kvtop's own sources on the host (kvtop_source_up / kvtop_source_age_seconds).
        "sources": [
            {"name": name, "up": up, "age_s": _r(age, 1)}
            for name, (up, age) in sorted(host.sources.items())
        ],
        "mismatches": list(host.mismatches),
        # kvtop's own verdict there (kvtop_verdict): ok, warning, critical, unknown; null
        # without it (the fleet then judges what Prometheus holds).
        "kvtop_verdict": host.verdict,
        "phases": [
            {"rank": rank, "model": model, "phase": phase, "seconds": _r(seconds, 3)}
            for rank, model, phase, seconds in host.phases
        ],
        "last_seen_age_s": _r(host.last_seen_age_s, 1),
        "worst_headroom_gib": None if room is None else _r(room.gib),
        "level": found.host_level(deployment, host),
        "alerts": [alert_json(a) for a in found.of_host(deployment, host)],
        "gpus": [gpu_json(g) for g in sorted(host.gpus, key=lambda g: g.index)],
        "kv": kv_json(host.kv),
    }


def deployment_json(deployment: Deployment, found: FleetAlerts) -> dict[str, object]:
    room = deployment_headroom(deployment)
    return {
        "key": deployment.key,
        "model": deployment.model,
        "tp": deployment.tp,
        "dp": deployment.dp,
        "pp": deployment.pp,
        "nnodes": deployment.nnodes,
        "disaggregation_mode": deployment.disaggregation_mode,
        "state": deployment_state(deployment),
        "restarts": deployment_restarts(deployment),
        "worst_headroom_gib": None if room is None else _r(room[1].gib),
        "level": found.deployment_level(deployment),
        # The deployment's own alerts (nodes missing); each host lists its own.
        "alerts": [alert_json(a) for a in found.deployments.get(deployment.key, ())],
        "hosts": [host_json(deployment, h, found) for h in deployment.hosts],
    }


def fleet_json(fleet: Fleet, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, object]:
    found = fleet_alerts(fleet, thresholds)
    report = {
        "schema": SCHEMA,
        "taken_at": _r(fleet.taken_at, 3),
        "prometheus": {
            "url": fleet.prometheus_url,
            "version": fleet.prometheus_version,
            "selector": fleet.selector,
            "problem": fleet.problem,
            "warnings": list(fleet.warnings),
        },
        # "unknown" when Prometheus gave no fleet (its problem above): nothing was judged, so
        # nothing may read as ok (as --check's UNKNOWN).
        "level": Level.UNKNOWN if fleet.problem and not fleet.deployments else found.level,
        "deployments": [deployment_json(d, found) for d in fleet.deployments],
    }
    return finite(report)  # type: ignore[return-value]
