"""The fleet's Textual app (`kvtop --prometheus URL`): the fleet overview, and a host's GPUs.

Runs a fleet feed (tui/kvtop/fleet/feed.py: FleetReader.read() every interval) and shows each fleet
on the fleet screen (tui/kvtop/fleet/screen.py). Enter opens the selected host with the single-host
overview (tui/kvtop/live/screens/overview.OverviewScreen), fed a Snapshot made from what Prometheus holds
(tui/kvtop/fleet/host_snapshot) and refreshed with every fleet, its KV sparkline seeded with the
host's last 10 minutes from Prometheus (one query through the feed, in a worker, on opening
only); Escape or Backspace goes back, q quits. Like tui/kvtop/live/app.py it knows neither the reader
nor Prometheus: only the feed's fleets and history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Protocol

from textual import events, work
from textual.binding import Binding

from kvtop.fleet.model import Fleet
from kvtop.fleet.rows import RowKey
from kvtop.fleet.screen import FleetMove, FleetOpen, FleetScreen
from kvtop.fleet.view_state import FleetViewState, fleet_status, open_host, wants_kv_history
from kvtop.live.base import FeedApp, stylesheet
from kvtop.live.screens.base import OpenGpuDetail, SelectGpu, ShowsState
from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.view_state import ViewState, kv_facts, next_interval
from kvtop.model.history import KvHistory
from kvtop.model.memory.gpu_order import next_order
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds


class FleetSource(Protocol):
    """What the app needs from the fleet feed."""

    interval_s: float
    paused: bool

    def fleets(self) -> AsyncIterator[Fleet]: ...

    def wake(self) -> None: ...

    async def kv_history(self, host: str) -> KvHistory | None: ...


class FleetApp(FeedApp):
    TITLE = "kvtop fleet"
    CSS_PATH = stylesheet()
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("q", "quit", "quit"),
        Binding("escape,backspace", "back", "fleet"),
        Binding("space", "toggle_pause", "pause"),
        Binding("plus,equals_sign", "interval(1)", "slower", show=False),
        Binding("minus", "interval(-1)", "faster", show=False),
    ]

    def __init__(
        self,
        feed: FleetSource,
        *,
        prometheus_url: str,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        clock: Callable[[], float] = time.time,
        theme: str | None = None,
    ) -> None:
        super().__init__()
        if theme is not None:
            self.theme = theme
        self.feed = feed
        self.clock = clock
        self.fleet_state = FleetViewState(
            prometheus_url=prometheus_url, interval_s=feed.interval_s, thresholds=thresholds
        )
        self.opened: RowKey | None = None  # the host whose GPUs are shown
        self.host_view: ViewState | None = None
        self._fleet_screen = FleetScreen()
        self._rows = 0  # the terminal's height, from the latest resize (0: none yet)

    # -- lifecycle ----------------------------------------------------------------------------
    def get_default_screen(self) -> FleetScreen:
        self._show()
        return self._fleet_screen

    def on_mount(self) -> None:
        self.follow_the_terminal()
        self._feed = self._consume()

    @work(group="feed", exclusive=True, exit_on_error=False)
    async def _consume(self) -> None:
        try:
            async for fleet in self.feed.fleets():
                self.apply(fleet)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave a traceback on screen
            self.fleet_state.problem = (
                f"kvtop stopped reading Prometheus ({type(exc).__name__}: {exc}). The screen "
                "shows the last fleet; restart kvtop, and please report this."
            )
            self.fleet_state.stale = True
            self._show()

    def apply(self, fleet: Fleet) -> None:
        """One refresh: the fleet screen, and the opened host's GPUs."""
        self.fleet_state.apply(fleet)
        self._show()

    # -- showing ------------------------------------------------------------------------------
    def _show(self) -> None:
        state = self.fleet_state
        state.status = fleet_status(state, self.clock())
        self._fleet_screen.show_fleet(state)
        if self.opened is not None:
            self._show_host()

    def show_view(self) -> None:
        self._show()

    def _show_host(self) -> None:
        assert self.opened is not None
        host = self.fleet_state.host_of(self.opened)
        view = self.host_view
        if host is None:
            if view is not None and view.status is not None:
                gone = "not in Prometheus' latest answer (last numbers shown)"
                view.status = replace(view.status, state=gone, state_kind="failed")
        else:
            view = open_host(view, host, self.fleet_state, self.clock)
            view.rows = self._rows or self.size.height
        self.host_view = view
        if view is not None:
            self._push_view(view)

    def _push_view(self, view: ViewState) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, ShowsState):
                screen.show_state(view)

    # -- what the screens ask for -------------------------------------------------------------
    def on_fleet_move(self, message: FleetMove) -> None:
        message.stop()
        self.fleet_state.step(message.step)
        self._show()

    def on_fleet_open(self, message: FleetOpen) -> None:
        message.stop()
        row = self.fleet_state.selected_row()
        host = self.fleet_state.host_of(row.key) if row is not None else None
        if row is None or host is None:
            self.notify("No host to open: Prometheus has given no fleet yet.")
            return
        self.opened = (row.key[0], host.host)
        self.host_view = None
        self._show_host()
        screen = OverviewScreen()
        if self.host_view is not None:
            screen.show_state(self.host_view)
        self.push_screen(screen)
        if self.host_view is not None and wants_kv_history(host):
            self._seed_history(self.host_view, host.host)

    @work(group="history", exclusive=True, exit_on_error=False)
    async def _seed_history(self, view: ViewState, host: str) -> None:
        """The opened host's KV usage of the last minutes, from Prometheus (one query_range,
        only here), put before the live points; the fleet's refresh goes on meanwhile. None
        (no history, Prometheus failing) leaves the sparkline to fill live: no error shown."""
        found = await self.feed.kv_history(host)
        if found is None or view is not self.host_view:
            return  # nothing, or the operator went back or opened another host meanwhile
        if view.history.seed_token_usage(found.points, found.step_s):
            view.kv = kv_facts(view, self.clock)
            self._push_view(view)

    def on_select_gpu(self, message: SelectGpu) -> None:
        message.stop()
        view = self.host_view
        if view is not None and message.gpu_index != view.selected_gpu:
            view.selected_gpu = message.gpu_index
            self._show_host()

    def on_open_gpu_detail(self, message: OpenGpuDetail) -> None:
        """GPU detail explains each number by its log line and NVML reading: Prometheus has
        neither, so it is left to kvtop on the host."""
        message.stop()
        host = self.opened[1] if self.opened is not None else "the host"
        self.notify(
            f"GPU detail needs the host's log and NVML: run kvtop on {host} for it. "
            "Escape goes back to the fleet.",
            timeout=8,
        )

    # -- actions ------------------------------------------------------------------------------
    async def action_back(self) -> None:  # async as App's, which it replaces
        """Back one screen; on the fleet screen, nothing (q quits)."""
        if len(self.screen_stack) <= 1:
            return
        self.pop_screen()
        if self.screen is self._fleet_screen:
            self.workers.cancel_group(self, "history")
            self.opened, self.host_view = None, None
            self._show()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Escape (back to the fleet) only where there is a screen to leave; nothing once
        leaving."""
        if self.leaving:
            return False
        if action == "back":
            return len(self.screen_stack) > 1
        return True

    def action_gpu_order(self) -> None:
        """o on a host's GPUs: the next order (index, free, used, temperature)."""
        if self.host_view is not None:
            self.host_view.gpu_order = next_order(self.host_view.gpu_order)
            self._show_host()

    def action_toggle_pause(self) -> None:
        state = self.fleet_state
        state.paused = not state.paused
        self.feed.paused = state.paused
        self._show()

    def action_interval(self, step: int) -> None:
        new = next_interval(self.fleet_state.interval_s, step)
        self.fleet_state.interval_s = new
        self.feed.interval_s = new
        self.feed.wake()
        self._show()

    def on_resize(self, event: events.Resize) -> None:
        # The event's size: App's own handler, which stores it in self.size, runs after this.
        self._rows = event.size.height
        if self.opened is not None:
            self._show_host()
