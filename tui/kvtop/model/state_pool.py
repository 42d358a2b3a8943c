"""The recurrent-state pool of a hybrid model (Mamba, GDN / linear attention) beside its KV cache.

Such a model holds a fixed number of state slots besides the KV pool: each running request
takes one or a few, and a slot that is never freed stays taken until the pool is full and the
server stops admitting requests. SGLang logs the pool's share in use on its batch lines
(`mamba num: 46, mamba usage: 0.72`) and exports it as `sglang:mamba_usage` (0.5.6+); the two
are the same number, read from the same source as the KV usage (metrics when trusted).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop import fmt
from kvtop.model.snapshot import Snapshot
from kvtop.sglang.events import BatchStats
from kvtop.sglang.metrics import MetricsSample


@dataclass(frozen=True, slots=True)
class StatePool:
    """The state pool in use now: a percentage of its slots, and the slots when known."""

    usage_pct: float | None
    slots_used: int | None = None
    slots: int | None = None  # the pool's size (the log's max_mamba_cache_size, or metrics)
    source_kind: str = "none"  # "metrics" or "log"


def logged_state_pool(snapshot: Snapshot) -> bool:
    """The log says the model has a state pool: its `Mamba Cache is allocated` line, or a batch
    line with `mamba usage`."""
    analysis = snapshot.analysis
    if any(r.target.mamba_gib is not None or r.target.mamba_slots for r in analysis.ranks):
        return True
    return any(b.mamba_usage is not None for b in analysis.startup.latest_batch.values())


def _logged_slots(snapshot: Snapshot, batch: BatchStats | None) -> int | None:
    """The slots of the rank that logged the batch line (every rank of a DP group has as many)."""
    ranks = snapshot.analysis.ranks
    rank = next((r for r in ranks if batch is not None and r.rank == batch.prefix.rank), None)
    rank = rank if rank is not None else (ranks[0] if ranks else None)
    return rank.target.mamba_slots if rank is not None else None


def from_metrics(metrics: MetricsSample, logged: bool) -> StatePool | None:
    """SGLang sends `sglang:mamba_usage 0` for a plain model too: the pool is known from
    metrics when the log says the model has one, when slots are counted or when some are used."""
    usage = metrics.mamba_usage
    if usage is None:
        return None
    slots = metrics.mamba_slots
    if not (logged or usage > 0 or (slots is not None and slots > 0)):
        return None
    return StatePool(usage * 100, metrics.mamba_slots_used, slots or None, "metrics")


def from_batch(snapshot: Snapshot, batch: BatchStats) -> StatePool | None:
    if batch.mamba_usage is None:
        return None
    slots = _logged_slots(snapshot, batch)
    used = batch.mamba_slots_used
    pct = batch.mamba_usage * 100
    # SGLang rounds the usage to 0.01: the exact slot count gives the exact share when it agrees.
    if used is not None and slots and abs(used / slots - batch.mamba_usage) <= 0.005 + 1e-9:
        pct = 100 * used / slots
    return StatePool(pct, used, slots, "log")


def state_pool_now(snapshot: Snapshot, kind: str, batch: BatchStats | None) -> StatePool | None:
    """The state pool from the KV usage's own reading (`kind`: "metrics", "log" or "none";
    `batch`: the batch line of a log reading); metrics without the gauge (before 0.5.6) leave
    it to the latest batch line. None: the model has no state pool that kvtop knows of."""
    logged = logged_state_pool(snapshot)
    metrics = snapshot.trusted_metrics
    if kind == "metrics" and metrics is not None:
        found = from_metrics(metrics, logged)
        if found is not None or metrics.mamba_usage is not None:
            return found
        batches = snapshot.analysis.startup.latest_batch
        batch = batches[min(batches)] if batches else None
    if batch is not None:
        found = from_batch(snapshot, batch)
        if found is not None:
            return found
    if logged:
        return StatePool(None, None, _logged_slots(snapshot, batch), "none")
    return None


def slots_text(pool: StatePool) -> str:
    """`46 / 64 slots`, `46 slots`, or "" when the slots in use are not known."""
    if pool.slots_used is None:
        return ""
    return (
        f"{pool.slots_used:,} / {pool.slots:,} slots"
        if pool.slots
        else f"{pool.slots_used:,} slots"
    )


def state_pool_text(pool: StatePool) -> str:
    """The report's words: `72.00% in use (46 / 64 slots; Mamba state beside the KV cache)`."""
    pct = fmt.pct(pool.usage_pct, 2) if pool.usage_pct is not None else "not known yet"
    used = " in use" if pool.usage_pct is not None else ""
    slots = slots_text(pool)
    where = {"metrics": "metrics", "log": "the log's batch line"}.get(pool.source_kind)
    said = "; ".join(w for w in (slots, f"from {where}" if where else "") if w)
    return f"{pct}{used}" + (f" ({said})" if said else "")
