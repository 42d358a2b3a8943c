"""The KV pool right now: tokens in use, load, and how many requests of a length fit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tui.model.deployment import Snapshot


@dataclass(frozen=True, slots=True)
class Capacity:
    """Requests of `length_tokens` the pool holds: when empty, and with what is free now."""

    length_tokens: int
    label: str  # "context length" or "your length"
    fit_in_pool: float
    fit_free_now: float | None


@dataclass(frozen=True, slots=True)
class KvUsage:
    max_tokens: int | None
    used_tokens: int | None
    usage_pct: float | None
    running_requests: int | None
    queued_requests: int | None
    gen_throughput: float | None
    cache_hit_pct: float | None
    accept_length: float | None
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


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def kv_usage(snapshot: Snapshot, user_length_tokens: int | None = None) -> KvUsage:
    """Metrics when scraped, else the latest batch line of the log (SGLang logs the same numbers)."""
    startup = snapshot.analysis.startup
    summary = startup.summary
    metrics = snapshot.metrics
    max_tokens = metrics.max_total_num_tokens if metrics else None
    if max_tokens is None:
        max_tokens = summary.max_total_num_tokens if summary else None
        if max_tokens is None and snapshot.analysis.ranks:
            max_tokens = snapshot.analysis.ranks[0].target.kv_tokens
    context = metrics.context_len if metrics else None
    if context is None and summary is not None:
        context = summary.context_len
    args = startup.server_args
    if context is None and args is not None:
        context = args.context_length
    used = usage = running = queued = throughput = hit = accept = None
    host_used = host_total = None
    if metrics is not None:
        used, running, queued = (
            metrics.used_tokens,
            metrics.running_requests,
            metrics.queued_requests,
        )
        usage = _finite(metrics.token_usage)
        throughput = _finite(metrics.gen_throughput)
        hit = _finite(metrics.cache_hit_rate)
        accept = _finite(metrics.spec_accept_length)
        host_used, host_total = metrics.hicache_host_used_tokens, metrics.hicache_host_total_tokens
        source = "metrics"
    elif startup.latest_batch:
        # The batch line of the lowest rank: every rank of a TP group logs the same numbers.
        batch = startup.latest_batch[min(startup.latest_batch)]
        used, usage, running, queued = (
            batch.tokens,
            batch.token_usage,
            batch.running_reqs,
            batch.queued_reqs,
        )
        throughput, hit, accept = batch.gen_throughput, batch.cache_hit_rate, batch.accept_len
        source = f"log: {batch.kind} batch at {batch.prefix.time_text or '?'}"
    else:
        source = "none"
    if usage is not None and usage <= 1.0:
        usage_pct = usage * 100
    elif used is not None and max_tokens:
        usage_pct = 100 * used / max_tokens
    else:
        usage_pct = None
    if used is None and usage is not None and max_tokens:
        used = round(usage * max_tokens)
    free = None if max_tokens is None or used is None else max(0, max_tokens - used)
    capacity: list[Capacity] = []
    lengths = [(context, "context length"), (user_length_tokens, "your length")]
    for length, label in lengths:
        if length and length > 0 and max_tokens:
            capacity.append(
                Capacity(
                    length,
                    label,
                    max_tokens / length,
                    None if free is None else free / length,
                )
            )
    return KvUsage(
        max_tokens=max_tokens,
        used_tokens=used,
        usage_pct=usage_pct,
        running_requests=running,
        queued_requests=queued,
        gen_throughput=throughput,
        cache_hit_pct=None if hit is None else hit * 100 if hit <= 1 else hit,
        accept_length=accept,
        capacity=tuple(capacity),
        source=source,
        host_used_tokens=host_used,
        host_total_tokens=host_total,
    )
