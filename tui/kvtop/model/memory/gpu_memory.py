"""One GPU's memory picture: the log's itemised startup memory reconciled with an NVML reading."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.model.str_enum import StrEnum

if TYPE_CHECKING:  # the live view imports this module before its first frame: kept light
    from kvtop.model.memory.rank_memory import MemoryBreakdown


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """GiB per segment of the stacked bar, left to right, summing to the card's total.

    `baseline` is what was in use before SGLang loaded anything (CUDA context, NCCL: total −
    pre-load free, less another's memory that was already there, which is counted once, in
    `other_processes`); `other_processes` is what processes that are not the server's hold now
    (NVML per process; 0.0 when none, None when NVML does not say); `runtime` is NVML's used
    memory minus everything itemised and the other processes (activations, allocator cache,
    buffers). `reserve_starts_at_gib` is where SGLang's reserve pre-load free ×
    (1 − mem_fraction_static) begins on the bar.

    No segment is ever negative: when the log itemises more than NVML sees in use by more than
    rounding (the server's memory released, a log of another start or host), runtime is
    unknown (None) and `log_excess_gib` says by how much; a note says it in words.

    A lost GPU (or one whose memory NVML cannot read) has no numbers at all: `lost_memory()`,
    every field None, no segment.
    """

    total_gib: float | None
    baseline_gib: float | None
    weights_gib: float | None
    kv_cache_gib: float | None
    draft_weights_gib: float | None
    draft_kv_gib: float | None
    graphs_gib: float | None
    runtime_gib: float | None
    free_gib: float | None
    reserve_gib: float | None
    reserve_starts_at_gib: float | None
    other_processes_gib: float | None = 0.0
    # Hybrid models: the Mamba state slots and other caches beside the KV pool (None: none).
    mamba_gib: float | None = None
    other_caches_gib: float | None = None
    # GiB the log itemises beyond what NVML sees in use (None: the numbers agree).
    log_excess_gib: float | None = None

    @property
    def known(self) -> bool:
        """False for a lost GPU: nothing on it can be drawn or derived."""
        return self.total_gib is not None

    def segments(self) -> list[tuple[str, float]]:
        """(name, GiB) in bar order, leaving out unknown and empty other-process segments.
        The server's segments come first (the reserve mark falls after its KV cache), then
        what is not the server's, then free."""
        other = self.other_processes_gib or None  # 0.0: no segment
        named = [
            ("baseline", self.baseline_gib),
            ("weights", self.weights_gib),
            ("KV cache", self.kv_cache_gib),
            # Inside the mem_fraction_static budget with the KV cache: before the reserve mark.
            ("mamba", self.mamba_gib),
            ("other caches", self.other_caches_gib),
            ("draft weights", self.draft_weights_gib),
            ("draft KV", self.draft_kv_gib),
            ("CUDA graphs", self.graphs_gib),
            ("runtime", self.runtime_gib),
            ("other processes", other),
            ("free", self.free_gib),
        ]
        return [(name, value) for name, value in named if value is not None]


def lost_memory() -> GpuMemory:
    """A GPU NVML lost (or whose memory it cannot read): no number, not even 0."""
    return GpuMemory(None, None, None, None, None, None, None, None, None, None, None, None)


# The log's GiB are rounded to two decimals per item: a runtime this far below zero is rounding
# (shown as 0.00); further below, the log and the GPU do not match.
ROUNDING_GIB = 0.5


def reconcile(
    total_gib: float,
    free_gib: float,
    log: MemoryBreakdown | None,
    other_processes_gib: float | None = 0.0,
) -> GpuMemory:
    """Join NVML's total/free with a rank's log breakdown (None: only used and free are known).

    `other_processes_gib`: memory of processes that are not the server's (NVML per process):
    its own segment, out of runtime (None: unknown, nothing taken out)."""
    in_use = max(0.0, total_gib - free_gib)  # NVML v2 "used" excludes the driver reserve
    other = other_processes_gib or 0.0
    if log is None:
        return GpuMemory(
            total_gib,
            None,
            None,
            None,
            None,
            None,
            None,
            round(max(0.0, in_use - other), 4),
            free_gib,
            None,
            None,
            other_processes_gib,
        )
    baseline = None
    if log.pre_load_free_gib is not None:
        baseline = max(0.0, round(total_gib - log.pre_load_free_gib, 4))
    items = (
        log.weights_gib,
        log.kv_cache_gib,
        log.draft_weights_gib,
        log.draft_kv_gib,
        log.graphs_gib,
        log.mamba_gib,
        log.other_caches_gib,
    )
    itemised = sum(v for v in items if v is not None)
    rest = round(in_use - (baseline or 0.0) - itemised - other, 4)
    if baseline is not None and other > 0 and rest < 0:
        # Another's memory already there when the rank measured its free memory before loading
        # is inside the baseline as well: counted once, in other processes. As much of it was
        # there as keeps runtime from going below zero (at most all of it).
        inside = min(other, baseline, -rest)
        baseline = round(baseline - inside, 4)
        rest = round(rest + inside, 4)
    runtime: float | None = max(0.0, rest)  # a rounding's worth below zero: nothing left
    excess = None
    if rest < -ROUNDING_GIB:
        excess, runtime = round(-rest, 4), None  # unknown: never a negative segment
    reserve_start = None
    if log.reserve_gib is not None:
        reserve_start = round(max(0.0, total_gib - log.reserve_gib), 4)
    return GpuMemory(
        total_gib=total_gib,
        baseline_gib=baseline,
        weights_gib=log.weights_gib,
        kv_cache_gib=log.kv_cache_gib,
        draft_weights_gib=log.draft_weights_gib,
        draft_kv_gib=log.draft_kv_gib,
        graphs_gib=log.graphs_gib,
        runtime_gib=runtime,
        free_gib=free_gib,
        reserve_gib=log.reserve_gib,
        reserve_starts_at_gib=reserve_start,
        other_processes_gib=other_processes_gib,
        mamba_gib=log.mamba_gib,
        other_caches_gib=log.other_caches_gib,
        log_excess_gib=excess,
    )


def ranks_by_order(
    gpu_indices: Sequence[int],
    ranks: Sequence[str],
    base_gpu_id: int = 0,
    visible_devices: Sequence[int] | None = None,
) -> dict[int, tuple[str, ...]]:
    """Rank i on CUDA device base_gpu_id + i (SGLang's placement) when processes cannot tell.

    CUDA numbers devices within CUDA_VISIBLE_DEVICES while NVML numbers all of them, so a
    device number goes through `visible_devices` (NVML indices) when that is known.
    """
    present = set(gpu_indices)
    mapping: dict[int, tuple[str, ...]] = {}
    for position, rank in enumerate(ranks):
        device = base_gpu_id + position
        if visible_devices is not None:
            if device >= len(visible_devices):
                continue
            device = visible_devices[device]
        if device in present:
            mapping[device] = (*mapping.get(device, ()), rank)
    return mapping


def parse_visible_devices(value: str | None, uuids: Sequence[str]) -> list[int] | None:
    """CUDA_VISIBLE_DEVICES ("4,5,6,7" or GPU UUIDs, possibly abbreviated) -> NVML indices."""
    if value is None or not value.strip():
        return None
    indices: list[int] = []
    for item in value.split(","):
        item = item.strip()
        if item.isdigit():
            indices.append(int(item))
            continue
        match = [i for i, uuid in enumerate(uuids) if item and uuid.startswith(item)]
        if len(match) != 1:
            return None  # MIG names or an unknown UUID: placement cannot be derived
        indices.append(match[0])
    return indices


class RankMapping(StrEnum):
    """How ranks were placed on GPUs; its value is the JSON's `rank_mapping`."""

    PROCESS = "process"  # the processes' titles name their ranks
    ORDER = "order"  # SGLang's order over the visible GPUs (advisory)
    NONE = "none"  # no ranks to place
    PROMETHEUS = "prometheus"  # the fleet: the ranks kvtop's exporter published


def choose_rank_mapping(
    gpu_indices: Sequence[int],
    ranks: Sequence[str],
    by_process: Mapping[int, tuple[str, ...]],
    base_gpu_id: int = 0,
    visible_devices: Sequence[int] | None = None,
) -> tuple[dict[int, tuple[str, ...]], RankMapping]:
    """Process titles when they name ranks, else SGLang's order; with how it was decided."""
    if any(by_process.values()):
        return dict(by_process), RankMapping.PROCESS
    if ranks:
        return ranks_by_order(gpu_indices, ranks, base_gpu_id, visible_devices), RankMapping.ORDER
    return {}, RankMapping.NONE
