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

from kvtop.live.app import KvtopApp
from kvtop.live.widgets.gpu_rows import GpuRow, GpuTable
from kvtop.model.analysis import Analysis
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.memory.gpu_reading import GpuSample, NvmlReading
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.model.snapshot import Snapshot, SourceHealth, SourceState
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds
from kvtop.model.status.watch import Watch
from kvtop.session import Options, Session
from tests.support.still import STILL_EPOCH, StillFeed, still_snapshot

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
        SnapshotInputs(
            analysis,
            taken_at=FIXED_EPOCH,
            sources=(
                SourceHealth("log", SourceState.OK),
                SourceHealth("nvml", SourceState.OFF, "--no-gpus", asked_off=True),
            ),
        )
    )


def gpus_snapshot(
    analysis: Analysis, samples: Sequence[GpuSample], ranks: Mapping[int, str | None]
) -> Snapshot:
    """An analysed log joined with these GPU readings (`ranks`: pid -> the rank its title
    names), no server and no source health: the model's join alone."""
    return build_snapshot(
        SnapshotInputs(
            analysis,
            taken_at=0.0,
            nvml=NvmlReading(
                gpus=tuple(samples), available=True, problem=None, driver_version=None
            ),
            processes=ProcessFacts({pid: ProcessRecord(pid, rank) for pid, rank in ranks.items()}),
        )
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


FOREIGN_PID = 4242
HIDDEN_PID = 4343


def processes_snapshot() -> Snapshot:
    """The demo's still with two more GPU processes, joined by the real model: a foreign
    `python3 train.py` holding 4 GiB on GPU 2 (bob's, readable) and a process on GPU 5 that
    this host cannot read (another PID namespace)."""
    from kvtop.model.memory.gpu_reading import GpuProcess
    from kvtop.model.memory.process_owner import ProcessInfo
    from kvtop.model.snapshot import ProcessUsage
    from tests.support.still import still_session

    session = still_session()
    reading = session.latest_nvml
    assert reading is not None
    extra = {2: GpuProcess(FOREIGN_PID, 4.0), 5: GpuProcess(HIDDEN_PID, 1.5)}
    gpus = tuple(
        replace(
            g,
            processes=(*g.processes, extra[g.index]),
            used_gib=g.used_gib + extra[g.index].used_gib,  # type: ignore[operator]
            free_gib=g.free_gib - extra[g.index].used_gib,  # type: ignore[operator]
        )
        if g.index in extra
        else g
        for g in reading.gpus
    )
    facts = session.host.processes(reading)
    return build_snapshot(
        SnapshotInputs(
            session.analysis(),
            taken_at=session.clock(),
            nvml=replace(reading, gpus=gpus),
            processes=ProcessFacts(
                {
                    **facts.records,
                    FOREIGN_PID: ProcessRecord(
                        FOREIGN_PID,
                        user="bob",
                        info=ProcessInfo("python3 train.py --epochs 3", session.clock() - 3725.0),
                        usage=ProcessUsage(312.5, 2.25),
                    ),
                    HIDDEN_PID: ProcessRecord(HIDDEN_PID),
                }
            ),
            metrics=session.latest_metrics,
            host=session.host.memory(),
            sources=session.snapshot().sources,
            log_from_this_host=True,
        )
    )


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


def sixteen_gpus_snapshot() -> Snapshot:
    """The demo's eight GPUs and eight more (indices 8-15): more than a small screen shows."""
    base = demo_snapshot()
    extra = tuple(
        replace(g, sample=replace(g.sample, index=g.sample.index + 8, uuid=g.sample.uuid + "x"))
        for g in base.gpus
    )
    return replace(base, gpus=base.gpus + extra)


def gpu_table(app: KvtopApp) -> GpuTable:
    """The screen's table of GPUs (the overview's, or the GPU detail's one line)."""
    return app.screen.query_one(GpuTable)


def gpu_rows(app: KvtopApp) -> list[GpuRow]:
    """The lines of the screen's GPU table, in the order drawn."""
    return list(gpu_table(app).rows)
