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
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_nvml.build import STATE_ENV, build_fake_nvml  # noqa: E402
from pane_measure import HEIGHT, WIDTH, Figures, StateWriter, measure  # noqa: E402
from sglang_http import FakeSGLang  # noqa: E402
from tmux_tools import Tmux  # noqa: E402

STORY_LOG = ROOT / "tui" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
BUDGET_CPU_PCT = 2.0
BUDGET_RSS_MB = 80.0
BUDGET_FIRST_FRAME_S = 1.0
# An overview row: `▶ 0   TP0  ▚███▓▓▒…   88.2/95.6    7.3  35%  45C  300W` (rank `—` if none).
GPU_ROW = re.compile(r"^\S?\s*(?P<gpu>\d+)\s+\S+\s.*?\d+\.\d/\d+\.\d")


def shows(count: int) -> Callable[[str], bool]:
    """The first complete frame: GPU rows 0..min(count, 16)-1 with their figures."""
    return lambda screen: rows_shown(screen, count)


def rows_shown(screen: str, count: int) -> bool:
    want = set(range(min(count, 16)))
    seen = {int(m["gpu"]) for line in screen.splitlines() if (m := GPU_ROW.match(line))}
    return want <= seen


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


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    parser.add_argument(
        "--gpus", type=int, nargs="+", default=[8], help="fake GPU counts (default 8)"
    )
    args = parser.parse_args()
    tmux_path = shutil.which("tmux")
    if tmux_path is None:
        print("tmux not found: install tmux to run this benchmark", file=sys.stderr)
        return 2
    if not KVTOP.exists():
        print(f"no kvtop console script next to {sys.executable}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)

    secs = args.seconds
    work = Path(tempfile.mkdtemp(prefix="kvtop-bench-tui-"))
    tmux: Tmux | None = None
    writer: StateWriter | None = None
    results: list[Figures] = []
    try:
        lib = build_fake_nvml(work / "lib")
        log = work / STORY_LOG.name
        shutil.copyfile(STORY_LOG, log)
        tmux = Tmux(tmux_path, f"kvtop-bench-{os.getpid()}", work)
        print(
            f"machine: {os.cpu_count()} CPUs; kvtop {KVTOP}; tmux pane {WIDTH}x{HEIGHT}; "
            f"{args.seconds:g} s idle window per configuration"
        )
        with FakeSGLang() as server:
            for count in args.gpus:
                state = work / f"state-{count}"
                writer = StateWriter(state, count)
                writer.start()
                env = {"LD_LIBRARY_PATH": str(lib.parent), STATE_ENV: str(state)}
                label = f"fake NVML {count} GPUs"
                print(f"running: {label} (log + metrics at {server.url}) ...", flush=True)
                kv_args = ["--log-file", str(log), "--url", server.url, "--interval", "1"]
                results.append(
                    measure(tmux, work, label, [str(KVTOP), *kv_args], env, shows(count), secs)
                )
                writer.stop.set()
                writer.join()
                writer = None
        print("running: --demo ...", flush=True)
        results.append(measure(tmux, work, "--demo", [str(KVTOP), "--demo"], {}, shows(8), secs))
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr)
        return 130
    finally:
        if writer is not None:
            writer.stop.set()
        if tmux is not None:
            tmux.kill_server()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
