"""Per-rank memory picture from the startup log: what each GiB on the GPU is doing."""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.sizing.formula import reserve_gib
from kvtop.sglang.start_state import ModelMemory, RankStartup


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """GiB per item for one rank, as far as its log lines tell (None where they do not).

    `pre_load_free_gib` is the free memory before weights; everything below it is itemised:
    weights + KV + draft weights + draft KV + graphs + mamba + other caches + startup_other +
    free_after_startup.
    `startup_other_gib` is what startup allocated that no line names (request-to-token table,
    attention workspaces, allocator cache): the difference, never negative.
    """

    rank: str
    init_dist_gib: float | None
    pre_load_free_gib: float | None
    weights_gib: float | None
    kv_cache_gib: float | None
    draft_weights_gib: float | None
    draft_kv_gib: float | None
    graphs_gib: float | None
    startup_other_gib: float | None
    free_after_startup_gib: float | None
    free_after_startup_source: str | None
    reserve_gib: float | None
    free_after_pool_gib: float | None
    # Hybrid models: the Mamba state slots (target + draft) and the other caches
    # SGLang allocates beside the KV pool (speculative intermediate states); None when none.
    mamba_gib: float | None = None
    other_caches_gib: float | None = None
    # The fields above kvtop computed rather than read from one line (BREAKDOWN_HOW says how).
    derived: tuple[str, ...] = ()


# How each breakdown field that can be derived was computed (the memory table's footnote).
BREAKDOWN_HOW = {
    "kv_cache_gib": "K size + V size, or the KV lines summed",
    "draft_kv_gib": "K size + V size, or the KV lines summed",
    "graphs_gib": "the captures' mem usage summed, or a capture's free before and after",
    "mamba_gib": "the state sizes summed",
    "other_caches_gib": "the intermediate state sizes summed",
    "startup_other_gib": "pre-load free − free after startup − the items",
    "reserve_gib": "pre-load free × (1 − mem_fraction_static)",
}


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return round(sum(present), 6) if present else None


def free_after_startup(rank: RankStartup) -> tuple[float | None, str | None]:
    """The last free-memory reading of this rank (the summary line on TP0), and its phase."""
    for phase in reversed(rank.phases):
        if phase.avail_gib is not None:
            return phase.avail_gib, f"{phase.name} ({phase.model}) at {phase.time_text or '?'}"
    return None, None


def memory_breakdown(rank: RankStartup, mem_fraction_static: float | None) -> MemoryBreakdown:
    target: ModelMemory = rank.target
    draft = rank.draft
    pre = target.avail_before_load_gib
    free, free_source = free_after_startup(rank)
    graphs = _sum(target.graph_gib, draft.graph_gib if draft else None)
    draft_weights = draft.weights_gib if draft else None
    draft_kv = draft.kv_gib if draft else None
    mamba = _sum(target.mamba_gib, draft.mamba_gib if draft else None)
    other_caches = _sum(
        target.mamba_intermediate_gib, draft.mamba_intermediate_gib if draft else None
    )
    itemised = _sum(
        target.weights_gib, target.kv_gib, draft_weights, draft_kv, graphs, mamba, other_caches
    )
    other = None
    if pre is not None and free is not None and itemised is not None:
        other = max(0.0, round(pre - free - itemised, 2))
    reserve = None
    if pre is not None and mem_fraction_static is not None:
        reserve = reserve_gib(pre, mem_fraction_static)
    models = [m for m in (target, draft) if m is not None]
    computed = {
        "kv_cache_gib": "kv_gib" in target.derived_how,
        "draft_kv_gib": draft is not None and "kv_gib" in draft.derived_how,
        "graphs_gib": _derived_sum(models, "graph_gib"),
        "mamba_gib": _derived_sum(models, "mamba_gib"),
        "other_caches_gib": _derived_sum(models, "mamba_intermediate_gib"),
        "startup_other_gib": other is not None,
        "reserve_gib": reserve is not None,
    }
    return MemoryBreakdown(
        rank=rank.rank,
        init_dist_gib=target.init_dist_gib,
        pre_load_free_gib=pre,
        weights_gib=target.weights_gib,
        kv_cache_gib=target.kv_gib,
        draft_weights_gib=draft_weights,
        draft_kv_gib=draft_kv,
        graphs_gib=graphs,
        startup_other_gib=other,
        free_after_startup_gib=free,
        free_after_startup_source=free_source,
        reserve_gib=reserve,
        free_after_pool_gib=target.avail_after_pool_gib,
        mamba_gib=mamba,
        other_caches_gib=other_caches,
        derived=tuple(name for name, derived in computed.items() if derived),
    )


def _derived_sum(models: list[ModelMemory], name: str) -> bool:
    """A sum over target and draft, or one model's own derived value."""
    present = [m for m in models if getattr(m, name) is not None]
    derived = any(name in m.derived or name in m.derived_how for m in present)
    return len(present) > 1 or derived
