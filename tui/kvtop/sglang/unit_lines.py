"""Fold systemd's own lines about the unit (kvtop.sglang.systemd_lines) into the start they speak
of: the OOM killer, the unit failed or stopped, the main process exited, a new start, systemd's
restart counter and the unit's memory peak."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from kvtop.sglang import events as ev
from kvtop.sglang.failure_record import replace_failure, step_now
from kvtop.sglang.failures import SERVING
from kvtop.sglang.start_state import FAILED, READY, STARTING, STOPPED, Startup

# The host's OOM killer (systemd's `A process of this unit has been killed by the OOM killer`,
# `Failed with result 'oom-kill'`): host RAM, which kvtop's GPU numbers do not show.
OOM_KILL_CAUSE = (
    "the host's OOM killer killed a process of the unit: the host ran out of RAM (host memory, "
    "not GPU memory)"
)
# Kinds a line about the end gives without saying why: systemd's OOM-killer line explains them.
GENERIC_END_KINDS = frozenset({"crash", "exited", "error", "scheduler_died", "exception"})
# systemd's result of a failed unit -> the failure kind, when nothing in the log said more.
RESULT_KIND = {
    "exit-code": "exited",
    "signal": "crash",
    "core-dump": "crash",
    "watchdog": "watchdog",
}


class UnitLineHost(Protocol):
    """What folding a unit line asks of the startup tracker."""

    restart_counter: int
    unit_limits: str | None

    def new_startup(self) -> Startup: ...

    def end_failure(
        self, startup: Startup, event: ev.Event, kind: str, cause: str | None
    ) -> None: ...

    def stop(self, startup: Startup, event: ev.Event, how: str) -> None: ...

    def begin_shutdown(self, startup: Startup, event: ev.ShutdownBegun) -> None: ...


class UnitLines:
    """systemd's lines about the unit, folded for HOST (the StartupTracker)."""

    def __init__(self, host: UnitLineHost) -> None:
        self.host = host

    def fold(self, startup: Startup, event: ev.UnitEvent) -> None:
        """systemd's own lines about the unit (kvtop.sglang.systemd_lines)."""
        host = self.host
        what = event.what
        if what == "oom_kill" or (what == "failed" and event.result == "oom-kill"):
            startup.unit_result = event.result or startup.unit_result
            self._oom_killed(startup, event)
        elif what == "failed":
            startup.unit_result = event.result
            if startup.state != FAILED and not startup.stopping and event.result in RESULT_KIND:
                host.end_failure(startup, event, RESULT_KIND[event.result], None)
        elif what == "main_exited":
            self._main_exited(startup, event)
        elif what == "stopping":
            host.begin_shutdown(
                startup, ev.ShutdownBegun(event.prefix, event.message, how="systemd")
            )
        elif what == "stopped":
            if startup.state != FAILED:
                host.stop(startup, event, "systemd")
        elif what == "starting":
            if startup.has_rank_lines or startup.server_args or startup.state != STARTING:
                host.new_startup()
        elif what == "restart_scheduled" and event.counter is not None:
            host.restart_counter = event.counter
        elif what == "consumed" and event.memory_peak:
            startup.unit_memory_peak = event.memory_peak
            failure = startup.failure
            if failure is not None and failure.kind == "oom_kill":
                replace_failure(startup, failure, replace(failure, cause=self._oom_cause(startup)))

    def _oom_cause(self, startup: Startup) -> str:
        limits = self.host.unit_limits
        said = [f"the unit's memory limits: {limits}"] if limits else []
        if startup.unit_memory_peak:
            said.append(f"memory peak {startup.unit_memory_peak}")
        return OOM_KILL_CAUSE + (f" ({'; '.join(said)})" if said else "")

    def _oom_killed(self, startup: Startup, event: ev.UnitEvent) -> None:
        """The host's OOM killer: it explains the crash SGLang reported (a child dead of -9)."""
        failure = startup.failure
        if failure is not None and failure.kind == "oom_kill":
            return
        if failure is not None and failure.kind in GENERIC_END_KINDS:
            replace_failure(
                startup, failure, replace(failure, kind="oom_kill", cause=self._oom_cause(startup))
            )
            return
        if failure is not None:
            return  # a failure with a cause of its own came first
        if startup.state == STOPPED:
            startup.state = STARTING if startup.ready_at is None else READY
            startup.stop_how = None
        self.host.end_failure(startup, event, "oom_kill", self._oom_cause(startup))

    def _main_exited(self, startup: Startup, event: ev.UnitEvent) -> None:
        """`Main process exited, code=exited, status=0/SUCCESS` (or killed, dumped)."""
        host = self.host
        if startup.state == FAILED:
            return
        if startup.stopping:
            startup.shutdown_finished = True
            return
        status = event.status or "?"
        if event.code == "exited" and status.startswith("0/") and startup.finished:
            host.stop(startup, event, "exited")
        elif event.code == "exited":
            step = step_now(startup)
            words = f"exited with status {status} during {step}"
            if step != SERVING:
                words += "; the log does not say why"
            host.end_failure(startup, event, "exited", words)
        else:
            host.end_failure(
                startup, event, "crash", f"the main process was killed by signal {status}"
            )
