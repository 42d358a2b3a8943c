"""The latest Snapshot rendered into kvtop's metric families (tui/kvtop/export/families.py).

`SnapshotCollector.collect()` runs in the HTTP server's request thread on every scrape: it reads
one reference (`latest`, swapped whole by the session loop) and renders it, nothing else. The
numbers come from the model as the JSON report and `--check` have them (GiB × 2^30 for bytes);
what kvtop does not know is left out, never sent as 0 (docs/exporter.md says when each sample
is absent).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from datetime import datetime

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kvtop.export import families as ff
from kvtop.model.deployment_shape import deployment_shape
from kvtop.model.kv_usage import kv_now
from kvtop.model.memory.headroom import headrooms
from kvtop.model.snapshot import GpuView, Snapshot, SourceHealth, SourceState
from kvtop.model.status.identity import FIELDS, compared_fields
from kvtop.model.status.server_status import server_status
from kvtop.sglang.control_chars import make_visible

GIB = 2**30
# Snapshot.sources' names -> the exported `source` label (SOURCES).
SOURCE_LABELS = {"nvml": "gpus", "log": "log", "journal": "log", "metrics": "metrics"}
GPU_LABELS = ("gpu", "uuid")

# name -> (type, help). Every family the collector emits, in the order it emits them.
FAMILIES: dict[str, tuple[str, str]] = {
    ff.INFO: (
        "info",
        "The server kvtop watches: SGLang version, model, parallel sizes, nodes, PD role, "
        "this host's name and the multi-node rendezvous address (empty: not known).",
    ),
    ff.VERDICT: (
        "gauge",
        "1 for kvtop's verdict on this server (the level kvtop --check exits with), 0 for the "
        "other levels.",
    ),
    ff.ALERT: (
        "gauge",
        "1 for each active alert of kvtop's verdict: its kind, severity and subject (gpu 3, "
        "server, metrics, KV cache ...); the alert's words are in kvtop --once.",
    ),
    ff.STARTUP_STATE: (
        "gauge",
        "1 for the server's current state as its log tells it, 0 for the other states.",
    ),
    ff.RESTARTS: ("counter", "Restarts of the server seen in its log or its unit's journal."),
    ff.RETRACTED_REQUESTS: (
        "counter",
        "Requests SGLang retracted since the server started (the KV pool full at a decode "
        "step): its sglang:num_retracted_requests_total, else counted from its log.",
    ),
    ff.RETRACTIONS_PER_MINUTE: (
        "gauge",
        "Requests retracted per minute over kvtop's window (absent until a rate is known).",
    ),
    ff.GPU_UP: (
        "gauge",
        "1 while NVML reads the GPU, 0 when it lost it or cannot read it (no memory samples then).",
    ),
    ff.GPU_INFO: (
        "info",
        "Each GPU NVML or AMD SMI names: its model name, PCI bus id and vendor (1 per GPU, "
        "lost GPUs included).",
    ),
    ff.GPU_TOTAL: ("gauge", "The GPU's memory in bytes, as NVML reports it."),
    ff.GPU_MEMORY: (
        "gauge",
        "The GPU's memory by segment of kvtop's breakdown, in bytes; a GPU's segments add up "
        "to its total (a segment kvtop cannot tell is left out).",
    ),
    ff.GPU_RESERVE: (
        "gauge",
        "SGLang's reserve on the GPU in bytes: pre-load free memory x (1 - mem_fraction_static).",
    ),
    ff.GPU_USED: (
        "gauge",
        "The GPU's memory in use in bytes as NVML reports it: total minus free (NVML's used "
        "plus the driver's reserve).",
    ),
    ff.GPU_TEMPERATURE: ("gauge", "The GPU's core temperature in degrees Celsius (NVML)."),
    ff.GPU_POWER: ("gauge", "The GPU's power draw in watts (NVML)."),
    ff.GPU_POWER_LIMIT: (
        "gauge",
        "The power limit the GPU enforces in watts (NVML): its draw is capped here.",
    ),
    ff.GPU_UTILIZATION: (
        "gauge",
        "The share of NVML's last sample period in which a kernel ran on the GPU, 0 to 1 "
        "(nvidia-smi's GPU-Util / 100).",
    ),
    ff.KV_HEADROOM: (
        "gauge",
        "Free memory in bytes on a GPU of the server's after its startup (only while ready); "
        "the least of them is what kvtop --check calls headroom.",
    ),
    ff.KV_POOL_TOKENS: ("gauge", "The KV cache pool in tokens each rank's log says it got."),
    ff.KV_POOL_PREDICTED_TOKENS: (
        "gauge",
        "The KV cache pool in tokens kvtop's replay of SGLang's sizing formula predicts per rank.",
    ),
    ff.STATE_POOL_USAGE: (
        "gauge",
        "The share of a hybrid model's recurrent-state (Mamba) slots in use, 0 to 1, beside the "
        "KV cache (absent for a model without a state pool).",
    ),
    ff.KV_EVICTABLE: (
        "gauge",
        "The share of the KV pool holding cached prefixes SGLang evicts on demand, 0 to 1, "
        "beside the used share (absent without sglang:kv_evictable_tokens).",
    ),
    ff.STARTUP_PHASE_SECONDS: (
        "gauge",
        "How long each startup phase took on each rank, in seconds, as the log times it.",
    ),
    ff.SOURCE_UP: ("gauge", "1 while kvtop reads the source normally, 0 when it is failing."),
    ff.SOURCE_AGE: ("gauge", "Seconds since the source's last good reading."),
    ff.MISMATCH: (
        "gauge",
        "1 when the server's /metrics or /server_info disagree with its log on the field, "
        "0 when they were compared and agree.",
    ),
}


def _bytes(gib: float) -> int:
    return round(gib * GIB)


def _gauge(name: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, FAMILIES[name][1], labels=list(labels))


def _gpu_id(gpu: GpuView) -> list[str]:
    return [str(gpu.sample.index), gpu.sample.uuid or ""]


def segment_gib(gpu: GpuView, segment: str) -> float | None:
    """A segment of the GPU's breakdown (SEGMENT_FIELDS summed), None when unknown or lost."""
    if gpu.lost:
        return None
    values = [getattr(gpu.memory, name) for name in ff.SEGMENT_FIELDS[segment]]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def gpu_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_gpu_up, _info, _total_bytes, _memory_bytes{segment}, _reserve_bytes per GPU, then
    NVML's own readings (sensor_families)."""
    up, total = _gauge(ff.GPU_UP, GPU_LABELS), _gauge(ff.GPU_TOTAL, GPU_LABELS)
    memory = _gauge(ff.GPU_MEMORY, (*GPU_LABELS, "segment"))
    reserve = _gauge(ff.GPU_RESERVE, GPU_LABELS)
    info = InfoMetricFamily(
        ff.GPU_INFO.removesuffix("_info"),
        FAMILIES[ff.GPU_INFO][1],
        labels=[*GPU_LABELS, *ff.GPU_INFO_LABELS],
    )
    for gpu in snapshot.gpus:
        ids = _gpu_id(gpu)
        up.add_metric(ids, 0 if gpu.lost else 1)
        if gpu.sample.name or gpu.sample.pci_bus_id:  # a GPU never read has neither
            # The card's words pass the filter for text from outside, as kvtop_info's do.
            named = [
                make_visible(gpu.sample.name),
                make_visible(gpu.sample.pci_bus_id),
                str(gpu.sample.vendor),
            ]
            info.add_metric([*ids, *named], {})
        if gpu.lost or gpu.memory.total_gib is None:
            continue
        total.add_metric(ids, _bytes(gpu.memory.total_gib))
        for segment in ff.SEGMENTS:
            gib = segment_gib(gpu, segment)
            if gib is not None:
                memory.add_metric([*ids, segment], _bytes(gib))
        if gpu.memory.reserve_gib is not None:
            reserve.add_metric(ids, _bytes(gpu.memory.reserve_gib))
    return [up, info, total, memory, reserve, *sensor_families(snapshot)]


def sensor_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_gpu_used_bytes, _temperature_celsius, _power_draw_watts, _power_limit_watts and
    _utilization_ratio per GPU: the session's last NVML reading (a scrape calls no NVML). A
    GPU lost or unreadable has none; a reading the card does not support, or that NVML
    answered with an impossible number (refused, tui/kvtop/sources/nvml_checks.py), is left out."""
    used = _gauge(ff.GPU_USED, GPU_LABELS)
    temperature = _gauge(ff.GPU_TEMPERATURE, GPU_LABELS)
    power = _gauge(ff.GPU_POWER, GPU_LABELS)
    limit = _gauge(ff.GPU_POWER_LIMIT, GPU_LABELS)
    utilization = _gauge(ff.GPU_UTILIZATION, GPU_LABELS)
    for gpu in snapshot.gpus:
        if gpu.lost:
            continue
        ids, sample = _gpu_id(gpu), gpu.sample
        if gpu.memory.total_gib is not None and gpu.memory.free_gib is not None:
            used.add_metric(ids, max(0, _bytes(gpu.memory.total_gib - gpu.memory.free_gib)))
        if sample.temperature_c is not None:
            temperature.add_metric(ids, sample.temperature_c)
        if sample.power_w is not None:
            power.add_metric(ids, sample.power_w)
        if sample.power_limit_w is not None:
            limit.add_metric(ids, sample.power_limit_w)
        if sample.utilization_pct is not None:
            utilization.add_metric(ids, sample.utilization_pct / 100)
    return [used, temperature, power, limit, utilization]


def headroom_by_gpu(snapshot: Snapshot) -> list[tuple[list[str], float]]:
    """([gpu, uuid, rank], GiB free) per headroom of tui/kvtop/model/memory/headroom.py (the selection
    --check's headroom is the least of); gpu and uuid empty for the log's reference rank."""
    return [
        ([*(_gpu_id(h.gpu) if h.gpu is not None else ["", ""]), h.rank], h.free_gib)
        for h in headrooms(snapshot)
    ]


def kv_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_kv_headroom_bytes, kvtop_kv_pool_tokens and its prediction per rank, and the
    state pool's usage."""
    headroom = _gauge(ff.KV_HEADROOM, (*GPU_LABELS, "rank"))
    for labels, gib in headroom_by_gpu(snapshot):
        headroom.add_metric(labels, _bytes(gib))
    pool = _gauge(ff.KV_POOL_TOKENS, ("rank",))
    for rank in snapshot.analysis.ranks:
        if rank.target.kv_tokens is not None:
            pool.add_metric([rank.rank], rank.target.kv_tokens)
    predicted = _gauge(ff.KV_POOL_PREDICTED_TOKENS, ("rank",))
    for sizing in snapshot.analysis.sizings:
        predicted.add_metric([sizing.rank], sizing.predicted_tokens)
    return [headroom, pool, predicted, state_pool_family(snapshot), evictable_family(snapshot)]


def evictable_family(snapshot: Snapshot) -> Metric:
    """kvtop_kv_evictable_ratio: the pool's evictable cache as the KV panel shows it, while
    current."""
    family = _gauge(ff.KV_EVICTABLE, ())
    usage = kv_now(snapshot)
    if usage.evictable_pct is not None and usage.current:
        family.add_metric([], usage.evictable_pct / 100)
    return family


def state_pool_family(snapshot: Snapshot) -> Metric:
    """kvtop_state_pool_usage_ratio: the state pool as the KV panel shows it, while current
    (an old batch line says nothing about now)."""
    family = _gauge(ff.STATE_POOL_USAGE, ())
    usage = kv_now(snapshot)
    pool = usage.state_pool
    if pool is not None and pool.usage_pct is not None and usage.current:
        family.add_metric([], pool.usage_pct / 100)
    return family


def phase_family(snapshot: Snapshot) -> Metric:
    """kvtop_startup_phase_seconds{rank,model,phase}: the phases the log times (a phase logged
    twice on a rank, such as a graph captured again, counts its total)."""
    seconds: dict[tuple[str, str, str], float] = {}
    for rank in snapshot.analysis.ranks:
        for phase in rank.phases:
            if phase.duration_s is not None:
                key = (rank.rank, phase.model, phase.name)
                seconds[key] = seconds.get(key, 0.0) + phase.duration_s
    family = _gauge(ff.STARTUP_PHASE_SECONDS, ("rank", "model", "phase"))
    for key, value in seconds.items():
        family.add_metric(list(key), value)
    return family


def verdict_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_verdict{level} and kvtop_alert{alert,severity,subject}: the one judgement."""
    verdict = _gauge(ff.VERDICT, ("level",))
    level = snapshot.verdict.level
    for name in ff.VERDICT_LEVELS:
        verdict.add_metric([name], 1 if name == level else 0)
    alerts = _gauge(ff.ALERT, ff.ALERT_LABELS)
    seen: set[tuple[str, str, str]] = set()
    for alert in snapshot.verdict.alerts:
        labels = (alert.kind, str(alert.level), alert.subject)
        if labels not in seen:  # two alerts of one kind on one subject: one series
            seen.add(labels)
            alerts.add_metric(list(labels), 1)
    return [verdict, alerts]


def _log_asked(snapshot: Snapshot) -> bool:
    """A log or journal was given (the startup's state and restarts are its)."""
    return any(s.name in ("log", "journal") and not s.asked_off for s in snapshot.sources)


def lifecycle_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_startup_state{state} and kvtop_restarts_total, when a log is read."""
    state = _gauge(ff.STARTUP_STATE, ("state",))
    restarts = CounterMetricFamily(ff.RESTARTS, FAMILIES[ff.RESTARTS][1])
    if _log_asked(snapshot):
        startup = snapshot.analysis.startup
        now = server_status(startup, datetime.fromtimestamp(snapshot.taken_at)).state
        for name in ff.STATES:
            state.add_metric([name], 1 if name == now else 0)
        restarts.add_metric([], startup.restarts)
    return [state, restarts]


def retraction_families(snapshot: Snapshot) -> list[Metric]:
    """kvtop_retracted_requests_total and kvtop_retractions_per_minute, when a source knows."""
    total = CounterMetricFamily(ff.RETRACTED_REQUESTS, FAMILIES[ff.RETRACTED_REQUESTS][1])
    rate = _gauge(ff.RETRACTIONS_PER_MINUTE, ())
    found = snapshot.retractions
    if found is not None:
        total.add_metric([], found.count)
        if found.per_min is not None:
            rate.add_metric([], found.per_min)
    return [total, rate]


def _exported(source: SourceHealth) -> str | None:
    """The source's `source` label; None when it is off because the user asked for it."""
    if source.asked_off:
        return None
    return SOURCE_LABELS.get(source.name)


def source_families(snapshot: Snapshot) -> list[Metric]:
    up, age = _gauge(ff.SOURCE_UP, ("source",)), _gauge(ff.SOURCE_AGE, ("source",))
    for source in snapshot.sources:
        name = _exported(source)
        if name is None:
            continue
        up.add_metric([name], 1 if source.state == SourceState.OK else 0)
        if source.age_s is not None:
            age.add_metric([name], round(source.age_s, 3))
    return [up, age]


def mismatch_family(snapshot: Snapshot) -> Metric:
    """1 per field the server sources disagree on, 0 per field compared and agreeing."""
    startup = snapshot.analysis.startup
    wrong = {m.field for m in snapshot.mismatches}
    compared = compared_fields(startup, snapshot.metrics, snapshot.server_info) | wrong
    family = _gauge(ff.MISMATCH, ("field",))
    for name in FIELDS:
        if name in compared:
            family.add_metric([name], 1 if name in wrong else 0)
    return family


def _text(value: object) -> str:
    return "" if value is None else str(value)


def info_labels(snapshot: Snapshot | None, hostname: str) -> dict[str, str]:
    """kvtop_info's labels (INFO_LABELS); "" where not known. Every value passes the filter for
    text from outside (a host name, a model name from a log, a version from a server): a fleet
    view that reads them back must never receive an escape sequence."""
    labels = _info_labels(snapshot, hostname)
    return {name: make_visible(value) for name, value in labels.items()}


def _info_labels(snapshot: Snapshot | None, hostname: str) -> dict[str, str]:
    labels = dict.fromkeys(ff.INFO_LABELS, "")
    labels["hostname"] = hostname
    if snapshot is None:
        return labels
    startup = snapshot.analysis.startup
    if snapshot.analysis.version_shown != "unknown":  # the one version string every view shows
        labels["sglang_version"] = snapshot.analysis.version_shown
    args = startup.server_args
    if args is not None:
        labels["model"] = _text(args.served_model_name or args.model_path)
        labels["tp"], labels["dp"] = _text(args.tp_size), _text(args.dp_size)
        labels["pp"] = _text(args.pp_size)
        labels["dist_init_addr"] = _text(args.dist_init_addr)
    shape = deployment_shape(startup)
    labels["nnodes"], labels["node_rank"] = _text(shape.nnodes), _text(shape.node_rank)
    labels["disaggregation_mode"] = _text(shape.disaggregation_mode)
    return labels


def info_family(snapshot: Snapshot | None, hostname: str) -> Metric:
    family = InfoMetricFamily(ff.INFO.removesuffix("_info"), FAMILIES[ff.INFO][1])
    family.add_metric([], info_labels(snapshot, hostname))
    return family


def _empty(name: str) -> Metric:
    kind, text = FAMILIES[name]
    if kind == "counter":
        return CounterMetricFamily(name, text)
    if kind == "info":
        return InfoMetricFamily(name.removesuffix("_info"), text)
    return _gauge(name, ())


def render(snapshot: Snapshot | None, hostname: str) -> list[Metric]:
    """Every family for this snapshot, in FAMILIES' order; before the first snapshot only
    kvtop_info with the host's name has a sample."""
    if snapshot is None:
        return [info_family(None, hostname), *(_empty(n) for n in FAMILIES if n != ff.INFO)]
    return [
        info_family(snapshot, hostname),
        *verdict_families(snapshot),
        *lifecycle_families(snapshot),
        *retraction_families(snapshot),
        *gpu_families(snapshot),
        *kv_families(snapshot),
        phase_family(snapshot),
        *source_families(snapshot),
        mismatch_family(snapshot),
    ]


class SnapshotCollector(Collector):
    """Renders the latest Snapshot on every scrape. The session loop swaps `latest` whole (one
    reference assignment, atomic); collect() reads it once and never waits or computes."""

    def __init__(self, hostname: str | None = None) -> None:
        self.latest: Snapshot | None = None
        self.hostname = hostname if hostname is not None else socket.gethostname()

    def collect(self) -> Iterator[Metric]:
        yield from render(self.latest, self.hostname)

    def describe(self) -> list[Metric]:
        return []  # registration must not render (there may be no snapshot yet)
