"""The fleet table's rows: one per deployment, then one per host of it (pure).

What the fleet view's table (tui/kvtop/fleet/table.py) and the `--once` text
(tui/kvtop/fleet/text_report.py) show, computed once: the numbers come from tui/kvtop/fleet/summary,
the levels from tui/kvtop/fleet/alerts; `row_cells` words them in the table's columns. A host
with two servers is in two deployments: a row's key is (deployment key, host).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop import fmt
from kvtop.fleet.alerts import FleetAlerts
from kvtop.fleet.model import Deployment, Fleet, FleetHost
from kvtop.fleet.summary import (
    deployment_headroom,
    deployment_kv_usage_pct,
    deployment_restarts,
    deployment_state,
    kv_usage_pct,
    memory_gib,
    shape_text,
    worst_headroom,
)
from kvtop.model.status.levels import Alert, Level

DEPLOYMENT, HOST = "deployment", "host"
RowKey = tuple[str, str | None]  # (deployment key, host name; None for the deployment's row)


@dataclass(frozen=True, slots=True)
class FleetRow:
    kind: str  # DEPLOYMENT or HOST
    key: RowKey
    name: str  # the deployment's model (else its key), or the host's name
    state: str | None
    model: str | None
    shape: str  # TP16 / TP8 DP2
    nodes: str  # a deployment: hosts seen (of nnodes); a host: its node_rank
    kv_usage_pct: float | None
    headroom_gib: float | None
    restarts: int | None
    level: Level
    warnings: int
    criticals: int
    used_gib: float | None = None
    total_gib: float | None = None
    exporters: tuple[str, ...] = ()
    alerts: tuple[Alert, ...] = ()


def _counts(found: tuple[Alert, ...]) -> tuple[int, int]:
    levels = [a.level for a in found]
    return levels.count(Level.WARNING), levels.count(Level.CRITICAL)


def _nodes(deployment: Deployment) -> str:
    seen = len(deployment.hosts)
    if deployment.nnodes and deployment.nnodes != seen:
        return f"{seen}/{deployment.nnodes}"
    return str(seen)


def deployment_row(deployment: Deployment, found: FleetAlerts) -> FleetRow:
    alerts = found.of_deployment(deployment)
    room = deployment_headroom(deployment)
    used = [memory_gib(h) for h in deployment.hosts]
    warnings, criticals = _counts(alerts)
    return FleetRow(
        kind=DEPLOYMENT,
        key=(deployment.key, None),
        name=deployment.model or deployment.key,
        state=deployment_state(deployment),
        model=deployment.model,
        shape=shape_text(deployment.tp, deployment.dp, deployment.pp),
        nodes=_nodes(deployment),
        kv_usage_pct=deployment_kv_usage_pct(deployment),
        headroom_gib=None if room is None else room[1].gib,
        restarts=deployment_restarts(deployment),
        level=found.deployment_level(deployment),
        warnings=warnings,
        criticals=criticals,
        used_gib=_total([u for u, _ in used]),
        total_gib=_total([t for _, t in used]),
        alerts=alerts,
    )


def _total(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def host_row(deployment: Deployment, host: FleetHost, found: FleetAlerts) -> FleetRow:
    alerts = found.of_host(deployment, host)
    room = worst_headroom(host)
    used, total = memory_gib(host)
    warnings, criticals = _counts(alerts)
    return FleetRow(
        kind=HOST,
        key=(deployment.key, host.host),
        name=host.host,
        state=host.state,
        model=host.model,
        shape=shape_text(host.tp, host.dp, host.pp),
        nodes="—" if host.node_rank is None else f"n{host.node_rank}",
        kv_usage_pct=kv_usage_pct(host),
        headroom_gib=None if room is None else room.gib,
        restarts=host.restarts,
        level=found.host_level(deployment, host),
        warnings=warnings,
        criticals=criticals,
        used_gib=used,
        total_gib=total,
        exporters=host.exporters,
        alerts=alerts,
    )


def fleet_rows(fleet: Fleet, found: FleetAlerts) -> tuple[FleetRow, ...]:
    rows: list[FleetRow] = []
    for deployment in fleet.deployments:
        rows.append(deployment_row(deployment, found))
        rows += [host_row(deployment, h, found) for h in deployment.hosts]
    return tuple(rows)


def find_host(fleet: Fleet, key: RowKey) -> FleetHost | None:
    """The host of a row (a deployment's row: its first host, node 0)."""
    deployment = next((d for d in fleet.deployments if d.key == key[0]), None)
    if deployment is None or not deployment.hosts:
        return None
    if key[1] is None:
        return deployment.hosts[0]
    return next((h for h in deployment.hosts if h.host == key[1]), None)


# -- the table's words ------------------------------------------------------------------------
def alert_cell(row: FleetRow) -> str:
    """`✖1 ▲2`: the alerts by level, with the level glyphs (readable without colour)."""
    parts = []
    if row.criticals:
        parts.append(f"{Level.CRITICAL.glyph}{row.criticals}")
    if row.warnings:
        parts.append(f"{Level.WARNING.glyph}{row.warnings}")
    return " ".join(parts)


def row_cells(row: FleetRow) -> dict[str, str]:
    """Each column's words for this row (unknown: an em dash)."""
    restarts = fmt.count(row.restarts)
    room = fmt.gib(row.headroom_gib, 2)
    memory = "—"
    if row.total_gib is not None:
        memory = f"{fmt.gib(row.used_gib)}/{fmt.gib(row.total_gib)}"
    return {
        "name": row.name,
        "state": row.state or "—",
        "model": row.model or "—",
        "shape": row.shape if row.kind == DEPLOYMENT else "",
        "nodes": row.nodes,
        "kv": fmt.pct(row.kv_usage_pct, 1),
        "headroom": room,
        "restarts": restarts,
        "alerts": alert_cell(row),
        "memory": memory,
        "exporters": ",".join(row.exporters),
    }
