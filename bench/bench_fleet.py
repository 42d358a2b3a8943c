"""The fleet view's refresh against a simulated fleet scraped by a real Prometheus.

    python bench/bench_fleet.py                       # 64 hosts x 8 GPUs, ~60 s
    python bench/bench_fleet.py --hosts 16 --seconds 30 --selector 'job="kvtop"'

One child process serves every host's four exporters (kvtop, DCGM, SGLang, node: 4 x --hosts
loopback ports, tests/support/fleet_bodies.py) and Debian's Prometheus 2.42 scrapes them every 1 s
(tests/support/prometheus_server.py, `host` set by relabeling). When every target is up, this process
calls FleetReader.read() every --interval seconds for --seconds and prints the refresh's wall
time and this process's CPU time per refresh (time.process_time(): the reader is all it runs),
and that CPU as % of one core at the interval. Budget: a refresh under 1 s and under
5 % of a core at a 5 s interval. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtop.fleet.reader import FleetReader, queries  # noqa: E402
from tests.support.fleet_bodies import (  # noqa: E402
    GIB,
    KvtopHost,
    dcgm_body,
    kvtop_body,
    node_body,
    serve_bodies,
    sglang_body,
)
from tests.support.prometheus_server import PrometheusServer, Target, reserve_ports  # noqa: E402

MODELS = ("moonshotai/Kimi-K2.5", "Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3.2")
JOBS = ("kvtop", "dcgm", "sglang", "node")


def host_name(h: int) -> str:
    return f"sim-h{h:03d}"


def bodies_for(h: int, hosts: int) -> dict[str, bytes]:
    """One simulated host's four bodies; the last 8 hosts are four two-node deployments (only
    node 0 has SGLang)."""
    name, model = host_name(h), MODELS[h % len(MODELS)]
    pair = h >= hosts - 8 and hosts >= 16
    shape = {}
    if pair:
        lead = h - (h - (hosts - 8)) % 2
        model = MODELS[lead % len(MODELS)]
        shape = {
            "nnodes": 2,
            "node_rank": h - lead,
            "dist_init_addr": f"10.9.0.{lead}:5757",
            "tp": 16,
        }
    kv_gib = 8.0 + (h % 7)
    spec = KvtopHost(
        name,
        model=model,
        restarts=h % 3,
        segments_gib={
            "baseline": 0.5,
            "weights": 70.0,
            "kv_cache": kv_gib,
            "cuda_graphs": 2.1,
            "runtime": 1.2,
        },
        **shape,
    )
    out = {
        "kvtop": kvtop_body(spec),
        "dcgm": dcgm_body(name, used_mib={g: 80000 + 997 * g + 13 * h for g in range(8)}),
        "node": node_body(name, total_bytes=2048 * GIB, available_bytes=(900 + h) * GIB, cpus=64),
    }
    if not pair or shape["node_rank"] == 0:
        out["sglang"] = sglang_body(
            model, used_tokens=(40000 + 500 * h,), running=h % 17, queued=h % 5
        )
    return out


def serve_child(bodies: dict[int, bytes], sockets, ready) -> None:
    server = serve_bodies(bodies, sockets=sockets)
    ready.set()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.sigwait({signal.SIGTERM})
    server.close()


async def refresh_loop(url: str, selector: str | None, seconds: float, interval_s: float):
    reader = FleetReader(url, selector=selector)
    walls, cpus, fleet = [], [], None
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            fleet = await reader.read()
            walls.append(time.perf_counter() - wall0)
            cpus.append(time.process_time() - cpu0)
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
        per_query = await query_costs(reader) if PER_QUERY else []
    finally:
        await reader.aclose()
    return walls, cpus, fleet, per_query


PER_QUERY = False


async def query_costs(reader: FleetReader) -> list[tuple[str, int, int, float]]:
    """Each refresh query alone: (name, series, JSON bytes, client CPU ms for GET + decode)."""
    import httpx

    from kvtop.fleet.prometheus_api import parse_answer

    out = []
    async with httpx.AsyncClient(timeout=10.0) as client:
        for name, promql in queries(reader.selector).items():
            cpu0 = time.process_time()
            r = await client.get(reader.url + "/api/v1/query", params={"query": promql})
            answer = parse_answer(r.json()["data"])
            cpu_ms = (time.process_time() - cpu0) * 1000
            out.append((name, len(answer.vector), len(r.content), cpu_ms))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--selector", default=None)
    parser.add_argument("--per-query", action="store_true", help="also time each query alone")
    args = parser.parse_args()
    global PER_QUERY
    PER_QUERY = args.per_query

    sockets = reserve_ports(len(JOBS) * args.hosts)
    ports = iter(sockets)
    targets, bodies = [], {}
    for h in range(args.hosts):
        for job, body in bodies_for(h, args.hosts).items():
            port = next(ports)
            targets.append(Target(job, host_name(h), port))
            bodies[port] = body
    for port in list(ports):  # a second node's SGLang: declared nowhere, closed
        sockets.pop(port).close()
    size_kb = sum(map(len, bodies.values())) / 1024
    print(f"{args.hosts} hosts, {len(targets)} targets, {size_kb:,.0f} KB of bodies")

    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=serve_child, args=(bodies, sockets, ready), daemon=True)
    child.start()
    for s in sockets.values():
        s.close()
    ready.wait(60)
    prometheus = PrometheusServer(tuple(targets)).start()
    try:
        t0 = time.monotonic()
        prometheus.wait_up([t.port for t in targets], deadline_s=120)
        print(
            f"Prometheus {prometheus.url}: every target up {time.monotonic() - t0:.1f} s after ready"
        )
        walls, cpus, fleet, per_query = asyncio.run(
            refresh_loop(prometheus.url, args.selector, args.seconds, args.interval)
        )
    finally:
        prometheus.stop()
        child.terminate()
        child.join(10)
    hosts = fleet.hosts
    gpus = sum(len(h.gpus) for h in hosts)
    print(
        f"fleet: {len(fleet.deployments)} deployments, {len(hosts)} hosts, {gpus} GPUs, "
        f"problem: {fleet.problem}"
    )
    for name, series, size, cpu_ms in per_query:
        print(f"  {name:12} {series:6d} series {size / 1024:8.0f} KB  {cpu_ms:5.1f} ms CPU")
    steady_w, steady_c = walls[1:] or walls, cpus[1:] or cpus
    print(
        f"refreshes: {len(walls)} (first, with connection set-up: {walls[0] * 1000:.0f} ms wall, {cpus[0] * 1000:.0f} ms CPU)"
    )
    print(
        f"refresh wall: median {statistics.median(steady_w) * 1000:.0f} ms, max {max(steady_w) * 1000:.0f} ms"
    )
    cpu_ms = statistics.median(steady_c) * 1000
    print(
        f"kvtop CPU per refresh: median {cpu_ms:.0f} ms, max {max(steady_c) * 1000:.0f} ms "
        f"= {cpu_ms / 10 / args.interval:.2f} % of a core at a {args.interval:g} s interval"
    )


if __name__ == "__main__":
    main()
