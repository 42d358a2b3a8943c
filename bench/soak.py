"""Soak: kvtop's live data path for a simulated hour at 10 refreshes per second; is memory bounded?

    python bench/soak.py                      # 60 simulated minutes at 10/s: 36,000 refreshes
    python bench/soak.py --minutes 5 --rate 10
    python bench/soak.py --render-every 1     # paint every refresh (slower; default every 10th)

What runs: the real `Session` in demo mode (the story log replayed through the real parser,
8 simulated GPUs, a simulated /metrics) on a simulated clock that this script advances by
1/rate seconds per refresh, feeding the real `KvtopApp` headless (`App.run_test()`, 120x40)
through a snapshot feed, so every snapshot goes through `KvtopApp.apply`: the history buffers,
the overview's widgets and, every `--render-every` refreshes, a full paint of the screen.
It runs as fast as the machine allows, not in real time.

Faults injected along the way (a fault plan on the simulated clock, repeating every 10 minutes):
- /metrics gone for 90 s (the server stops answering), then an HTML page instead of metrics
  for 30 s (a proxy in front of it);
- one GPU fallen off the bus ("lost", no readings) for 60 s, and the whole NVML reading stale
  for 30 s;
- garbage in the log every 7 s: invalid UTF-8 replaced, NUL bytes, escape sequences, a 64 KiB
  line, a batch line with `nan`, a line with markup;
- two server restarts (at 1/3 and 2/3 of the run) with a smaller, then larger
  max_total_num_tokens: the startup is replayed again in the same log.

Prints: refreshes done, wall time, RSS (psutil) at start, after warm-up, every 10 simulated
minutes and at the end; the history points kept per series against the cap; the tracker's
sizes; tracemalloc's top growth sites when RSS grew more than 10 % after warm-up. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtop.demo.scenario import POOL_TOKENS, DemoScenario  # noqa: E402
from kvtop.demo.source import DemoSource  # noqa: E402
from kvtop.demo.sources import advance, install  # noqa: E402
from kvtop.live.app import KvtopApp  # noqa: E402
from kvtop.model.history import POINTS  # noqa: E402
from kvtop.model.memory.gpu_reading import NvmlReading  # noqa: E402
from kvtop.model.snapshot import Snapshot  # noqa: E402
from kvtop.session import Options, Session  # noqa: E402
from tests.support.still import STILL_EPOCH  # noqa: E402

WARM_UP_S = 120.0  # simulated seconds: the startup replay, the story's traffic, first paints
REPORT_EVERY_S = 600.0
FAULT_CYCLE_S = 600.0
RESTART_POOLS = (120_000, 180_000)  # max_total_num_tokens after the first and second restart

GARBAGE = (
    "\ufffd\ufffd\x00\x00 binary \x00junk \xff",
    "\x1b[31m\x1b]0;title\x07[2026-01-01 00:00:00 TP0] Decode batch, #running-req: nan, "
    "#token: nan, token usage: nan, gen throughput (token/s): inf, #queue-req: -1, ",
    "[bold red]not markup[/] [link=http://x]x[/link] " * 20,
    "x" * 65_536,
    'Traceback (most recent call last):\n  File "<soak>", line 1\nValueError: soak',
)


def fault_phase(t: float) -> float:
    """Seconds into the current 10-minute fault cycle."""
    return t % FAULT_CYCLE_S


class SoakScenario(DemoScenario):
    """The demo server, with faults on a schedule and a pool size of its own (for restarts)."""

    def __init__(self, *, pool: int, clock, started_at: float, garbage: list[int]) -> None:
        super().__init__(clock=clock)
        self.pool = pool
        self._start = started_at
        self._garbage = garbage  # [lines injected so far]; shared across restarts
        self._garbage_at = self._clock()

    def _t(self) -> float:
        return self._clock() - self._start

    def due_lines(self) -> list[str]:
        lines = super().due_lines()
        if self.pool != POOL_TOKENS:
            lines = [line.replace(str(POOL_TOKENS), str(self.pool)) for line in lines]
        if self._clock() - self._garbage_at >= 7.0:
            self._garbage_at = self._clock()
            self._garbage[0] += 1
            lines.append(GARBAGE[self._garbage[0] % len(GARBAGE)])
        return lines

    def exposition(self) -> str | None:
        phase = fault_phase(self._t())
        if 200 <= phase < 290:
            return None  # /metrics gone: the server does not answer
        if 290 <= phase < 320:
            return "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>\n"
        text = super().exposition()
        if text is not None and self.pool != POOL_TOKENS:
            text = text.replace(f" {float(POOL_TOKENS)!r}\n", f" {float(self.pool)!r}\n")
        return text

    def nvml_reading(self, startup) -> NvmlReading:  # type: ignore[no-untyped-def]
        reading = super().nvml_reading(startup)
        phase = fault_phase(self._t())
        if 400 <= phase < 460:  # GPU 3 fell off the bus
            gpus = list(reading.gpus)
            gpus[3] = replace(
                gpus[3],
                status="lost",
                used_gib=math.nan,
                free_gib=math.nan,
                utilization_pct=None,
                temperature_c=None,
                power_w=None,
                processes=(),
            )
            reading = replace(reading, gpus=tuple(gpus), problem="GPU 3 fell off the bus.")
        elif 500 <= phase < 530:
            reading = replace(reading, stale=True, problem="NVML did not answer in time.")
        return reading


class SoakFeed:
    """The app's snapshot feed: the real demo Session on a simulated clock, as fast as it goes."""

    def __init__(self, refreshes: int, rate: float) -> None:
        self.interval_s = 1.0 / rate
        self.refreshes = refreshes
        self.done = 0
        self.now = [STILL_EPOCH]
        self.garbage = [0]
        self.restarts_done = 0
        self.scenario = self._scenario(POOL_TOKENS)
        self.session = Session(Options(demo=True, interval_s=self.interval_s), clock=self.clock)
        install(self.session, DemoSource(self.scenario))
        self.raw_lines = self.session.raw_lines
        self.render_every = 1
        self.finished = asyncio.Event()
        # The feed stops at every `render_every`-th refresh until the driver has painted.
        self.paint_due = asyncio.Event()
        self.painted = asyncio.Event()

    def clock(self) -> float:
        return self.now[0]

    @property
    def sim_s(self) -> float:
        return self.now[0] - STILL_EPOCH

    def _scenario(self, pool: int) -> SoakScenario:
        return SoakScenario(
            pool=pool, clock=self.clock, started_at=STILL_EPOCH, garbage=self.garbage
        )

    def _maybe_restart(self) -> None:
        total_s = self.refreshes * self.interval_s
        due = [total_s * (k + 1) / 3 for k in range(len(RESTART_POOLS))]
        if self.restarts_done < len(due) and self.sim_s >= due[self.restarts_done]:
            # The server restarts: the same log gets a whole new startup with another pool.
            pool = RESTART_POOLS[self.restarts_done]
            self.scenario = self._scenario(pool)
            install(self.session, DemoSource(self.scenario))
            self.restarts_done += 1

    async def snapshots(self) -> AsyncIterator[Snapshot]:
        session = self.session
        while self.done < self.refreshes:
            self.now[0] += self.interval_s
            self._maybe_restart()
            advance(session)
            self.done += 1
            yield session.snapshot()
            await self.tick()
        self.finished.set()
        await asyncio.Event().wait()  # like the live feed: never ends by itself

    async def tick(self) -> None:
        if self.done % self.render_every == 0 or self.done == self.refreshes:
            self.painted.clear()
            self.paint_due.set()
            await self.painted.wait()
        else:
            await asyncio.sleep(0)  # let the app's message pump run between refreshes


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


async def soak(
    minutes: float, rate: float, render_every: int, size: tuple[int, int], trace: bool = True
) -> None:
    refreshes = round(minutes * 60 * rate)
    feed = SoakFeed(refreshes, rate)
    feed.render_every = render_every
    app = KvtopApp(
        feed, source_label="demo (soak)", demo=True, clock=feed.clock, host_name="soak-host"
    )
    gc.collect()
    rss: list[tuple[str, float, float]] = [("start", 0.0, rss_mb())]
    print(
        f"soak: {minutes:g} simulated minutes at {rate:g} refreshes/s = {refreshes:,} refreshes; "
        f"a paint every {render_every} refreshes; {size[0]}x{size[1]}"
    )
    print(f"RSS at start (Python, kvtop and Textual imported): {rss[0][2]:.1f} MB")
    warm_mark: float | None = None
    trace_start: tracemalloc.Snapshot | None = None
    next_report = REPORT_EVERY_S
    paints = 0
    t0 = time.perf_counter()
    async with app.run_test(size=size) as pilot:
        while feed.done < refreshes:
            await feed.paint_due.wait()
            feed.paint_due.clear()
            await pilot.pause()  # the screen paints what the widgets hold now
            paints += 1
            if warm_mark is None and feed.sim_s >= WARM_UP_S:
                gc.collect()
                warm_mark = rss_mb()
                rss.append(("after warm-up", feed.sim_s, warm_mark))
                print(f"  {feed.sim_s / 60:5.1f} min  RSS {warm_mark:6.1f} MB  (after warm-up)")
                if trace:
                    tracemalloc.start(1)
                    trace_start = tracemalloc.take_snapshot()
            if feed.sim_s >= next_report:
                next_report += REPORT_EVERY_S
                gc.collect()
                value = rss_mb()
                rss.append((f"{feed.sim_s / 60:.0f} min", feed.sim_s, value))
                print(
                    f"  {feed.sim_s / 60:5.1f} min  RSS {value:6.1f} MB  "
                    f"history points {app.state.history.size():,}  "
                    f"restarts {feed.session.tracker.current.restarts}  "
                    f"wall {time.perf_counter() - t0:6.1f} s",
                    flush=True,
                )
            feed.painted.set()
        await feed.finished.wait()
        await pilot.pause()
        wall = time.perf_counter() - t0
        gc.collect()
        end = rss_mb()
        rss.append(("end", feed.sim_s, end))
        trace_end = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
        history = app.state.history
        tracker = feed.session.tracker
        snapshot = app.state.snapshot
        screen_ok = snapshot is not None and len(snapshot.gpus) == 8
    tracemalloc.stop()

    print()
    print(
        f"refreshes done: {feed.done:,} ({feed.sim_s / 60:.1f} simulated minutes), paints {paints:,}"
    )
    print(
        f"wall time: {wall:.1f} s ({feed.done / wall:,.0f} refreshes/s, {wall / feed.done * 1e3:.2f} ms each)"
    )
    print(
        f"garbage lines injected: {feed.garbage[0]:,}; restarts seen by the tracker: {tracker.current.restarts}"
    )
    print(f"last snapshot on screen has 8 GPUs: {screen_ok}")
    print("RSS (MB):")
    for label, _, value in rss:
        print(f"  {label:>14}  {value:6.1f}")
    series = {
        "token usage": len(history._token_usage_pct),
        **{f"used {k[:12]}": len(v) for k, v in history._gpu_used_gib.items()},
        **{f"util {k[:12]}": len(v) for k, v in history._gpu_util_pct.items()},
    }
    cap = history.points
    print(f"history: {len(series)} series, cap {cap} points each (POINTS = {POINTS})")
    print(f"  points kept: {history.size():,} of at most {cap * len(series):,}")
    print(f"  per series: min {min(series.values())}, max {max(series.values())}")
    print(f"  timestamps kept: {len(history._times)}")
    current = tracker.current
    print(
        f"tracker: lines seen {tracker.lines_seen:,}, batch lines {current.batch_lines:,}, ranks {len(current.ranks)}, failures {len(current.failures)}, unbalanced warnings {len(current.unbalanced_warnings)}, "
        f"latest_batch keys {len(current.latest_batch)}, phases per rank max {max((len(r.phases) for r in current.ranks.values()), default=0)}"
    )
    if warm_mark is not None:
        growth = (end - warm_mark) / warm_mark * 100
        print(f"RSS growth after warm-up: {end - warm_mark:+.1f} MB ({growth:+.1f} %)")
        if trace_start is not None and trace_end is not None:
            stats = trace_end.compare_to(trace_start, "lineno")
            total = sum(s.size_diff for s in stats)
            print(f"tracemalloc: Python allocations {total / 1e6:+.2f} MB after warm-up")
            if growth > 10:
                print("tracemalloc: top growth sites")
                for stat in stats[:10]:
                    print(f"  {stat}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="simulated minutes (60)")
    parser.add_argument("--rate", type=float, default=10.0, help="refreshes per second (10)")
    parser.add_argument(
        "--render-every", type=int, default=10, help="paint the screen every N refreshes (10)"
    )
    parser.add_argument("--size", default="120x40", help="terminal size (120x40)")
    parser.add_argument(
        "--no-trace",
        action="store_true",
        help="no tracemalloc after warm-up (it slows the run and its own records take memory)",
    )
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    if args.minutes <= 0 or args.rate <= 0 or args.render_every < 1:
        parser.error("--minutes and --rate take positive numbers, --render-every 1 or more")
    asyncio.run(
        soak(args.minutes, args.rate, args.render_every, (width, height), not args.no_trace)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
