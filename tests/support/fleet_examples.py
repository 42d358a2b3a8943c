"""Fleets built directly from tui/kvtop/fleet/model.py, for the fleet view's tests.

Why built and not read: the Prometheus reader (tui/kvtop/fleet/reader.py) has its own tests against
a real Prometheus, and one end-to-end test runs every part together. These fleets hold exactly
what that reader hands the view, so the view, the reports and --check are tested on known
numbers, without a Prometheus to start.

The story's hosts: RTX PRO 6000 Blackwell cards of 97,887 MiB (the DCGM fixture's), a TP16
Kimi-K2.5 over two nodes, and a DCGM+SGLang-only host without kvtop.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from kvtop.fleet.model import (
    DCGM,
    KVTOP,
    NODE,
    SGLANG,
    Deployment,
    Fleet,
    FleetGpu,
    FleetHost,
    FleetKv,
    TargetState,
)
from kvtop.fleet.prometheus_api import Series

MIB = 1 << 20
GIB = 1 << 30
TOTAL = 97_887 * MIB
CARD = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TAKEN_AT = 1_796_135_923.0  # 2026-12-01 (the reference's sample timestamp)
URL = "http://127.0.0.1:9090"
KIMI = "moonshotai/Kimi-K2.5"
QWEN = "Qwen/Qwen3-32B"

# kvtop's segments of one Kimi GPU, GiB (adding up to the card's 95.59 GiB).
KIMI_SEGMENTS_GIB = {
    "baseline": 0.81,
    "weights": 61.2,
    "kv_cache": 18.43,
    "draft_weights": 1.79,
    "draft_kv": 0.63,
    "cuda_graphs": 1.52,
    "runtime": 3.81,
    "free": 7.4,
}


def _targets(host: str, *exporters: str, down: dict[str, str] | None = None) -> tuple:
    ports = {KVTOP: 9877, DCGM: 9400, SGLANG: 30000, NODE: 9100}
    down = down or {}
    return tuple(
        TargetState(e, f"{host}:{ports[e]}", e not in down, 1.2, down.get(e)) for e in exporters
    )


def kimi_gpu(index: int, node_rank: int, headroom_gib: float = 7.4, temp: float = 61) -> FleetGpu:
    segments = {k: v * GIB for k, v in KIMI_SEGMENTS_GIB.items()}
    segments["free"] = headroom_gib * GIB
    used = TOTAL - segments["free"]
    return FleetGpu(
        index=index,
        uuid=f"GPU-{node_rank}{index:07d}-aaaa-bbbb-cccc-000000000000",
        name=CARD,
        total_bytes=TOTAL,
        used_bytes=used,
        free_bytes=segments["free"],
        segments_bytes=segments,
        reserve_bytes=5.72 * GIB,
        headroom_bytes=headroom_gib * GIB,
        ranks=(f"TP{node_rank * 8 + index}",),
        utilization_pct=87.0,
        temperature_c=temp,
        power_w=412.5,
    )


def kimi_host(node_rank: int, **changes: object) -> FleetHost:
    name = f"gpu-node-0{node_rank + 1}"
    exporters = (KVTOP, DCGM, SGLANG, NODE) if node_rank == 0 else (KVTOP, DCGM, NODE)
    kv = (
        FleetKv(
            token_usage=0.3027,
            used_tokens=48_211,
            pool_tokens=159_277,
            predicted_tokens=159_277,
            running_reqs=16,
            queued_reqs=0,
            gen_throughput=674.2,
            host_ram_total_bytes=1_081_000_000_000,
            host_ram_available_bytes=668_000_000_000,
        )
        if node_rank == 0
        else FleetKv(host_ram_total_bytes=1_081_000_000_000, host_ram_available_bytes=700e9)
    )
    host = FleetHost(
        host=name,
        targets=_targets(name, *exporters),
        state="ready",
        model=KIMI,
        sglang_version="0.5.8",
        tp=16,
        dp=1,
        pp=1,
        nnodes=2,
        node_rank=node_rank,
        disaggregation_mode="null",
        dist_init_addr="10.0.0.1:5000",
        hostname=name,
        restarts=0,
        gpus=tuple(kimi_gpu(i, node_rank) for i in range(8)),
        kv=kv,
        sources={"gpus": (True, 0.4), "log": (True, 2.0), "metrics": (node_rank == 0, 0.9)},
        phases=(("TP0", "target", "load weights", 215.0),),
    )
    return replace(host, **changes) if changes else host


def kimi_deployment(*hosts: FleetHost) -> Deployment:
    hosts = hosts or (kimi_host(0), kimi_host(1))
    return Deployment(
        key=f"{KIMI}@10.0.0.1:5000",
        model=KIMI,
        hosts=hosts,
        tp=16,
        dp=1,
        pp=1,
        nnodes=2,
        disaggregation_mode="null",
    )


def dcgm_gpu(index: int, used_mib: int = 89_690, temp: float = 58) -> FleetGpu:
    free_mib = 97_887 - 604 - used_mib
    return FleetGpu(
        index=index,
        uuid=f"GPU-3{index:07d}-dddd-eeee-ffff-000000000000",
        name=CARD,
        total_bytes=TOTAL,
        used_bytes=(used_mib + 604) * MIB,
        free_bytes=free_mib * MIB,
        utilization_pct=43.0,
        temperature_c=temp,
        power_w=301.0,
    )


def qwen_host(**changes: object) -> FleetHost:
    """A host with only DCGM and SGLang metrics: no kvtop exporter (no state, no segments)."""
    name = "gpu-node-03"
    host = FleetHost(
        host=name,
        targets=_targets(name, DCGM, SGLANG),
        model=QWEN,
        gpus=tuple(dcgm_gpu(i) for i in range(2)),
        kv=FleetKv(
            token_usage=0.512,
            used_tokens=410_000,
            pool_tokens=800_781,
            running_reqs=31,
            queued_reqs=2,
            gen_throughput=1290.0,
        ),
    )
    return replace(host, **changes) if changes else host


def qwen_deployment(host: FleetHost | None = None) -> Deployment:
    return Deployment(key=f"{QWEN}@gpu-node-03", model=QWEN, hosts=(host or qwen_host(),))


def story_fleet(**changes: object) -> Fleet:
    """Two deployments: the two-node TP16 Kimi and the DCGM+SGLang-only Qwen host."""
    fleet = Fleet(
        taken_at=TAKEN_AT,
        prometheus_url=URL,
        deployments=(kimi_deployment(), qwen_deployment()),
        prometheus_version="2.42.0+ds",
    )
    return replace(fleet, **changes) if changes else fleet


def down_fleet() -> Fleet:
    """What the reader returns when Prometheus does not answer: no data, a sentence."""
    return Fleet(
        taken_at=TAKEN_AT,
        prometheus_url=URL,
        problem=(
            f"nothing listens on {URL} (connection refused): is Prometheus running, and is "
            "--prometheus right?"
        ),
    )


class QueueReader:
    """Stands in for kvtop.fleet.reader.FleetReader (same read/aclose interface): it
    answers each read() with the next fleet pushed, waiting for one when none is queued, and
    history() with `history_answer`. The real reader against a real Prometheus is tested in
    tests/e2e/test_fleet_reader.py, test_fleet_history.py and end to end; here the fleet view gets
    exactly the fleets and history a test decides (a real Prometheus cannot be given a history
    dated to the fleets' fixed TAKEN_AT, nor made to fail for one query only)."""

    def __init__(self, *fleets: Fleet) -> None:
        self._queue: asyncio.Queue[Fleet] = asyncio.Queue()
        self.reads = 0
        self.closed = False
        # history(): what it answers (a Series, None, or an exception to raise), and the
        # (host, what, minutes) asked, in order.
        self.history_answer: Series | BaseException | None = None
        self.history_calls: list[tuple[str, str, float]] = []
        for fleet in fleets:
            self._queue.put_nowait(fleet)

    def push(self, fleet: Fleet) -> None:
        self._queue.put_nowait(fleet)

    async def read(self) -> Fleet:
        fleet = await self._queue.get()
        self.reads += 1
        return fleet

    async def history(self, host: str, what: str, minutes: float) -> Series | None:
        self.history_calls.append((host, what, minutes))
        if isinstance(self.history_answer, BaseException):
            raise self.history_answer
        return self.history_answer

    async def aclose(self) -> None:
        self.closed = True


def kv_usage_series(
    host: str, end: float = TAKEN_AT, minutes: int = 10, step_s: float = 15.0
) -> Series:
    """What FleetReader.history(host, "kv_usage", minutes) gives: `max by (host)` of
    sglang:token_usage, 0..1, one point a step up to `end` (excluded), rising 10 % → 90 %."""
    count = int(minutes * 60 / step_s)
    points = tuple((end - (count - k) * step_s, 0.1 + 0.8 * k / (count - 1)) for k in range(count))
    return Series({"host": host}, points)


def make_fleet_app(*fleets: Fleet, interval_s: float = 0.25):  # type: ignore[no-untyped-def]
    """The real FleetApp on the real FleetFeed, its reader a QueueReader."""
    from kvtop.fleet.app import FleetApp
    from kvtop.fleet.feed import FleetFeed

    reader = QueueReader(*fleets)
    feed = FleetFeed(reader, interval_s)
    app = FleetApp(feed, prometheus_url=URL, clock=lambda: TAKEN_AT + 2)
    return app, reader
