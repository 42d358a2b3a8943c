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
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_nvml.build import STATE_ENV, build_fake_nvml, write_state  # noqa: E402
from sglang_http import FakeSGLang  # noqa: E402
from tmux_tools import Tmux  # noqa: E402

STORY_LOG = ROOT / "tui" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
WIDTH, HEIGHT = 120, 40
POLL_S = 0.02
FIRST_FRAME_TIMEOUT_S = 30.0
SETTLE_S = 2.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
BUDGET_CPU_PCT = 2.0
BUDGET_RSS_MB = 80.0
BUDGET_FIRST_FRAME_S = 1.0
# An overview row: `▶ 0   TP0  ▚███▓▓▒…   88.2/95.6    7.3  35%  45C  300W` (rank `—` if none).
GPU_ROW = re.compile(r"^\S?\s*(?P<gpu>\d+)\s+\S+\s.*?\d+\.\d/\d+\.\d")


def gpu_state(count: int, tick: int) -> dict[int, dict[str, object]]:
    """bench_refresh's RTX PRO 6000 host (the story log's GPUs), with numbers moving per tick."""
    return {
        i: {
            "name": "NVIDIA RTX PRO 6000 Blackwell",
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "bus": f"00000000:{i // 8:02X}:{i % 8:02X}.0",
            "total_mib": 97887,
            "used_mib": 89800 + (tick * 37 + i * 11) % 300,
            "reserved_mib": 512,
            "util": (40 + tick * 7 + i * 3) % 100,
            "mem_util": (20 + tick * 5 + i) % 100,
            "temp": 45 + (tick + i) % 20,
            "power_mw": 250000 + ((tick * 13 + i * 7) % 300) * 1000,
            "limit_mw": 600000,
        }
        for i in range(count)
    }


class StateWriter(threading.Thread):
    """Rewrites the fake NVML state file once a second until stopped."""

    def __init__(self, path: Path, count: int) -> None:
        super().__init__(daemon=True)
        self.path, self.count = path, count
        self.stop = threading.Event()
        write_state(path, gpus=gpu_state(count, 0))

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0):
            tick += 1
            write_state(self.path, gpus=gpu_state(self.count, tick))


@dataclass
class Figures:
    label: str
    first_frame_s: float | None
    cpu_pct: float | None
    rss_mb: float | None
    note: str = ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_s(pid: int) -> float:
    """utime+stime+cutime+cstime of PID and its live descendants, in seconds."""
    ticks = 0
    for p in [pid, *descendants(pid)]:
        fields = _stat_fields(p)
        if fields:  # fields[11..14] are utime, stime, cutime, cstime (stat fields 14..17)
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLK_TCK


def tree_rss_mb(pid: int) -> float:
    total_kb = 0
    for p in [pid, *descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            pass
    return total_kb * 1024 / 1e6


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def thread_states(pid: int) -> str:
    """`state:wchan` of each thread, to see where a process that will not exit sits."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            state = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
            out.append(f"{state}:{task.joinpath('wchan').read_text() or '-'}")
        except OSError:
            pass
    return "threads " + " ".join(out)


def rows_shown(screen: str, count: int) -> bool:
    want = set(range(min(count, 16)))
    seen = {int(m["gpu"]) for line in screen.splitlines() if (m := GPU_ROW.match(line))}
    return want <= seen


def measure(
    tmux: Tmux, work: Path, label: str, args: list[str], env: dict[str, str], gpus: int, secs: float
) -> Figures:
    name = re.sub(r"\W", "-", label)
    pid_file = work / f"{name}.pid"
    settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    core = f"env {settings} {shlex.quote(str(KVTOP))} {' '.join(map(shlex.quote, args))}"
    script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {core}"
    size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
    start = time.monotonic()
    tmux.run("new-session", "-d", "-s", name, *size, f"sh -c {shlex.quote(script)}")
    first = None
    screen = ""
    while time.monotonic() - start < FIRST_FRAME_TIMEOUT_S:
        screen = tmux.capture(name)
        if rows_shown(screen, gpus):
            first = time.monotonic() - start
            break
        if "Traceback" in screen or "Pane is dead" in screen:
            break
        time.sleep(POLL_S)
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        if first is None or pid is None:
            tail = "\n".join(screen.rstrip().splitlines()[-8:])
            return Figures(label, None, None, None, f"no first frame; pane ends:\n{tail}")
        time.sleep(SETTLE_S)
        before_screen = tmux.capture(name)
        cpu0, t0 = tree_cpu_s(pid), time.monotonic()
        time.sleep(secs)
        cpu1, t1 = tree_cpu_s(pid), time.monotonic()
        rss = tree_rss_mb(pid)
        changed = tmux.capture(name) != before_screen
        note = "" if changed else "screen did not change during the window"
        if not alive(pid):
            note = "kvtop exited during the window"
        return Figures(label, first, 100 * (cpu1 - cpu0) / (t1 - t0), rss, note)
    finally:
        tmux.run("kill-session", "-t", name, check=False)  # the terminal goes away: SIGHUP
        if pid is not None:
            deadline = time.monotonic() + 3
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid):
                print(
                    f"  ({label}: kvtop outlived its terminal by 3 s: {thread_states(pid)}; killed)"
                )
                os.kill(pid, signal.SIGKILL)


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
                results.append(measure(tmux, work, label, kv_args, env, count, args.seconds))
                writer.stop.set()
                writer.join()
                writer = None
        print("running: --demo ...", flush=True)
        results.append(measure(tmux, work, "--demo", ["--demo"], {}, 8, args.seconds))
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
