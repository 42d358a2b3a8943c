"""Cost of kvtop's terminal UI: idle CPU, RSS and time to first frame, in a real tmux pane.

    python bench/bench_tui.py                      # 8 GPUs (fake NVML) and --demo, 60 s each
    python bench/bench_tui.py --seconds 20
    python bench/bench_tui.py --gpus 8 16 64       # also 16 and 64 fake GPUs

Configurations: (1) the installed `kvtop` on the fake libnvidia-ml.so.1 (LD_LIBRARY_PATH) with
N GPUs whose utilization, temperature, power and used memory change every second (this script
rewrites the state file), the story log copied to a temp file and followed, and the loopback
FakeSGLang /metrics server (`--url`), at `--interval 1`; (2) `kvtop --demo`. Each runs in a
detached tmux pane at 120x40 on a private server (`tmux -L kvtop-bench-<pid>`).

Figures, per configuration:
- first frame: from spawning the process (`tmux new-session`) to the first `capture-pane -p`
  (polled every 20 ms) that shows the GPU rows 0..min(N,16)-1, each with its used/total figure.
  A 40-line pane cannot hold 64 rows: for 64 GPUs this is the first screenful of rows.
- idle CPU: after the first frame and a 2 s settle, utime+stime (and reaped children's) of the
  kvtop process and its descendants from /proc/<pid>/stat at the start and end of --seconds,
  as percent of one core. Threads count in their process's stat.
- RSS: VmRSS of the process tree from /proc/<pid>/status at the end, in MB (10^6 bytes).

Prints figures and "within budget" / "OVER budget" against the TUI budgets (idle CPU under 2 %
of one core, RSS under 80 MB, first frame under 1 s); asserts nothing. Every child (tmux
server, kvtop, the HTTP server thread) is cleaned up on exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pane_measure import (  # noqa: E402
    HEIGHT,
    KVTOP,
    KVTOP_ROW,
    WIDTH,
    FakeHost,
    Figures,
    measure,
    ready_to_run,
    rows_seen,
)

BUDGET_CPU_PCT = 2.0
BUDGET_RSS_MB = 80.0
BUDGET_FIRST_FRAME_S = 1.0
ROWS_FOR_FIRST_FRAME = 16  # a 40-line pane holds the first 16 rows of 64 GPUs


def verdict(value: float | None, budget: float) -> str:
    if value is None:
        return "no figure"
    return "within budget" if value < budget else "OVER budget"


def report(results: list[Figures], secs: float) -> None:
    print()
    print(f"{'configuration':<26} {'first frame':>12} {'idle CPU':>10} {'RSS':>9}")
    print(f"{'':<26} {'(s)':>12} {'(% core)':>10} {'(MB)':>9}")
    for r in results:
        ff = "—" if r.first_frame_s is None else f"{r.first_frame_s:.3f}"
        cpu = "—" if r.cpu_pct is None else f"{r.cpu_pct:.2f}"
        rss = "—" if r.rss_mb is None else f"{r.rss_mb:.1f}"
        print(f"{r.label:<26} {ff:>12} {cpu:>10} {rss:>9}")
    print()
    print(
        f"budgets: first frame < {BUDGET_FIRST_FRAME_S:g} s, idle CPU < {BUDGET_CPU_PCT:g} % "
        f"of one core (over {secs:g} s at a 1 s refresh), RSS < {BUDGET_RSS_MB:g} MB"
    )
    for r in results:
        print(
            f"  {r.label:<24} first frame {verdict(r.first_frame_s, BUDGET_FIRST_FRAME_S)}; "
            f"idle CPU {verdict(r.cpu_pct, BUDGET_CPU_PCT)}; "
            f"RSS {verdict(r.rss_mb, BUDGET_RSS_MB)}"
        )
        if r.note:
            print(f"    note: {r.note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    parser.add_argument(
        "--gpus", type=int, nargs="+", default=[8], help="fake GPU counts (default 8)"
    )
    args = parser.parse_args()
    why = ready_to_run()
    if why:
        print(why, file=sys.stderr)
        return 2
    secs = args.seconds
    results: list[Figures] = []
    try:
        with FakeHost("kvtop-bench-tui") as host:
            print(
                f"machine: {os.cpu_count()} CPUs; kvtop {KVTOP}; tmux pane {WIDTH}x{HEIGHT}; "
                f"{secs:g} s idle window per configuration"
            )
            for count in args.gpus:
                with host.gpus(count) as env:
                    label = f"fake NVML {count} GPUs"
                    print(f"running: {label} (log + metrics at {host.server.url}) ...", flush=True)
                    first = rows_seen(KVTOP_ROW, count, ROWS_FOR_FIRST_FRAME)
                    results.append(
                        measure(host.tmux, host.work, label, host.kvtop_argv(), env, first, secs)
                    )
            print("running: --demo ...", flush=True)
            first = rows_seen(KVTOP_ROW, 8, ROWS_FOR_FIRST_FRAME)
            argv = [str(KVTOP), "--demo"]
            results.append(measure(host.tmux, host.work, "--demo", argv, {}, first, secs))
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    report(results, secs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
