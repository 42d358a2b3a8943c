"""Where kvtop's idle CPU goes: py-spy samples the live view in a tmux pane on the fake host.

    python bench/profile_tui.py                 # 8 GPUs, 60 s, summary printed
    python bench/profile_tui.py --seconds 120 --gpus 64 --raw out.txt

Same host as bench_tui.py (fake NVML whose numbers move every second, the story log followed,
a loopback /metrics server, --interval 1) and, as bench_vs_nvitop.py, eight live processes titled
as SGLang's schedulers on the first eight GPUs (`--no-processes`: none). py-spy (`pip install py-spy`, not a dependency of
kvtop) attaches after the first frame and records only samples where a thread was running, so
the sample counts are proportional to CPU time. Prints the share of samples by the package
the running frame belongs to, the hottest functions by self and by total time. Asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_vs_nvitop import ranks_for  # noqa: E402
from pane_measure import (  # noqa: E402
    KVTOP_ROW,
    FakeHost,
    launch,
    ready_to_run,
    rows_seen,
    wait_first_frame,
)

RATE_HZ = 500
# py-spy's idle detection does not work on every VM: leaves that are waits are dropped here.
IDLE_LEAVES = ("select (selectors.py", "wait (threading.py", "_worker (concurrent/futures")


def where(frame: str) -> str:
    """`func (path/to/module.py:12)` -> a package label."""
    path = frame.rsplit("(", 1)[-1]
    installed = path.split("site-packages/")[-1]
    for key in ("textual", "rich", "httpx", "httpcore", "anyio", "h11", "pynvml", "psutil"):
        if installed.startswith(key + "/") or installed.startswith(key + "."):
            return key
    if "/asyncio/" in path or path.startswith("asyncio/"):
        return "asyncio"
    if "/tui/kvtop/" in path or path.startswith("tui/kvtop/"):
        return "kvtop." + path.split("tui/kvtop/", 1)[-1].split(".py")[0].replace("/", ".")
    if "threading.py" in path or "selectors.py" in path:
        return "threading/selectors"
    return "other: " + path.split("/")[-1].split(":")[0]


def summarise(raw: Path, top: int) -> None:
    self_by: collections.Counter[str] = collections.Counter()
    total_by: collections.Counter[str] = collections.Counter()
    package: collections.Counter[str] = collections.Counter()
    tui_entry: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        if any(frames[-1].startswith(idle) for idle in IDLE_LEAVES):
            continue
        samples += count
        self_by[frames[-1]] += count
        for frame in set(frames):
            total_by[frame] += count
        package[where(frames[-1])] += count
        outermost_tui = next((f for f in frames if "/tui/" in f or "(tui/kvtop/" in f), None)
        tui_entry[outermost_tui or "(no kvtop frame: Textual/asyncio/threads)"] += count
    if not samples:
        print("no samples (the process never ran while sampled?)")
        return
    print(f"{samples} samples")

    def show(title: str, counter: collections.Counter[str]) -> None:
        print(f"\n{title}")
        for name, count in counter.most_common(top):
            print(f"  {100 * count / samples:5.1f}%  {name}")

    show("by package of the running frame", package)
    show("by the outermost kvtop frame on the stack", tui_entry)
    show("self", self_by)
    show("total", total_by)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    parser.add_argument("--no-processes", action="store_true", help="no GPU processes")
    args = parser.parse_args()
    why = ready_to_run()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if why or not Path(spy).exists():
        sys.exit(why or "py-spy not found: pip install py-spy (a profiling tool, not a dependency)")
    with (
        FakeHost("kvtop-prof") as host,
        ranks_for(args.gpus, args.no_processes) as procs,
        host.gpus(args.gpus, procs) as env,
    ):
        pid_file = launch(host.tmux, host.work, "prof", host.kvtop_argv(), env)
        shown, screen = wait_first_frame(host.tmux, "prof", rows_seen(KVTOP_ROW, args.gpus, 8))
        if shown is None:
            sys.exit("kvtop showed no GPU rows:\n" + screen)
        time.sleep(2)
        raw = args.raw or host.work / "spy.txt"
        pid = pid_file.read_text().strip()
        subprocess.run(
            [
                spy,
                "record",
                "--pid",
                pid,
                "--duration",
                str(int(args.seconds)),
                "--rate",
                str(RATE_HZ),
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "--output",
                str(raw),
            ],
            check=True,
            capture_output=True,
        )
        summarise(raw, args.top)


if __name__ == "__main__":
    main()
