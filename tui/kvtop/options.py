"""What every kvtop command line shares: exit statuses, usage errors, the monitoring plugin's
line, the terminal the live view needs and the deadline of one-shot runs. Which options go
together is tui/kvtop/option_rules.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Protocol

from kvtop.report.unexpected import debugging, unexpected_error

EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE = 0, 1, 2
# Stopped by a signal before the report (128 + the signal's number, as shells do).
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


class PluginResult(Protocol):
    """What a `--check` run ends with: its one line and the plugin's exit status."""

    @property
    def line(self) -> str: ...

    @property
    def exit_code(self) -> int: ...


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """argparse's usage line and the sentence on stderr; exit status 2."""
    parser.print_usage(sys.stderr)
    print(f"kvtop: {message}", file=sys.stderr)
    return EXIT_USAGE


def one_report(write: Callable[[], int]) -> int:
    """Run a one-shot report (`--once`); a bug becomes one sentence, not a traceback (which
    could quote input); a closed pipe (`kvtop --once ... | head`) is a normal end."""
    try:
        return write()
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debugging():
            raise
        print(f"kvtop: {unexpected_error(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE


def print_check(result: PluginResult) -> int:
    """The plugin's one line on stdout; its exit status is the result's."""
    with contextlib.suppress(OSError, ValueError):
        print(result.line, flush=True)
    return int(result.exit_code)


DUMB_TERMINAL = "TERM=dumb cannot draw the live view: use --once (or TERM=xterm-256color)."
NO_TERMINAL = (
    "the live view needs a terminal; for a pipe or a script use --once "
    "(add --json for machine-readable output)"
)


def dumb_terminal() -> bool:
    """Textual would draw anyway, sending escape codes such a terminal prints as garbage."""
    return os.environ.get("TERM", "") in ("dumb", "unknown")


def has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


# -- the total deadline of --check and --once ------------------------------------------------------
DEFAULT_DEADLINE_S = 60.0
# --check answers inside the usual plugin timeouts (check_nrpe's 10 s, Nagios' and Icinga's own):
# one /metrics fetch (5 s at most) and the log and NVML fit well within it.
DEFAULT_CHECK_DEADLINE_S = 8.0
DEADLINE_RANGE_S = (1.0, 3600.0)  # --deadline and the config file's `deadline`
EXIT_UNKNOWN = 3  # a monitoring plugin's UNKNOWN


class Deadline:
    """A one-shot command's total deadline: past it, the command says what it was still waiting
    for (one sentence; UNKNOWN for --check) and exits at once. A watchdog thread, because what
    blocks may be a read no coroutine can cancel (a FIFO without a writer, as log or config)."""

    def __init__(self, seconds: float, *, check: bool, started: float | None = None) -> None:
        import threading
        import time

        self.seconds = seconds
        self.check = check
        self.waiting_for = "kvtop itself to start"
        self._started = time.monotonic() if started is None else started
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kvtop-deadline", daemon=True)

    def start(self) -> Deadline:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        import time

        while not self._done.wait(0.1):
            if time.monotonic() - self._started >= self.seconds:
                self._expire()

    def sentence(self) -> str:
        return (
            f"no result within {self.seconds:g} s: still waiting for {self.waiting_for}; check "
            "that it answers, or give more time with --deadline (or the config file's deadline)"
        )

    def _expire(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.check:
                print(f"KVTOP UNKNOWN - {self.sentence()}", flush=True)
            else:
                print(f"kvtop: {self.sentence()}.", file=sys.stderr, flush=True)
        os._exit(EXIT_UNKNOWN if self.check else EXIT_UNREADABLE)


def deadline_seconds(text: str) -> float:
    """--deadline SECONDS for argparse."""
    low, high = DEADLINE_RANGE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"give seconds from {low:g} to {high:g}, e.g. 30")
    return value
