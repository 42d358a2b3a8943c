"""Build the real KvtopApp on snapshots from real parts (the demo scenario, fixture logs).

The feed is the only stand-in: it hands the app prepared snapshots instead of polling, so a
test decides exactly what is on screen and when it changes. Everything else is the real app.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from tests.support.still import STILL_EPOCH, StillFeed, still_snapshot
from tui.live.app import KvtopApp
from tui.model.analysis import Analysis
from tui.model.build_snapshot import build_snapshot
from tui.model.memory.gpu_reading import GpuSample, NvmlReading
from tui.model.snapshot import Snapshot, SourceHealth, SourceState
from tui.model.status.levels import DEFAULT_THRESHOLDS, Thresholds
from tui.model.status.watch import Watch
from tui.session import Options, Session

FIXED_EPOCH = STILL_EPOCH


def fixed_clock() -> float:
    return FIXED_EPOCH


@contextmanager
def utc() -> Iterator[None]:
    """Log times are local times: pin the zone so screens are the same on every machine."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


Feed = StillFeed


def demo_snapshot(serving_s: float = 0.0) -> Snapshot:
    """The demo one minute (plus `serving_s`) after the server got ready, at the fixed clock."""
    return still_snapshot(serving_s)


def log_snapshot(path: Path) -> Snapshot:
    """A fixture log through the real parser, no GPUs and no server (as `--once --no-gpus`)."""
    session = Session(Options(log_file=str(path), nvml=False, metrics=False), clock=fixed_clock)
    session._read_whole_log()
    return session.snapshot()


def analysis_snapshot(analysis: Analysis) -> Snapshot:
    """An analysed log alone as `kvtop --once --no-gpus --no-metrics` reports it: the log read,
    no GPUs, no server."""
    return build_snapshot(
        analysis,
        taken_at=FIXED_EPOCH,
        nvml=None,
        process_ranks={},
        pids_visible=True,
        metrics=None,
        server_info=None,
        host=None,
        sources=(
            SourceHealth("log", SourceState.OK),
            SourceHealth("nvml", SourceState.OFF, "--no-gpus", asked_off=True),
        ),
    )


def gpus_snapshot(
    analysis: Analysis, samples: Sequence[GpuSample], ranks: Mapping[int, str | None]
) -> Snapshot:
    """An analysed log joined with these GPU readings (`ranks`: pid -> the rank its title
    names), no server and no source health: the model's join alone."""
    return build_snapshot(
        analysis,
        taken_at=0.0,
        nvml=NvmlReading(gpus=tuple(samples), available=True, problem=None, driver_version=None),
        process_ranks=ranks,
        pids_visible=True,
        metrics=None,
        server_info=None,
        host=None,
        sources=(),
    )


def make_app(*snapshots: Snapshot, demo: bool = True, label: str = "demo") -> KvtopApp:
    return KvtopApp(
        Feed(*snapshots),
        source_label=label,
        demo=demo,
        clock=fixed_clock,
        host_name="gpu-host",
    )


def screen_text(app: KvtopApp) -> str:
    """What the terminal shows now, as plain text (the compositor's own strips)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)


async def until(pilot, what: str, predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Let the app run until predicate() holds, then return: a test that must wait waits for
    the very condition it asserts next. Fails naming WHAT, with the screen, if it never holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(
                f"no {what} within {timeout_s:g} s; screen:\n{screen_text(pilot.app)}"
            )
        await pilot.pause(0.02)


def judged_in_turn(
    *snapshots: Snapshot, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[Snapshot]:
    """SNAPSHOTS judged one after the other by one watch, as a session judges its beats (a
    Snapshot changed with dataclasses.replace keeps the verdict it was built with)."""
    watch = Watch(thresholds)
    out = []
    for snapshot in snapshots:
        verdict, timeline = watch.look(snapshot)
        out.append(replace(snapshot, verdict=verdict, timeline=timeline))
    return out


def help_text(app: KvtopApp, width: int = 116) -> str:
    """The whole help, scrolled or not: its text as drawn at `width` columns."""
    import io

    from rich.console import Console
    from textual.widgets import Static

    content = app.screen.query_one("#help-text", Static).content
    console = Console(width=width, file=io.StringIO(), color_system=None)
    with console.capture() as capture:
        console.print(content)
    return capture.get()
