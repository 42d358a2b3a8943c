"""CPU cost of kvtop's refresh cycle on a simulated host: fake NVML GPUs, a loopback SGLang
server serving a ~110 KB /metrics, and the story log followed from a file.

    python bench/bench_refresh.py                 # 8, 16 and 64 GPUs
    python bench/bench_refresh.py --gpus 8 --seconds 20

For each GPU count it runs, in a child process with the fake libnvidia-ml.so.1 on
LD_LIBRARY_PATH: (1) back-to-back cycles (NVML poll + scrape + parse + snapshot), reporting CPU
milliseconds per cycle; (2) the live session at a 1 s refresh for --seconds, reporting the
percentage of one core it used. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pane_measure import gpu_state  # noqa: E402

from tests.support.fake_nvml.build import STATE_ENV, build_fake_nvml, write_state  # noqa: E402
from tests.support.sglang_http import FakeSGLang  # noqa: E402

CHILD = r"""
import asyncio, json, resource, sys, time
from kvtop.session import Options, Session

def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(log, url, cycles, seconds):
    session = Session(Options(log_file=log, url=url, interval_s=1.0))
    await asyncio.to_thread(session._read_whole_log)
    await session.collect_once()  # warm: init NVML, first scrape, first analysis
    start = cpu()
    for _ in range(cycles):
        await asyncio.gather(session._poll_nvml(), session._scrape())
        session.snapshot()
    per_cycle_ms = (cpu() - start) / cycles * 1000
    await session.close()
    live = Session(Options(log_file=log, url=url, interval_s=1.0))
    stream = live.snapshots()
    n = 0
    start_cpu, start_wall = cpu(), time.monotonic()
    async for snap in stream:
        n += 1
        if time.monotonic() - start_wall >= seconds:
            break
    used = cpu() - start_cpu
    wall = time.monotonic() - start_wall
    await stream.aclose()
    gpus = len(snap.gpus)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"gpus": gpus, "per_cycle_ms": per_cycle_ms, "live_pct": 100 * used / wall,
                      "snapshots": n, "rss_mib": rss_mib}))

asyncio.run(main(*sys.argv[1:3], int(sys.argv[3]), float(sys.argv[4])))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, action="append", help="GPU counts (default 8 16 64)")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    counts = args.gpus or [8, 16, 64]
    work = Path(tempfile.mkdtemp(prefix="kvtop-bench-refresh-"))
    lib = build_fake_nvml(work / "lib")
    log = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
    print(
        f"machine: {os.cpu_count()} CPUs; {args.cycles} back-to-back cycles, then "
        f"{args.seconds:g} s live at a 1 s refresh"
    )
    with FakeSGLang() as server:
        for count in counts:
            state = work / f"state-{count}"
            write_state(state, gpus=gpu_state(count, 0))  # one still reading: sources only
            env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent), **{STATE_ENV: str(state)})
            env["PYTHONPATH"] = str(ROOT)
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(log),
                    server.url,
                    str(args.cycles),
                    str(args.seconds),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
            if out.returncode != 0:
                print(f"{count} GPUs: child failed:\n{out.stderr[-2000:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{r['gpus']:3d} GPUs: {r['per_cycle_ms']:6.2f} ms CPU per refresh cycle "
                f"(NVML + /metrics + snapshot); live at 1 s: {r['live_pct']:5.2f} % of a core, "
                f"{r['snapshots']} snapshots, peak RSS {r['rss_mib']:.0f} MiB"
            )


if __name__ == "__main__":
    main()
