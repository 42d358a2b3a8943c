"""One GPU drilled into: its rank's phase waterfall and every number with where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kvtop.model.memory.gpu_memory import GpuMemory
from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.sglang.start_state import Phase, RankStartup


@dataclass(frozen=True, slots=True)
class WaterfallStep:
    """Free memory after one phase of the rank, what the phase took, and how long it ran."""

    time_text: str
    model: str
    name: str
    avail_gib: float | None
    delta_gib: float | None
    duration_s: float | None


@dataclass(frozen=True, slots=True)
class SourcedValue:
    item: str
    gib: float | None
    source: str  # "log TP3 09:05:49 'Load weight end …'", "NVML 12:01:07", "metrics", "derived: …"


@dataclass(frozen=True, slots=True)
class GpuDetail:
    gpu: GpuView
    rank: RankStartup | None
    waterfall: tuple[WaterfallStep, ...]
    breakdown: tuple[SourcedValue, ...]
    peak_avail_gib: float | None  # the widest waterfall bar (pre-load free, or the total)


def waterfall(rank: RankStartup) -> tuple[WaterfallStep, ...]:
    """Phases that moved or measured memory, in log order (begin lines only when they measure)."""
    steps: list[WaterfallStep] = []
    for phase in rank.phases:
        if phase.avail_gib is None and phase.delta_gib is None:
            continue
        steps.append(
            WaterfallStep(
                time_text=_clock(phase),
                model=phase.model,
                name=phase.name,
                avail_gib=phase.avail_gib,
                delta_gib=phase.delta_gib,
                duration_s=phase.duration_s,
            )
        )
    return tuple(steps)


def _clock(phase: Phase) -> str:
    if phase.timestamp is not None:
        return phase.timestamp.strftime("%H:%M:%S")
    return phase.time_text or "?"


def _logged(rank: RankStartup, name: str, model: str = "target") -> str | None:
    for phase in reversed(rank.phases):
        if phase.name == name and phase.model == model:
            text = quoted(phase.message)
            return f"log {rank.rank} {_clock(phase)}: {text}"
    return None


QUOTE_CHARS = 120  # a log line quoted as a number's source, cut after this (the screen wraps)


def quoted(message: str, limit: int = QUOTE_CHARS) -> str:
    """`message` up to `limit` characters, cut at a space so no number or word is split."""
    if len(message) <= limit:
        return message
    cut = message.rfind(" ", 0, limit)
    return message[: cut if cut > 0 else limit].rstrip(" ,;") + " …"


def _graph_source(rank: RankStartup) -> str:
    names = [p.name for p in rank.phases if "graph" in p.name and not p.name.endswith("begin")]
    if not names:
        return "log: no capture line"
    return f"log {rank.rank}: sum of {len(names)} capture lines ({', '.join(names)})"


def breakdown(
    gpu: GpuView, rank: RankStartup | None, log: MemoryBreakdown | None, nvml_at: float | None
) -> tuple[SourcedValue, ...]:
    memory = gpu.memory
    at = datetime.fromtimestamp(nvml_at).strftime("%H:%M:%S") if nvml_at else "?"
    nvml = f"NVML {at}"
    if not memory.known:
        why = (
            "lost (fallen off the bus)"
            if gpu.sample.status == GpuStatus.LOST
            else "memory unreadable"
        )
        return (SourcedValue("total", None, f"{nvml}: GPU {why}; no number is derived for it"),)
    rows = [SourcedValue("total", memory.total_gib, f"{nvml} (memory info)")]
    other = _other_row(gpu, nvml)
    if rank is not None and log is not None:
        pre = log.pre_load_free_gib
        rows.append(
            SourcedValue(
                "baseline",
                memory.baseline_gib,
                f"derived: NVML total − pre-load free {pre:.2f} GiB"
                if pre is not None
                else "unknown: no pre-load free memory in the log",
            )
        )
        rows.append(
            SourcedValue("weights", memory.weights_gib, _logged(rank, "load weights") or "—")
        )
        rows.append(SourcedValue("KV cache", memory.kv_cache_gib, _logged(rank, "KV cache") or "—"))
        rows += _hybrid_rows(memory)
        if rank.draft is not None:
            rows.append(
                SourcedValue(
                    "draft weights",
                    memory.draft_weights_gib,
                    _logged(rank, "load weights", "draft") or "—",
                )
            )
            rows.append(
                SourcedValue(
                    "draft KV", memory.draft_kv_gib, _logged(rank, "KV cache", "draft") or "—"
                )
            )
        rows.append(SourcedValue("CUDA graphs", memory.graphs_gib, _graph_source(rank)))
        rows.append(SourcedValue("runtime", memory.runtime_gib, _runtime_source(memory, nvml)))
        rows += other
    else:
        rows += other
        rows.append(
            SourcedValue(
                "in use",
                memory.runtime_gib,
                f"{nvml}: no rank's log for it (less other processes)",
            )
        )
    rows.append(SourcedValue("free", memory.free_gib, f"{nvml} (memory info)"))
    if memory.reserve_gib is not None and log is not None and log.pre_load_free_gib is not None:
        rows.append(
            SourcedValue(
                "reserve",
                memory.reserve_gib,
                f"derived: pre-load free {log.pre_load_free_gib:.2f} × (1 − mem_fraction_static)",
            )
        )
    return tuple(rows)


def _runtime_source(memory: GpuMemory, nvml: str) -> str:
    if memory.log_excess_gib is not None:
        return (
            f"unknown: the log itemises {memory.log_excess_gib:.2f} GiB more than {nvml} sees "
            "in use (memory released, or a log of another start or host)"
        )
    return f"derived: {nvml} in use − the other segments (activations, allocator cache)"


def _hybrid_rows(memory: GpuMemory) -> list[SourcedValue]:
    """A hybrid model's state caches beside the KV pool (no rows for a plain model)."""
    rows = []
    if memory.mamba_gib is not None:
        source = "log: Mamba Cache is allocated (conv_state + ssm_state)"
        rows.append(SourcedValue("mamba", memory.mamba_gib, source))
    if memory.other_caches_gib is not None:
        source = "log: Mamba Cache is allocated (intermediate state caches)"
        rows.append(SourcedValue("other caches", memory.other_caches_gib, source))
    return rows


def _other_row(gpu: GpuView, nvml: str) -> list[SourcedValue]:
    """The other processes' GiB and how they were told apart from the server's (no row when
    there are none)."""
    others = [p for p in gpu.processes if p.other]
    if gpu.memory.other_processes_gib is None:
        source = f"{nvml} per process: no memory figure for one of them (unknown)"
    elif not others:
        return []
    else:
        pids = ", ".join(str(p.pid) for p in others[:4]) + (" …" if len(others) > 4 else "")
        source = f"{nvml} per process: pid {pids}, not the server's (see processes)"
    return [SourcedValue("other processes", gpu.memory.other_processes_gib, source)]


def gpu_detail(snapshot: Snapshot, index: int) -> GpuDetail | None:
    """The GPU with NVML index `index`, or None when it is not in this snapshot."""
    gpu = next((g for g in snapshot.gpus if g.sample.index == index), None)
    if gpu is None:
        return None
    startup = snapshot.analysis.startup
    rank = startup.ranks.get(gpu.ranks[0]) if len(gpu.ranks) == 1 else None
    log = next((b for b in snapshot.analysis.breakdowns if rank and b.rank == rank.rank), None)
    steps = waterfall(rank) if rank is not None else ()
    widest = [s.avail_gib for s in steps if s.avail_gib is not None]
    return GpuDetail(
        gpu=gpu,
        rank=rank,
        waterfall=steps,
        breakdown=breakdown(gpu, rank, log, snapshot.taken_at),
        peak_avail_gib=max(widest) if widest else None,
    )
