"""What the fleet view shows: the fleet on screen, the selected row, Prometheus' problem, and
the ViewState of a host opened from it (no Textual here; tui/kvtop/fleet/app.py owns one of each).

A refresh that brought nothing (Prometheus down, slow, refusing) leaves the last good fleet on
screen, marked stale, with the problem as a sentence and the Prometheus marker off. A host
opened with Enter is drawn by the single-host overview from tui/kvtop/fleet/host_snapshot; its
status line says where it is (host · prometheus), its state from kvtop's exporter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kvtop.fleet.alerts import FleetAlerts, fleet_alerts, host_alerts
from kvtop.fleet.host_snapshot import fleet_snapshot
from kvtop.fleet.model import SGLANG, Fleet, FleetHost
from kvtop.fleet.rows import FleetRow, RowKey, find_host, fleet_rows
from kvtop.fleet.summary import gpu_exporters_text, shape_text
from kvtop.live.view_state import StatusFacts, ViewState, kv_facts
from kvtop.model.snapshot import SourceHealth, SourceState
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level, Thresholds
from kvtop.model.status.server_status import (
    AMBIENT,
    EXTRA,
    MUST,
    HeaderItem,
    duration_text,
    short_model,
)

PROMETHEUS = "prometheus"
_STATE_KINDS = {"ready": "ready", "failed": "failed", "stopped": "failed", "starting": "starting"}


@dataclass
class FleetViewState:
    """The fleet view's state; the fleet app is the only one to change it."""

    prometheus_url: str
    interval_s: float = 5.0
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    fleet: Fleet | None = None  # on screen: the last fleet that had any data
    problem: str | None = None  # the latest refresh's problem (None: it went well)
    stale: bool = False  # the fleet on screen is older than the latest refresh
    paused: bool = False
    selected: RowKey | None = None
    rows: tuple[FleetRow, ...] = ()
    alerts: FleetAlerts | None = None
    refreshes: int = 0
    status: StatusFacts | None = field(default=None)

    def apply(self, fleet: Fleet) -> None:
        """One refresh: a fleet with data replaces the one on screen; one without keeps it
        (stale) and says why."""
        self.refreshes += 1
        self.problem = fleet.problem
        if fleet.deployments or fleet.problem is None or self.fleet is None:
            self.fleet, self.stale = fleet, False
        else:
            self.stale = True
        self.alerts = fleet_alerts(self.fleet, self.thresholds)
        self.rows = fleet_rows(self.fleet, self.alerts)
        keys = [r.key for r in self.rows]
        if self.selected not in keys:
            self.selected = _nearest(self.selected, keys)

    def selected_position(self) -> int:
        keys = [r.key for r in self.rows]
        return keys.index(self.selected) if self.selected in keys else 0

    def selected_row(self) -> FleetRow | None:
        return self.rows[self.selected_position()] if self.rows else None

    def step(self, by: int) -> None:
        if not self.rows:
            return
        position = max(0, min(len(self.rows) - 1, self.selected_position() + by))
        self.selected = self.rows[position].key

    def host_of(self, key: RowKey) -> FleetHost | None:
        return find_host(self.fleet, key) if self.fleet is not None else None

    def age_s(self, now: float) -> float | None:
        return None if self.fleet is None else max(0.0, now - self.fleet.taken_at)


def _nearest(old: RowKey | None, keys: list[RowKey]) -> RowKey | None:
    """The same deployment's row when its host left, else the first row."""
    if not keys:
        return None
    if old is not None:
        same = [k for k in keys if k[0] == old[0]]
        if same:
            return same[0]
    return keys[0]


def _prometheus_marker(state: FleetViewState, now: float) -> tuple[SourceHealth, str | None]:
    age = state.age_s(now) if state.stale else None
    if state.problem and (state.stale or state.fleet is None or not state.fleet.deployments):
        health = SourceHealth(PROMETHEUS, SourceState.OFF, state.problem, age)
        return health, None if age is None else duration_text(age)
    return SourceHealth(PROMETHEUS, SourceState.OK), None


def fleet_status(state: FleetViewState, now: float) -> StatusFacts:
    """The fleet screen's status line: the URL, what was found, the alerts, the marker."""
    fleet = state.fleet
    marker, age = _prometheus_marker(state, now)
    items: list[HeaderItem] = []
    level = Level.OK
    if fleet is None:
        text, kind = "waiting for Prometheus", "waiting"
    elif marker.state == SourceState.OFF:
        text, kind = "Prometheus not answering", "failed"
    else:
        hosts, deployments = len(fleet.hosts), len(fleet.deployments)
        text = f"{deployments} deployment{'s' if deployments != 1 else ''}"
        text += f" on {hosts} host{'s' if hosts != 1 else ''}"
        kind = "ready"
    if state.alerts is not None and fleet is not None:
        level = state.alerts.level
        counts = [r.level for r in state.rows if r.kind == "deployment"]
        for shown in (Level.CRITICAL, Level.WARNING):
            if count := counts.count(shown):
                words = f"{shown.glyph} {count} {shown}"
                items.append(HeaderItem(words, f"{shown.glyph}{count}", MUST))
    if fleet is not None and fleet.selector:
        items.append(HeaderItem(fleet.selector, fleet.selector, EXTRA))
    if state.stale and fleet is not None:
        stamp = datetime.fromtimestamp(fleet.taken_at).strftime("%H:%M:%S")
        items.append(HeaderItem(f"stale: as of {stamp}", "stale", MUST))
    return StatusFacts(
        left=("fleet", state.prometheus_url),
        state=text,
        state_kind=kind,
        sources=(marker,),
        paused=state.paused,
        interval_s=state.interval_s,
        demo=False,
        facts=tuple(i.text for i in items),
        fact_items=tuple(items),
        level=level,
        source_ages=(age,),
    )


# -- a host opened from the fleet ---------------------------------------------------------------
def _host_items(host: FleetHost) -> list[HeaderItem]:
    items = []
    if host.model:
        model = host.model.rstrip("/").rsplit("/", 1)[-1]
        items.append(HeaderItem(model, short_model(model), MUST))
    if host.tp is not None:
        shape = shape_text(host.tp, host.dp, host.pp)
        items.append(HeaderItem(shape, shape, MUST))
    if host.nnodes and host.nnodes > 1 and host.node_rank is not None:
        words = f"node {host.node_rank} of {host.nnodes}"
        items.append(HeaderItem(words, f"n{host.node_rank}/{host.nnodes}", AMBIENT))
    if host.sglang_version:
        version = f"SGLang {host.sglang_version}"
        items.append(HeaderItem(version, version, EXTRA))
    return items


def host_status(
    host: FleetHost, view: ViewState, fleet_state: FleetViewState, now: float
) -> StatusFacts:
    """The opened host's status line: its state from kvtop's exporter, its alert level."""
    snapshot = view.snapshot
    sources = snapshot.sources if snapshot is not None else ()
    marker, age = _prometheus_marker(fleet_state, now)
    # The host's name leads the state, which a narrow status line keeps longest.
    gpus = gpu_exporters_text(host)
    numbers = f"{gpus} and SGLang numbers only" if gpus else "SGLang numbers only"
    text = f"{host.host}: {host.state or f'no kvtop exporter ({numbers})'}"
    if fleet_state.stale:
        text += " (stale)"
    found = host_alerts(host, fleet_state.thresholds)
    items = _host_items(host)
    return StatusFacts(
        left=(PROMETHEUS,),
        state=text,
        state_kind=_STATE_KINDS.get(host.state or "", "waiting"),
        sources=(*sources, marker),
        paused=view.paused,
        interval_s=view.interval_s,
        demo=False,
        facts=tuple(i.text for i in items),
        fact_items=tuple(items),
        level=found[0].level if found else Level.OK,
        source_ages=(*(None,) * len(sources), age),
    )


def open_host(
    view: ViewState | None,
    host: FleetHost,
    fleet_state: FleetViewState,
    clock: Callable[[], float],
) -> ViewState:
    """The single-host ViewState for `host` (a new one, or `view` with the new snapshot: the
    selected GPU, order and history stay)."""
    fleet = fleet_state.fleet
    taken_at = fleet.taken_at if fleet is not None else clock()
    snapshot = fleet_snapshot(host, taken_at, fleet_state.thresholds)
    if view is None or view.host_name != host.host:
        view = ViewState(
            source_label=PROMETHEUS,
            interval_s=fleet_state.interval_s,
            host_name=host.host,
            thresholds=fleet_state.thresholds,
        )
    if view.latest is None or view.latest.taken_at != snapshot.taken_at:
        view.history.record(snapshot, view.interval_s)
    view.latest = snapshot
    view.paused = fleet_state.paused
    if not view.paused or view.snapshot is None:
        view.snapshot = snapshot
    view.interval_s = fleet_state.interval_s
    view.status = host_status(host, view, fleet_state, clock())
    view.kv = kv_facts(view, clock)
    return view


def wants_kv_history(host: FleetHost) -> bool:
    """Whether opening `host` asks Prometheus for its KV usage history: only a host with
    SGLang's metrics (not node 1+ of a multi-node deployment, not a DCGM-only host)."""
    return host.kv.token_usage is not None or any(t.exporter == SGLANG for t in host.targets)
