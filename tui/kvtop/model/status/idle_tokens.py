"""KV tokens held while nothing runs or waits: tokens not released (`kv_tokens_held_idle`).

SGLang's used tokens (`sglang:num_used_tokens`, a batch line's `#token`) are the pool less its
free and its evictable slots: a finished request's prefix stays in the radix cache, evictable,
and is not counted. With no request running and none waiting, nothing should hold a token but
a streaming session (`sglang:streaming_session_held_tokens`, taken out here): tokens held for
longer than the grace period are tokens a request never gave back, a leak that shrinks the
pool for every request after it until the server stops admitting them.

Only /metrics can show an idle server: SGLang refreshes its gauges every 30 s while idle,
whereas it writes batch lines only while something runs (a prefill line's `#running-req: 0`
counts the running batch without the requests being prefilled). One look cannot know how long
it has been idle: the watch (watch.py) feeds each look here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop import fmt
from kvtop.model.kv_usage import KvUsage
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.model.status.server_status import duration_text
from kvtop.sglang.metrics import MetricsSample


@dataclass(frozen=True, slots=True)
class IdleHold:
    """Tokens held while idle, as of one look."""

    held_tokens: int
    max_tokens: int | None
    evictable_tokens: int | None  # radix-cached, not counted in held (None: not published)
    session_tokens: int | None  # held by streaming sessions, taken out of held


def idle_hold(kv: KvUsage, metrics: MetricsSample | None) -> IdleHold | None:
    """The tokens held now while no request runs or waits, by /metrics; None when something
    runs or waits, nothing is held, or the reading cannot tell."""
    if metrics is None or not kv.current or kv.source_kind != "metrics":
        return None
    load = kv.load
    if load.running_requests != 0 or load.queued_requests != 0 or kv.used_tokens is None:
        return None
    session = _count(metrics, "streaming_session_held_tokens")
    held = kv.used_tokens - (session or 0)
    if held <= 0:
        return None
    return IdleHold(held, kv.max_tokens, _count(metrics, "kv_evictable_tokens"), session)


def _count(metrics: MetricsSample, name: str) -> int | None:
    value = metrics.values.get(name)
    return None if value is None else round(value)


class IdleTokens:
    """Since when tokens have been held while idle, and the alert past the grace period."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._restarts: int | None = None

    def look(
        self,
        kv: KvUsage,
        metrics: MetricsSample | None,
        now: float,
        restarts: int,
        t: Thresholds,
    ) -> Alert | None:
        if self._restarts is not None and restarts != self._restarts:
            self._since = None  # a new start: a new pool
        self._restarts = restarts
        hold = idle_hold(kv, metrics)
        if hold is None or (self._since is not None and now < self._since):
            self._since = None
            return None
        if self._since is None:
            self._since = now
        held_for = now - self._since
        if held_for < t.kv_idle_grace_s:
            return None
        return Alert(Level.WARNING, "kv_tokens_held_idle", _text(hold, held_for, t), "KV cache")


def _text(hold: IdleHold, held_for: float, t: Thresholds) -> str:
    share = ""
    if hold.max_tokens:
        share = f" ({fmt.pct(100 * hold.held_tokens / hold.max_tokens, 1)} of the pool)"
    if hold.evictable_tokens is None:
        cached = "radix-cached tokens, evictable, are not counted"
    elif hold.evictable_tokens == 0:
        cached = "none evictable"
    else:
        cached = f"{hold.evictable_tokens:,} radix-cached tokens, evictable, not counted"
    if hold.session_tokens:
        cached += f"; {hold.session_tokens:,} held by streaming sessions not counted"
    return (
        f"{hold.held_tokens:,} KV tokens{share} held for {duration_text(held_for)} while no "
        f"request runs or waits ({cached}): tokens not released, a leak that shrinks the pool "
        "for every request after; restart the server in a quiet moment (warning after "
        f"{duration_text(t.kv_idle_grace_s)} idle)"
    )
