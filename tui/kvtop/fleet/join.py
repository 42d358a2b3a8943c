"""Prometheus' answers → the fleet (tui/kvtop/fleet/model.py). Pure: no I/O; the queries that feed
it are in tui/kvtop/fleet/reader.py, and docs/fleet-prometheus.md says what comes from where.

Joins:
- host: the `host` target label, else (DCGM, AMD's device metrics exporter) its
  `Hostname`/`hostname` label, else the host part of `instance`;
- a GPU: kvtop's `uuid` = DCGM's `UUID` (AMD's `gpu_uuid`), else the same `gpu` index (AMD's
  `gpu_id`);
- a deployment: hosts whose kvtop_info has the same model and dist_init_addr with nnodes > 1
  (ordered by node_rank); every other host is a deployment of its own;
- a target is stale when its `up` sample is older than STALE_AFTER_INTERVALS scrape intervals
  (after a Prometheus restart a gone target's series linger for the 5-minute lookback).
A number no exporter gave stays None (never 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kvtop.export import families as ff
from kvtop.fleet import amd_families as amd
from kvtop.fleet.model import (
    AMD,
    DCGM,
    KVTOP,
    NODE,
    SGLANG,
    Deployment,
    Fleet,
    FleetGpu,
    FleetHost,
    FleetKv,
    TargetState,
)

MIB = 1024**2
# One series of an instant query: its labels and its value.
Row = tuple[Mapping[str, str], float]
# A target's `up` older than this many scrape intervals is stale (none known: the default).
STALE_AFTER_INTERVALS = 3
DEFAULT_STALE_AFTER_S = 60.0
# The label the SGLang query puts on each aggregate (which gauge it is).
WHAT = "kvtop_what"
SGLANG_WHATS = ("token_usage", "used_tokens", "pool_tokens", "running", "queued", "throughput")


@dataclass(frozen=True, slots=True)
class Readings:
    """One refresh's answers, as plain rows (tui/kvtop/fleet/reader.py asks for them)."""

    taken_at: float
    prometheus_url: str
    selector: str | None = None
    prometheus_version: str | None = None
    selected: tuple[Row, ...] = ()  # up{selector}: the hosts in the fleet (all without one)
    up: tuple[Row, ...] = ()
    up_age: tuple[Row, ...] = ()  # time() - timestamp(up)
    last_up_age: tuple[Row, ...] = ()  # seconds since each target last had up == 1 (5 min)
    targets: tuple[Mapping, ...] | None = None  # /api/v1/targets activeTargets, if it answered
    kvtop: tuple[Row, ...] = ()  # kvtop's families (with __name__), kvtop_info excepted
    info: tuple[Row, ...] = ()  # last_over_time(kvtop_info[5m])
    dcgm: tuple[Row, ...] = ()  # with __name__
    amd: tuple[Row, ...] = ()  # AMD's device metrics exporter, with __name__
    sglang: tuple[Row, ...] = ()  # aggregates by host, instance, model_name, engine_type, WHAT
    node: tuple[Row, ...] = ()  # with __name__
    warnings: tuple[str, ...] = ()
    problem: str | None = None


def instance_host(instance: str) -> str:
    """`gpu-01:9400` → `gpu-01`; `[::1]:9400` → `::1`."""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    head, sep, port = instance.rpartition(":")
    return head if sep and port.isdigit() else instance


def host_of(
    labels: Mapping[str, str], *, dcgm: bool = False, amd_exporter: bool = False
) -> str | None:
    if labels.get("host"):
        return labels["host"]
    if dcgm or amd_exporter:
        for name in ff.DCGM_HOST_LABELS if dcgm else amd.HOST_LABELS:
            if labels.get(name):
                return labels[name]
    instance = labels.get("instance")
    return instance_host(instance) if instance else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# --- targets -------------------------------------------------------------------------------


def _evidence(r: Readings) -> dict[str, str]:
    """instance → the exporter its series show it is."""
    seen: dict[str, str] = {}
    for rows, exporter in ((r.kvtop, KVTOP), (r.info, KVTOP), (r.dcgm, DCGM), (r.amd, AMD)):
        for labels, _ in rows:
            seen.setdefault(labels.get("instance", ""), exporter)
    for rows, exporter in ((r.sglang, SGLANG), (r.node, NODE)):
        for labels, _ in rows:
            seen.setdefault(labels.get("instance", ""), exporter)
    return seen


def exporter_of(job: str, instance: str, evidence: Mapping[str, str]) -> str:
    if instance in evidence:
        return evidence[instance]
    lowered = job.lower()
    for name in (KVTOP, DCGM, SGLANG):
        if name in lowered:
            return name
    if "device-metrics" in lowered or "device_metrics" in lowered:
        return AMD
    return NODE if "node" in lowered else job


def _duration_s(text: object) -> float | None:
    """Prometheus' scrapeInterval ("15s", "1m", "1m30s") in seconds."""
    if not isinstance(text, str) or not text:
        return None
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        if text[i].isdigit() or text[i] == ".":
            number += text[i]
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else text[i]
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number, i = "", i + len(unit)
    return total if not number else None


@dataclass(frozen=True, slots=True)
class _TargetInfo:
    error: str | None
    interval_s: float | None


def _target_infos(targets: Iterable[Mapping] | None) -> dict[tuple[str, str], _TargetInfo]:
    out = {}
    for t in targets or ():
        labels = t.get("labels") or {}
        key = (labels.get("job", ""), labels.get("instance", ""))
        error = t.get("lastError") or None
        out[key] = _TargetInfo(error, _duration_s(t.get("scrapeInterval")))
    return out


def _stale_after_s(infos: Mapping[tuple[str, str], _TargetInfo]) -> float:
    intervals = [i.interval_s for i in infos.values() if i.interval_s]
    if not intervals:
        return DEFAULT_STALE_AFTER_S
    return STALE_AFTER_INTERVALS * max(intervals)


def _key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("job", ""), labels.get("instance", "")


def host_targets(r: Readings) -> dict[str, list[TargetState]]:
    evidence = _evidence(r)
    infos = _target_infos(r.targets)
    stale_after_s = _stale_after_s(infos)
    ages = {_key(labels): value for labels, value in r.up_age}
    out: dict[str, list[TargetState]] = {}
    for labels, value in r.up:
        host = host_of(labels)
        if host is None:
            continue
        key = _key(labels)
        age = _finite(ages.get(key, math.nan))
        info = infos.get(key)
        fresh = age is None or age <= stale_after_s
        error = info.error if info else None
        if not fresh and error is None:
            error = f"no scrape for {age:.0f} s (target gone from Prometheus' configuration?)"
        state = TargetState(
            exporter=exporter_of(key[0], key[1], evidence),
            instance=key[1],
            up=value == 1 and fresh,
            last_scrape_age_s=age,
            error=error if value != 1 or not fresh else None,
        )
        out.setdefault(host, []).append(state)
    return out


# --- GPUs ----------------------------------------------------------------------------------


@dataclass
class _Gpu:
    index: int
    uuid: str | None = None
    name: str | None = None
    total: float | None = None
    free: float | None = None
    segments: dict[str, float] = field(default_factory=dict)
    reserve: float | None = None
    headroom: float | None = None
    ranks: set[str] = field(default_factory=set)
    dcgm: dict[str, float] = field(default_factory=dict)  # DCGM family → value
    amd: dict[str, float] = field(default_factory=dict)  # AMD exporter family → value
    nvml: dict[str, float] = field(default_factory=dict)  # kvtop's NVML family → value
    nvml_name: str | None = None  # kvtop_gpu_info{name}
    amd_name: str | None = None  # AMD's card_series, else card_model
    up: float | None = None  # kvtop_gpu_up


def _kvtop_gpu(gpus: dict[str, _Gpu], labels: Mapping[str, str]) -> _Gpu | None:
    index = _int(labels.get("gpu"))
    if index is None:
        return None
    uuid = labels.get("uuid") or None
    key = uuid or f"#{index}"
    gpu = gpus.setdefault(key, _Gpu(index, uuid))
    # a GPU shared by several ranks: rank="0,1" (the exporter's headroom)
    gpu.ranks.update(r for r in labels.get("rank", "").split(",") if r)
    return gpu


def _apply_kvtop_gpu(gpu: _Gpu, name: str, labels: Mapping[str, str], value: float) -> None:
    if name == ff.GPU_MEMORY and labels.get("segment"):
        gpu.segments[labels["segment"]] = value
        if labels["segment"] == "free":
            gpu.free = value
    elif name == ff.GPU_TOTAL:
        gpu.total = value
    elif name == ff.GPU_RESERVE:
        gpu.reserve = value
    elif name == ff.KV_HEADROOM:
        gpu.headroom = value if gpu.headroom is None else min(gpu.headroom, value)
    elif name == ff.GPU_UP:
        gpu.up = value
    elif name in _NVML and math.isfinite(value):
        gpu.nvml[name] = value
    elif name == ff.GPU_INFO and labels.get("name"):
        gpu.nvml_name = labels["name"]


def _gpu_for(gpus: dict[str, _Gpu], by_index: dict[int, str], index: int, uuid: str | None) -> _Gpu:
    """The GPU with this UUID, else the one at this index (when neither has a UUID to say
    otherwise: AMD's exporter sends none by default), else a new one."""
    key = uuid if uuid in gpus else None
    if key is None and index in by_index:
        known = gpus[by_index[index]].uuid
        key = by_index[index] if uuid is None or known in (None, uuid) else None
    if key is None:
        key = uuid or f"#{index}"
        gpus[key] = _Gpu(index, uuid)
        by_index.setdefault(index, key)
    gpu = gpus[key]
    gpu.uuid = gpu.uuid or uuid
    return gpu


def _merge_dcgm(gpus: dict[str, _Gpu], rows: Iterable[Row]) -> None:
    by_index = {g.index: key for key, g in gpus.items()}
    for labels, value in rows:
        index = _int(labels.get("gpu"))
        if index is None:
            continue
        uuid = labels.get("UUID") or labels.get("uuid") or None
        gpu = _gpu_for(gpus, by_index, index, uuid)
        gpu.name = gpu.name or labels.get("modelName") or None
        gpu.dcgm[labels.get("__name__", "")] = value


def _merge_amd(gpus: dict[str, _Gpu], rows: Iterable[Row]) -> None:
    """AMD's device metrics exporter: `gpu_id` is the index, `gpu_uuid` (where the exporter's
    config adds it) the UUID; a non-finite reading is left out, as no reading."""
    by_index = {g.index: key for key, g in gpus.items()}
    for labels, value in rows:
        index = _int(labels.get(amd.INDEX_LABEL))
        if index is None or not math.isfinite(value):
            continue
        gpu = _gpu_for(gpus, by_index, index, labels.get(amd.UUID_LABEL) or None)
        names = (labels.get(n) for n in amd.NAME_LABELS)
        gpu.amd_name = gpu.amd_name or next((n for n in names if n), None)
        gpu.amd[labels.get("__name__", "")] = value


def _rank_key(rank: str) -> tuple:
    """ "TP2" before "TP10": the number in the name compared as a number."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", rank))


def _readings_from(g: _Gpu) -> str | None:
    """Whose used/free memory, utilisation, temperature and power the GPU shows: DCGM's where
    the host has DCGM (what its other dashboards already show), else AMD's device metrics
    exporter's, else kvtop's own readings."""
    if g.dcgm:
        return DCGM
    if g.amd:
        return AMD
    return KVTOP if g.nvml else None


def _first(readings: Mapping[str, float], names: Iterable[str]) -> float | None:
    return next((readings[n] for n in names if n in readings), None)


def _reading(
    g: _Gpu, dcgm: str, amd_names: tuple[str, ...], kvtop: str, scale: float = 1.0
) -> float | None:
    """DCGM's reading, else AMD's exporter's (in DCGM's unit already), else kvtop's own NVML
    family in DCGM's unit (a utilisation ratio × 100 is DCGM's percent)."""
    if dcgm in g.dcgm:
        return g.dcgm[dcgm]
    if (value := _first(g.amd, amd_names)) is not None:
        return value
    value = g.nvml.get(kvtop)
    return None if value is None else value * scale


def _exporter_memory_mib(g: _Gpu) -> tuple[float, float | None, float] | None:
    """(used, free, total) in MiB: DCGM's (used with its reserve), else AMD's exporter's."""
    used, free = g.dcgm.get(ff.DCGM_FB_USED), g.dcgm.get(ff.DCGM_FB_FREE)
    if used is not None and free is not None:
        reserved = g.dcgm.get(ff.DCGM_FB_RESERVED, 0.0)
        return used + reserved, free, used + free + reserved
    used, total = g.amd.get(amd.USED_VRAM), g.amd.get(amd.TOTAL_VRAM)
    free = g.amd.get(amd.FREE_VRAM)
    if used is not None and total is not None:
        return used, free if free is not None else total - used, total
    if used is not None and free is not None:
        return used, free, used + free
    return None


def _fleet_gpu(g: _Gpu) -> FleetGpu:
    total, free, used = g.total, g.free, None
    free_mib = g.dcgm.get(ff.DCGM_FB_FREE, g.amd.get(amd.FREE_VRAM))
    if (memory := _exporter_memory_mib(g)) is not None:
        used_mib, free_mib, total_mib = memory
        total = total if total is not None else total_mib * MIB
        used = used_mib * MIB
    if free is None and free_mib is not None:
        free = free_mib * MIB
    if used is None:
        used = g.nvml.get(ff.GPU_USED)
    if used is None and total is not None and free is not None:
        used = total - free
    return FleetGpu(
        index=g.index,
        uuid=g.uuid,
        name=g.name or g.amd_name or g.nvml_name,
        total_bytes=total,
        used_bytes=used,
        free_bytes=free,
        segments_bytes={s: g.segments[s] for s in ff.SEGMENTS if s in g.segments},
        reserve_bytes=g.reserve,
        headroom_bytes=g.headroom,
        ranks=tuple(sorted(g.ranks, key=_rank_key)),
        utilization_pct=_reading(g, ff.DCGM_GPU_UTIL, (amd.GFX_ACTIVITY,), ff.GPU_UTILIZATION, 100),
        temperature_c=_reading(g, ff.DCGM_GPU_TEMP, amd.TEMPERATURES, ff.GPU_TEMPERATURE),
        power_w=_reading(g, ff.DCGM_POWER, amd.POWERS, ff.GPU_POWER),
        power_limit_w=g.nvml.get(ff.GPU_POWER_LIMIT),
        lost=g.up == 0,
        readings_from=_readings_from(g),
    )


# --- one host ------------------------------------------------------------------------------

# kvtop's own NVML readings of a GPU (the fleet's numbers on a host without DCGM).
_NVML = (ff.GPU_USED, ff.GPU_TEMPERATURE, ff.GPU_POWER, ff.GPU_POWER_LIMIT, ff.GPU_UTILIZATION)
_PER_GPU = (
    ff.GPU_MEMORY,
    ff.GPU_TOTAL,
    ff.GPU_RESERVE,
    ff.KV_HEADROOM,
    ff.GPU_UP,
    ff.GPU_INFO,
    *_NVML,
)


@dataclass
class _Host:
    name: str
    info: Mapping[str, str] | None = None
    state: str | None = None
    restarts: int | None = None
    gpus: dict[str, _Gpu] = field(default_factory=dict)
    dcgm: list[Row] = field(default_factory=list)
    amd: list[Row] = field(default_factory=list)
    pool: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)
    sources_up: dict[str, bool] = field(default_factory=dict)
    sources_age: dict[str, float] = field(default_factory=dict)
    mismatches: set[str] = field(default_factory=set)
    verdict: str | None = None
    alerts: set[tuple[str, str, str]] = field(default_factory=set)
    phases: list[tuple[str, str, str, float]] = field(default_factory=list)
    log_headroom: tuple[float, str] | None = None  # (bytes, rank): headroom without a GPU
    sglang: dict[str, list[float]] = field(default_factory=dict)
    sglang_models: set[str] = field(default_factory=set)
    engine_types: set[str] = field(default_factory=set)
    node: dict[str, float] = field(default_factory=dict)


def _apply_kvtop(h: _Host, labels: Mapping[str, str], value: float) -> None:
    name = labels.get("__name__", "")
    if name == ff.KV_HEADROOM and not labels.get("gpu"):
        h.log_headroom = (value, labels.get("rank", ""))
    elif name in _PER_GPU:
        gpu = _kvtop_gpu(h.gpus, labels)
        if gpu is not None:
            _apply_kvtop_gpu(gpu, name, labels, value)
    elif name == ff.STARTUP_STATE and value == 1:
        h.state = labels.get("state") or None
    elif name == ff.RESTARTS and math.isfinite(value):
        h.restarts = int(value)
    elif name == ff.KV_POOL_TOKENS:
        h.pool.append(value)
    elif name == ff.KV_POOL_PREDICTED_TOKENS:
        h.predicted.append(value)
    elif name == ff.SOURCE_UP and labels.get("source"):
        h.sources_up[labels["source"]] = value == 1
    elif name == ff.SOURCE_AGE and labels.get("source"):
        h.sources_age[labels["source"]] = value
    elif name == ff.MISMATCH and value == 1 and labels.get("field"):
        h.mismatches.add(labels["field"])
    elif name == ff.VERDICT and value == 1 and labels.get("level"):
        h.verdict = labels["level"]
    elif name == ff.ALERT and value == 1 and labels.get("alert"):
        key = (labels["alert"], labels.get("severity", ""), labels.get("subject", ""))
        h.alerts.add(key)
    elif name == ff.STARTUP_PHASE_SECONDS:
        key = (labels.get("rank", ""), labels.get("model", ""), labels.get("phase", ""))
        h.phases.append((*key, value))


def _kv(h: _Host) -> FleetKv:
    s = h.sglang

    def largest(what: str) -> float | None:
        values = [v for v in s.get(what, ()) if math.isfinite(v)]
        return max(values) if values else None

    def total(what: str) -> float | None:
        values = [v for v in s.get(what, ()) if math.isfinite(v)]
        return sum(values) if values else None

    pool = max(h.pool) if h.pool else total("pool_tokens")
    return FleetKv(
        token_usage=largest("token_usage"),
        used_tokens=total("used_tokens"),
        pool_tokens=pool,
        predicted_tokens=max(h.predicted) if h.predicted else None,
        running_reqs=total("running"),
        queued_reqs=total("queued"),
        gen_throughput=total("throughput"),
        host_ram_total_bytes=h.node.get(ff.NODE_MEM_TOTAL),
        host_ram_available_bytes=h.node.get(ff.NODE_MEM_AVAILABLE),
    )


def _disaggregation(h: _Host) -> str | None:
    if h.info is not None:
        return h.info.get("disaggregation_mode") or None
    roles = h.engine_types - {"unified"}
    return ",".join(sorted(roles)) if roles else None


def _fleet_host(h: _Host, targets: list[TargetState], last_seen_s: float | None) -> FleetHost:
    _merge_dcgm(h.gpus, h.dcgm)
    _merge_amd(h.gpus, h.amd)
    info = h.info or {}
    model = info.get("model") or (",".join(sorted(h.sglang_models)) or None)
    sources = {name: (up, h.sources_age.get(name)) for name, up in sorted(h.sources_up.items())}
    gpus = sorted(h.gpus.values(), key=lambda g: (g.index, g.uuid or ""))
    up = any(t.up for t in targets)
    return FleetHost(
        host=h.name,
        targets=tuple(sorted(targets, key=lambda t: (t.exporter, t.instance))),
        state=h.state,
        model=model,
        sglang_version=info.get("sglang_version") or None,
        tp=_int(info.get("tp")),
        dp=_int(info.get("dp")),
        pp=_int(info.get("pp")),
        nnodes=_int(info.get("nnodes")),
        node_rank=_int(info.get("node_rank")),
        disaggregation_mode=_disaggregation(h),
        dist_init_addr=info.get("dist_init_addr") or None,
        hostname=info.get("hostname") or None,
        restarts=h.restarts,
        gpus=tuple(_fleet_gpu(g) for g in gpus),
        kv=_kv(h),
        sources=sources,
        mismatches=tuple(sorted(h.mismatches)),
        verdict=h.verdict,
        kvtop_alerts=tuple(sorted(h.alerts)),
        phases=tuple(sorted(h.phases)),
        log_headroom_bytes=h.log_headroom[0] if h.log_headroom else None,
        log_headroom_rank=(h.log_headroom[1] or None) if h.log_headroom else None,
        last_seen_age_s=None if up else last_seen_s,
    )


# --- the fleet -----------------------------------------------------------------------------


def _collect(r: Readings) -> dict[str, _Host]:
    hosts: dict[str, _Host] = {}

    def host(
        labels: Mapping[str, str], *, dcgm: bool = False, amd_exporter: bool = False
    ) -> _Host | None:
        name = host_of(labels, dcgm=dcgm, amd_exporter=amd_exporter)
        return None if name is None else hosts.setdefault(name, _Host(name))

    for labels, _ in sorted(r.info, key=lambda row: row[0].get("instance", "")):
        if (h := host(labels)) is not None and h.info is None:
            h.info = labels
    for labels, value in r.kvtop:
        if (h := host(labels)) is not None:
            _apply_kvtop(h, labels, value)
    for row in r.dcgm:
        if (h := host(row[0], dcgm=True)) is not None:
            h.dcgm.append(row)
    for row in r.amd:
        if (h := host(row[0], amd_exporter=True)) is not None:
            h.amd.append(row)
    for labels, value in r.sglang:
        if (h := host(labels)) is not None and labels.get(WHAT) in SGLANG_WHATS:
            h.sglang.setdefault(labels[WHAT], []).append(value)
            if labels.get("model_name"):
                h.sglang_models.add(labels["model_name"])
            if labels.get("engine_type"):
                h.engine_types.add(labels["engine_type"])
    for labels, value in r.node:
        if (h := host(labels)) is not None:
            h.node[labels.get("__name__", "")] = value
    return hosts


def _last_seen(r: Readings) -> dict[str, float]:
    """host → seconds since one of its targets was last up: from the down targets' raw `up`
    samples, and from the `up == 1` samples that are stale (a gone target after a restart)."""
    out: dict[str, float] = {}
    stale_after_s = _stale_after_s(_target_infos(r.targets))
    ages = {_key(labels): value for labels, value in r.up_age}
    stale_up = [
        (labels, ages[_key(labels)])
        for labels, value in r.up
        if value == 1 and ages.get(_key(labels), 0.0) > stale_after_s
    ]
    for labels, value in (*r.last_up_age, *stale_up):
        host = host_of(labels)
        if host is not None and math.isfinite(value):
            out[host] = min(value, out.get(host, math.inf))
    return out


def deployment_key(h: FleetHost) -> str:
    if (h.nnodes or 1) > 1 and h.dist_init_addr:
        return f"{h.model or '?'}@{h.dist_init_addr}"
    return h.host


def deployments(hosts: Iterable[FleetHost]) -> tuple[Deployment, ...]:
    groups: dict[str, list[FleetHost]] = {}
    for h in hosts:
        groups.setdefault(deployment_key(h), []).append(h)
    out = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda h: (h.node_rank or 0, h.host))
        lead = next((h for h in members if h.node_rank in (0, None)), members[0])
        out.append(
            Deployment(
                key=key,
                model=lead.model,
                hosts=tuple(members),
                tp=lead.tp,
                dp=lead.dp,
                pp=lead.pp,
                nnodes=lead.nnodes,
                disaggregation_mode=lead.disaggregation_mode,
            )
        )
    return tuple(out)


def _problem(r: Readings, hosts: Mapping[str, object]) -> str | None:
    if r.problem:
        return r.problem
    if r.selector and not r.selected:
        return (
            f"No target matches the selector {r.selector}; check its labels against "
            "Prometheus' targets page (/targets)."
        )
    if not hosts:
        return (
            "Prometheus has no kvtop, DCGM, SGLang or node exporter targets; check its "
            "scrape config (docs/fleet-prometheus.md)."
        )
    return None


def join(r: Readings) -> Fleet:
    """The fleet from one refresh's answers; the hosts the selector picked when there is one."""
    hosts = _collect(r)
    targets = host_targets(r)
    for name in targets:
        hosts.setdefault(name, _Host(name))
    if r.selector:
        picked = {host_of(labels) for labels, _ in r.selected}
        hosts = {name: h for name, h in hosts.items() if name in picked}
    last_seen = _last_seen(r)
    fleet_hosts = [
        _fleet_host(h, targets.get(name, []), last_seen.get(name)) for name, h in hosts.items()
    ]
    return Fleet(
        taken_at=r.taken_at,
        prometheus_url=r.prometheus_url,
        deployments=deployments(fleet_hosts),
        problem=_problem(r, hosts),
        prometheus_version=r.prometheus_version,
        selector=r.selector,
        warnings=r.warnings,
    )
