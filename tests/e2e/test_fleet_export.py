"""The whole contract, end to end: the real exporter's body (tui/kvtop/export/collector.py over a real
Session's Snapshot: the story log, the fake libnvidia-ml through nvidia-ml-py, a loopback
SGLang server) scraped by the session's real Prometheus, read back by FleetReader, equals what
`--once --json` (snapshot_json) and `--check` (headroom_gib) say for the same Snapshot."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kvtop.export import families as ff
from kvtop.export.collector import GIB
from kvtop.fleet.reader import FleetReader
from kvtop.report.check import headroom_gib
from kvtop.report.json_report import snapshot_json
from tests.process.test_export_collector import (
    HOST,
    JSON_ROUNDING_BYTES,
    USED_MIB,
    body_of,
    collect,
)
from tests.support.fake_nvml import STATE_ENV, eight_gpus, write_state
from tests.support.fault_host import STORY_LOG
from tests.support.fleet_bodies import serve_bodies
from tests.support.sglang_http import Deployment, FakeSGLang, build_exposition

pytestmark = pytest.mark.slow  # the session's Prometheus: ~6 s to its first scrape


@pytest.fixture
def state(
    fake_lib: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    path = tmp_path_factory.mktemp("nvml") / "nvml.state"
    monkeypatch.setenv(STATE_ENV, str(path))
    write_state(path, eight_gpus(used_mib=USED_MIB))
    return path


async def test_the_exporters_body_reads_back_as_once_json(prometheus, state: Path) -> None:
    sglang = Deployment(version="0.5.8")
    with FakeSGLang(sglang) as server:
        snapshot = await collect(log_file=str(STORY_LOG), url=server.url)
    ports = [prometheus.port("kvtop", "real-06"), prometheus.port("sglang", "real-06")]
    bodies = {ports[0]: body_of(snapshot).encode(), ports[1]: build_exposition(sglang).encode()}
    served = serve_bodies(bodies, sockets=prometheus.take(ports))
    reader = FleetReader(prometheus.url, selector='host="real-06"')
    try:
        end = time.monotonic() + 30
        fleet = await reader.read()
        while time.monotonic() < end and not (
            fleet.hosts and fleet.hosts[0].state and fleet.hosts[0].kv.used_tokens is not None
        ):
            await asyncio.sleep(0.2)
            fleet = await reader.read()
    finally:
        await reader.aclose()
        served.close()
    assert fleet.problem is None and len(fleet.hosts) == 1, fleet
    host = fleet.hosts[0]
    assert host.kv.used_tokens is not None, "after 30 s Prometheus had no SGLang sample"
    data = snapshot_json(snapshot)
    startup = snapshot.analysis.startup
    args = startup.server_args
    assert (host.state, host.hostname) == ("ready", HOST)
    assert host.model == (args.served_model_name or args.model_path)
    assert (host.tp, host.restarts) == (args.tp_size, startup.restarts)
    assert host.exporters == ("kvtop", "sglang")
    assert set(host.sources) == {"gpus", "log", "metrics"}

    by_uuid = {g.uuid: g for g in host.gpus}
    assert len(by_uuid) == len(data["gpus"]) == 8
    for gpu in data["gpus"]:
        read = by_uuid[gpu["uuid"]]
        breakdown = gpu["breakdown"]
        assert read.index == gpu["index"]
        assert read.total_bytes == pytest.approx(
            breakdown["total_gib"] * GIB, abs=JSON_ROUNDING_BYTES
        )
        assert read.reserve_bytes == pytest.approx(
            breakdown["reserve_gib"] * GIB, abs=JSON_ROUNDING_BYTES
        )
        for segment, names in ff.SEGMENT_FIELDS.items():
            known = [breakdown[n] for n in names if breakdown[n] is not None]
            if known:
                assert read.segments_bytes[segment] == pytest.approx(
                    sum(known) * GIB, abs=JSON_ROUNDING_BYTES
                ), (gpu["index"], segment)
            else:
                assert segment not in read.segments_bytes  # left out, never 0
    worst = min(g.headroom_bytes for g in host.gpus if g.headroom_bytes is not None)
    assert worst == pytest.approx(headroom_gib(snapshot) * GIB, abs=1)
    assert sorted(r for g in host.gpus for r in g.ranks) == sorted(
        r for g in snapshot.gpus for r in g.ranks
    )
