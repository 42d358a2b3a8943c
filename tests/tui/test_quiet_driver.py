"""driver_class() chooses kvtop's quiet input driver only when Textual still has the private
pieces it uses; otherwise Textual's stock driver (tests/tui/test_tui_tmux.py runs kvtop both ways).

Textual's internals cannot be moved for real, so these cases replace a module attribute or hide
a module with pytest's monkeypatch: the only way to show what a future release would do."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator

import pytest
import textual._xterm_parser as xterm
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

from kvtop.live.quiet_driver import driver_class


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVTOP_STOCK_DRIVER", raising=False)


def test_quiet_driver_with_this_textual() -> None:
    chosen = driver_class(LinuxDriver)
    assert chosen is not LinuxDriver and issubclass(chosen, LinuxDriver)
    assert chosen.run_input_thread is not LinuxDriver.run_input_thread


def test_parser_attribute_moved_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    class Moved(xterm.XTermParser):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            del self._timeout_time

    monkeypatch.setattr(xterm, "XTermParser", Moved)
    assert driver_class(LinuxDriver) is LinuxDriver


def test_private_module_gone_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textual._xterm_parser", None)  # import raises ImportError
    assert driver_class(LinuxDriver) is LinuxDriver


def test_another_driver_is_left_alone() -> None:
    class Other(Driver):  # e.g. Textual's headless or web driver
        pass

    assert driver_class(Other) is Other


def test_stock_driver_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVTOP_STOCK_DRIVER", "1")
    assert driver_class(LinuxDriver) is LinuxDriver


@pytest.fixture
async def quiet_driver() -> AsyncIterator[Driver]:
    """The quiet driver reading a real pseudo terminal (not started: no app mode). Textual's
    driver sets SIGTSTP and SIGCONT handlers when built; they are put back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    primary, secondary = os.openpty()
    try:
        driver = driver_class(LinuxDriver)(App())
        driver.fileno = secondary  # type: ignore[attr-defined]
        yield driver
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        os.close(primary)
        os.close(secondary)


async def test_every_input_thread_leaves_on_exit(quiet_driver: Driver) -> None:
    """Textual starts a second input thread when it resumes; the exit event must wake them all,
    and each must leave even though Textual clears the event once it has joined the newest."""
    threads = [threading.Thread(target=quiet_driver.run_input_thread) for _ in range(3)]
    for thread in threads:
        thread.start()
    event = quiet_driver.exit_event  # type: ignore[attr-defined]
    while len(event.wake_fds) < len(threads):  # each thread has opened its pipe
        time.sleep(0.01)
    event.set()
    threads[-1].join()
    event.clear()  # as LinuxDriver.disable_input does
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    assert not event.wake_fds


def test_sigcont_handler_moved_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(LinuxDriver, "_sigcont_application")
    assert driver_class(LinuxDriver) is LinuxDriver
