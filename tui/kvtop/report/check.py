"""`kvtop --check`: one Snapshot judged by the alert rule, as a monitoring plugin says it.

One line, `KVTOP <STATE> - <what> | <performance data>`, and the exit status the Nagios,
Icinga, Zabbix and Sensu plugin convention reads: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
(docs/alerts.md, "kvtop --check").
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop import fmt
from kvtop.model.kv_usage import kv_now
from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.memory.headroom import least_headroom_gib
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.judge import verdict_of
from kvtop.model.status.levels import Level, Thresholds
from kvtop.model.status.orphans import find_orphans

# The plugin convention's exit status and state word per level.
EXIT_CHECK = {Level.OK: 0, Level.WARNING: 1, Level.CRITICAL: 2, Level.UNKNOWN: 3}
EXIT_UNKNOWN = EXIT_CHECK[Level.UNKNOWN]
STATE_WORD = {level: level.value.upper() for level in Level}


@dataclass(frozen=True, slots=True)
class CheckResult:
    exit_code: int
    line: str  # the one line a plugin prints


def plain(text: str) -> str:
    """`|` starts the performance data: none may appear before it."""
    return " ".join(text.replace("|", "/").split())


def unknown(reason: str) -> CheckResult:
    """UNKNOWN with a reason: nothing could be judged (no source, bad options, a bad file)."""
    return CheckResult(EXIT_UNKNOWN, f"KVTOP {STATE_WORD[Level.UNKNOWN]} - {plain(reason)}")


def _gib(value: float) -> str:
    return f"{value:.2f}GB"  # GiB: the plugin guidelines name no binary unit (docs/alerts.md)


def headroom_gib(snapshot: Snapshot) -> float | None:
    """What stays free after startup: the least free memory on a GPU of the server's (read
    now), else what the log says stayed free on its reference rank. None before ready."""
    return least_headroom_gib(snapshot)


def performance_data(snapshot: Snapshot, t: Thresholds) -> str:
    """`'label'=value[UOM];[warn];[crit];[min];[max]`, space-separated; unknown values left out."""
    kv = kv_now(snapshot)
    data = []
    if kv.usage_pct is not None and kv.current:
        # Two decimals by the rule of every screen: 94.9999 is 94.99, never the 95 it is under.
        pct = fmt.pct(kv.usage_pct, 2, edges=(t.kv_usage_warning_pct, t.kv_usage_critical_pct))
        pct = pct.rstrip("%").lstrip("<>").replace(",", "")
        data.append(f"kv_usage={pct}%;{t.kv_usage_warning_pct:g};{t.kv_usage_critical_pct:g};0;100")
    if kv.evictable_pct is not None and kv.current:  # cached prefixes, freed on demand
        evictable = fmt.pct(kv.evictable_pct, 2).rstrip("%").lstrip("<>").replace(",", "")
        data.append(f"kv_evictable={evictable}%;;;0;100")
    if kv.used_tokens is not None:
        data.append(f"kv_tokens_used={kv.used_tokens};;;0;{kv.max_tokens or ''}")
    if kv.max_tokens is not None:
        data.append(f"kv_tokens_max={kv.max_tokens};;;0;")
    if kv.load.queued_requests is not None:
        data.append(f"queued={kv.load.queued_requests};;;0;")
    retracted = snapshot.retractions
    if retracted is not None:
        # Requests retracted since the server started; the rate beside it over kvtop's window.
        data.append(f"retractions={retracted.count};;;0;")
        if retracted.per_min is not None:
            warn = f"{t.retractions_per_min_warning:g}"
            data.append(f"retractions_per_min={retracted.per_min:.2f};{warn};;0;")
    margin = f"{t.safe_margin_gib:g}:"  # a range: below it is a warning
    for gpu in snapshot.gpus:
        sample = gpu.sample
        if sample.status == GpuStatus.OK:
            free, total = _gib(sample.free_gib), f"{sample.total_gib:.2f}"
            data.append(f"gpu{sample.index}_free={free};{margin};;0;{total}")
    headroom = headroom_gib(snapshot)
    if headroom is not None:
        data.append(f"headroom={_gib(headroom)};{margin};;0;")
    orphans = len({o.pid for o in find_orphans(snapshot)})
    if orphans:
        data.append(f"orphans={orphans};0;;0;")  # any is a warning (docs/alerts.md)
    return " ".join(data)


def check(snapshot: Snapshot, thresholds: Thresholds) -> CheckResult:
    """The plugin's answer for this snapshot: its verdict (the one every view shows) as a
    state word and an exit status, with the performance data."""
    verdict = verdict_of(snapshot, thresholds)
    if verdict.level == Level.UNKNOWN:
        return unknown(verdict.summary)
    line = f"KVTOP {STATE_WORD[verdict.level]} - {plain(verdict.summary)}"
    perf = performance_data(snapshot, thresholds)
    return CheckResult(EXIT_CHECK[verdict.level], f"{line} | {perf}" if perf else line)
