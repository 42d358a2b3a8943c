"""The Textual app: runs the session's snapshot feed and shows it on the current screen."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Protocol

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import Screen

from tui.model.deployment import Snapshot
from tui.model.formula import format_version
from tui.model.history import History
from tui.model.server_status import deployment_facts, server_status
from tui.screens.overview import OverviewScreen
from tui.widgets.status_line import StatusFacts

INTERVALS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
EXIT_GRACE_S = 2.0  # after SIGHUP/SIGTERM, the longest a clean shutdown may take
AUTO_COMPACT_BELOW_ROWS = 34


class SnapshotFeed(Protocol):
    """What the app needs from a session: snapshots every `interval_s`, changeable live."""

    interval_s: float

    def snapshots(self) -> AsyncIterator[Snapshot]: ...


@dataclass
class ViewState:
    """What the screens show; the app owns it, the screens read it."""

    source_label: str
    demo: bool = False
    snapshot: Snapshot | None = None  # what is on screen (frozen while paused)
    latest: Snapshot | None = None  # what the sources delivered last
    history: History = field(default_factory=History)
    paused: bool = False
    interval_s: float = 1.0
    compact: bool | None = None  # None: decided by the terminal height
    request_len: int | None = None
    host_name: str = ""
    problem: str | None = None


def _stylesheet() -> str:
    """styles/kvtop.tcss, installed as the tui.styles package."""
    return str(resources.files("tui.styles") / "kvtop.tcss")


class KvtopApp(App[int]):
    TITLE = "kvtop"
    CSS_PATH = _stylesheet()
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("q", "quit", "quit"),
        Binding("question_mark,f1", "help", "help"),
        Binding("f", "formula", "formula"),
        Binding("c", "toggle_compact", "compact"),
        Binding("space", "toggle_pause", "pause"),
        Binding("plus,equals_sign", "interval(1)", "slower", show=False),
        Binding("minus", "interval(-1)", "faster", show=False),
    ]

    def __init__(
        self,
        feed: SnapshotFeed,
        *,
        source_label: str,
        demo: bool = False,
        request_len: int | None = None,
        compact: bool | None = None,
        clock: Callable[[], float] = time.time,
        host_name: str | None = None,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.clock = clock  # for uptimes; tests fix it
        self.state = ViewState(
            source_label=source_label,
            demo=demo,
            interval_s=feed.interval_s,
            request_len=request_len,
            compact=compact,
            host_name=host_name or socket.gethostname(),
        )
        self._feed_task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def get_driver_class(self) -> type[Driver]:
        from tui.quiet_driver import driver_class

        return driver_class(super().get_driver_class())

    def get_default_screen(self) -> Screen[object]:
        return OverviewScreen()

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            # The SSH session went away (SIGHUP) or systemd stops us: leave cleanly, status 0.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._leave)
        self._feed_task = asyncio.create_task(self._consume())

    def _leave(self) -> None:
        """Exit now, and for certain: with the terminal gone, Textual's shutdown can block for
        ever (seen: LinuxDriver.close waiting on its writer thread's queue, SIGTERM ignored
        because the event loop is stuck in that call). There is nothing left to restore."""
        watchdog = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()
        self.exit(0)

    async def on_unmount(self) -> None:
        if self._feed_task is not None:
            self._feed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._feed_task

    async def _consume(self) -> None:
        try:
            async for snapshot in self.feed.snapshots():
                self.apply(snapshot)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a source must not leave a traceback on screen
            self.state.problem = (
                f"kvtop stopped reading its sources ({type(exc).__name__}: {exc}). "
                "The screen shows the last readings; restart kvtop, and please report this."
            )
            self.notify(self.state.problem, severity="error", timeout=30)

    def apply(self, snapshot: Snapshot) -> None:
        """One new snapshot: history always, the screen unless paused."""
        state = self.state
        state.history.record(snapshot)
        state.latest = snapshot
        if not state.paused:
            state.snapshot = snapshot
            self.refresh_screen()

    def refresh_screen(self) -> None:
        for screen in (self.screen, *self._under_modal()):
            view = getattr(screen, "refresh_view", None)
            if view is not None:
                view()

    def _under_modal(self) -> Iterable[Screen[object]]:
        """The screen under a modal is visible too: keep it current."""
        stack = self.screen_stack
        if len(stack) >= 2 and getattr(self.screen, "is_modal", False):
            return (stack[-2],)
        return ()

    # -- what the screens share ------------------------------------------------------------------
    @property
    def compact(self) -> bool:
        if self.state.compact is not None:
            return self.state.compact
        return self.size.height < AUTO_COMPACT_BELOW_ROWS

    def status_facts(self) -> StatusFacts:
        state = self.state
        snapshot = state.snapshot
        left = (state.host_name, state.source_label)
        after: list[str] = []
        kind, text = "waiting", "waiting for the first readings"
        sources = ()
        if snapshot is not None:
            startup = snapshot.analysis.startup
            info = snapshot.server_info
            if info is not None and info.version:
                after.append(f"SGLang {info.version}")
            elif snapshot.analysis.version is not None:
                after.append(f"SGLang {format_version(snapshot.analysis.version)}")
            elif startup.version.known:
                after.append(f"SGLang {startup.version.text()}")
            after.extend(deployment_facts(startup))
            status = server_status(startup, datetime.fromtimestamp(self.clock()))
            kind, text = status.state, status.text
            if status.restarts:
                text += f" · restarted {status.restarts}×"
            sources = snapshot.sources
        if state.problem:
            kind, text = "failed", "sources stopped (see the message)"
        return StatusFacts(
            left=left,
            facts=tuple(after),
            state=text,
            state_kind=kind,
            sources=tuple(sources),
            paused=state.paused,
            interval_s=state.interval_s,
            demo=state.demo,
        )

    # -- actions --------------------------------------------------------------------------------
    def open_detail(self, gpu_index: int) -> None:
        from tui.screens.gpu_detail import GpuDetailScreen

        self.push_screen(GpuDetailScreen(gpu_index))

    def action_formula(self) -> None:
        from tui.screens.formula import FormulaScreen

        if isinstance(self.screen, FormulaScreen):
            return
        self.push_screen(FormulaScreen(self.selected_rank()))

    def selected_rank(self) -> str | None:
        """The rank of the GPU in GPU detail, else of the GPU selected in the overview."""
        snapshot = self.state.snapshot
        if snapshot is None or not snapshot.gpus:
            return None
        index = getattr(self.screen, "gpu_index", None)
        if index is None:
            overview = self.screen_stack[0]
            position = getattr(overview, "selected", 0)
            gpu = snapshot.gpus[min(position, len(snapshot.gpus) - 1)]
        else:
            gpu = next((g for g in snapshot.gpus if g.sample.index == index), None)
        return gpu.ranks[0] if gpu is not None and gpu.ranks else None

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen())

    def action_toggle_compact(self) -> None:
        self.state.compact = not self.compact
        self.refresh_screen()

    def action_toggle_pause(self) -> None:
        state = self.state
        state.paused = not state.paused
        if not state.paused and state.latest is not None:
            state.snapshot = state.latest
        self.refresh_screen()

    def action_interval(self, step: int) -> None:
        state = self.state
        current = min(range(len(INTERVALS_S)), key=lambda i: abs(INTERVALS_S[i] - state.interval_s))
        new = INTERVALS_S[max(0, min(len(INTERVALS_S) - 1, current + step))]
        state.interval_s = new
        self.feed.interval_s = new
        self.refresh_screen()

    def on_resize(self) -> None:
        if self.state.compact is None:
            self.refresh_screen()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("GPU detail", "Drill into the selected GPU", self._detail_command)
        yield SystemCommand("Formula", "SGLang's KV sizing with live numbers", self.action_formula)
        yield SystemCommand("Help", "Keys, glyphs and sources", self.action_help)
        yield SystemCommand(
            "Pause / resume", "Freeze the display (sources keep running)", self.action_toggle_pause
        )
        yield SystemCommand(
            "Compact / full", "One line per GPU, fewer panels", self.action_toggle_compact
        )
        yield SystemCommand(
            "Slower refresh", "Longer refresh interval (+)", lambda: self.action_interval(1)
        )
        yield SystemCommand(
            "Faster refresh", "Shorter refresh interval (-)", lambda: self.action_interval(-1)
        )

    def _detail_command(self) -> None:
        overview = self.screen_stack[0]
        if isinstance(overview, OverviewScreen):
            while len(self.screen_stack) > 1:
                self.pop_screen()
            overview.action_detail()
