"""`kvtop --check`: one Snapshot judged by the alert rule, as a monitoring plugin says it.

One line, `KVTOP <STATE> - <what> | <performance data>`, and the exit status the Nagios,
Icinga, Zabbix and Sensu plugin convention reads: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
(docs/alerts.md, README "kvtop --check").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tui.model.kv_usage import kv_now
from tui.model.memory.gpu_reading import GpuStatus
from tui.model.memory.headroom import least_headroom_gib
from tui.model.snapshot import Snapshot
from tui.model.status.alert_rule import anything_read, evaluate, log_known, pct_1, unread_sources
from tui.model.status.levels import Alert, Level, Thresholds
from tui.model.status.server_status import server_status

# The plugin convention's exit status and state word per level.
EXIT_CHECK = {Level.OK: 0, Level.WARNING: 1, Level.CRITICAL: 2, Level.UNKNOWN: 3}
EXIT_UNKNOWN = EXIT_CHECK[Level.UNKNOWN]
STATE_WORD = {level: level.value.upper() for level in Level}
NAMED_AT_MOST = 3  # alerts named on the status line; the rest are counted


@dataclass(frozen=True, slots=True)
class CheckResult:
    exit_code: int
    line: str  # the one line a plugin prints


def _plain(text: str) -> str:
    """`|` starts the performance data: none may appear before it."""
    return " ".join(text.replace("|", "/").split())


def unknown(reason: str) -> CheckResult:
    """UNKNOWN with a reason: nothing could be judged (no source, bad options, a bad file)."""
    return CheckResult(EXIT_UNKNOWN, f"KVTOP {STATE_WORD[Level.UNKNOWN]} - {_plain(reason)}")


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
        pct = f"{kv.usage_pct:.2f}"
        data.append(f"kv_usage={pct}%;{t.kv_usage_warning_pct:g};{t.kv_usage_critical_pct:g};0;100")
    if kv.used_tokens is not None:
        data.append(f"kv_tokens_used={kv.used_tokens};;;0;{kv.max_tokens or ''}")
    if kv.max_tokens is not None:
        data.append(f"kv_tokens_max={kv.max_tokens};;;0;")
    if kv.load.queued_requests is not None:
        data.append(f"queued={kv.load.queued_requests};;;0;")
    margin = f"{t.safe_margin_gib:g}:"  # a range: below it is a warning
    for gpu in snapshot.gpus:
        sample = gpu.sample
        if sample.status == GpuStatus.OK:
            free, total = _gib(sample.free_gib), f"{sample.total_gib:.2f}"
            data.append(f"gpu{sample.index}_free={free};{margin};;0;{total}")
    headroom = headroom_gib(snapshot)
    if headroom is not None:
        data.append(f"headroom={_gib(headroom)};{margin};;0;")
    return " ".join(data)


def _state_words(snapshot: Snapshot) -> str:
    if log_known(snapshot):
        startup = snapshot.analysis.startup
        return server_status(startup, datetime.fromtimestamp(snapshot.taken_at)).text
    if snapshot.metrics is not None:
        return "server answers /metrics"
    return "no server start in the log yet"


def _ok_words(snapshot: Snapshot, t: Thresholds) -> str:
    words = [_state_words(snapshot)]
    kv = kv_now(snapshot)
    if kv.usage_pct is not None and kv.current:
        words.append(f"KV cache {pct_1(kv.usage_pct, t.kv_usage_warning_pct)} full")
    if snapshot.gpus:
        count = len(snapshot.gpus)
        words.append(f"{count} GPU{'s' if count != 1 else ''} fine")
    return ", ".join(words)


def _named(found: tuple[Alert, ...], level: Level) -> str:
    """The alerts at the worst level (up to NAMED_AT_MOST), then how many more there are."""
    top = [a for a in found if a.level == level]
    words = "; ".join(a.text for a in top[:NAMED_AT_MOST])
    rest = len(found) - min(len(top), NAMED_AT_MOST)
    return words + (f"; and {rest} more" if rest else "")


def check(snapshot: Snapshot, thresholds: Thresholds) -> CheckResult:
    """The plugin's answer for this snapshot."""
    if not anything_read(snapshot):
        return unknown(f"no source could be read ({unread_sources(snapshot)})")
    found = evaluate(snapshot, thresholds)
    level = found[0].level if found else Level.OK
    words = _named(found, level) if found else _ok_words(snapshot, thresholds)
    line = f"KVTOP {STATE_WORD[level]} - {_plain(words)}"
    perf = performance_data(snapshot, thresholds)
    return CheckResult(EXIT_CHECK[level], f"{line} | {perf}" if perf else line)
