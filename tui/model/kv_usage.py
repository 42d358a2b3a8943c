"""The KV pool right now: tokens in use, load, and how many requests of a length fit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tui import fmt
from tui.model.deployment import Snapshot
from tui.sglang.events import BatchStats
from tui.sglang.metrics import MetricsSample


@dataclass(frozen=True, slots=True)
class Capacity:
    """Requests of `length_tokens` the pool holds: when empty, and with what is free now."""

    length_tokens: int
    label: str  # "context length" or "your length"
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

    @property
    def host_usage_pct(self) -> float | None:
        """HiCache host pool in use (metrics give it from SGLang 0.5.12)."""
        if self.host_used_tokens is None or not self.host_total_tokens:
            return None
        return 100 * self.host_used_tokens / self.host_total_tokens

    @property
    def free_tokens(self) -> int | None:
        if self.max_tokens is None or self.used_tokens is None:
            return None
        return max(0, self.max_tokens - self.used_tokens)


@dataclass(frozen=True, slots=True)
class _Reading:
    """The pool and load as one source reported them (metrics or a batch line)."""

    used_tokens: int | None = None
    token_usage: float | None = None  # fraction of the pool
    load: Load = Load()
    source: str = "none"
    host_used_tokens: int | None = None
    host_total_tokens: int | None = None


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


def _context_len(snapshot: Snapshot) -> int | None:
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


def _usage_pct(reading: _Reading, max_tokens: int | None) -> float | None:
    usage, used = reading.token_usage, reading.used_tokens
    if usage is not None and usage <= 1.0:
        return usage * 100
    if used is not None and max_tokens:
        return 100 * used / max_tokens
    return None


def _capacity(
    max_tokens: int | None, free: int | None, lengths: tuple[tuple[int | None, str], ...]
) -> tuple[Capacity, ...]:
    return tuple(
        Capacity(length, label, max_tokens / length, None if free is None else free / length)
        for length, label in lengths
        if length and length > 0 and max_tokens
    )


def kv_usage(snapshot: Snapshot, user_length_tokens: int | None = None) -> KvUsage:
    """The pool, its use and the load now, and how many requests of each length fit."""
    reading = _reading(snapshot)
    max_tokens = _max_tokens(snapshot)
    used = reading.used_tokens
    if used is None and reading.token_usage is not None and max_tokens:
        used = round(reading.token_usage * max_tokens)
    free = None if max_tokens is None or used is None else max(0, max_tokens - used)
    lengths = ((_context_len(snapshot), "context length"), (user_length_tokens, "your length"))
    return KvUsage(
        max_tokens=max_tokens,
        used_tokens=used,
        usage_pct=_usage_pct(reading, max_tokens),
        load=reading.load,
        capacity=_capacity(max_tokens, free, lengths),
        source=reading.source,
        host_used_tokens=reading.host_used_tokens,
        host_total_tokens=reading.host_total_tokens,
    )
