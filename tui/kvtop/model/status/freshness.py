"""How old each source's numbers are, and when that is old enough to say so.

Every source has an age: seconds since its last good reading (SourceHealth.age_s; None before
the first). A good reading is a scrape with a sample, an NVML poll with GPUs answering, a read
of the log file or the journal; an idle server logs nothing for hours and its log is not stale
while kvtop can read it.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtop.model.snapshot import SourceHealth

# A source whose last good reading is older than this many refresh intervals shows its age:
# one late reading is normal (a slow scrape joins the next tick), three in a row are not.
STALE_INTERVALS = 3


def stale_after_s(interval_s: float) -> float:
    """The age past which a source's numbers are shown as old."""
    return STALE_INTERVALS * interval_s


def is_fresh(health: SourceHealth | None, interval_s: float) -> bool:
    """A good reading within the last three refresh intervals."""
    return (
        health is not None
        and health.age_s is not None
        and health.age_s <= stale_after_s(interval_s)
    )


def stale_age_s(health: SourceHealth, interval_s: float) -> float | None:
    """The age to show beside the source's marker once it is stale; None while fresh or
    before its first good reading (its marker says off or degraded then)."""
    if health.age_s is None or is_fresh(health, interval_s):
        return None
    return health.age_s


def named(sources: Iterable[SourceHealth], *names: str) -> SourceHealth | None:
    """The first source with one of these names (the log is "log" or "journal")."""
    return next((s for s in sources if s.name in names), None)
