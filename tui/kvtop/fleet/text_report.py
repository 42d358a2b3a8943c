"""`kvtop --prometheus URL --once`: the fleet as text, one block per deployment, a row per host.

Fits the width it is printed at like the single-host report (tui/kvtop/report/reflow.py: a table of
hosts while it fits, else one column per host, else one block per host); nothing is cut. A
Prometheus problem and every alert are sentences.
"""

from __future__ import annotations

from datetime import datetime

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.text import Text

from kvtop.fleet.alerts import FleetAlerts, fleet_alerts
from kvtop.fleet.model import Fleet
from kvtop.fleet.rows import DEPLOYMENT, FleetRow, fleet_rows, row_cells
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds
from kvtop.report.reflow import FitColumn, FitTable, Hanging, hang

# The host table's columns: (title, the row_cells key, justify).
_COLUMNS: tuple[tuple[str, str, JustifyMethod], ...] = (
    ("host", "name", "left"),
    ("node", "nodes", "left"),
    ("state", "state", "left"),
    ("used/total GiB", "memory", "right"),
    ("KV use", "kv", "right"),
    ("headroom GiB", "headroom", "right"),
    ("restarts", "restarts", "right"),
    ("alerts", "alerts", "left"),
    ("exporters", "exporters", "left"),
)


def _alert_line(alert: Alert) -> RenderableType:
    return Hanging(Text(f"{alert.level.glyph} {alert.text}"), hang=2)


def _heading(row: FleetRow) -> Text:
    cells = row_cells(row)
    parts = [row.name, row.shape, f"{cells['nodes']} node{'s' if cells['nodes'] != '1' else ''}"]
    parts.append(cells["state"])
    if row.kv_usage_pct is not None:
        parts.append(f"KV {cells['kv']}")
    if row.headroom_gib is not None:
        parts.append(f"headroom {cells['headroom']} GiB")
    if row.criticals or row.warnings:
        parts.append(cells["alerts"])
    return Text(" · ".join(parts), style="bold")


def _hosts_table(rows: list[FleetRow]) -> FitTable:
    table = FitTable(
        [FitColumn(title, justify=justify) for title, _, justify in _COLUMNS], gap=2, key=0
    )
    for row in rows:
        cells = row_cells(row)
        table.add_row(*(cells[key] or "—" for _, key, _ in _COLUMNS))
    return table


def _blocks(fleet: Fleet, found: FleetAlerts) -> list[RenderableType]:
    parts: list[RenderableType] = []
    rows = fleet_rows(fleet, found)
    for i, row in enumerate(rows):
        if row.kind != DEPLOYMENT:
            continue
        hosts = []
        for other in rows[i + 1 :]:
            if other.kind == DEPLOYMENT:
                break
            hosts.append(other)
        parts += [Text(""), hang(_heading(row)), _hosts_table(hosts)]
        parts += [_alert_line(a) for a in row.alerts]
    return parts


def _summary(fleet: Fleet, found: FleetAlerts) -> Text:
    deployments, hosts = len(fleet.deployments), len(fleet.hosts)
    words = f"{deployments} deployment{'s' if deployments != 1 else ''} on "
    words += f"{hosts} host{'s' if hosts != 1 else ''}"
    levels = [found.deployment_level(d) for d in fleet.deployments]
    counted = [
        f"{level.glyph} {levels.count(level)} {level}"
        for level in (Level.CRITICAL, Level.WARNING)
        if levels.count(level)
    ]
    return Text(words + (" · " + ", ".join(counted) if counted else " · no alerts"))


def _title(fleet: Fleet) -> Text:
    version = f" ({fleet.prometheus_version})" if fleet.prometheus_version else ""
    parts = [f"kvtop fleet · Prometheus {fleet.prometheus_url}{version}"]
    if fleet.selector:
        parts.append(f"selector {fleet.selector}")
    parts.append(datetime.fromtimestamp(fleet.taken_at).strftime("%Y-%m-%d %H:%M:%S"))
    return Text(" · ".join(parts), style="bold")


def render_fleet(fleet: Fleet, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Group:
    found = fleet_alerts(fleet, thresholds)
    parts: list[RenderableType] = [hang(_title(fleet))]
    if fleet.problem:
        parts.append(Hanging(Text(f"{Level.CRITICAL.glyph} Prometheus: {fleet.problem}"), hang=2))
    parts += [
        Hanging(Text(f"{Level.WARNING.glyph} Prometheus warns: {w}"), hang=2)
        for w in fleet.warnings
    ]
    if fleet.deployments:
        parts.append(hang(_summary(fleet, found)))
    elif not fleet.problem:
        selector = f" matching {fleet.selector}" if fleet.selector else ""
        parts.append(
            hang(
                Text(
                    f"No kvtop, DCGM or SGLang host{selector} in this Prometheus: check its "
                    "targets (/targets) and the selector."
                )
            )
        )
    parts += _blocks(fleet, found)
    return Group(*parts)


def print_fleet(
    fleet: Fleet, console: Console, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> None:
    console.print(render_fleet(fleet, thresholds), crop=False)
