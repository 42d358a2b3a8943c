"""Memory that keeps growing while the server serves: each GPU's runtime memory and each rank's
host memory, as GiB/day over the session, and the `memory_growing` alert.

A server that serves steadily holds steady memory once warm: its KV pool is allocated at
startup, the allocator's cache settles after the largest batches have come. What climbs for
hours is memory not given back (a leak): on the GPU it eats the free memory until a large
prefill runs out of it, on the host the ranks' resident memory climbs until the host swaps or
kills them. One look cannot see a rate: the watch (watch.py) feeds every look here, each
figure's history is kept bounded (growth_rate.py), and no rate is given before the history
spans `growth_min_span_s`.

GPU: the runtime segment (NVML's used memory beyond what the startup itemised and other
processes hold: tui/kvtop/model/memory/gpu_memory.py), so another process allocating on the
card is not the server's growth. Host: the resident memory (RSS) of the processes whose titles
name the rank. A new start (the restart count, or other server processes on the GPU or for the
rank) starts the figure's history again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtop.model.memory.growth_rate import (
    SECONDS_PER_DAY,
    GpuGrowth,
    GrowthRate,
    GrowthSeries,
    MemoryGrowth,
    RankGrowth,
    growth_rate,
)
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.model.status.server_status import duration_text


@dataclass(slots=True)
class _Tracked:
    series: GrowthSeries = field(default_factory=GrowthSeries)
    owners: frozenset[int] = frozenset()  # the server's pids it was measured under


def _follow(tracked: _Tracked, owners: frozenset[int], at: float, gib: float) -> None:
    if owners and tracked.owners and owners != tracked.owners:
        tracked.series.clear()  # other processes: another server's memory
    if owners:
        tracked.owners = owners
    tracked.series.add(at, gib)


class MemoryGrowthWatch:
    """The history of each figure over the session, and the growth and alerts it shows."""

    def __init__(self) -> None:
        self._gpus: dict[int, _Tracked] = {}
        self._ranks: dict[str, _Tracked] = {}
        self._restarts: int | None = None

    def look(self, snapshot: Snapshot, t: Thresholds) -> tuple[MemoryGrowth, tuple[Alert, ...]]:
        now = snapshot.taken_at
        restarts = snapshot.analysis.startup.restarts
        if self._restarts is not None and restarts != self._restarts:
            self._gpus.clear()  # a new start: new memory
            self._ranks.clear()
        self._restarts = restarts
        gpus = self._look_gpus(snapshot, now, t)
        ranks = self._look_ranks(snapshot, now, t)
        growth = MemoryGrowth(gpus, ranks, t.growth_min_span_s, watched=True)
        alerts = [_gpu_alert(g, t) for g in gpus] + [_rank_alert(r, t) for r in ranks]
        return growth, tuple(a for a in alerts if a is not None)

    def _look_gpus(self, snapshot: Snapshot, now: float, t: Thresholds) -> tuple[GpuGrowth, ...]:
        found = []
        seen = set()
        for gpu in snapshot.gpus:
            index = gpu.sample.index
            seen.add(index)
            tracked = self._gpus.setdefault(index, _Tracked())
            runtime = gpu.memory.runtime_gib
            if not gpu.lost and runtime is not None:
                owners = frozenset(p.pid for p in gpu.processes if not p.other)
                _follow(tracked, owners, now, runtime)
            if tracked.series.first_at is None:
                continue
            free = None if gpu.lost else gpu.sample.free_gib
            rate = growth_rate(tracked.series, t.growth_min_span_s)
            found.append(GpuGrowth(index, gpu.ranks, rate, free))
        for index in set(self._gpus) - seen:
            del self._gpus[index]  # a GPU gone from NVML's list: bounded over swaps
        return tuple(found)

    def _look_ranks(self, snapshot: Snapshot, now: float, t: Thresholds) -> tuple[RankGrowth, ...]:
        rss: dict[str, dict[int, float]] = {}
        unread: set[str] = set()
        for gpu in snapshot.gpus:
            for p in gpu.processes:
                if p.other or p.rank is None:
                    continue
                if p.rss_gib is None:
                    unread.add(p.rank)
                else:
                    rss.setdefault(p.rank, {})[p.pid] = p.rss_gib
        found = []
        for rank in sorted(rss, key=_rank_order):
            tracked = self._ranks.setdefault(rank, _Tracked())
            if rank not in unread:  # a process of the rank not read now: no sum now
                _follow(tracked, frozenset(rss[rank]), now, sum(rss[rank].values()))
            if tracked.series.first_at is None:
                continue
            rate = growth_rate(tracked.series, t.growth_min_span_s)
            found.append(RankGrowth(rank, tuple(sorted(tracked.owners)), rate))
        for rank in set(self._ranks) - set(rss):
            del self._ranks[rank]  # its processes are gone: a new one starts a new history
        return tuple(found)


def _rank_order(rank: str) -> tuple[str, int]:
    head = rank.rstrip("0123456789")
    tail = rank[len(head) :]
    return (head, int(tail) if tail else -1)


def _span_text(rate: GrowthRate) -> str:
    return duration_text(rate.span_s)


def _from_to(rate: GrowthRate) -> str:
    if rate.first_gib is None or rate.latest_gib is None:
        return ""
    return f" ({rate.first_gib:,.2f} → {rate.latest_gib:,.2f} GiB)"


def _grows(rate: GrowthRate, bound: float) -> bool:
    return rate.gib_per_day is not None and rate.gib_per_day >= bound and rate.steady


def _gpu_alert(gpu: GpuGrowth, t: Thresholds) -> Alert | None:
    rate = gpu.runtime
    if not _grows(rate, t.gpu_growth_warning_gib_per_day) or rate.gib_per_day is None:
        return None
    ranks = f" ({', '.join(gpu.ranks)})" if gpu.ranks else ""
    days = gpu.days_until_full
    left = ""
    if days is not None and gpu.free_gib is not None:
        left = (
            f"; at this rate its {gpu.free_gib:,.2f} GiB free are gone in "
            f"{duration_text(days * SECONDS_PER_DAY)}"
        )
    text = (
        f"GPU {gpu.index}{ranks}: runtime memory grows {rate.gib_per_day:,.2f} GiB/day, "
        f"steadily over the last {_span_text(rate)}{_from_to(rate)}{left}: memory the server "
        "does not give back (a leak); restart the server in a quiet moment before it runs out "
        f"(warning from {t.gpu_growth_warning_gib_per_day:g} GiB/day)"
    )
    return Alert(Level.WARNING, "memory_growing", text, f"GPU {gpu.index}")


def _rank_alert(rank: RankGrowth, t: Thresholds) -> Alert | None:
    rate = rank.host
    if not _grows(rate, t.host_growth_warning_gib_per_day) or rate.gib_per_day is None:
        return None
    pids = ", ".join(str(p) for p in rank.pids)
    text = (
        f"{rank.rank}'s host memory (resident, pid {pids}) grows {rate.gib_per_day:,.2f} "
        f"GiB/day, steadily over the last {_span_text(rate)}{_from_to(rate)}: memory the rank "
        "does not give back (a leak); restart the server in a quiet moment before the host "
        f"swaps or kills it (warning from {t.host_growth_warning_gib_per_day:g} GiB/day)"
    )
    return Alert(Level.WARNING, "memory_growing", text, f"{rank.rank} host memory")


def growth_line(growth: MemoryGrowth, index: int) -> str | None:
    """The GPU detail view's line: `runtime growth: +0.42 GiB/day over 5h10m`; before the
    history spans enough, how long it still needs; None for one look or a GPU not measured."""
    gpu = growth.gpu(index) if growth.watched else None
    if gpu is None:
        return None
    rate = gpu.runtime
    if rate.gib_per_day is None:
        return (
            f"runtime growth: measured once kvtop has watched {duration_text(growth.least_span_s)}"
            f" ({duration_text(rate.span_s)} so far)"
        )
    line = f"runtime growth: {rate.gib_per_day:+,.2f} GiB/day over {_span_text(rate)}"
    days = gpu.days_until_full
    if days is not None and rate.steady:
        line += f", free memory gone in {duration_text(days * SECONDS_PER_DAY)} at this rate"
    return line
