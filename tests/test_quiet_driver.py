"""driver_class() chooses kvtop's quiet input driver only when Textual still has the private
pieces it uses; otherwise Textual's stock driver (tests/test_tui_tmux.py runs kvtop both ways).

Textual's internals cannot be moved for real, so these cases replace a module attribute or hide
a module with pytest's monkeypatch: the only way to show what a future release would do."""

from __future__ import annotations

import sys

import pytest
import textual._xterm_parser as xterm
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

from tui.quiet_driver import driver_class


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
