"""What the process table costs: cProfile over a minute of the live view on the fake host,
with real processes on the fake GPUs (eight SGLang schedulers and a foreign trainer).

    python bench/profile_processes.py               # the overview (its processes line), 60 s
    python bench/profile_processes.py --view table  # the processes view (t) on screen
    python bench/profile_processes.py --seconds 30 --top 30

Same host as bench_tui.py (fake NVML whose numbers move every second, the story log followed,
a loopback /metrics server, --interval 1), kvtop run under `python -m cProfile` in a 120×40
tmux pane. Prints the wall window, the CPU seconds cProfile saw in total and in the parts that
make the process table (the host's readings with psutil, the rows, the overview's line, the
view), and each as % of one core over the window. Asserts nothing.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from pane_measure import KVTOP_ROW, FakeHost, launch, ready_to_run, rows_seen, wait_first_frame  # noqa: E402

from tests.support.sglang_procs import running_server  # noqa: E402

# (module file, function): the process table's own work, each counted with what it calls.
PARTS = (
    ("host_processes.py", "read"),
    ("host_processes.py", "host"),
    ("local_host.py", "processes"),
    ("build_snapshot.py", "_process_view"),
    ("table.py", "process_rows"),
    ("processes_line.py", "show"),
    ("processes.py", "show"),
    ("columns.py", "table_lines"),
    ("overview.py", "show"),
    ("session.py", "snapshot"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--view", choices=("overview", "table"), default="overview")
    parser.add_argument("--top", type=int, default=0, help="also print the N hottest functions")
    args = parser.parse_args()
    why = ready_to_run()
    if why:
        sys.exit(why)
    import subprocess

    with FakeHost("kvtop-procs") as host, running_server(8) as ranks:
        trainer = subprocess.Popen(["bash", "-c", "exec -a 'python3 train.py' sleep 600"])
        try:
            procs = tuple((i, ranks[f"TP{i}"].pid, 88_000) for i in range(8))
            procs += ((2, trainer.pid, 4096),)
            with host.gpus(8, procs) as env:
                prof = host.work / "kvtop.prof"
                argv = host.kvtop_argv()
                argv = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "kvtop", *argv[1:]]
                launch(host.tmux, host.work, "procs", argv, env)
                shown, screen = wait_first_frame(host.tmux, "procs", rows_seen(KVTOP_ROW, 8, 8))
                if shown is None:
                    sys.exit("kvtop showed no GPU rows:\n" + screen)
                if args.view == "table":
                    host.tmux.run("send-keys", "-t", "procs", "t")
                start = time.monotonic()
                time.sleep(args.seconds)
                host.tmux.run("send-keys", "-t", "procs", "q")
                window = time.monotonic() - start
                deadline = time.monotonic() + 20
                while not prof.exists() and time.monotonic() < deadline:
                    time.sleep(0.2)
                time.sleep(1)  # cProfile writes its file as the process ends
                report(prof, window, args.top)
        finally:
            trainer.kill()
            trainer.wait()


def report(prof: Path, window: float, top: int) -> None:
    stats = pstats.Stats(str(prof))
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in table.items())
    print(f"window {window:.1f} s (kvtop's whole run under cProfile, start-up included)")
    print(f"all functions, self time: {total:.3f} s")
    for file, name in PARTS:
        cum = sum(
            ct
            for (path, _, func), (_, calls, _, ct, _) in table.items()
            if path.endswith("/" + file) and func == name
        )
        calls = sum(
            nc for (path, _, func), (_, nc, _, _, _) in table.items()
            if path.endswith("/" + file) and func == name
        )  # fmt: skip
        print(f"  {file}:{name:<14} {calls:6d} calls  {cum * 1000:9.1f} ms  "
              f"{100 * cum / window:6.3f} % of a core")  # fmt: skip
    if top:
        stats.sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    main()
