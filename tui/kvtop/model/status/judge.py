"""One look at a Snapshot: its level, its alerts and the words that say them.

Pure. `judge()` is the one evaluation every view shows (the live header, the report, the JSON,
`kvtop --check`, the exporter); the watch (tui/kvtop/model/status/watch.py) adds what only watching
over time can tell (since when, the queue).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from kvtop.model.kv_usage import kv_now
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.alert_rule import (
    anything_read,
    evaluate,
    log_known,
    pct_1,
    unread_sources,
)
from kvtop.model.status.levels import (
    DEFAULT_THRESHOLDS,
    Alert,
    Level,
    Thresholds,
    alert_order,
)
from kvtop.model.status.server_status import server_status
from kvtop.model.verdict import UNJUDGED, Verdict

NAMED_AT_MOST = 3  # alerts named in the summary; the rest are counted


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
        words.append(
            f"KV cache {pct_1(kv.usage_pct, t.kv_usage_warning_pct, t.kv_usage_critical_pct)} full"
        )
    if snapshot.gpus:
        count = len(snapshot.gpus)
        words.append(f"{count} GPU{'s' if count != 1 else ''} fine")
    return ", ".join(words)


def named_alerts(found: tuple[Alert, ...], level: Level) -> str:
    """The alerts at the worst level (up to NAMED_AT_MOST), then how many more there are."""
    top = [a for a in found if a.level == level]
    words = "; ".join(a.text for a in top[:NAMED_AT_MOST])
    rest = len(found) - min(len(top), NAMED_AT_MOST)
    return words + (f"; and {rest} more" if rest else "")


def judge(
    snapshot: Snapshot,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    queued_for_s: float | None = None,
) -> Verdict:
    """The verdict of one snapshot: unknown when no source gave anything, else the worst
    alert's level (ok without one) and the words for it."""
    if not anything_read(snapshot):
        reason = f"no source could be read ({unread_sources(snapshot)})"
        return Verdict(Level.UNKNOWN, (), reason)
    found = evaluate(snapshot, thresholds, queued_for_s=queued_for_s)
    level = found[0].level if found else Level.OK
    words = named_alerts(found, level) if found else _ok_words(snapshot, thresholds)
    return Verdict(level, found, words, queued_for_s)


def with_alerts(verdict: Verdict, extra: tuple[Alert, ...]) -> Verdict:
    """VERDICT with alerts that only watching over time can raise (watch.py), its level and
    words judged again over all of them."""
    if not extra or verdict.level == Level.UNKNOWN:
        return verdict
    found = tuple(sorted((*verdict.alerts, *extra), key=alert_order))
    level = found[0].level
    # Everything else the verdict carries (the queue's time, the memory growth) stays.
    return replace(verdict, level=level, alerts=found, summary=named_alerts(found, level))


def verdict_of(snapshot: Snapshot, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Verdict:
    """The snapshot's own verdict; one look with `thresholds` for a Snapshot made by hand
    (build_snapshot always judges)."""
    return snapshot.verdict if snapshot.verdict is not UNJUDGED else judge(snapshot, thresholds)
