"""The JSON of the session's memory growth (tui/kvtop/model/status/memory_growth.py).

A rate is null until the history spans `least_span_s`; one look (`--once`) has no history, so
its rates are null and its spans about 0.
"""

from __future__ import annotations

from kvtop.model.memory.growth_rate import MemoryGrowth


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def growth_json(growth: MemoryGrowth) -> dict[str, object]:
    """Per GPU its runtime memory's growth, per rank its host memory's (GiB/day, least
    squares over `span_s` seconds; `steady`: both halves of the span grow)."""
    return {
        "least_span_s": growth.least_span_s,
        "gpus": [
            {
                "index": g.index,
                "ranks": list(g.ranks),
                "runtime_gib_per_day": _r(g.runtime.gib_per_day),
                "span_s": _r(g.runtime.span_s, 1),
                "steady": g.runtime.steady,
                "runtime_gib": _r(g.runtime.latest_gib),
                # At the rate measured, days until the GPU has no free memory (null: no rate,
                # or not growing).
                "days_until_full": _r(g.days_until_full, 2),
            }
            for g in growth.gpus
        ],
        "ranks": [
            {
                "rank": r.rank,
                "pids": list(r.pids),
                "host_gib_per_day": _r(r.host.gib_per_day),
                "span_s": _r(r.host.span_s, 1),
                "steady": r.host.steady,
                "rss_gib": _r(r.host.latest_gib),
            }
            for r in growth.ranks
        ],
    }
