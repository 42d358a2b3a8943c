"""The KV cache right now: tokens in use, load, and how many requests of a length fit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from kvtop import fmt
from kvtop.model.snapshot import Snapshot
from kvtop.model.state_pool import StatePool, state_pool_now
from kvtop.model.status.freshness import named
from kvtop.model.status.server_status import duration_text
from kvtop.sglang.events import BatchStats
from kvtop.sglang.metrics import MetricsSample

# A batch line older than this (in the log's clock) is the last known usage, not the current
# one: a busy server logs one every few seconds, an idle one stops logging, so an old line says
# nothing about now. Neither is a line from before the latest start.
BATCH_CURRENT_S = 600.0


@dataclass(frozen=True, slots=True)
class Capacity:
    """Requests of `length_tokens` the pool holds: when empty, and with what is free now."""

    length_tokens: int
    label: str  # "context_len" or "your length"
    fit_in_pool: float
    fit_free_now: float | None


@dataclass(frozen=True, slots=True)
class Load:
    """What the server is doing: requests, generation speed, prefix-cache hits, draft acceptance."""

    running_requests: int | None = None
    queued_requests: int | None = None
    gen_throughput: float | None = None  # tokens/s
    cache_hit_pct: float | None = None
    accept_length: float | None = None  # speculative decoding: tokens accepted per step


def load_line(load: Load) -> str:
    """The load in the live view's and the report's words: `16 running · 0 queued · 674 tok/s`."""
    words = [
        f"{fmt.count(load.running_requests)} running",
        f"{fmt.count(load.queued_requests)} queued",
        f"{fmt.count(load.gen_throughput)} tok/s",
    ]
    if load.cache_hit_pct is not None:
        words.append(f"hit {fmt.pct(load.cache_hit_pct)}")
    if load.accept_length is not None:
        words.append(f"accept {load.accept_length:.2f}")
    return " · ".join(words)


@dataclass(frozen=True, slots=True)
class KvUsage:
    max_tokens: int | None
    used_tokens: int | None
    usage_pct: float | None
    load: Load
    capacity: tuple[Capacity, ...]
    source: str  # "metrics", "log: <batch line time>" or "none"
    host_used_tokens: int | None = None
    host_total_tokens: int | None = None
    source_kind: str = "none"  # "metrics", "log" or "none"
    # The batch line's kind and time as logged ("decode", "09:03:07"), for a log reading.
    batch_kind: str | None = None
    batch_time: str | None = None
    # Seconds since the numbers were current: the metrics source's age, or the batch line's
    # age in the log's clock (None: unknown, e.g. the log's clock is ahead of ours).
    age_s: float | None = None
    # False for a batch line too old to stand for now (BATCH_CURRENT_S, or before the latest
    # start): its numbers are the last known usage, shown as such and without alert colours.
    current: bool = True
    other_server: bool = False  # metrics were scraped but are another server's
    # A hybrid model's recurrent-state pool from the same reading; None for a plain model.
    state_pool: StatePool | None = None
    # Pool tokens holding radix-cached prefixes no running request uses: SGLang evicts them
    # for a new request, so a pool full of them is not full (metrics from 0.5.12; the batch
    # line does not say, so None from the log).
    evictable_tokens: int | None = None

    @property
    def evictable_pct(self) -> float | None:
        """The evictable cache's share of the pool, beside `usage_pct` (the used share)."""
        if self.evictable_tokens is None or not self.max_tokens:
            return None
        return 100 * self.evictable_tokens / self.max_tokens

    @property
    def host_usage_pct(self) -> float | None:
        """HiCache host pool in use (metrics give it from SGLang 0.5.12)."""
        if self.host_used_tokens is None or not self.host_total_tokens:
            return None
        return 100 * self.host_used_tokens / self.host_total_tokens


@dataclass(frozen=True, slots=True)
class _Reading:
    """The pool and load as one source reported them (metrics or a batch line)."""

    used_tokens: int | None = None
    token_usage: float | None = None  # fraction of the pool
    load: Load = Load()
    source: str = "none"
    host_used_tokens: int | None = None
    host_total_tokens: int | None = None
    kind: str = "none"
    batch: BatchStats | None = None
    evictable_tokens: int | None = None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _hit_pct(rate: float | None) -> float | None:
    """SGLang logs the hit rate as a fraction (a percentage in some versions)."""
    if rate is None:
        return None
    return rate * 100 if rate <= 1 else rate


def load_from_metrics(metrics: MetricsSample) -> Load:
    return Load(
        running_requests=metrics.running_requests,
        queued_requests=metrics.queued_requests,
        gen_throughput=_finite(metrics.gen_throughput),
        cache_hit_pct=_hit_pct(_finite(metrics.cache_hit_rate)),
        accept_length=_finite(metrics.spec_accept_length),
    )


def load_from_batch(batch: BatchStats) -> Load:
    return Load(
        running_requests=batch.running_reqs,
        queued_requests=batch.queued_reqs,
        gen_throughput=batch.gen_throughput,
        cache_hit_pct=_hit_pct(batch.cache_hit_rate),
        accept_length=batch.accept_len,
    )


def _reading(snapshot: Snapshot) -> _Reading:
    """Metrics when scraped, else the latest batch line of the log (SGLang logs the same numbers)."""
    metrics = snapshot.trusted_metrics
    if metrics is not None:
        return _Reading(
            used_tokens=metrics.used_tokens,
            token_usage=_finite(metrics.token_usage),
            load=load_from_metrics(metrics),
            source="metrics",
            host_used_tokens=metrics.hicache_host_used_tokens,
            host_total_tokens=metrics.hicache_host_total_tokens,
            kind="metrics",
            evictable_tokens=metrics.evictable_tokens,
        )
    batches = snapshot.analysis.startup.latest_batch
    if not batches:
        return _Reading()
    # The batch line of the lowest rank: every rank of a TP group logs the same numbers.
    batch = batches[min(batches)]
    other = " (metrics are from another server)" if snapshot.metrics is not None else ""
    return _Reading(
        used_tokens=batch.tokens,
        token_usage=batch.token_usage,
        load=load_from_batch(batch),
        source=f"log: {batch.kind} batch at {batch.prefix.time_text or '?'}{other}",
        kind="log",
        batch=batch,
    )


def _max_tokens(snapshot: Snapshot) -> int | None:
    """The pool size: from metrics, else the summary line, else the first rank's KV line."""
    metrics, analysis = snapshot.trusted_metrics, snapshot.analysis
    if metrics is not None and metrics.max_total_num_tokens is not None:
        return metrics.max_total_num_tokens
    summary = analysis.startup.summary
    if summary is not None and summary.max_total_num_tokens is not None:
        return summary.max_total_num_tokens
    return analysis.ranks[0].target.kv_tokens if analysis.ranks else None


def context_len(snapshot: Snapshot) -> int | None:
    """The model's context length: from metrics, else the summary line, else server_args."""
    startup = snapshot.analysis.startup
    metrics, summary, args = snapshot.trusted_metrics, startup.summary, startup.server_args
    for context in (
        metrics.context_len if metrics else None,
        summary.context_len if summary else None,
        args.context_length if args else None,
    ):
        if context is not None:
            return context
    return None


# SGLang rounds the batch line's token usage to two decimals: an exact count within this of it
# is the same figure, exact (a hybrid's usage is the larger of two pools: it differs more).
_ROUNDING = 0.005 + 1e-9


def usage_pct(used: int | None, max_tokens: int | None, ratio: float | None) -> float | None:
    """The pool's use in percent: from the exact token count where the source gives one that
    agrees with its own ratio (the batch line's `#token` against its usage rounded to 0.01, the
    used-tokens gauge), so 94.57 % is never read as the 95 % edge it is not on."""
    exact = 100 * used / max_tokens if used is not None and max_tokens else None
    if ratio is not None and ratio <= 1.0:
        if exact is not None and abs(exact / 100 - ratio) <= _ROUNDING:
            return exact
        return ratio * 100
    return exact


def _usage_pct(reading: _Reading, max_tokens: int | None) -> float | None:
    return usage_pct(reading.used_tokens, max_tokens, reading.token_usage)


def _capacity(
    max_tokens: int | None, free: int | None, lengths: tuple[tuple[int | None, str], ...]
) -> tuple[Capacity, ...]:
    return tuple(
        Capacity(length, label, max_tokens / length, None if free is None else free / length)
        for length, label in lengths
        if length and length > 0 and max_tokens
    )


def _age_and_current(
    snapshot: Snapshot, reading: _Reading, now: datetime | None
) -> tuple[float | None, bool]:
    """How old the reading is, and whether it still stands for now (see BATCH_CURRENT_S).
    `now` is in the log's clock (local time, like SGLang's), as for the uptime."""
    if reading.kind == "metrics":
        metrics = named(snapshot.sources, "metrics")
        return (metrics.age_s if metrics is not None else None), True
    batch = reading.batch
    stamp = batch.prefix.timestamp if batch is not None else None
    if stamp is None:
        return None, True
    start = snapshot.analysis.startup.first_time
    before_start = start is not None and stamp < start
    age = (now - stamp).total_seconds() if now is not None else None
    if age is not None and age < 0:
        age = None  # the log's clock is ahead of ours (another host, another zone)
    return age, not before_start and (age is None or age <= BATCH_CURRENT_S)


def kv_usage(
    snapshot: Snapshot, user_length_tokens: int | None = None, now: datetime | None = None
) -> KvUsage:
    """The pool, its use and the load now, and how many requests of each length fit; `now`
    (the log's clock) dates a batch line that stands in for metrics."""
    reading = _reading(snapshot)
    age_s, current = _age_and_current(snapshot, reading, now)
    max_tokens = _max_tokens(snapshot)
    used = reading.used_tokens
    if used is None and reading.token_usage is not None and max_tokens:
        used = round(reading.token_usage * max_tokens)
    free = None if max_tokens is None or used is None else max(0, max_tokens - used)
    if not current:
        free = None  # the last known usage says nothing about what is free now
    lengths = ((context_len(snapshot), "context_len"), (user_length_tokens, "your length"))
    return KvUsage(
        max_tokens=max_tokens,
        used_tokens=used,
        usage_pct=_usage_pct(reading, max_tokens),
        load=reading.load,
        capacity=_capacity(max_tokens, free, lengths),
        source=reading.source,
        host_used_tokens=reading.host_used_tokens,
        host_total_tokens=reading.host_total_tokens,
        source_kind=reading.kind,
        batch_kind=reading.batch.kind if reading.batch is not None else None,
        batch_time=reading.batch.prefix.time_text if reading.batch is not None else None,
        age_s=age_s,
        current=current,
        other_server=reading.kind == "log" and snapshot.metrics is not None,
        state_pool=state_pool_now(snapshot, reading.kind, reading.batch),
        evictable_tokens=reading.evictable_tokens,
    )


def kv_now(snapshot: Snapshot) -> KvUsage:
    """The KV cache as of the snapshot: its time is "now" in the log's clock, which dates a
    batch line standing in for metrics (the report, --check, the alert rule, the history)."""
    return kv_usage(snapshot, now=datetime.fromtimestamp(snapshot.taken_at))


def source_text(usage: KvUsage, stale_after_s: float) -> str | None:
    """Where the KV numbers come from and how old they are, when that needs saying: fresh
    metrics need no words; a batch line always names itself and its age."""
    if usage.source_kind == "none":
        return "no metrics and no batch line yet"
    if usage.source_kind == "metrics":
        if usage.age_s is not None and usage.age_s > stale_after_s:
            return f"metrics, {duration_text(usage.age_s)} old"
        return None
    other = " (metrics are from another server)" if usage.other_server else ""
    age, when = usage.age_s, usage.batch_time or "?"
    if not usage.current:  # its date too: it may be from another day
        ago = f", {duration_text(age)} ago" if age is not None else ", before the latest start"
        return f"last known usage: log {usage.batch_kind} batch line {when}{ago}{other}"
    line = f"log {usage.batch_kind} batch line {when.rsplit(' ', 1)[-1]}"  # today: the time
    return f"{line}, {duration_text(age)} old{other}" if age is not None else f"{line}{other}"
