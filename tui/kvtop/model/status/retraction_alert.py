"""Retractions too often: the KV pool fills during decode, and SGLang takes running requests
back to the queue to compute their KV again later (wasted work, longer latency).

SGLang's own tuning guide: retractions now and then are fine (about one a minute); frequent ones
mean the scheduler admits more than the pool holds as requests grow, and raising
--schedule-conservativeness (default 1.0, e.g. 1.3) makes it reserve more for each; when they go
on, --max-running-requests is to be lowered. The alert's words carry this server's values.
"""

from __future__ import annotations

from kvtop.model.retractions import Retractions, window_text
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.sglang.start_state import Startup

# SGLang's --schedule-conservativeness when not set, and the value its guide names to try.
DEFAULT_CONSERVATIVENESS = 1.0
GUIDE_CONSERVATIVENESS = 1.3


def _value(value: float) -> str:
    """1.0 as SGLang prints it (one decimal at least), 1.25 as it is."""
    return f"{value:.1f}" if round(value, 1) == value else f"{value:g}"


def conservativeness_to_try(now: float) -> float:
    """SGLang's 1.3 from the default or less; past it, 30 % more again."""
    return GUIDE_CONSERVATIVENESS if now < GUIDE_CONSERVATIVENESS else round(now * 1.3, 1)


def max_running_requests(startup: Startup) -> int | None:
    """The cap on running requests: as set, as SGLang reset it, or as it sized it at startup."""
    args = startup.server_args
    if args is not None and args.max_running_requests is not None:
        return args.max_running_requests
    if startup.max_running_requests_reset is not None:
        return startup.max_running_requests_reset
    summary = startup.summary
    return summary.max_running_requests if summary is not None else None


def advice(startup: Startup) -> str:
    """SGLang's rule with this server's values."""
    args = startup.server_args
    now = args.schedule_conservativeness if args is not None else None
    if now is None:
        conservativeness = (
            f"default {_value(DEFAULT_CONSERVATIVENESS)}, try {_value(GUIDE_CONSERVATIVENESS)}"
        )
    else:
        conservativeness = f"now {_value(now)}, try {_value(conservativeness_to_try(now))}"
    cap = max_running_requests(startup)
    running = f" (now {cap:,})" if cap is not None else ""
    return (
        f"SGLang's rule: raise --schedule-conservativeness ({conservativeness}); if they go on, "
        f"lower --max-running-requests{running}"
    )


def frequent(found: Retractions | None, t: Thresholds) -> bool:
    return (
        found is not None
        and found.per_min is not None
        and found.per_min >= t.retractions_per_min_warning
    )


def retraction_alert(snapshot: Snapshot, t: Thresholds) -> Alert | None:
    """A warning when requests were retracted at or above the threshold's rate over the window."""
    found = snapshot.retractions
    if found is None or not frequent(found, t):
        return None
    assert found.per_min is not None
    n = found.in_window if found.in_window is not None else 0
    text = (
        f"{n:,} request{'s' if n != 1 else ''} retracted in the last "
        f"{window_text(found.window_s)} ({found.per_min:.1f}/min): the KV pool fills during "
        "decode and SGLang takes running requests back to compute again later; "
        f"{advice(snapshot.analysis.startup)}; warning from "
        f"{t.retractions_per_min_warning:g}/min"
    )
    return Alert(Level.WARNING, "retractions_frequent", text, "KV cache")
