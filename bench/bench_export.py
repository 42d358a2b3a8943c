#!/usr/bin/env python3
"""What `kvtop --export` costs while Prometheus scrapes it: the real process (the story log, eight
fake H200s through the fake libnvidia-ml, a loopback SGLang server from
tests/support/sglang_http.py) scraped every SECONDS_BETWEEN s for DURATION s as Prometheus 2.42
scrapes (its Accept header: OpenMetrics; gzip), then its CPU (utime + stime from /proc/PID/stat over
the window, as a share of one core), its resident memory at the end (VmRSS), the scrape's wall time
and the body's size. Then, in this process, what one scrape's rendering costs (the collector over
the same kind of Snapshot, text and OpenMetrics, median of 300).

    python bench/bench_export.py                 # every 1 s for 60 s, refresh 1 s
    python bench/bench_export.py --duration 20   # shorter

Prints; asserts nothing. docs/exporter.md quotes the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.support.export_tools import PROMETHEUS_ACCEPT, exporter, fake_nvml_env  # noqa: E402
from tests.support.fake_nvml import build_fake_nvml, eight_gpus, write_state  # noqa: E402
from tests.support.sglang_http import Deployment, FakeSGLang  # noqa: E402

STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of scraping")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--interval", type=float, default=1.0, help="kvtop's refresh period")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeSGLang(Deployment(version="0.5.8")) as server:
        lib = build_fake_nvml(Path(tmp) / "lib")
        state = write_state(Path(tmp) / "nvml.state", eight_gpus(used_mib=135_700))
        env = fake_nvml_env(lib.parent, state)
        argv = ["--log-file", str(STORY_LOG), "--url", server.url, "--interval", str(args.interval)]
        with exporter(*argv, env=env) as running, httpx.Client() as client:
            pid = running.proc.pid
            headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
            for _ in range(5):  # the first snapshots and the connection, outside the window
                client.get(running.url, headers=headers)
                time.sleep(args.every)
            walls, sizes, zipped = [], [], []
            start_cpu, start = cpu_s(pid), time.monotonic()
            next_at = start
            while time.monotonic() - start < args.duration:
                began = time.perf_counter()
                response = client.get(running.url, headers=headers)
                walls.append(time.perf_counter() - began)
                sizes.append(len(response.content))
                zipped.append(response.num_bytes_downloaded)
                next_at += args.every
                time.sleep(max(0.0, next_at - time.monotonic()))
            elapsed = time.monotonic() - start
            used = cpu_s(pid) - start_cpu
            rss = rss_mib(pid)
            samples = sum(
                1 for line in response.text.splitlines() if line and not line.startswith("#")
            )
            running.stop()
    print(
        f"kvtop --export, refresh {args.interval:g} s, scraped every {args.every:g} s for "
        f"{elapsed:.0f} s ({len(walls)} scrapes; 8 GPUs, story log, /metrics):"
    )
    print(f"  CPU            {100 * used / elapsed:.2f} % of one core ({used:.2f} s)")
    print(f"  RSS at the end {rss:.1f} MiB")
    print(
        f"  scrape wall    median {1000 * statistics.median(walls):.2f} ms, "
        f"max {1000 * max(walls):.2f} ms (OpenMetrics, gzip)"
    )
    print(
        f"  body           {sizes[-1] / 1000:.1f} KB, {zipped[-1] / 1000:.1f} KB gzipped, "
        f"{samples} samples"
    )
    with tempfile.TemporaryDirectory() as tmp:
        render_ms(Path(tmp))


def render_ms(tmp: Path) -> None:
    """The collector's rendering alone, on a Snapshot of the same sources (no /metrics)."""
    import asyncio

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    from kvtop.export.collector import SnapshotCollector
    from kvtop.session import Options, Session
    from tests.support.fake_nvml import STATE_ENV
    from tests.support.fault_host import preload_fake_nvml

    preload_fake_nvml(tmp / "lib-in-process")
    os.environ[STATE_ENV] = str(write_state(tmp / "in-process.state", eight_gpus(used_mib=135_700)))

    async def collect():  # type: ignore[no-untyped-def]
        session = Session(Options(log_file=str(STORY_LOG), metrics=False))
        try:
            return await session.collect_once()
        finally:
            await session.close()

    collector = SnapshotCollector()
    collector.latest = asyncio.run(collect())
    registry = CollectorRegistry()
    registry.register(collector)
    for name, render in (("text 0.0.4", generate_latest), ("OpenMetrics", openmetrics)):
        times = []
        for _ in range(300):
            began = time.perf_counter()
            render(registry)
            times.append(time.perf_counter() - began)
        print(f"  render         {name}: median {1000 * statistics.median(times):.2f} ms")


if __name__ == "__main__":
    main()
