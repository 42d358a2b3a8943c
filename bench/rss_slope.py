"""kvtop's live view for an hour on the setup a GPU host has: does its memory stay flat?

    python bench/rss_slope.py                        # 60 minutes, RSS read every 30 s
    python bench/rss_slope.py --minutes 10 --every 10
    python bench/rss_slope.py --kvtop "PYTHONPATH=/tmp/base/tui .venv/bin/kvtop"   # another version

The setup of bench_vs_nvitop.py, in real time: the fake GPUs' figures change every second, eight
live processes titled as SGLang's schedulers hold the first eight GPUs, the story log is
followed from a file and a loopback SGLang /metrics answers each scrape; kvtop runs in a 120×40
tmux pane at a 1 s refresh. Every `--every` seconds the RSS of its process tree is read from
/proc. Prints the readings (one line per 5 minutes), then the least-squares slope in MB per
minute after the warm-up (the first 2 minutes: imports at first use, the history filling) and
over the last half of the run. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_vs_nvitop import pythonpaths, ranks_for, variant  # noqa: E402
from pane_measure import (  # noqa: E402
    KVTOP_ROW,
    FakeHost,
    alive,
    compile_bytecode,
    launch,
    ready_to_run,
    rows_seen,
    tree_rss_mb,
    wait_first_frame,
)

WARM_UP_S = 120.0
PRINT_EVERY_S = 300.0


def slope_mb_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    if len(points) < 3:
        return None
    fit = statistics.linear_regression([t for t, _ in points], [mb for _, mb in points])
    return fit.slope * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between RSS readings")
    parser.add_argument("--kvtop", default="kvtop", help="[VAR=VALUE ...] PROGRAM to run")
    args = parser.parse_args()
    why = ready_to_run()
    if why:
        print(why, file=sys.stderr)
        return 2
    _, prefix, extra_env = variant(f"rss={args.kvtop}")  # `kvtop`: this checkout's
    compile_bytecode(ROOT / "tui", *pythonpaths([extra_env]))
    points: list[tuple[float, float]] = []
    try:
        with (
            FakeHost("kvtop-rss") as host,
            ranks_for(8, False) as procs,
            host.gpus(8, procs) as env,
        ):
            argv = prefix + host.kvtop_argv()[1:]
            pid_file = launch(host.tmux, host.work, "rss", argv, {**env, **extra_env})
            first, screen = wait_first_frame(host.tmux, "rss", rows_seen(KVTOP_ROW, 8, 8))
            if first is None:
                print("kvtop showed no first frame; its pane ends:\n" + screen, file=sys.stderr)
                return 1
            pid = int(pid_file.read_text())
            start = time.monotonic()
            print(f"kvtop pid {pid}: {' '.join(argv[:1])} · {args.minutes:g} min", flush=True)
            last_print = -PRINT_EVERY_S
            while (now := time.monotonic() - start) < args.minutes * 60:
                if not alive(pid):
                    print(f"kvtop exited after {now:.0f} s", file=sys.stderr)
                    return 1
                points.append((now, tree_rss_mb(pid)))
                if now - last_print >= PRINT_EVERY_S:
                    print(f"{now / 60:6.1f} min  {points[-1][1]:6.1f} MB", flush=True)
                    last_print = now
                time.sleep(args.every)
            host.tmux.run("kill-session", "-t", "rss", check=False)
            deadline = time.monotonic() + 3
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        if not points:
            return 130
    after = [p for p in points if p[0] >= WARM_UP_S]
    half = [p for p in points if p[0] >= points[-1][0] / 2]
    whole, late = slope_mb_per_min(after), slope_mb_per_min(half)
    print(
        f"RSS {points[0][1]:.1f} MB at start, {max(mb for _, mb in points):.1f} MB at most, "
        f"{points[-1][1]:.1f} MB at {points[-1][0] / 60:.1f} min ({len(points)} readings)"
    )
    for name, slope in (("after the warm-up", whole), ("over the last half", late)):
        shown = "too few readings" if slope is None else f"{slope:+.4f} MB/min"
        print(f"slope {name}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
