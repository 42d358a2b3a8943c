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

Only `run_input_thread` is replaced; the rest is Textual's LinuxDriver, and the loop uses two
private pieces of Textual (`textual._xterm_parser.XTermParser` and its `_timeout_time`).
pyproject.toml bounds Textual to the releases this was tested with; if a Textual release moves
those pieces anyway, `driver_class()` falls back to the stock driver rather than break input
(tests/test_tui_tmux.py runs kvtop both ways). KVTOP_STOCK_DRIVER=1 in the environment
chooses the stock driver on purpose: for measuring one against the other
(bench/bench_vs_nvitop.py --also), or if this one misbehaves with some terminal.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder

from textual.driver import Driver

# How often an unfinished escape sequence is checked for its timeout (Textual's own period).
PARSER_TICK_S = 0.1


class _WakingEvent(threading.Event):
    """threading.Event that also writes a byte to the input thread's pipe when set (wakes its
    blocked select). The pipe is opened and closed by that thread, under `pipe_lock`, so a set()
    from the event loop never writes to a descriptor number that was closed and reused."""

    def __init__(self) -> None:
        super().__init__()
        self.pipe_lock = threading.Lock()
        self.wake_fd: int | None = None

    def set(self) -> None:
        super().set()
        with self.pipe_lock:
            if self.wake_fd is not None:
                with contextlib.suppress(OSError):
                    os.write(self.wake_fd, b"x")


def driver_class(stock: type[Driver]) -> type[Driver]:
    """The quiet driver when `stock` is Textual's LinuxDriver and has what it needs, else stock."""
    if os.environ.get("KVTOP_STOCK_DRIVER"):
        return stock
    try:
        from textual._xterm_parser import XTermParser
        from textual.drivers.linux_driver import LinuxDriver
    except ImportError:
        return stock
    if stock is not LinuxDriver or not hasattr(XTermParser(False), "_timeout_time"):
        return stock

    class QuietLinuxDriver(LinuxDriver):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.exit_event = _WakingEvent()

        def run_input_thread(self) -> None:
            """Textual's input loop, blocking while there is nothing to wait for."""
            exit_event = self.exit_event
            assert isinstance(exit_event, _WakingEvent)
            wake_read, wake_write = os.pipe()
            with exit_event.pipe_lock:
                exit_event.wake_fd = wake_write
            fileno = self.fileno
            selector = selectors.SelectSelector()  # as Textual: select() works on every tty
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(wake_read, selectors.EVENT_READ)
            parser = XTermParser(self._debug)
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
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)

            try:
                while not exit_event.is_set():
                    pending = parser._timeout_time is not None
                    process(selector.select(PARSER_TICK_S if pending else None))
            finally:
                selector.close()
                with exit_event.pipe_lock:
                    exit_event.wake_fd = None
                    for fd in (wake_read, wake_write):
                        with contextlib.suppress(OSError):
                            os.close(fd)
                with contextlib.suppress(Exception):
                    for _event in parser.feed(""):
                        pass

    return QuietLinuxDriver
