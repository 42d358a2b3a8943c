"""Fold a Python traceback into the start it belongs to: the failure line that announced it, or
the failure it explains (its exception line is the cause, its frames the phase), or a failure of
its own (an uncaught exception in the launcher, a failure text alone)."""

from __future__ import annotations

from dataclasses import replace

from kvtop.sglang import events as ev
from kvtop.sglang.failure_record import phase_of, record_failure, replace_failure
from kvtop.sglang.failures import (
    LAUNCH,
    MAX_CAUSE_CHARS,
    TEARDOWN,
    OpenTraceback,
    counts_as_cause,
    exception_type,
    explained,
    frame_phase,
    launcher_failure,
    nothing_started,
    opens_traceback,
)
from kvtop.sglang.start_state import Startup

# The lines of a failure and its traceback: anything else between a traceback and a crash
# line means the traceback was not that crash's cause.
TRACEBACK_EVENTS = (
    ev.Failure,
    ev.TracebackStart,
    ev.TracebackFrame,
    ev.TracebackChained,
    ev.ExceptionLine,
)


class TracebackTracker:
    """The traceback being read (failures.OpenTraceback) and the failures it makes or explains."""

    def __init__(self) -> None:
        self.reading: OpenTraceback | None = None  # the traceback being read (failures.py)
        # The last exception line of a traceback no failure line announced: (start, line, the
        # phase its frames named). A crash line right after it takes it as its cause.
        self._unclaimed: tuple[Startup, str, str | None] | None = None

    def note(self, event: ev.Event) -> None:
        """Any event, in log order: a line that is no part of a traceback ends the wait for
        the crash line an unclaimed traceback would explain."""
        if self._unclaimed is not None and not isinstance(event, TRACEBACK_EVENTS):
            self._unclaimed = None  # something else came between: not that crash's cause

    def close(self) -> None:
        """The run ended without a traceback: none is being read any more."""
        self.reading = None

    # -- failure lines (failures.py) ------------------------------------------------------------
    def on_failure(self, startup: Startup, event: ev.Failure) -> None:
        tb = self.reading
        if event.exception_line and tb is not None and tb.startup is startup and tb.awaiting:
            self.on_exception_line(startup, event)  # the cause of the traceback being read
            return
        unclaimed, self._unclaimed = self._unclaimed, None
        hint = None
        cause = event.message if event.exception_line else None
        if event.kind == "crash" and unclaimed is not None and unclaimed[0] is startup:
            _, cause, hint = unclaimed  # the traceback just before it is the child's death
        phase, settled = phase_of(startup, event, hint)
        failure = replace(event, phase=phase, cause=cause)
        record_failure(startup, failure)
        owned = opens_traceback(failure)
        self.reading = OpenTraceback(startup, failure, owned=owned, awaiting=owned, settled=settled)

    # -- tracebacks (unprefixed lines after a failure line; failures.py) ------------------------
    def on_traceback_start(self, startup: Startup, event: ev.TracebackStart) -> None:
        tb = self.reading
        if tb is not None and tb.startup is startup and tb.awaiting and tb.entry is None:
            return  # the header right after `... hit an exception:` on a line of its own
        if tb is not None and tb.startup is startup and not tb.awaiting and tb.chained:
            tb.awaiting, tb.chained, tb.entry = True, False, None  # the next of a chain
            return
        self._open_traceback(startup)

    def _open_traceback(self, startup: Startup, *, entry: bool | None = None) -> OpenTraceback:
        """A traceback no failure line began: it explains the latest failure when that has no
        cause yet (`Rank 0 scheduler is dead` then an EOFError traceback), else it stands alone."""
        tb = self.reading
        latest = startup.failures[-1] if startup.failures else None
        if latest is not None and latest.cause is None and (tb is None or tb.failure is latest):
            settled = latest.phase is not None  # else its frames may say where it was
            self.reading = OpenTraceback(startup, latest, owned=False, entry=entry, settled=settled)
        else:
            self.reading = OpenTraceback(startup, None, owned=False, entry=entry, settled=False)
        return self.reading

    def on_traceback_chained(self, startup: Startup, event: ev.TracebackChained) -> None:
        tb = self.reading
        if tb is not None and tb.startup is startup:
            tb.chained = True

    def on_traceback_frame(self, startup: Startup, event: ev.TracebackFrame) -> None:
        tb = self.reading
        if tb is None or tb.startup is not startup or not tb.awaiting:
            # Frames without their header: an excerpt that begins inside a traceback. Its first
            # frame seen need not be the outermost, so it never counts as an uncaught one.
            tb = self._open_traceback(startup, entry=False)
        if tb.entry is None:
            tb.entry = event.entry
        if tb.hint is None:
            tb.hint = frame_phase(event.message)
            failure = tb.failure
            if tb.hint and failure is not None and not tb.settled and not tb.owned:
                # Frames after a line without a traceback of its own (faulthandler's after
                # `Fatal Python error`): they name where it was, with no exception line to come.
                new = replace(failure, phase=tb.hint)
                replace_failure(startup, failure, new)
                tb.failure, tb.settled = new, True

    def on_exception_line(self, startup: Startup, event: ev.Failure | ev.ExceptionLine) -> None:
        tb = self.reading
        if tb is None or tb.startup is not startup or not tb.awaiting:
            return
        tb.awaiting = False
        exc_type = exception_type(event)
        if tb.failure is None:  # a traceback no failure line announced
            if startup.stopping:
                return  # a process torn down by the shutdown, not a failure of the server
            if isinstance(event, ev.Failure):  # a failure text (`RuntimeError: Not enough memory`)
                self._on_failure_line_alone(startup, event, tb)
            elif tb.entry and exc_type not in TEARDOWN:  # uncaught: a `raise` in the launcher
                if tb.hint is None and nothing_started(startup):
                    tb.hint = LAUNCH  # the launcher's own exception before any rank: launch
                self._on_failure_line_alone(startup, launcher_failure(event), tb)
            elif exc_type not in TEARDOWN and startup.failure is None:
                # A logged traceback whose failure line is not in the log (cut from an
                # excerpt): the crash line that may follow it names no cause of its own.
                self._unclaimed = (startup, event.message[:MAX_CAUSE_CHARS], tb.hint)
            return
        if not counts_as_cause(tb, exc_type):
            return
        new = explained(tb, event)
        replace_failure(startup, tb.failure, new)
        tb.failure, tb.has_cause = new, True
        first = startup.failure
        if first is not None and first.cause is None and opens_traceback(first):
            # The first report's traceback never named its cause (cut, or another rank's record
            # written into it): the start failed with the first cause that is known.
            startup.failure = new

    def _on_failure_line_alone(
        self, startup: Startup, event: ev.Failure, tb: OpenTraceback
    ) -> None:
        phase, tb.settled = phase_of(startup, event, tb.hint)
        failure = replace(event, phase=phase, cause=event.message[:MAX_CAUSE_CHARS])
        record_failure(startup, failure)
        tb.failure, tb.has_cause = failure, True
