"""The alert rule: one Snapshot in, the alerts an operator should see out (docs/alerts.md).

Pure: the same judgement for the live view's colours, the report and `kvtop --check`. Each
alert says its level, its kind, one sentence and what it is about ("GPU 3", "KV cache").
"""

from __future__ import annotations

from datetime import datetime

from kvtop import fmt
from kvtop.model.deployment_shape import rank_span
from kvtop.model.kv_usage import kv_now
from kvtop.model.memory.gpu_reading import GpuStatus, slowdown_reasons
from kvtop.model.snapshot import (
    METRICS_AGAINST_LOG,
    METRICS_DISABLED,
    NOT_YET,
    UNREACHABLE,
    GpuView,
    Snapshot,
    SourceHealth,
    SourceState,
)
from kvtop.model.status import levels as alerts
from kvtop.model.status.identity import mismatch_text
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds, alert_order
from kvtop.model.status.orphans import find_orphans, orphans_alert
from kvtop.model.status.server_status import duration_text, failure_words, stopped_text
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.start_state import FAILED, READY, STARTING, STOPPED

LOG_SOURCES = ("log", "journal")
_MAX_DETAIL = 200  # characters of a source's or a failure's own words quoted in a sentence


def pct_1(value: float, *thresholds: float) -> str:
    """One decimal by kvtop.fmt's rule (the same on every screen): 99.97 % reads 99.97%, never
    100%, and a value under a threshold never reads as the threshold."""
    return fmt.pct(value, 1, edges=thresholds)


def _number(value: float) -> str:
    """A threshold as the user wrote it: 85, 4.5."""
    return f"{value:g}"


def _words(text: str | None) -> str:
    """A source's or the log's own words, on one line, visible, not too long."""
    flat = " ".join(make_visible(text or "").split())
    return flat if len(flat) <= _MAX_DETAIL else flat[: _MAX_DETAIL - 1] + "…"


def _alert(level: Level, kind: str, text: str, subject: str) -> Alert | None:
    return None if level == Level.OK else Alert(level, kind, text, subject)


# -- sources ----------------------------------------------------------------------------------
def _source(snapshot: Snapshot, *names: str) -> SourceHealth | None:
    return next((s for s in snapshot.sources if s.name in names), None)


def asked_off(source: SourceHealth) -> bool:
    """Off because the user asked for it (--no-gpus, no log given), not because it failed."""
    return source.state == SourceState.OFF and source.asked_off


def log_known(snapshot: Snapshot) -> bool:
    """The log says anything about a server start (its arguments or a rank's lines; arguments
    from /server_info alone are not the log's)."""
    startup = snapshot.analysis.startup
    logged_args = startup.server_args is not None and snapshot.analysis.lines_seen > 0
    return startup.has_rank_lines or logged_args


def anything_read(snapshot: Snapshot) -> bool:
    """At least one source gave a reading: log lines, a GPU, or a /metrics scrape. Without any,
    nothing can be judged (--check says UNKNOWN)."""
    log = _source(snapshot, *LOG_SOURCES)
    log_read = log is not None and log.state != SourceState.OFF and snapshot.analysis.lines_seen > 0
    return log_read or bool(snapshot.gpus) or snapshot.metrics is not None


def unread_sources(snapshot: Snapshot) -> str:
    """Each source that gave nothing, with its reason: `log: no such file; nvml: ...`."""
    parts = [
        f"{s.name}: {_words(s.detail).rstrip('.') or s.state}"
        for s in snapshot.sources
        if s.state != SourceState.OK and not asked_off(s)
    ]
    return "; ".join(parts) or "no source was asked for"


def _server_alerts(snapshot: Snapshot) -> list[Alert]:
    """The server's own endpoint. No answer at all after it was ready (or with no log to say
    it is starting) is critical; an answer without numbers (a refused key, a 5xx, another
    service) is a warning; a 404 is a server started without --enable-metrics (SGLang's
    default): no alert, the KV numbers come from the log."""
    source = _source(snapshot, "metrics")
    if source is None or source.state == SourceState.OK:
        return []
    if source.cause in (METRICS_DISABLED, NOT_YET):
        return []  # no --enable-metrics (a note says so), or the first scrape is on its way
    state = snapshot.analysis.startup.state
    if state == STOPPED and snapshot.metrics is None:
        return []  # the log says it stopped: the startup alert says so (server_stopped)
    detail = _words(source.detail) or source.state
    if source.cause == METRICS_AGAINST_LOG:
        return [Alert(Level.WARNING, "source_down", f"metrics {source.state}: {detail}", "metrics")]
    unreachable = source.cause in (None, UNREACHABLE)
    if unreachable and snapshot.metrics is None and (state == READY or not log_known(snapshot)):
        why = "after the log said ready" if state == READY else "and no log says it is starting"
        text = f"server stopped or unreachable {why}: {detail}"
        return [Alert(Level.CRITICAL, "server_down", text, "server")]
    if state == READY or snapshot.metrics is not None or not unreachable:
        return [Alert(Level.WARNING, "source_down", f"metrics {source.state}: {detail}", "metrics")]
    return []  # starting or failed: /metrics answers only once the server is ready


def _source_alerts(snapshot: Snapshot) -> list[Alert]:
    found = []
    for source in snapshot.sources:
        if source.name == "metrics" or source.state == SourceState.OK or asked_off(source):
            continue
        if source.name == "nvml" and any(g.lost for g in snapshot.gpus):
            continue  # the lost GPUs say it, one by one
        what = "GPU readings (NVML)" if source.name == "nvml" else source.name
        text = f"{what} {source.state}: {_words(source.detail) or 'no reason given'}"
        found.append(Alert(Level.WARNING, "source_down", text, source.name))
    return found + _server_alerts(snapshot)


def _mismatch_alerts(snapshot: Snapshot) -> list[Alert]:
    found = []
    for source in ("metrics", "server_info"):
        mine = tuple(m for m in snapshot.mismatches if m.source == source)
        for sentence in mismatch_text(mine):
            subject = "metrics" if source == "metrics" else "/server_info"
            found.append(Alert(Level.WARNING, "mismatch", sentence, subject))
    return found


# -- startup ----------------------------------------------------------------------------------
def _startup_alerts(snapshot: Snapshot, t: Thresholds) -> list[Alert]:
    startup = snapshot.analysis.startup
    if startup.state == STOPPED:
        # Stopped by its operator (SIGTERM, Ctrl-C): it serves nothing, whoever asked.
        said = f": {_words(startup.stopped_by)}" if startup.stopped_by else ""
        metrics = _source(snapshot, "metrics")
        if snapshot.metrics is not None and metrics is not None and metrics.state == SourceState.OK:
            # Something answers with fresh numbers: the log is not this server's latest start
            # (another log, a start it does not show) or --url reaches another server.
            text = (
                f"the log says the server {stopped_text(startup)}{said}, but /metrics answers "
                "with fresh numbers: a start the log does not show (another log file or unit?) "
                "or --url reaches another server"
            )
            return [Alert(Level.WARNING, "mismatch", text, "server")]
        return [
            Alert(
                Level.CRITICAL, "server_stopped", f"server {stopped_text(startup)}{said}", "server"
            )
        ]
    if startup.state == FAILED:
        failure = startup.failure
        kind = failure_words(failure.kind if failure is not None else None)
        said = f": {_words(failure.reported)}" if failure is not None and failure.message else ""
        what = (
            "crashed while serving" if failure and failure.phase == "serving" else "startup failed"
        )
        return [Alert(Level.CRITICAL, "startup_failed", f"{what} ({kind}){said}", "server")]
    # Its server_args line, else (an excerpt) the first line of it that kvtop read.
    began = startup.started_at or startup.first_time
    if startup.state != STARTING or began is None:
        return []
    # SGLang stamps its lines in local time without a zone, like datetime.fromtimestamp.
    now = datetime.fromtimestamp(snapshot.taken_at)
    running_s = (now - began).total_seconds()
    if running_s < t.startup_warning_s:
        return []
    text = (
        f"startup still in progress after {duration_text(running_s)} (started "
        f"{began:%Y-%m-%d %H:%M:%S}; warning after {duration_text(t.startup_warning_s)})"
    )
    last = startup.last_time
    if last is not None and (now - last).total_seconds() >= t.startup_warning_s:
        text += f"; the log's last line is from {last:%Y-%m-%d %H:%M:%S}"
    return [Alert(Level.WARNING, "startup_slow", text, "server")]


# -- KV cache and queue ---------------------------------------------------------------------
def _kv_alerts(snapshot: Snapshot, t: Thresholds, queued_for_s: float | None) -> list[Alert]:
    kv = kv_now(snapshot)
    found = []
    # An old batch line (metrics down, the server idle or gone) is the last known usage, not
    # the usage now: it raises nothing.
    pct = kv.usage_pct if kv.current else None
    level = alerts.kv_usage_level(pct, t)
    if pct is not None and level != Level.OK:
        bound = t.kv_usage_critical_pct if level == Level.CRITICAL else t.kv_usage_warning_pct
        tokens = ""
        if kv.used_tokens is not None and kv.max_tokens:
            tokens = f"{kv.used_tokens:,} of {kv.max_tokens:,} tokens, "
        where = "" if kv.source == "metrics" else f"; from the {kv.source}"
        edges = (t.kv_usage_warning_pct, t.kv_usage_critical_pct)
        text = f"KV cache {pct_1(pct, *edges)} full ({tokens}{level} from {_number(bound)}%{where})"
        found.append(Alert(level, "kv_usage", text, "KV cache"))
    return found + _queue_alerts(kv.load.queued_requests, t, queued_for_s)


def _queue_alerts(queued: int | None, t: Thresholds, queued_for_s: float | None) -> list[Alert]:
    found = []
    level = alerts.queue_level(queued_for_s, t)
    if queued_for_s is not None and level != Level.OK:
        count = f"{queued:,} requests" if queued is not None else "requests"
        bound = t.queue_critical_s if level == Level.CRITICAL else t.queue_warning_s
        text = (
            f"{count} queued for {duration_text(queued_for_s)} without a break "
            f"({level} from {duration_text(bound)})"
        )
        found.append(Alert(level, "queue", text, "queue"))
    return found


def queue_since(previous: float | None, queued: int | None, taken_at: float) -> float | None:
    """When the queue last started to hold requests (epoch seconds), carried from one snapshot
    to the next: None while it is empty or unknown. `taken_at - since` is the `queued_for_s`
    that evaluate() takes. One snapshot alone (--check) cannot know it."""
    if not queued:
        return None
    return previous if previous is not None else taken_at


# -- GPUs -----------------------------------------------------------------------------------
def _gpu_name(gpu: GpuView) -> str:
    ranks = f" ({', '.join(gpu.ranks)})" if gpu.ranks else ""
    return f"GPU {gpu.sample.index}{ranks}"


def _lost(gpu: GpuView) -> Alert:
    sample = gpu.sample
    refused_memory = any(r.field.startswith("memory") for r in sample.rejected)
    if sample.status == GpuStatus.LOST:
        text = f"{_gpu_name(gpu)} is lost (fallen off the bus): check nvidia-smi and dmesg"
    elif sample.cause is not None and not refused_memory:
        # The check that made it unreadable; a call merely unsupported here is never named.
        name, error = sample.cause
        text = (
            f"{_gpu_name(gpu)} cannot be read through NVML ({name}: {_words(error)}): check "
            "nvidia-smi and dmesg for Xid errors"
        )
    elif sample.field_errors and not refused_memory:
        # Its handle, its memory or another call failed: which call, with NVML's words and code.
        why = "; ".join(f"{name}: {_words(error)}" for name, error in sample.field_errors[:3])
        text = (
            f"{_gpu_name(gpu)} cannot be read through NVML ({why}): check nvidia-smi and dmesg "
            "for Xid errors"
        )
    else:
        first = sorted(sample.rejected, key=lambda r: not r.field.startswith("memory"))
        refused = ", ".join(f"{r.field} {r.value} ({r.reason})" for r in first[:2])
        text = (
            f"{_gpu_name(gpu)}: its memory cannot be read (NVML gave impossible numbers: "
            f"{_words(refused) or 'memory'}): check nvidia-smi and dmesg"
        )
    return Alert(Level.CRITICAL, "gpu_lost", text, f"GPU {sample.index}")


def _log_of_this_host(snapshot: Snapshot) -> bool:
    """The log is tied to this host: its journal is read here, its processes' titles name the
    ranks, or a GPU here holds what the log itemises for its rank."""
    if snapshot.log_here:
        return True
    return any(
        g.ranks
        and not g.lost
        and g.memory.baseline_gib is not None
        and g.memory.log_excess_gib is None
        for g in snapshot.gpus
    )


def _missing_alert(snapshot: Snapshot) -> list[Alert]:
    """Ranks the log placed on this host with no GPU here (NVML sees fewer GPUs than them):
    critical when the log is this host's; a warning when nothing ties it to this host (a log
    copied from another machine says nothing about this one's GPUs)."""
    missing = snapshot.missing_ranks
    if not missing:
        return []
    which = rank_span(list(missing))
    count = len(snapshot.gpus)
    sees = "no GPU" if count == 0 else f"{count} GPU{'s' if count != 1 else ''}"
    text = f"{which} from the log {'has' if len(missing) == 1 else 'have'} no GPU here (NVML sees {sees})"
    if _log_of_this_host(snapshot):
        text += ": a GPU fell off the bus or is hidden; check nvidia-smi and dmesg for Xid errors"
        return [Alert(Level.CRITICAL, "gpu_missing", text, which)]
    text += (
        ", and nothing here ties the log to this host: is it another host's log (check --unit / "
        "--log-file), or did a GPU fall off the bus (nvidia-smi, dmesg)?"
    )
    return [Alert(Level.WARNING, "gpu_missing", text, which)]


def _throttle(gpu: GpuView, name: str, subject: str) -> Alert | None:
    """Clocks lowered for heat, a hardware slowdown or the power brake (NVML's clocks event
    reasons). Drawing the enforced power limit (the software power cap) is normal under load
    and raises nothing."""
    reasons = slowdown_reasons(gpu.sample.clock_event_reasons)
    if not reasons:
        return None
    text = (
        f"{name} clocks lowered: {', '.join(reasons)} (NVML clocks event reasons); check its "
        "cooling and nvidia-smi -q -d PERFORMANCE"
    )
    return Alert(Level.WARNING, "throttle", text, subject)


def _gpu_alerts(gpu: GpuView, t: Thresholds, ready: bool) -> list[Alert]:
    sample = gpu.sample
    if gpu.lost:
        return [_lost(gpu)]
    name, subject = _gpu_name(gpu), f"GPU {sample.index}"
    found = []
    level = alerts.temperature_level(sample.temperature_c, t)
    bound = t.temperature_critical_c if level == Level.CRITICAL else t.temperature_warning_c
    text = f"{name} at {sample.temperature_c} °C ({level} from {_number(bound)} °C)"
    found.append(_alert(level, "temperature", text, subject))
    found.append(_throttle(gpu, name, subject))
    if ready and gpu.ranks:
        level = alerts.free_after_startup_level(sample.free_gib, t)
        found.append(_alert(level, "headroom", _headroom_text(name, sample.free_gib, t), subject))
    return [a for a in found if a is not None]


def _headroom_text(name: str, free_gib: float, t: Thresholds) -> str:
    return (
        f"{name}: {free_gib:.2f} GiB free after startup, under the "
        f"{_number(t.safe_margin_gib)} GiB safe margin: large prefills may run out of memory"
    )


def _log_headroom(snapshot: Snapshot, t: Thresholds) -> list[Alert]:
    """Without GPU readings for the server's ranks: what the log says stayed free."""
    explanation = snapshot.analysis.explanation
    free = explanation.free_after_startup_gib if explanation is not None else None
    level = alerts.free_after_startup_level(free, t)
    if free is None or level == Level.OK or explanation is None:
        return []
    name = f"{explanation.rank} (the log's reference rank)"
    return [Alert(level, "headroom", _headroom_text(name, free, t), explanation.rank)]


# -- host RAM -------------------------------------------------------------------------------
def _host_ram_alerts(snapshot: Snapshot) -> list[Alert]:
    """The log's host KV cache (HiCache) larger than this host's RAM: the pool cannot fit. Only
    for a log of this host (another host's log says nothing about this one's RAM)."""
    host, pool_gb = snapshot.host, snapshot.host_kv_total_gb
    if host is None or pool_gb is None or not snapshot.log_here or pool_gb <= host.total_gb:
        return []
    text = (
        f"the host KV cache (HiCache) of {pool_gb:,.2f} GB the log sets up is more than this "
        f"host's {host.total_gb:,.1f} GB of RAM: lower --hicache-ratio or --hicache-size"
    )
    return [Alert(Level.WARNING, "host_ram", text, "host RAM")]


# -- the rule -------------------------------------------------------------------------------
def evaluate(
    snapshot: Snapshot,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    queued_for_s: float | None = None,
) -> tuple[Alert, ...]:
    """Every alert for this snapshot, critical first (docs/alerts.md). `queued_for_s`: how long
    requests have waited without the queue emptying, when the caller has watched it
    (queue_since); None (one snapshot) leaves the queue out."""
    t = thresholds
    ready = snapshot.analysis.startup.state == READY
    found = _startup_alerts(snapshot, t) + _source_alerts(snapshot) + _mismatch_alerts(snapshot)
    found += _kv_alerts(snapshot, t, queued_for_s) + _host_ram_alerts(snapshot)
    for gpu in snapshot.gpus:
        found += _gpu_alerts(gpu, t, ready)
    found += _missing_alert(snapshot)
    orphans = orphans_alert(snapshot, find_orphans(snapshot))
    found += [orphans] if orphans is not None else []
    if ready and not any(g.ranks and not g.lost for g in snapshot.gpus):
        found += _log_headroom(snapshot, t)
    return tuple(sorted(found, key=alert_order))
