"""The Textual app: runs the session's snapshot feed and shows it on the current screen."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from textual import events, work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from kvtop.live.base import FeedApp, stylesheet
from kvtop.live.key_list import KeySection, palette_commands
from kvtop.live.screens.base import OpenGpuDetail, RequestLength, SelectGpu, ShowsState
from kvtop.live.screens.first_frame import FirstFrameScreen
from kvtop.model.memory.gpu_order import next_order
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds

# What the first frame needs is imported above; the overview, the view state and the session's
# model only once it is drawn (KvtopApp._begin): see tui/kvtop/live/screens/first_frame.py.
if TYPE_CHECKING:
    from kvtop.live.screens.overview import OverviewScreen
    from kvtop.live.view_state import ViewState
    from kvtop.model.memory.gpu_view import GpuView
    from kvtop.model.snapshot import Snapshot
    from kvtop.sglang.raw_lines import RawLines

_S = TypeVar("_S", bound=Screen[Any])  # a screen handed back as the type it came in as
# The keys that work on the first frame, before the state the views need is there.
FIRST_FRAME_ACTIONS = frozenset({"quit", "suspend_process"})


class SnapshotFeed(Protocol):
    """What the app needs from a session: snapshots every `interval_s`, changeable live, and
    the log's latest lines as written (the raw log view and the overview's tail)."""

    interval_s: float
    raw_lines: RawLines

    def snapshots(self) -> AsyncIterator[Snapshot]: ...


# The first frame's GPUs, as soon as they are known (none: nothing to draw before the feed).
FirstGpus = Callable[[], Awaitable["Sequence[GpuView]"]]
# The longest the first paint waits for them (they are there in a millisecond as a rule).
FIRST_PAINT_HOLD_S = 0.1


def settle_startup_memory() -> None:
    """Start-up's objects (Textual and its widgets, the modules, the log read whole: some
    hundreds of thousands, all kept for the run) set aside from the garbage collector, which
    otherwise walks every one of them at each full collection: measured on the live view,
    one such pass every 30 to 60 s at 28 to 36 ms each, about 0.1 % of a core alone. What is
    made later is collected as before; what start-up made and later drops is freed by its
    reference count as always (only a cycle among such objects would stay: once, not growing)."""
    gc.collect()
    gc.freeze()


class KvtopApp(FeedApp):
    TITLE = "kvtop"
    CSS_PATH = stylesheet()
    ENABLE_COMMAND_PALETTE = True
    # The description is the key bar's word and the palette's title; the tooltip, where
    # there is one, the help's line (tui/kvtop/live/key_list.py reads them for both).
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("q", "quit", "quit", tooltip="quit (status 0)"),
        Binding("question_mark,f1", "help", "help", tooltip="this help"),
        Binding(
            "f",
            "formula",
            "formula",
            tooltip="the formula: SGLang's KV sizing with live numbers, what-if and reverse "
            "questions",
        ),
        Binding(
            "e",
            "events('events')",
            "events",
            tooltip="the events pane: every event, newest first (scroll, search, filter, save)",
        ),
        Binding(
            "l",
            "events('log')",
            "raw log",
            show=False,
            tooltip="the raw log: the latest lines as written, tracebacks included, literally",
        ),
        Binding(
            "t",
            "processes",
            "processes",
            tooltip="processes: every GPU process, whose (rank, foreign), host CPU, RSS, time",
        ),
        Binding(
            "c",
            "toggle_compact",
            "compact",
            tooltip="compact (one line per GPU, fewer panels) / full",
        ),
        Binding(
            "space",
            "toggle_pause",
            "pause",
            tooltip="pause the display (sources keep running, history keeps recording)",
        ),
        Binding(
            "d",
            "dismiss_notes",
            "dismiss note",
            show=False,
            tooltip="dismiss the advisory note (ranks mapped by order): it stays listed here, "
            "under notes",
        ),
        Binding("plus,equals_sign", "interval(1)", "slower", show=False, tooltip="slower refresh"),
        Binding("minus", "interval(-1)", "faster", show=False, tooltip="faster refresh"),
    ]

    # Set by _take_feed: at once when the app is given a feed, after the first frame otherwise.
    feed: SnapshotFeed
    state: ViewState

    def __init__(
        self,
        feed: SnapshotFeed | None = None,
        *,
        make_feed: Callable[[], SnapshotFeed] | None = None,
        first_gpus: FirstGpus | None = None,
        source_label: str,
        demo: bool = False,
        request_len: int | None = None,
        compact: bool | None = None,
        clock: Callable[[], float] = time.time,
        host_name: str | None = None,
        theme: str | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        config_path: str | None = None,
        settle_memory_after: int | None = None,
    ) -> None:
        """`feed`: the snapshots, made already; or `make_feed`, called once the first frame is
        drawn (the GPUs of `first_gpus` as NVML alone shows them, before the session and the
        overview are imported: the CLI's way). `settle_memory_after`: once that many
        snapshots are on screen, what start-up made is set aside from the garbage collector
        (settle_startup_memory); None: never (tests)."""
        if (feed is None) == (make_feed is None):
            raise ValueError("KvtopApp takes a feed or make_feed, one of the two")
        super().__init__()
        self._settle_after = settle_memory_after
        self._applied = 0
        self.config_path = config_path  # --config; None: the default file (Save theme writes it)
        if (
            theme is not None
        ):  # the config file's, checked against Textual's names (tui/kvtop/config.py)
            self.theme = theme
        self.clock = clock  # for uptimes; tests fix it
        self._make_feed = make_feed
        self._first_gpus = first_gpus
        self.start_error: Exception | None = None  # make_feed's, for the CLI to report
        self._view_settings: dict[str, Any] = {
            "source_label": source_label,
            "demo": demo,
            "request_len": request_len,
            "compact": compact,
            "host_name": host_name or socket.gethostname(),
            "thresholds": thresholds,
        }
        self.began = False  # the feed and the view state are there (at once, given a feed)
        if feed is not None:
            self._take_feed(feed)

    def _take_feed(self, feed: SnapshotFeed) -> None:
        from kvtop.live.view_state import ViewState

        self.feed = feed
        self.state = ViewState(interval_s=feed.interval_s, **self._view_settings)
        self.began = True

    # -- lifecycle ------------------------------------------------------------------------------
    def get_default_screen(self) -> Screen[Any]:
        if not self.began:
            settings = self._view_settings
            return FirstFrameScreen(settings["host_name"], settings["source_label"])
        return self._overview()

    def _overview(self) -> OverviewScreen:
        from kvtop.live.screens.overview import OverviewScreen

        return self._with_state(OverviewScreen(self.raw_log_lines))

    def on_mount(self) -> None:
        self.follow_the_terminal()
        if self.began:
            self._start_feed()
            return
        # The first paint held until the GPUs are drawn: they are read by now as a rule (their
        # poll began before Textual was imported), but the worker drawing them runs after the
        # screen's first paint, which would then show the status line alone (measured: one
        # start in two, 20 ms before the rows). Held at most FIRST_PAINT_HOLD_S: a driver still
        # loading does not keep the screen blank.
        hold = contextlib.ExitStack()
        hold.enter_context(self.batch_update())
        self._first_frame(hold)

    @work(group="first-frame", exit_on_error=False)
    async def _first_frame(self, hold: contextlib.ExitStack) -> None:
        """The first frame's GPUs drawn (`first_gpus`), then the rest begun once that frame
        is on the terminal; begun all the same if they fail (the session reads the GPUs again
        and says what went wrong)."""
        first = self._first_gpus
        reading = asyncio.ensure_future(first()) if first is not None else None
        try:
            if reading is not None:
                await asyncio.wait({reading}, timeout=FIRST_PAINT_HOLD_S)
                if reading.done():
                    self._show_first(reading.result())
            hold.close()  # painted now, with the rows or without
            if reading is not None and not reading.done():
                self._show_first(await reading)
        finally:
            hold.close()
            if reading is not None and not reading.done():
                reading.cancel()  # leaving while a driver still loads
            self.call_after_refresh(self._begin)

    def _show_first(self, gpus: Sequence[GpuView]) -> None:
        screen = self.screen
        if gpus and isinstance(screen, FirstFrameScreen):
            screen.show_gpus(gpus)

    def _begin(self) -> None:
        """The feed made (the session and the model imported), the overview in place of the
        first frame, and the feed consumed."""
        if self.began or self.leaving or self._make_feed is None:
            return
        try:
            feed = self._make_feed()
        except Exception as exc:  # the CLI reports it as it would have before the app ran
            self.start_error = exc
            self.exit(1)
            return
        self._take_feed(feed)
        # Pushed over the first frame, which Textual cannot switch away from (the default
        # screen was never pushed); a mode of its own would make Textual parse the whole
        # stylesheet again (measured: 2.8 MB more RSS for the run). The first frame stays
        # under it, emptied, never shown: nothing pops the overview.
        first = self.screen
        self.push_screen(self._overview())
        first.call_later(first.remove_children)
        self._start_feed()

    def _start_feed(self) -> None:
        self.state.rows = self.size.height
        self._feed = self._consume()

    @work(group="feed", exclusive=True, exit_on_error=False)
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
            self.show_state()

    def apply(self, snapshot: Snapshot) -> None:
        """One new snapshot: history always, the screen unless paused."""
        state = self.state
        self._applied += 1
        if self._applied == self._settle_after:
            self.call_after_refresh(settle_startup_memory)  # once drawn: start-up is done
        state.history.record(snapshot, state.interval_s)
        state.latest = snapshot
        if not state.paused:
            state.snapshot = snapshot
            self.show_state()

    def show_state(self) -> None:
        """The one way screens learn of a change: the state, to every visible screen."""
        if not self.began:
            return  # the first frame: nothing but the GPUs to show yet
        self._facts()
        for screen in (self.screen, *self._under_modal()):
            if isinstance(screen, ShowsState):
                screen.show_state(self.state)

    def show_view(self) -> None:
        self.show_state()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Nothing once leaving; the key bar offers an app key only where it does something."""
        if not super().check_action(action, parameters):
            return False
        if not self.began:  # the first frame: leaving works, views need the state
            return action in FIRST_FRAME_ACTIONS
        return action not in getattr(self.screen, "APP_ACTIONS_OFF", ())

    def _with_state(self, screen: _S) -> _S:
        if isinstance(screen, ShowsState):
            self._facts()
            screen.show_state(self.state)
        return screen

    def _facts(self) -> None:
        """What the status line and the KV panel show, from the state and the clock now."""
        from kvtop.live.view_state import kv_facts, status_facts

        self.state.status = status_facts(self.state, self.clock)
        self.state.kv = kv_facts(self.state, self.clock)

    def _under_modal(self) -> Iterable[Screen[object]]:
        """The screen under a modal is visible too: keep it current."""
        stack = self.screen_stack
        if len(stack) >= 2 and self.screen.is_modal:
            return (stack[-2],)
        return ()

    @property
    def compact(self) -> bool:
        return self.state.compact_now

    # -- what the screens ask for ---------------------------------------------------------------
    def on_select_gpu(self, message: SelectGpu) -> None:
        message.stop()
        if message.gpu_index != self.state.selected_gpu:
            self.state.selected_gpu = message.gpu_index
            self.show_state()

    def on_open_gpu_detail(self, message: OpenGpuDetail) -> None:
        message.stop()
        self.open_detail()

    def on_request_length(self, message: RequestLength) -> None:
        message.stop()
        self.state.request_len = message.tokens

    # -- actions --------------------------------------------------------------------------------
    def open_detail(self) -> None:
        from kvtop.live.screens.gpu_detail import GpuDetailScreen

        view = self.state.selected_view()
        if view is None:
            self.notify("No GPU to show: kvtop has no GPU readings (see the NVML marker).")
            return
        self.state.selected_gpu = view.sample.index
        self._open(GpuDetailScreen())

    def action_formula(self) -> None:
        from kvtop.live.screens.formula import FormulaScreen

        if isinstance(self.screen, FormulaScreen):
            return
        self._open(FormulaScreen(self.state.selected_rank()))

    def action_processes(self) -> None:
        """t: every process on the GPUs, with the host's CPU, RAM and swap (t again: back)."""
        from kvtop.live.screens.processes import ProcessesScreen

        if isinstance(self.screen, ProcessesScreen):
            self.screen.dismiss(None)
            return
        self._open(ProcessesScreen())

    def action_process_order(self) -> None:
        """o in the processes view: the next order (GPU memory, CPU, RSS, time, GPU, pid, user)."""
        from kvtop.model.processes.table import next_order as next_process_order

        self.state.process_order = next_process_order(self.state.process_order)
        self.show_state()

    def action_events(self, mode: str) -> None:
        """The events pane (e) or the raw log (l): scroll, search, filter, save, copy."""
        from kvtop.live.screens.events import EventsScreen

        if isinstance(self.screen, EventsScreen):
            return
        self._open(EventsScreen(mode, self.raw_log_lines, self.save_view))

    def _open(self, screen: Screen[Any]) -> None:
        """A view the operator asked for, over the toasts of the one before: they are cleared,
        so none covers the help or the formula (the sources' stop, the one lasting message,
        stays in the status line and the help's notes)."""
        self.clear_notifications()
        self.push_screen(self._with_state(screen))

    def save_view(self, kind: str, text: str) -> tuple[str | None, str]:
        """The events pane's `s`: a new file with the lines shown, and the sentence saying
        where (or why not)."""
        from datetime import datetime

        from kvtop.live.view_file import save_view

        saved = save_view(kind, text, datetime.now(), os.environ, os.getcwd())
        return saved.path, saved.sentence

    def raw_log_lines(self) -> tuple[str, ...]:
        """The latest log lines as written (oldest first)."""
        return self.feed.raw_lines.lines()

    def action_help(self) -> None:
        from kvtop.live.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        self._open(HelpScreen(self.key_sections()))

    def key_sections(self) -> list[KeySection]:
        """The help's key list: this app's bindings (every view), then each view's own."""
        from kvtop.live.screens.events import EventsScreen
        from kvtop.live.screens.formula import FormulaScreen
        from kvtop.live.screens.gpu_detail import GpuDetailScreen
        from kvtop.live.screens.help import CLICK, PALETTE
        from kvtop.live.screens.overview import OverviewScreen
        from kvtop.live.screens.processes import ProcessesScreen

        everywhere = ((self.COMMAND_PALETTE_BINDING, PALETTE),) if self.use_command_palette else ()
        scroll = ("↑ ↓ PgUp PgDn Home End", "scroll")
        views = [
            KeySection("overview", OverviewScreen, (CLICK,)),
            KeySection("GPU detail", GpuDetailScreen, (scroll,)),
            KeySection("processes", ProcessesScreen, (scroll,)),
            KeySection("events pane and raw log", EventsScreen, (scroll,)),
            KeySection("formula", FormulaScreen, (("Tab", "the next field"), scroll)),
        ]
        # The keys of the view the help was opened on first: what the operator can do there.
        here = [v for v in views if isinstance(self.screen, v.view)]
        rest = [v for v in views if v not in here]
        return [*here, KeySection("every view", type(self), everywhere), *rest]

    def action_dismiss_notes(self) -> None:
        """Hide the advisory notes on screen (the rank-by-order mapping): the help lists them."""
        snapshot = self.state.snapshot
        kinds = {n.kind for n in snapshot.kinded_notes if n.advisory} if snapshot else set()
        if kinds - self.state.dismissed_notes:
            self.state.dismissed_notes |= kinds
            self.show_state()

    def action_gpu_order(self) -> None:
        """o: the next GPU order (index, free, used, temperature); the selection stays."""
        self.state.gpu_order = next_order(self.state.gpu_order)
        self.show_state()

    def action_save_screenshot(self) -> None:
        """The screen as an SVG file named for the time, in the current directory (else the
        temporary one); the toast says where (works over SSH: no browser, no Downloads)."""
        from kvtop.live.screenshot import save_svg

        saved = save_svg(self)
        self.notify(saved.sentence, severity="information" if saved.path else "error", timeout=15)

    def action_save_theme(self) -> None:
        """Write `theme = "…"` into the config file, keeping its other keys and comments."""
        from kvtop.config import ConfigError, save_theme

        try:
            path = save_theme(self.theme, self.config_path)
        except ConfigError as exc:
            self.notify(str(exc), severity="error", timeout=20)
            return
        self.notify(f'theme = "{self.theme}" saved in {path}', timeout=10)

    def action_toggle_compact(self) -> None:
        self.state.compact = not self.compact
        self.show_state()

    def action_toggle_pause(self) -> None:
        state = self.state
        state.paused = not state.paused
        if not state.paused and state.latest is not None:
            state.snapshot = state.latest
        self.show_state()

    def action_interval(self, step: int) -> None:
        from kvtop.live.view_state import next_interval

        new = next_interval(self.state.interval_s, step)
        self.state.interval_s = new
        self.feed.interval_s = new
        self.show_state()

    def on_resize(self, event: events.Resize) -> None:
        # The event's size, not self.size: this handler runs before App's own, which is what
        # stores the new size, so self.size is still the old one here (the compact layout
        # then followed every resize one late).
        if not self.began:
            return  # the first frame: _start_feed takes the size then
        self.state.rows = event.size.height
        if self.state.compact is None:
            self.show_state()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        # Textual's own entries are replaced: its Keys shows Textual's default key summary,
        # and its Screenshot goes to a Downloads folder through the browser delivery.
        yield SystemCommand(
            "Theme", "Change the colours (Save theme keeps it)", self.action_change_theme
        )
        yield SystemCommand(
            "Save theme to config", "Write theme = … into config.toml", self.action_save_theme
        )
        yield SystemCommand(
            "Screenshot",
            "Save this screen as an SVG file (the path is shown)",
            self._screenshot_later,
        )
        yield SystemCommand("Keys", "kvtop's keys (the help view)", self.action_help)
        # Every action a key does in this view, by its name in the key bar: the view's own
        # keys, then the app's that the view does not bind to something else.
        yield from palette_commands(screen, self)

    def _screenshot_later(self) -> None:
        # After the palette has closed, so the picture is of kvtop's screen, not the palette.
        self.set_timer(0.1, self.action_save_screenshot)
