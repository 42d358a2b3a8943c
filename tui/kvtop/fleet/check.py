"""`kvtop --prometheus URL --check`: the fleet judged by the fleet's alerts, as a monitoring
plugin says it (the output contract of tui/kvtop/report/check.py, docs/alerts.md and docs/fleet.md).

`KVTOP <STATE> - <what> | <performance data>`, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
Prometheus down, slow or refusing (Fleet.problem), or no host at all: UNKNOWN with the sentence.
"""

from __future__ import annotations

import math

from kvtop.fleet.alerts import fleet_alerts
from kvtop.fleet.model import Fleet
from kvtop.fleet.summary import (
    deployment_headroom,
    deployment_kv_usage_pct,
    deployment_state,
)
from kvtop.model.status.judge import named_alerts
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level, Thresholds
from kvtop.report.check import EXIT_CHECK, STATE_WORD, CheckResult, plain, unknown


def _label(key: str) -> str:
    """A deployment's key as a perfdata label: quoted, its own quotes doubled (plugin rule)."""
    return "'" + key.replace("'", "''").replace("=", "_") + "'"


def performance_data(fleet: Fleet, t: Thresholds) -> str:
    """Counts, then per deployment its fullest KV pool and least headroom (unknown left out)."""
    found = fleet_alerts(fleet, t)
    levels = [found.deployment_level(d) for d in fleet.deployments]
    data = [
        f"deployments={len(fleet.deployments)};;;0;",
        f"hosts={len(fleet.hosts)};;;0;",
        f"hosts_down={sum(1 for h in fleet.hosts if not h.up)};;;0;",
        f"warning={levels.count(Level.WARNING)};;;0;",
        f"critical={levels.count(Level.CRITICAL)};;;0;",
    ]
    margin = f"{t.safe_margin_gib:g}:"
    for deployment in fleet.deployments:
        label = deployment.key
        usage = deployment_kv_usage_pct(deployment)
        if usage is not None and math.isfinite(usage):
            warn, crit = t.kv_usage_warning_pct, t.kv_usage_critical_pct
            pct = f"{usage:.2f}"  # perfdata: a plain number for the plugin (as check.py)
            data.append(f"{_label(label + '_kv_usage')}={pct}%;{warn:g};{crit:g};0;100")
        room = deployment_headroom(deployment)
        if room is not None and math.isfinite(room[1].gib):
            data.append(f"{_label(label + '_headroom')}={room[1].gib:.2f}GB;{margin};;0;")
    return " ".join(data)


def _ok_words(fleet: Fleet) -> str:
    deployments, hosts = len(fleet.deployments), len(fleet.hosts)
    ready = sum(1 for d in fleet.deployments if deployment_state(d) == "ready")
    words = f"{deployments} deployment{'s' if deployments != 1 else ''}"
    words += f" on {hosts} host{'s' if hosts != 1 else ''}, fine"
    if ready:
        words += f" ({ready} ready)"
    return words


def fleet_check(fleet: Fleet, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> CheckResult:
    """The plugin's answer for this fleet."""
    if fleet.problem:
        return unknown(f"Prometheus: {fleet.problem}")
    if not fleet.hosts:
        selector = f" matching {fleet.selector}" if fleet.selector else ""
        return unknown(
            f"Prometheus at {fleet.prometheus_url} has no kvtop, DCGM or SGLang host{selector}"
        )
    found = fleet_alerts(fleet, thresholds).everything()
    level = found[0].level if found else Level.OK
    words = named_alerts(found, level) if found else _ok_words(fleet)
    line = f"KVTOP {STATE_WORD[level]} - {plain(words)}"
    perf = performance_data(fleet, thresholds)
    return CheckResult(EXIT_CHECK[level], f"{line} | {perf}" if perf else line)
