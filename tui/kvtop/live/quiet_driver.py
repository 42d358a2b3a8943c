"""Textual's Linux terminal driver with an input thread that sleeps until a key arrives.

Textual's input thread wakes ten times a second (`select` with a 0.1 s timeout) to notice that
the app is leaving and to time out a lone Escape. On the 2-core VMs kvtop is measured on, a
wake-up from idle costs about a millisecond of CPU (see docs/performance.md), so that thread
alone cost ~1 % of a core, a third of nvitop's whole budget, with nobody typing. This driver's
thread blocks in `select` until there is input, waking only when:
- bytes arrive from the terminal,
- the parser holds an unfinished escape sequence (then it polls every 0.1 s, as Textual does,
  so a lone Escape still arrives),
- the app leaves: `exit_event.set()` also writes to a pipe the thread is waiting on.

SIGCONT: Textual's driver answers every SIGCONT by starting application mode again, meant for
coming back from its own SIGTSTP (Ctrl+Z) suspension. A SIGCONT that did not follow one (a
`kill -STOP`/`kill -CONT`, systemd's TERM+CONT when it stops a unit or scope) then started a
second input thread and writer thread next to the running ones, and one arriving during shutdown
started them after the app had stopped: the stray input thread kept the process alive (`q`
cleared the screen and kvtop never exited; after SIGTERM only the exit watchdog ended it). This
driver decides from the event loop, never inside the signal handler: it resumes what was
suspended (Ctrl+Z, or a start cut short in the background), sets a running application mode up
again once (the terminal's modes and screen, as after Ctrl+Z and `fg`), and does nothing before
the app has started it or once shutdown has begun. Every input thread has its own wake pipe and
leaves when it is written to, so none can be left waiting in `select`.

Only `run_input_thread` and the SIGCONT path are replaced; the rest is Textual's LinuxDriver.
They use private pieces of Textual (`textual._xterm_parser.XTermParser` and its `_timeout_time`;
LinuxDriver's `_sigcont_application`, `_key_thread` and `_auto_restart`).
pyproject.toml bounds Textual to the releases this was tested with; if a Textual release moves
those pieces anyway, `driver_class()` falls back to the stock driver rather than break input
(tests/tui/test_tui_tmux.py runs kvtop both ways). KVTOP_STOCK_DRIVER=1 in the environment
chooses the stock driver on purpose: for measuring one against the other
(bench/bench_vs_nvitop.py --also), or if this one misbehaves with some terminal.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import TYPE_CHECKING, Any

from textual.driver import Driver

if TYPE_CHECKING:
    from textual._xterm_parser import XTermParser
    from textual.drivers.linux_driver import LinuxDriver

# How often an unfinished escape sequence is checked for its timeout (Textual's own period).
PARSER_TICK_S = 0.1


class _WakingEvent(threading.Event):
    """threading.Event that also writes a byte to every input thread's wake pipe when set (wakes
    each blocked select). Each pipe is opened and closed by its thread, under `pipe_lock`, so a
    set() from the event loop never writes to a descriptor number that was closed and reused."""

    def __init__(self) -> None:
        super().__init__()
        self.pipe_lock = threading.Lock()
        self.wake_fds: set[int] = set()

    def set(self) -> None:
        super().set()
        with self.pipe_lock:
            for fd in self.wake_fds:
                with contextlib.suppress(OSError):
                    os.write(fd, b"x")


def driver_class(stock: type[Driver]) -> type[Driver]:
    """The quiet driver when `stock` is Textual's LinuxDriver and has what it needs, else stock."""
    if os.environ.get("KVTOP_STOCK_DRIVER"):
        return stock
    try:
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:
        return stock
    if (
        stock is not LinuxDriver
        or not hasattr(XTermParser(False), "_timeout_time")
        or not hasattr(LinuxDriver, "_sigcont_application")
    ):
        return stock
    return _quiet_linux_driver(LinuxDriver, XTermParser)


def _quiet_linux_driver(
    linux_driver: type[LinuxDriver], parser_class: type[XTermParser]
) -> type[Driver]:
    """Textual's LinuxDriver with a blocking input loop (`_read_input`) and a SIGCONT that
    resumes only what was suspended."""

    class QuietLinuxDriver(linux_driver):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.exit_event = _WakingEvent()
            self._suspending = False  # inside suspend_application_mode (Ctrl+Z)
            self._shut_down = False  # application mode stopped for good: the app is leaving
            self._mode_requested = False  # the app has asked for application mode

        # -- SIGCONT: resume only what was suspended ------------------------------------------
        def start_application_mode(self) -> None:
            self._mode_requested = True
            super().start_application_mode()

        def stop_application_mode(self) -> None:
            if not self._suspending:
                self._shut_down = True
            super().stop_application_mode()

        def suspend_application_mode(self) -> None:
            self._suspending = True
            try:
                super().suspend_application_mode()
            finally:
                self._suspending = False

        def _input_running(self) -> bool:
            thread = self._key_thread
            return thread is not None and thread.is_alive()

        def _sigcont_application(self, *_args: object) -> None:
            """Decide from the event loop, not in this handler: it may have interrupted the loop
            in the middle of a write to the terminal or of starting application mode."""
            if self._shut_down or not self._auto_restart:
                return  # leaving (or App.suspend() resumes by itself): start nothing
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to redo
                self._loop.call_soon_threadsafe(self._after_sigcont)

        def _after_sigcont(self) -> None:
            if self._shut_down or not self._auto_restart:
                return
            if self._input_running():
                # Stopped and continued without a SIGTSTP (kill -STOP/-CONT, a thawed scope):
                # set the terminal up again, as after Ctrl+Z and `fg`.
                self.suspend_application_mode()
                self.resume_application_mode()
                self._app.refresh(layout=True)
            elif self._mode_requested:
                # Back from Ctrl+Z, or a start cut short in the background (SIGTTOU): as Textual.
                self.resume_application_mode()
            # else the app has not started application mode yet; it will.

        # -- input ------------------------------------------------------------------------------
        def run_input_thread(self) -> None:
            _read_input(self, parser_class(self._debug))

    return QuietLinuxDriver


def _read_input(driver: LinuxDriver, parser: XTermParser) -> None:
    """Textual's input loop, blocking while there is nothing to wait for; it leaves when the
    driver's exit event is set or its own wake pipe is written to."""
    exit_event = driver.exit_event
    assert isinstance(exit_event, _WakingEvent)
    wake_read, wake_write = os.pipe()
    with exit_event.pipe_lock:
        exit_event.wake_fds.add(wake_write)
    fileno = driver.fileno
    selector = selectors.SelectSelector()  # as Textual: select() works on every tty
    selector.register(fileno, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    decode = getincrementaldecoder("utf-8")().decode

    def process(ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in ready:
            if key.fd != fileno or not mask & selectors.EVENT_READ:
                continue
            raw = os.read(fileno, 1024 * 4)
            if not raw:
                # The terminal is gone (or stdin is a pipe at its end): stop watching it
                # rather than spin on an fd that is always readable.
                selector.unregister(fileno)
                break
            # Half a UTF-8 character decodes to "" and waits for its other half.
            for event in parser.feed(decode(raw)):
                driver.process_message(event)
        for event in parser.tick():
            driver.process_message(event)

    try:
        while not exit_event.is_set():
            pending = parser._timeout_time is not None
            ready = selector.select(PARSER_TICK_S if pending else None)
            if any(key.fd == wake_read for key, _mask in ready):
                break  # set() wrote to this thread's pipe (the event may be clear again)
            process(ready)
    finally:
        selector.close()
        with exit_event.pipe_lock:
            exit_event.wake_fds.discard(wake_write)
            for fd in (wake_read, wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(Exception):
            for _event in parser.feed(""):
                pass
