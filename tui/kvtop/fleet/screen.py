"""The fleet overview: one row per deployment and its hosts, Prometheus' problem as a sentence,
the selected row's alerts under the table.

Like every screen, it shows the state the app hands it (`show_fleet`) and asks the app for a
change with a message (FleetMove, FleetOpen): it never imports the app.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer

from kvtop.fleet.rows import DEPLOYMENT
from kvtop.fleet.table import FleetSentences, FleetTable
from kvtop.fleet.view_state import FleetViewState
from kvtop.live.widgets.status_line import StatusLine


class FleetMove(Message):
    """Select the row `step` rows away."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step


class FleetOpen(Message):
    """Open the selected row's host (a deployment's row: its first host)."""


class FleetScreen(Screen[None]):
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("down,j", "move(1)", "down", show=False),
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("pageup", "move(-10)", show=False),
        Binding("home", "move(-100000)", show=False),
        Binding("end", "move(100000)", show=False),
        Binding("enter", "open", "host's GPUs"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.fleet_state: FleetViewState | None = None
        self._mounted = False

    def compose(self) -> ComposeResult:
        yield StatusLine(id="fleet-status", second_line=True)
        yield FleetSentences(id="fleet-problem")
        yield FleetTable(id="fleet-table")
        yield FleetSentences(id="fleet-alerts")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._mounted = True
        self.query_one("#fleet-problem", FleetSentences).display = False
        self.query_one("#fleet-alerts", FleetSentences).display = False
        if self.fleet_state is not None:
            self.show_fleet(self.fleet_state)

    def action_move(self, step: int) -> None:
        self.post_message(FleetMove(step))

    def action_open(self) -> None:
        self.post_message(FleetOpen())

    def show_fleet(self, state: FleetViewState) -> None:
        self.fleet_state = state
        if not self._mounted:
            return
        if state.status is not None:
            self.query_one(StatusLine).show(state.status)
        problem = state.problem if state.problem else None
        if problem is not None and state.stale:
            problem += " The table shows the last fleet Prometheus gave (stale)."
        warnings = state.fleet.warnings if state.fleet is not None and not state.stale else ()
        self.query_one("#fleet-problem", FleetSentences).show_problem(problem, warnings)
        self.query_one(FleetTable).show(state.rows, state.selected_position(), state.stale)
        row = state.selected_row()
        alerts = self.query_one("#fleet-alerts", FleetSentences)
        if row is None:
            alerts.show_alerts(None, ())
            return
        what = "deployment" if row.kind == DEPLOYMENT else "host"
        alerts.show_alerts(f"{what} {row.name}", row.alerts)
