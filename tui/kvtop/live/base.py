"""What the live view and the fleet view share as Textual apps: the stylesheet, the quiet
terminal driver, leaving at once when the terminal or systemd goes away, and waiting for the
feed's worker on the way out (its sources close when its generator ends)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from importlib import resources

from rich.console import RenderableType
from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.worker import Worker, WorkerCancelled, WorkerFailed

EXIT_GRACE_S = 2.0  # after SIGHUP/SIGTERM, the longest a clean shutdown may take


def exit_grace_s() -> float:
    """EXIT_GRACE_S, or KVTOP_EXIT_GRACE_S from the environment: the fault matrix sets a long
    one, so a shutdown that only ends because the watchdog fired fails its test."""
    try:
        return max(0.1, float(os.environ["KVTOP_EXIT_GRACE_S"]))
    except (KeyError, ValueError):
        return EXIT_GRACE_S


def stylesheet() -> str:
    """styles/kvtop.tcss, installed as the kvtop.styles package."""
    return str(resources.files("kvtop.styles") / "kvtop.tcss")


class FeedApp(App[int]):
    """An app that shows a feed: `_feed` is the worker consuming it (started in on_mount)."""

    # The terminal's own keys, as in htop and nvitop. The terminal is in raw mode, so they
    # arrive as keys, not signals: Ctrl-C quits as q does (status 0; Textual's default only
    # says "press ctrl+q"), Ctrl-Z suspends to the shell (Textual leaves the alternate screen
    # and shows the cursor; `fg` comes back through `repaint_after_resume`). Priority: an
    # input field (the formula's) must not take Ctrl-C as "copy".
    BINDINGS = [  # noqa: RUF012 - Textual's convention
        Binding("ctrl+c", "quit", "quit", show=False, priority=True, tooltip="quit (status 0)"),
        Binding(
            "ctrl+z",
            "suspend_process",
            "suspend",
            show=False,
            priority=True,
            tooltip="suspend to the shell (fg comes back)",
        ),
    ]

    _feed: Worker[None] | None = None
    # Set once the app is asked to exit: a key typed together with q ("qe", "q?") must not
    # open a screen on an app that is closing (its widgets are gone: a traceback on exit).
    leaving = False

    def exit(
        self,
        result: int | None = None,
        return_code: int = 0,
        message: RenderableType | None = None,
    ) -> None:
        self.leaving = True
        super().exit(result, return_code, message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No action once leaving (see `leaving`)."""
        return not self.leaving

    def get_driver_class(self) -> type[Driver]:
        from kvtop.live.quiet_driver import driver_class

        return driver_class(super().get_driver_class())

    def follow_the_terminal(self) -> None:
        """From on_mount: leave on hangup, repaint everything after Ctrl-Z and `fg`."""
        self.leave_on_hangup()
        self.app_resume_signal.subscribe(self, self.repaint_after_resume)

    def repaint_after_resume(self, _app: object = None) -> None:
        """Back from Ctrl-Z: the terminal's alternate screen starts blank and Textual repaints
        only what changes (its resize to the same size is a no-op), so the whole screen is
        marked for repainting, and the view is shown again from the state (the clock moved)."""
        self.show_view()
        self.screen.refresh()  # the whole screen dirty: a full update, not a partial one
        self.refresh(layout=True)

    def show_view(self) -> None:
        """The app's state, shown again on the visible screens (each app says how)."""

    def leave_on_hangup(self) -> None:
        """SIGHUP (the SSH session went away) or SIGTERM (systemd stops us): leave, status 0."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._leave)

    def _leave(self) -> None:
        """Exit now, and for certain: with the terminal gone, Textual's shutdown can block for
        ever (seen: LinuxDriver.close waiting on its writer thread's queue, SIGTERM ignored
        because the event loop is stuck in that call). There is nothing left to restore."""
        watchdog = threading.Timer(exit_grace_s(), os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()
        self.exit(0)

    async def on_unmount(self) -> None:
        # Textual cancels its workers after the app's last message without waiting for them;
        # the feed closes its sources when its generator ends, so wait for that here.
        if self._feed is not None:
            self._feed.cancel()
            with contextlib.suppress(WorkerCancelled, WorkerFailed, asyncio.CancelledError):
                await self._feed.wait()
