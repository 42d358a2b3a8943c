"""One immutable Snapshot per refresh: GPUs, ranks, startup analysis, metrics and source health."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tui.model.analysis import Analysis
from tui.model.deployment_shape import deployment_shape
from tui.model.memory.gpu_memory import (
    GpuMemory,
    choose_rank_mapping,
    lost_memory,
    parse_visible_devices,
    reconcile,
)
from tui.model.memory.gpu_reading import GpuSample, NvmlReading
from tui.model.memory.process_owner import ProcessInfo, other_pids, other_processes_gib
from tui.model.memory.rank_memory import MemoryBreakdown
from tui.model.server_target import ServerTarget
from tui.model.status.identity import Mismatch
from tui.model.status.notes import LOG_VS_NVML, OTHER, RANK_ORDER, SHAPE, UNPLACED, Note, collapse
from tui.sglang.metrics import MetricsSample, ServerInfo

OK, DEGRADED, OFF = "ok", "degraded", "off"
# NVML in use below what the log itemises by more than rounding: log and GPUs do not match.
MISMATCH_GIB = 0.5


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One input's state: ok, degraded (with the reason) or off (with the reason)."""

    name: str
    state: str
    detail: str | None = None
    # Seconds since this source's last good reading (None: none yet, or not tracked).
    age_s: float | None = None
    # Off because the user asked for it (--no-gpus, no log given): not a fault.
    asked_off: bool = False


@dataclass(frozen=True, slots=True)
class GpuProcessView:
    pid: int
    used_gib: float | None
    rank: str | None
    user: str | None = None
    command: str | None = None  # its command line, when visible here
    other: bool = False  # not the server's (tui/model/memory/process_owner.py)


@dataclass(frozen=True, slots=True)
class GpuView:
    sample: GpuSample
    ranks: tuple[str, ...]
    memory: GpuMemory
    processes: tuple[GpuProcessView, ...]

    @property
    def lost(self) -> bool:
        """NVML lost the GPU or cannot read its memory: no numbers for it."""
        return self.sample.status != "ok"


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host RAM in decimal GB, the unit of SGLang's hierarchical-cache lines."""

    total_gb: float
    used_gb: float
    available_gb: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: float
    analysis: Analysis
    gpus: tuple[GpuView, ...]
    rank_mapping: str  # "process", "order" or "none"
    metrics: MetricsSample | None
    server_info: ServerInfo | None
    host: HostMemory | None
    sources: tuple[SourceHealth, ...]
    notes: tuple[str, ...] = ()
    driver_version: str | None = None
    server: ServerTarget | None = None  # the server scraped (None in the demo)
    # Facts on which the log and /server_info or /metrics disagree (tui/model/status/identity.py).
    mismatches: tuple[Mismatch, ...] = ()
    # The model's notes with their kinds (collapsed); `notes` holds their sentences (JSON).
    note_items: tuple[Note, ...] = ()

    @property
    def kinded_notes(self) -> tuple[Note, ...]:
        """Every note with a kind: the model's, then sentences added without one (kind other)."""
        known = {n.text for n in self.note_items}
        return self.note_items + tuple(Note(OTHER, t) for t in self.notes if t not in known)

    @property
    def trusted_metrics(self) -> MetricsSample | None:
        """The scrape, unless it is about another server than the log (then the log's own
        numbers stand in, labelled: tui/model/kv_usage.py)."""
        if any(m.source == "metrics" for m in self.mismatches):
            return None
        return self.metrics

    @property
    def host_kv_total_gb(self) -> float | None:
        sizes = [r.host_kv_gb for r in self.analysis.ranks if r.host_kv_gb is not None]
        return round(sum(sizes), 2) if sizes else None


def _ranks_by_process(
    samples: tuple[GpuSample, ...], process_ranks: Mapping[int, str | None]
) -> dict[int, tuple[str, ...]]:
    """GPU index -> the ranks its processes name in their titles (`sglang::scheduler_TP3`)."""
    by_process: dict[int, tuple[str, ...]] = {}
    for sample in samples:
        named = sorted({r for p in sample.processes if (r := process_ranks.get(p.pid))})
        if named:
            by_process[sample.index] = tuple(named)
    return by_process


def _base_gpu_id(analysis: Analysis) -> int:
    """The first GPU SGLang was told to use (--base-gpu-id), 0 unless logged."""
    args = analysis.startup.server_args
    return args.base_gpu_id if args is not None and args.base_gpu_id is not None else 0


@dataclass(frozen=True, slots=True)
class _ProcessFacts:
    ranks: Mapping[int, str | None]
    users: Mapping[int, str | None]
    infos: Mapping[int, ProcessInfo]
    # rank -> when it read its free memory before loading (epoch s): its baseline's moment
    baseline_at: Mapping[str, float]


def _baseline_times(analysis: Analysis) -> dict[str, float]:
    """Each rank's first timestamped line: its pre-load free memory is read about then."""
    times: dict[str, float] = {}
    for name, rank in analysis.startup.ranks.items():
        stamp = next((p.timestamp for p in rank.phases if p.timestamp is not None), None)
        if stamp is not None:
            try:
                times[name] = stamp.timestamp()
            except (OverflowError, OSError, ValueError):
                continue
    return times


def _gpu_view(
    sample: GpuSample,
    ranks: tuple[str, ...],
    breakdowns: Mapping[str, MemoryBreakdown],
    facts: _ProcessFacts,
) -> GpuView:
    """One GPU: NVML's reading reconciled with the log of the one rank on it (if just one);
    processes that are not the server's get their own segment. A lost GPU: no numbers."""
    log = breakdowns.get(ranks[0]) if len(ranks) == 1 else None
    others = other_pids(sample.processes, bool(ranks), facts.ranks, facts.infos)
    views = tuple(
        GpuProcessView(
            p.pid,
            p.used_gib,
            facts.ranks.get(p.pid),
            facts.users.get(p.pid),
            (info.command if (info := facts.infos.get(p.pid)) else None),
            p.pid in others,
        )
        for p in sample.processes
    )
    if sample.status != "ok":
        return GpuView(sample, ranks, lost_memory(), views)
    if any(name == "processes" for name, _ in sample.field_errors):
        other: float | None = None  # NVML could not list the processes: unknown
    else:
        at = facts.baseline_at.get(ranks[0]) if log is not None else None
        other = other_processes_gib(sample.processes, others, facts.infos, at)
    memory = reconcile(sample.total_gib, sample.free_gib, log, other)
    return GpuView(sample=sample, ranks=ranks, memory=memory, processes=views)


_MISMATCH_GIST = (
    "the log itemises more than NVML sees in use; the log may come from another host, other "
    "GPUs or an earlier start (check --unit / --log-file)."
)


def _mismatch_notes(gpus: list[GpuView]) -> list[Note]:
    """GPUs where the log itemises more than NVML sees in use: the log is not about them.
    Never about a lost GPU (it has no numbers)."""
    notes = []
    for gpu in gpus:
        runtime = gpu.memory.runtime_gib
        if gpu.memory.baseline_gib is not None and runtime is not None and runtime < -MISMATCH_GIB:
            notes.append(
                Note(
                    LOG_VS_NVML,
                    f"GPU {gpu.sample.index}: the log itemises {-runtime:.1f} GiB more than NVML "
                    "sees in use on it; the log may come from another host, other GPUs or an "
                    "earlier start (check --unit / --log-file).",
                    (gpu.sample.index,),
                    _MISMATCH_GIST,
                )
            )
    return notes


def _rank_span(ranks: list[str]) -> str:
    """ "TP0–7" for a run of TP ranks, else the ranks listed."""
    numbers = [int(r[2:]) for r in ranks if r.startswith("TP") and r[2:].isdigit()]
    run = len(numbers) == len(ranks) > 2
    if run and sorted(numbers) == list(range(min(numbers), max(numbers) + 1)):
        return f"TP{min(numbers)}–{max(numbers)}"
    return ", ".join(ranks)


def _unplaced_note(unplaced: list[str], gpu_count: int) -> str:
    which = _rank_span(unplaced)
    sees = "no GPU" if gpu_count == 0 else f"{gpu_count} GPU{'s' if gpu_count != 1 else ''}"
    return (
        f"{which} from the log {'has' if len(unplaced) == 1 else 'have'} no GPU here: NVML "
        f"sees {sees}. A GPU may have fallen off the bus (check nvidia-smi and dmesg), or "
        "those ranks run on another host."
    )


def _placement_notes(
    nvml: NvmlReading | None,
    mapping: Mapping[int, tuple[str, ...]],
    how: str,
    log_ranks: list[str],
    by_order: str,
) -> list[Note]:
    """Ranks of the log without a GPU here (also when NVML answers with none), and how ranks
    were placed when it was by order (an advisory). Ranks whose GPUs NVML lost are not
    "without a GPU": the lost GPUs' rows and the NVML notice say what happened."""
    if nvml is None or not nvml.available or not log_ranks:
        return []
    placed = {rank for ranks in mapping.values() for rank in ranks}
    unplaced = [rank for rank in log_ranks if rank not in placed]
    lost = sum(1 for g in nvml.gpus if g.status != "ok")
    notes = []
    if unplaced and len(unplaced) > lost and (how != "none" or not nvml.gpus):
        notes.append(Note(UNPLACED, _unplaced_note(unplaced, len(nvml.gpus))))
    if how == "order" and lost < len(nvml.gpus):  # placing ranks on lost GPUs says nothing
        notes.append(Note(RANK_ORDER, by_order, advisory=True))
    return notes


def _with_gpus_missing(sources: tuple[SourceHealth, ...], note: str) -> tuple[SourceHealth, ...]:
    """NVML answers with no GPU while the log has ranks: its marker is not healthy."""
    return tuple(
        replace(s, state=DEGRADED, detail=note) if s.name == "nvml" and s.state == OK else s
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
    within = f" within CUDA_VISIBLE_DEVICES={cuda_visible_devices}" if visible else ""
    return f"ranks mapped to GPUs by order from device {base}{within}: {reason}."


def build_snapshot(
    analysis: Analysis,
    *,
    taken_at: float,
    nvml: NvmlReading | None,
    process_ranks: Mapping[int, str | None],
    pids_visible: bool,
    metrics: MetricsSample | None,
    server_info: ServerInfo | None,
    host: HostMemory | None,
    sources: tuple[SourceHealth, ...],
    cuda_visible_devices: str | None = None,
    process_users: Mapping[int, str | None] | None = None,
    process_infos: Mapping[int, ProcessInfo] | None = None,
) -> Snapshot:
    """Join the analysed log with GPU readings. `process_ranks`: pid -> rank from its title;
    `process_infos`: pid -> command line and start time (whose process it is)."""
    samples = nvml.gpus if nvml is not None else ()
    base = _base_gpu_id(analysis)
    visible = parse_visible_devices(cuda_visible_devices, [s.uuid for s in samples])
    shape = deployment_shape(analysis.startup)
    # Ranks SGLang runs on another node have no GPU here by design: not placed, not "unplaced".
    elsewhere = set(shape.other_node_ranks)
    log_ranks = [r.rank for r in analysis.ranks if r.rank not in elsewhere]
    by_process = _ranks_by_process(samples, process_ranks)
    mapping, how = choose_rank_mapping(
        [s.index for s in samples], log_ranks, by_process, base, visible
    )
    breakdowns = {b.rank: b for b in analysis.breakdowns}
    facts = _ProcessFacts(
        process_ranks, process_users or {}, process_infos or {}, _baseline_times(analysis)
    )
    gpus = [_gpu_view(s, mapping.get(s.index, ()), breakdowns, facts) for s in samples]
    by_order = _by_order_note(pids_visible, base, cuda_visible_devices, visible)
    placement = _placement_notes(nvml, mapping, how, log_ranks, by_order)
    shape_notes = [Note(SHAPE, text) for text in shape.flags()]
    notes = collapse(_mismatch_notes(gpus) + placement + shape_notes)
    if placement and not samples:
        sources = _with_gpus_missing(sources, placement[0].text)
    return Snapshot(
        taken_at=taken_at,
        analysis=analysis,
        gpus=tuple(gpus),
        rank_mapping=how,
        metrics=metrics,
        server_info=server_info,
        host=host,
        sources=sources,
        notes=tuple(n.text for n in notes),
        note_items=notes,
        driver_version=nvml.driver_version if nvml is not None else None,
    )
