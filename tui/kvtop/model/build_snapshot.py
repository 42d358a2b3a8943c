"""The Snapshot built: the startup analysed, NVML joined with the log by rank, notes, sources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from kvtop.model.deployment_shape import deployment_shape, rank_span
from kvtop.model.memory.gpu_memory import (
    choose_rank_mapping,
    lost_memory,
    parse_visible_devices,
    reconcile,
)
from kvtop.model.memory.gpu_reading import (
    GpuProcess,
    GpuSample,
    GpuStatus,
    NvmlReading,
    gpu_library,
)
from kvtop.model.memory.gpu_view import titled_ranks
from kvtop.model.memory.process_owner import (
    ProcessInfo,
    ServerIdentity,
    other_pids,
    other_processes_gib,
    server_identity,
)
from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.mismatch import Mismatch
from kvtop.model.notes import (
    LOG_VS_NVML,
    NOT_UNDERSTOOD,
    RANK_ORDER,
    SHAPE,
    UNDATED,
    UNPLACED,
    Note,
    collapse,
)
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.model.server_target import ServerTarget
from kvtop.model.snapshot import (
    METRICS_AGAINST_LOG,
    METRICS_DISABLED,
    GpuProcessView,
    GpuView,
    HostMemory,
    Snapshot,
    SourceHealth,
    SourceState,
)
from kvtop.model.startup_analysis import Analysis
from kvtop.model.status.liveness import server_gone
from kvtop.model.status.watch import Watch
from kvtop.sglang.metrics import MetricsSample, ServerInfo
from kvtop.sglang.start_state import STOPPED


def _ranks_by_process(
    samples: tuple[GpuSample, ...], process_ranks: Mapping[int, str | None]
) -> dict[int, tuple[str, ...]]:
    """GPU index -> the ranks its processes name in their titles (`sglang::scheduler_TP3`)."""
    by_process: dict[int, tuple[str, ...]] = {}
    for sample in samples:
        named = titled_ranks(sample, process_ranks)
        if named:
            by_process[sample.index] = named
    return by_process


def _base_gpu_id(analysis: Analysis) -> int:
    """The first GPU SGLang was told to use (--base-gpu-id), 0 unless logged."""
    args = analysis.startup.server_args
    return args.base_gpu_id if args is not None and args.base_gpu_id is not None else 0


@dataclass(frozen=True, slots=True)
class _Owners:
    """The records as the owner rules read them (tui/kvtop/model/memory/process_owner.py):
    ranks and host facts by pid, and the server those make out."""

    records: Mapping[int, ProcessRecord]
    ranks: Mapping[int, str | None]
    infos: Mapping[int, ProcessInfo]
    server: ServerIdentity  # the server's processes as their titles, tree and unit show them

    @classmethod
    def of(cls, records: Mapping[int, ProcessRecord]) -> _Owners:
        ranks = {pid: r.rank for pid, r in records.items()}
        infos = {pid: r.info for pid, r in records.items()}
        return cls(records, ranks, infos, server_identity(ranks, infos))


def _gpu_view(
    sample: GpuSample,
    ranks: tuple[str, ...],
    breakdowns: Mapping[str, MemoryBreakdown],
    owners: _Owners,
) -> GpuView:
    """One GPU: NVML's reading reconciled with the log of the one rank on it (if just one);
    processes that are not the server's (by identity, tui/kvtop/model/memory/process_owner.py) get
    their own segment. A lost GPU: no numbers."""
    log = breakdowns.get(ranks[0]) if len(ranks) == 1 else None
    others = other_pids(sample.processes, bool(ranks), owners.ranks, owners.infos, owners.server)
    views = tuple(
        _process_view(p, p.pid in others, owners.records.get(p.pid)) for p in sample.processes
    )
    if sample.status != GpuStatus.OK:
        return GpuView(sample, ranks, lost_memory(), views)
    if any(name == "processes" for name, _ in sample.field_errors):
        other: float | None = None  # NVML could not list the processes: unknown
    else:
        other = other_processes_gib(sample.processes, others)
    memory = reconcile(sample.total_gib, sample.free_gib, log, other)
    return GpuView(sample=sample, ranks=ranks, memory=memory, processes=views)


def _process_view(process: GpuProcess, other: bool, record: ProcessRecord | None) -> GpuProcessView:
    record = record or ProcessRecord(process.pid)
    return GpuProcessView(
        process.pid,
        process.used_gib,
        record.rank,
        record.user,
        record.info.command,
        other,
        started_at=record.info.started_at,
        cpu_percent=record.usage.cpu_percent,
        rss_gib=record.usage.rss_gib,
        adopted=record.info.adopted,
    )


_MISMATCH_GIST = (
    "the log itemises more than {lib} sees in use, so runtime is unknown; the server's memory "
    "may have been released, or the log comes from another host, other GPUs or an earlier "
    "start (check --unit / --log-file)."
)


def _mismatch_notes(gpus: list[GpuView]) -> list[Note]:
    """GPUs where the log itemises more than NVML sees in use: the log is not about them.
    Never about a lost GPU (it has no numbers)."""
    notes = []
    for gpu in gpus:
        excess = gpu.memory.log_excess_gib
        if excess is not None:
            notes.append(
                Note(
                    LOG_VS_NVML,
                    f"GPU {gpu.sample.index}: the log itemises {excess:.1f} GiB more than "
                    f"{gpu.sample.vendor.library} sees in use on it, so its runtime is unknown; "
                    "the server's memory may have been released, or the log comes from another "
                    "host, other GPUs or an earlier start (check --unit / --log-file).",
                    (gpu.sample.index,),
                    _MISMATCH_GIST.format(lib=gpu.sample.vendor.library),
                )
            )
    return notes


def _unplaced_note(unplaced: list[str], samples: Sequence[GpuSample]) -> str:
    which = rank_span(unplaced)
    gpu_count = len(samples)
    sees = "no GPU" if gpu_count == 0 else f"{gpu_count} GPU{'s' if gpu_count != 1 else ''}"
    lib = gpu_library(samples)
    tool = "amd-smi" if lib == "AMD SMI" else "nvidia-smi"
    return (
        f"{which} from the log {'has' if len(unplaced) == 1 else 'have'} no GPU here: {lib} "
        f"sees {sees}. A GPU may have fallen off the bus (check {tool} and dmesg), or "
        "those ranks run on another host."
    )


def _missing_ranks(
    nvml: NvmlReading | None,
    mapping: Mapping[int, tuple[str, ...]],
    how: str,
    log_ranks: list[str],
) -> list[str]:
    """Ranks of the log without a GPU here (also when NVML answers with none). Ranks whose GPUs
    NVML lost are not missing: the lost GPUs' rows and alerts say what happened."""
    if nvml is None or not nvml.available or not log_ranks:
        return []
    placed = {rank for ranks in mapping.values() for rank in ranks}
    unplaced = [rank for rank in log_ranks if rank not in placed]
    lost = sum(1 for g in nvml.gpus if g.status != GpuStatus.OK)
    if unplaced and len(unplaced) > lost and (how != "none" or not nvml.gpus):
        return unplaced
    return []


def _with_unread_ranks(
    samples: tuple[GpuSample, ...],
    mapping: dict[int, tuple[str, ...]],
    how: str,
    log_ranks: list[str],
) -> dict[int, tuple[str, ...]]:
    """Ranks placed by their processes' titles leave a GPU NVML cannot read without a rank (its
    processes cannot be listed). When the ranks left over are exactly as many as those GPUs,
    they are theirs, in order: the alert can then name the rank of a GPU that fell away."""
    if how != "process":
        return mapping
    placed = {rank for ranks in mapping.values() for rank in ranks}
    left = [rank for rank in log_ranks if rank not in placed]
    unread = [s.index for s in samples if s.status != GpuStatus.OK and s.index not in mapping]
    if not left or len(left) != len(unread):
        return mapping
    return {**mapping, **{index: (rank,) for index, rank in zip(unread, left, strict=True)}}


def _placement_notes(
    nvml: NvmlReading | None,
    missing: list[str],
    how: str,
    by_order: str,
) -> list[Note]:
    """Ranks of the log without a GPU here, and how ranks were placed when it was by order (an
    advisory)."""
    if nvml is None or not nvml.available:
        return []
    lost = sum(1 for g in nvml.gpus if g.status != GpuStatus.OK)
    notes = []
    if missing:
        notes.append(Note(UNPLACED, _unplaced_note(missing, nvml.gpus)))
    if how == "order" and lost < len(nvml.gpus):  # placing ranks on lost GPUs says nothing
        notes.append(Note(RANK_ORDER, by_order, advisory=True))
    return notes


def _with_gpus_missing(sources: tuple[SourceHealth, ...], note: str) -> tuple[SourceHealth, ...]:
    """NVML answers with no GPU while the log has ranks: its marker is not healthy."""
    return tuple(
        replace(s, state=SourceState.DEGRADED, detail=note)
        if s.name == "nvml" and s.state == SourceState.OK
        else s
        for s in sources
    )


def _by_order_note(
    pids_visible: bool, base: int, cuda_visible_devices: str | None, visible: list[int] | None
) -> str:
    reason = (
        "the SGLang processes are not visible here (a container without the host PID namespace?)"
        if not pids_visible
        else "no GPU process carries an SGLang scheduler title"
    )
    within = f" within the visible devices ({cuda_visible_devices})" if visible else ""
    return f"ranks mapped to GPUs by order from device {base}{within}: {reason}."


def metrics_url_of(detail: str | None) -> str | None:
    """The URL a /metrics 404 sentence names (the source puts it first: `URL/metrics …`)."""
    if not detail or "/metrics answers 404" not in detail:
        return None
    return detail.split("/metrics answers 404", 1)[0] or None


def _metrics_against_the_log(
    sources: tuple[SourceHealth, ...], analysis: Analysis
) -> tuple[SourceHealth, ...]:
    """A /metrics 404 while the log's server_args say enable_metrics=True is not a server
    without --enable-metrics: --url reaches another server or service. The source's own words
    (which cannot know the log) are replaced by that, and the alert rule warns."""
    args = analysis.startup.server_args
    if args is None or args.enable_metrics is not True:
        return sources
    fixed = []
    for source in sources:
        url = metrics_url_of(source.detail) if source.cause == METRICS_DISABLED else None
        if url is not None:
            source = replace(
                source,
                state=SourceState.DEGRADED,
                cause=METRICS_AGAINST_LOG,
                detail=(
                    f"{url}/metrics answers 404, but the log's server_args say "
                    "enable_metrics=True: --url reaches another server or service, not this "
                    "one; check --url against the server's --host and --port"
                ),
            )
        fixed.append(source)
    return tuple(fixed)


@dataclass(frozen=True, slots=True)
class SnapshotInputs:
    """What the sources delivered for one snapshot. `processes`: the GPU processes as this
    host shows them (rank from the title, user, command line, start time, CPU and resident
    memory now); `notes`: the sources' own sentences (a log notice, a withheld API key), shown
    after the model's; `cuda_visible_devices`: the server's visible devices, for placing ranks
    by order."""

    analysis: Analysis
    taken_at: float
    nvml: NvmlReading | None = None
    processes: ProcessFacts = field(default_factory=ProcessFacts)
    metrics: MetricsSample | None = None
    server_info: ServerInfo | None = None
    host: HostMemory | None = None
    sources: tuple[SourceHealth, ...] = ()
    cuda_visible_devices: str | None = None
    notes: tuple[str, ...] = ()
    server: ServerTarget | None = None
    mismatches: tuple[Mismatch, ...] = ()
    log_from_this_host: bool = False


def build_snapshot(
    inputs: SnapshotInputs, *, watch: Watch | None = None, judged: bool = True
) -> Snapshot:
    """Join the analysed log with GPU readings. `watch`: the session's judge (one look with
    the default thresholds when None); `judged=False`: no verdict yet (the first frame's GPUs,
    before the other sources' first readings)."""
    analysis, nvml, sources = inputs.analysis, inputs.nvml, inputs.sources
    cuda_visible_devices, taken_at = inputs.cuda_visible_devices, inputs.taken_at
    samples = nvml.gpus if nvml is not None else ()
    base = _base_gpu_id(analysis)
    visible = parse_visible_devices(cuda_visible_devices, [s.uuid for s in samples])
    shape = deployment_shape(analysis.startup)
    # Ranks SGLang runs on another node have no GPU here by design: not placed, not "unplaced".
    elsewhere = set(shape.other_node_ranks)
    log_ranks = [r.rank for r in analysis.ranks if r.rank not in elsewhere]
    owners = _Owners.of(inputs.processes.records)
    by_process = _ranks_by_process(samples, owners.ranks)
    mapping, how = choose_rank_mapping(
        [s.index for s in samples], log_ranks, by_process, base, visible
    )
    mapping = _with_unread_ranks(samples, mapping, how, log_ranks)
    missing = _missing_ranks(nvml, mapping, how, log_ranks)
    breakdowns = {b.rank: b for b in analysis.breakdowns}
    gpus = [_gpu_view(s, mapping.get(s.index, ()), breakdowns, owners) for s in samples]
    gone = server_gone(analysis.startup, gpus, breakdowns)
    if gone is not None:
        # NVML outranks a log that stopped talking: the server is stopped in every view, and
        # its log's segments are not drawn on cards it has left.
        startup = replace(analysis.startup, state=STOPPED, stopped_by=gone)
        analysis = replace(analysis, startup=startup)
        gpus = [_gpu_view(s, mapping.get(s.index, ()), {}, owners) for s in samples]
    by_order = _by_order_note(inputs.processes.visible, base, cuda_visible_devices, visible)
    placement = _placement_notes(nvml, missing, how, by_order)
    shape_notes = [Note(SHAPE, text) for text in shape.flags()]
    reading = (
        [Note(NOT_UNDERSTOOD, analysis.not_understood_said)] if analysis.not_understood_said else []
    )
    if analysis.dates_said:  # permanent and known: the operator may dismiss it
        reading.append(Note(UNDATED, analysis.dates_said, advisory=True))
    items = collapse(_mismatch_notes(gpus) + placement + shape_notes + reading)
    if placement and not samples:
        sources = _with_gpus_missing(sources, placement[0].text)
    sources = _metrics_against_the_log(sources, analysis)
    unjudged = Snapshot(
        taken_at=taken_at,
        analysis=analysis,
        gpus=tuple(gpus),
        rank_mapping=how,
        metrics=inputs.metrics,
        server_info=inputs.server_info,
        host=inputs.host,
        sources=sources,
        notes=tuple(n.text for n in items) + inputs.notes,
        note_items=items,
        driver_version=nvml.driver_version if nvml is not None else None,
        server=inputs.server,
        mismatches=inputs.mismatches,
        log_from_this_host=inputs.log_from_this_host,
        missing_ranks=tuple(missing),
    )
    if not judged:
        return unjudged
    watch = watch or Watch()
    # The retractions need the counter's earlier readings, which the session's watch keeps.
    retractions = watch.retraction_readings.look(
        analysis.startup,
        unjudged.trusted_metrics,
        taken_at,
        watch.thresholds.retractions_window_s,
    )
    unjudged = replace(unjudged, retractions=retractions)
    # Judged before anyone sees it: every view shows this one verdict.
    verdict, timeline = watch.look(unjudged)
    return replace(unjudged, verdict=verdict, timeline=timeline)
