"""The fleet on AMD Instinct hosts: a real Prometheus (its own, not the session's: these hosts
would change the session fleet's host list) scraping AMD's device metrics exporter in its real
format (tests/fixtures/prometheus/amd-device-metrics-exporter-8gpu.prom, 8 x MI300X):
- mi300-solo: AMD's exporter alone, with gpu_uuid and card_series configured;
- mi300-pair: AMD's exporter beside kvtop's, joined by UUID;
- mi300-plain: AMD's exporter with its default labels (no gpu_uuid) beside kvtop's, joined by
  the GPU index."""

from __future__ import annotations

import asyncio
import time

import pytest

from kvtop.fleet.json_report import fleet_json
from kvtop.fleet.model import Fleet, FleetHost
from kvtop.fleet.reader import FleetReader
from tests.support.fleet_bodies import (
    AMD_TOTAL_MIB,
    GIB,
    MIB,
    KvtopHost,
    amd_body,
    gpu_uuids,
    kvtop_body,
    serve_bodies,
)
from tests.support.prometheus_server import PrometheusServer, Target, reserve_ports

pytestmark = pytest.mark.slow  # its own Prometheus: ~6 s to its first scrape

PLAN = (("amd", "mi300-solo"), ("kvtop", "mi300-pair"), ("amd", "mi300-pair"))
PLAN += (("kvtop", "mi300-plain"), ("amd", "mi300-plain"))
USED_MIB = (181530, 181532, 181530, 181534, 181530, 181530, 181536, 181530)  # the fixture's
MI300X = 192 * GIB


def _kvtop(host: str) -> KvtopHost:
    return KvtopHost(host, model="deepseek-ai/DeepSeek-R1", total_bytes=MI300X)


@pytest.fixture(scope="module")
def amd_fleet():
    reserved = reserve_ports(len(PLAN))
    ports = dict(zip(PLAN, reserved, strict=True))
    server = PrometheusServer(tuple(Target(job, host, port) for (job, host), port in ports.items()))
    server.start()
    bodies = {
        ports["amd", "mi300-solo"]: amd_body("mi300-solo"),
        ports["kvtop", "mi300-pair"]: kvtop_body(_kvtop("mi300-pair")),
        ports["amd", "mi300-pair"]: amd_body("mi300-pair", uuids=gpu_uuids("mi300-pair")),
        ports["kvtop", "mi300-plain"]: kvtop_body(_kvtop("mi300-plain")),
        ports["amd", "mi300-plain"]: amd_body("mi300-plain", default_labels=True),
    }
    bodies_server = serve_bodies(bodies, sockets=reserved)
    try:
        server.wait_up(bodies)
        yield server
    finally:
        bodies_server.close()
        server.stop()


async def _read(url: str) -> Fleet:
    """The fleet once Prometheus holds every host's GPUs from both exporters."""
    reader = FleetReader(url)
    try:
        end = time.monotonic() + 30
        while True:
            fleet = await reader.read()
            hosts = {h.host: h for h in fleet.hosts}
            done = len(hosts) == 3 and all(
                len(h.gpus) == 8 and all(g.readings_from == "amd" for g in h.gpus)
                for h in hosts.values()
            )
            done = done and all(hosts[h].state == "ready" for h in ("mi300-pair", "mi300-plain"))
            if done or time.monotonic() > end:
                return fleet
            await asyncio.sleep(0.2)
    finally:
        await reader.aclose()


@pytest.fixture(scope="module")
def fleet(amd_fleet) -> Fleet:
    return asyncio.run(_read(amd_fleet.url))


def _hosts(fleet: Fleet) -> dict[str, FleetHost]:
    return {h.host: h for h in fleet.hosts}


def test_a_host_with_only_amds_exporter_has_its_gpus(fleet) -> None:
    solo = _hosts(fleet)["mi300-solo"]
    assert fleet.problem is None and solo.exporters == ("amd",) and solo.up
    assert [g.index for g in solo.gpus] == list(range(8))
    for gpu, used_mib in zip(solo.gpus, USED_MIB, strict=True):
        assert gpu.readings_from == "amd" and gpu.name == "AMD Instinct MI300X OAM"
        # MB as amdsmi counts them (MiB) → bytes, as DCGM's
        assert gpu.total_bytes == AMD_TOTAL_MIB * MIB == MI300X
        assert gpu.used_bytes == used_mib * MIB
        assert gpu.free_bytes == (AMD_TOTAL_MIB - used_mib) * MIB
        assert gpu.segments_bytes == {} and gpu.power_limit_w is None
    gpu0 = solo.gpus[0]
    assert gpu0.uuid == "3dff74a1-0000-1000-80d3-0c4c1df1df58"
    # gfx activity %, junction temperature °C, package power W (the fixture's GPU 0)
    assert (gpu0.utilization_pct, gpu0.temperature_c, gpu0.power_w) == (100, 71, 612)


def test_amds_exporter_beside_kvtops_is_joined_by_uuid(fleet) -> None:
    pair = _hosts(fleet)["mi300-pair"]
    assert pair.exporters == ("kvtop", "amd") and pair.model == "deepseek-ai/DeepSeek-R1"
    assert len(pair.gpus) == 8  # one GPU each, not kvtop's 8 beside AMD's 8
    for gpu, uuid in zip(pair.gpus, gpu_uuids("mi300-pair"), strict=True):
        assert gpu.uuid == uuid and gpu.segments_bytes["weights"] == 72.9 * GIB
        assert gpu.used_bytes == USED_MIB[gpu.index] * MIB and gpu.temperature_c is not None
        assert gpu.name == "AMD Instinct MI300X OAM" and gpu.readings_from == "amd"


def test_amds_default_labels_are_joined_by_the_gpu_index(fleet) -> None:
    plain = _hosts(fleet)["mi300-plain"]
    assert plain.exporters == ("kvtop", "amd") and len(plain.gpus) == 8
    for gpu, uuid in zip(plain.gpus, gpu_uuids("mi300-plain"), strict=True):
        assert gpu.uuid == uuid and gpu.segments_bytes["kv_cache"] == 10.4 * GIB
        assert gpu.used_bytes == USED_MIB[gpu.index] * MIB and gpu.power_w is not None
        assert gpu.name == "102-G30211-0C"  # card_model: the default labels have no series


def test_the_json_says_the_figures_came_from_amds_exporter(fleet) -> None:
    report = fleet_json(fleet)
    hosts = {h["host"]: h for d in report["deployments"] for h in d["hosts"]}
    solo = hosts["mi300-solo"]
    assert solo["exporters"] == ["amd"] and solo["level"] == "ok"
    gpu = solo["gpus"][0]
    assert gpu["readings_from"] == "amd" and gpu["total_gib"] == 192.0
    assert gpu["used_gib"] == round(USED_MIB[0] / 1024, 4)
    assert gpu["temperature_c"] == 71.0 and gpu["power_w"] == 612.0
    assert all(g["readings_from"] == "amd" for g in hosts["mi300-pair"]["gpus"])
