"""Which limit holds requests back now: the running-request cap, the KV pool, the prefill
budget, or a context longer than the pool; "no limit binds" while nothing waits.

SGLang admits a waiting request when a running slot is free (max_running_requests, which it
may have lowered at startup for the pool), the pool has room for it (free tokens plus cached
prefixes it can evict), and the step's prefill budget has room (max_prefill_tokens, a prompt
longer than chunked_prefill_size taken in chunks). kvtop names the first of these that the
numbers show binding, with the numbers. It cannot see SGLang's reserve for the running
requests' next tokens, so it names the pool only when the tokens running requests hold reach
POOL_HELD_PCT of it: a full pool whose tokens are mostly evictable cache is not the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kvtop import fmt
from kvtop.model.kv_usage import KvUsage, context_len
from kvtop.model.snapshot import Snapshot
from kvtop.sglang.server_args import ServerArgs

MAX_RUNNING_REQUESTS = "max_running_requests"
KV_POOL = "kv_pool"
PREFILL_BUDGET = "prefill_budget"
CONTEXT_OVER_POOL = "context_over_pool"

# The pool holds requests back once running requests hold this much of it (evictable cache
# not counted): below it there is room for a request of ordinary length.
POOL_HELD_PCT = 80.0

NO_LIMIT = "no limit binds"


@dataclass(frozen=True, slots=True)
class RunningCap:
    """max_running_requests as SGLang runs with it, on the scale of the running count read,
    and whether (from what, why) SGLang lowered it."""

    value: int | None  # the deployment's when read from /metrics (all DP groups), else one's
    per_dp: int | None
    dp_groups: int
    source: str  # "/server_info", "log summary line", "log", "server args" or "none"
    requested: int | None = None  # per DP worker, as asked
    lowered_why: str | None = None


@dataclass(frozen=True, slots=True)
class BindingLimit:
    limit: str | None  # one of the names above; None: no limit binds
    text: str
    numbers: Mapping[str, object] = field(default_factory=dict)
    short: str = ""  # the live view's few words: `held back by the KV pool: …`


def _dp_groups(snapshot: Snapshot, usage: KvUsage) -> int:
    """DP groups the running count adds up: /metrics sums them; a batch line is one group's."""
    if usage.source_kind != "metrics":
        return 1
    metrics = snapshot.trusted_metrics
    if metrics is not None and metrics.max_total_num_tokens_by_dp:
        return len(metrics.max_total_num_tokens_by_dp)
    args = snapshot.analysis.startup.server_args
    return args.dp_size if args is not None and args.dp_size else 1


def _per_dp_asked(snapshot: Snapshot) -> int | None:
    """The max_running_requests asked for, per DP worker (SGLang divides it across them)."""
    args = snapshot.analysis.startup.server_args
    if args is None or args.max_running_requests is None:
        return None
    dp = args.dp_size or 1
    return (
        args.max_running_requests // dp
        if args.enable_dp_attention and dp > 1
        else (args.max_running_requests)
    )


def running_cap(snapshot: Snapshot, usage: KvUsage) -> RunningCap:
    """The effective max_running_requests: /server_info's, else the log's summary line, else
    the line that lowered it, else the argument; and from what and why SGLang lowered it."""
    startup = snapshot.analysis.startup
    info, summary = snapshot.server_info, startup.summary
    reduced, reset = startup.max_running_requests_reduced, startup.max_running_requests_reset
    groups = _dp_groups(snapshot, usage)
    per_dp: int | None = None
    source = "none"
    if info is not None and info.max_running_requests_by_dp:
        caps = info.max_running_requests_by_dp
        per_dp, source = caps[0], "/server_info"
        if usage.source_kind == "metrics":
            total = sum(caps) if len(caps) == groups else caps[0] * groups
            return _with_why(RunningCap(total, per_dp, groups, source), snapshot)
    elif summary is not None and summary.max_running_requests is not None:
        per_dp, source = summary.max_running_requests, "log summary line"
    elif reduced is not None and reduced.value is not None:
        per_dp, source = reduced.value, "log"
    elif reset is not None:
        per_dp, source = reset, "log"
    elif startup.server_args is not None and startup.server_args.max_running_requests:
        per_dp, source = _per_dp_asked(snapshot), "server args"
    value = None if per_dp is None else per_dp * groups
    return _with_why(RunningCap(value, per_dp, groups, source), snapshot)


def _with_why(cap: RunningCap, snapshot: Snapshot) -> RunningCap:
    startup = snapshot.analysis.startup
    reduced, reset = startup.max_running_requests_reduced, startup.max_running_requests_reset
    if reduced is not None:
        why = f"SGLang lowered it for the {reduced.reason}"
        if reduced.requested is not None:
            why = f"SGLang reduced it from the requested {reduced.requested:,} for the {reduced.reason}"
        return RunningCap(cap.value, cap.per_dp, cap.dp_groups, cap.source, reduced.requested, why)
    if reset is not None and reset == cap.per_dp:
        why = "SGLang set it for speculative decoding (no --max-running-requests given)"
        return RunningCap(cap.value, cap.per_dp, cap.dp_groups, cap.source, None, why)
    asked = _per_dp_asked(snapshot)
    if asked is not None and cap.per_dp is not None and cap.per_dp < asked:
        why = f"SGLang capped the requested {asked:,} without a line saying why"
        return RunningCap(cap.value, cap.per_dp, cap.dp_groups, cap.source, asked, why)
    return cap


def _raw_count(args: ServerArgs | None, name: str) -> int | None:
    value = args.raw.get(name) if args is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _prefill(snapshot: Snapshot) -> tuple[int | None, int | None]:
    """(max_prefill_tokens, chunked_prefill_size): the summary line, else the server args
    (the log's, then /server_info's)."""
    startup = snapshot.analysis.startup
    summary = startup.summary
    info_args = snapshot.server_info.server_args if snapshot.server_info else None
    chunk = summary.chunked_prefill_size if summary else None
    budget = summary.max_prefill_tokens if summary else None
    for args in (startup.server_args, info_args):
        if chunk is None and args is not None:
            chunk = args.chunked_prefill_size
        if budget is None:
            budget = _raw_count(args, "max_prefill_tokens")
    return budget, chunk


def _free_pct(usage: KvUsage) -> float | None:
    used, evictable = usage.usage_pct, usage.evictable_pct
    if used is None or evictable is None:
        return None
    return max(0.0, 100.0 - used - evictable)


def _pool_words(usage: KvUsage) -> str:
    """`the pool is 92.1% used, 3.0% evictable, 4.9% free (159,277 tokens)`."""
    words = [f"{fmt.pct(usage.usage_pct, 1)} used"]
    if usage.evictable_pct is not None:
        words.append(f"{fmt.pct(usage.evictable_pct, 1)} evictable")
        words.append(f"{fmt.pct(_free_pct(usage), 1)} free")
    return f"the pool is {', '.join(words)} of {fmt.count(usage.max_tokens)} tokens"


def _numbers(
    usage: KvUsage, cap: RunningCap, prefill: tuple[int | None, int | None], context: int | None
) -> Mapping[str, object]:
    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    return MappingProxyType(
        {
            "running_requests": usage.load.running_requests,
            "queued_requests": usage.load.queued_requests,
            "max_running_requests": cap.value,
            "max_running_requests_per_dp": cap.per_dp,
            "dp_groups": cap.dp_groups,
            "max_running_requests_source": cap.source,
            "max_running_requests_requested": cap.requested,
            "max_running_requests_lowered": cap.lowered_why,
            "max_total_num_tokens": usage.max_tokens,
            "used_tokens": usage.used_tokens,
            "evictable_tokens": usage.evictable_tokens,
            "used_pct": r(usage.usage_pct),
            "evictable_pct": r(usage.evictable_pct),
            "free_pct": r(_free_pct(usage)),
            "max_prefill_tokens": prefill[0],
            "chunked_prefill_size": prefill[1],
            "context_len": context,
        }
    )


def _cap_text(cap: RunningCap, why: bool = False) -> str:
    lowered = f"; {cap.lowered_why}" if cap.lowered_why and why else ""
    per_dp = f" ({cap.per_dp:,} per DP worker)" if cap.dp_groups > 1 and cap.per_dp else ""
    return f"max_running_requests {fmt.count(cap.value)}{per_dp}{lowered}"


def binding_limit(snapshot: Snapshot, usage: KvUsage) -> BindingLimit | None:
    """The limit holding requests back in this reading; None without a current reading of
    the load (an old batch line says nothing about now)."""
    running, queued = usage.load.running_requests, usage.load.queued_requests
    if not usage.current or running is None or queued is None:
        return None
    cap = running_cap(snapshot, usage)
    prefill, context = _prefill(snapshot), context_len(snapshot)
    numbers = _numbers(usage, cap, prefill, context)
    at_cap = cap.value is not None and running >= cap.value
    if at_cap:
        waiting = f"{queued:,} queued" if queued else "none queued yet: the next request waits"
        text = (
            f"running requests at the cap: {running:,} running of {_cap_text(cap, why=True)}; "
            f"{waiting}; {_pool_words(usage)}"
        )
        reduced = snapshot.analysis.startup.max_running_requests_reduced
        if reduced is not None and "KV cache" in (reduced.reason or ""):
            text += " (a larger pool raises it: --mem-fraction-static, more GPUs)"
        else:
            text += " (raise --max-running-requests if the pool has room)"
        short = f"held back by max_running_requests: {running:,} of {fmt.count(cap.value)} running"
        return BindingLimit(MAX_RUNNING_REQUESTS, text, numbers, f"{short}, {queued:,} queued")
    if queued <= 0:
        return BindingLimit(
            None, f"{NO_LIMIT}: {running:,} running, none queued", numbers, NO_LIMIT
        )
    used = usage.usage_pct
    if used is not None and used >= POOL_HELD_PCT:
        max_tokens = usage.max_tokens
        long_held = (
            context is not None
            and max_tokens is not None
            and context > max_tokens
            and usage.used_tokens is not None
            and running > 0
            and usage.used_tokens / running >= max_tokens / 2
        )
        if long_held and context is not None and usage.used_tokens is not None:
            each = usage.used_tokens / running
            text = (
                f"{queued:,} queued behind long requests: context_len {context:,} is longer "
                f"than the pool's {fmt.count(max_tokens)} tokens and {running:,} running hold "
                f"{fmt.pct(used, 1)} of it ({fmt.count(each)} tokens each); one request may "
                "fill the pool (lower --context-length or enlarge the pool)"
            )
            short = f"held back by long requests: context_len {context:,} > pool {max_tokens:,}"
            return BindingLimit(CONTEXT_OVER_POOL, text, numbers, f"{short}, {queued:,} queued")
        text = (
            f"{queued:,} queued for room in the KV pool: {_pool_words(usage)}, held by "
            f"{running:,} running (below {_cap_text(cap)})"
        )
        short = f"held back by the KV pool: {fmt.pct(used, 1)} used, {queued:,} queued"
        return BindingLimit(KV_POOL, text, numbers, short)
    max_prefill, chunk = prefill
    budget = f"max_prefill_tokens {fmt.count(max_prefill)}"
    if chunk is not None and chunk > 0:
        budget += f", a prompt longer than chunked_prefill_size {chunk:,} taken in chunks"
    text = (
        f"{queued:,} queued for the prefill budget ({budget}): {running:,} running of "
        f"{_cap_text(cap)} and {_pool_words(usage)}"
    )
    evictable = usage.evictable_pct
    if used is not None and evictable is not None and used + evictable >= 50 and evictable > used:
        text += "; most of what the pool holds is evictable cache, freed as new requests need it"
    short = f"held back by the prefill budget: max_prefill_tokens {fmt.count(max_prefill)}"
    short += f", {queued:,} queued"
    return BindingLimit(PREFILL_BUDGET, text, numbers, short)
