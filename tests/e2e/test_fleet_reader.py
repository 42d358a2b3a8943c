"""FleetReader against the session's real Prometheus (Debian's 2.42, 1 s scrapes) scraping a
simulated fleet from tests/support/fleet_bodies.py: a host with every exporter, a host with only
DCGM, SGLang and node metrics, a two-node deployment (SGLang only on node 0), a host whose kvtop
target is down, and one whose exporter goes away. Also Prometheus down, stuck, refusing a bad
selector, and behind an auth proxy (the bearer token)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from kvtop.fleet.model import Fleet, FleetHost
from kvtop.fleet.reader import BearerFileError, FleetReader, read_bearer_token
from tests.support.fleet_bodies import (
    DCGM_TOTAL_MIB,
    MIB,
    KvtopHost,
    dcgm_body,
    gpu_uuids,
    kvtop_body,
    node_body,
    serve_bodies,
    sglang_body,
)
from tests.support.prometheus_server import RecordingServer, free_ports

pytestmark = pytest.mark.slow  # the session's Prometheus: ~6 s to its first scrape

PAIR = {"model": "moonshotai/Kimi-K2.5", "nnodes": 2, "dist_init_addr": "10.1.0.10:5757", "tp": 16}
SOLO = KvtopHost("solo-01", model="Qwen/Qwen3-235B", restarts=3, mismatches={"tp": 1})
GiB = 1024**3


@pytest.fixture(scope="module")
def fleet_bodies(prometheus):
    p = prometheus.port
    bodies = {
        p("kvtop", "solo-01"): kvtop_body(SOLO),
        p("dcgm", "solo-01"): dcgm_body("solo-01"),
        p("sglang", "solo-01"): sglang_body("Qwen/Qwen3-235B", running=5, queued=2),
        p("node", "solo-01"): node_body(
            "solo-01", total_bytes=2048 * GiB, available_bytes=1500 * GiB
        ),
        p("dcgm", "plain-02"): dcgm_body("plain-02", label="hostname"),
        p("sglang", "plain-02"): sglang_body(
            "deepseek-ai/DeepSeek-V3", dp=2, used_tokens=(100, 300)
        ),
        p("node", "plain-02"): node_body(
            "plain-02", total_bytes=1024 * GiB, available_bytes=900 * GiB
        ),
        p("kvtop", "pair-n0"): kvtop_body(KvtopHost("pair-n0", node_rank=0, **PAIR)),
        p("dcgm", "pair-n0"): dcgm_body("pair-n0"),
        p("sglang", "pair-n0"): sglang_body(PAIR["model"], tp=16, used_tokens=(80000,)),
        p("node", "pair-n0"): node_body("pair-n0", total_bytes=2048 * GiB, available_bytes=1 * GiB),
        p("kvtop", "pair-n1"): kvtop_body(KvtopHost("pair-n1", node_rank=1, **PAIR)),
        p("dcgm", "pair-n1"): dcgm_body("pair-n1"),
        p("node", "pair-n1"): node_body("pair-n1", total_bytes=2048 * GiB, available_bytes=2 * GiB),
        p("dcgm", "down-04"): dcgm_body("down-04"),
    }
    server = serve_bodies(bodies, sockets=prometheus.take(bodies))
    prometheus.wait_up(bodies)
    prometheus.wait_up([p("kvtop", "down-04")], up=0)
    yield prometheus
    server.close()


async def read_until(reader: FleetReader, done: Callable[[Fleet], bool], what: str) -> Fleet:
    """Read until `done(fleet)`; a clear failure after a generous deadline."""
    end = time.monotonic() + 30
    fleet = await reader.read()
    while not done(fleet) and time.monotonic() < end:
        await asyncio.sleep(0.2)
        fleet = await reader.read()
    assert done(fleet), f"after 30 s the fleet did not show {what}: {summary(fleet)}"
    return fleet


def summary(fleet: Fleet) -> list:
    return [fleet.problem] + [
        (h.host, h.model, h.up, h.last_seen_age_s, [(t.exporter, t.up) for t in h.targets])
        for h in fleet.hosts
    ]


def by_host(fleet: Fleet) -> dict[str, FleetHost]:
    return {h.host: h for h in fleet.hosts}


# tests/e2e/test_fleet_end_to_end.py's hosts share the session's Prometheus: their targets are down
# or up (and their kvtop_info remembered) depending on the order the tests ran in; so does
# tests/e2e/test_fleet_history.py's host.
E2E = ("e2e-", "hist-")


def without_e2e(fleet: Fleet) -> Fleet:
    """The fleet without those hosts (and deployments made only of them)."""
    kept = []
    for deployment in fleet.deployments:
        hosts = tuple(h for h in deployment.hosts if not h.host.startswith(E2E))
        if hosts:
            kept.append(replace(deployment, hosts=hosts))
    return replace(fleet, deployments=tuple(kept))


async def test_the_fleet_as_prometheus_sees_it(fleet_bodies) -> None:
    reader = FleetReader(fleet_bodies.url)
    try:
        fleet = await read_until(
            reader,
            lambda f: "pair-n0" in by_host(f) and by_host(f)["pair-n0"].kv.running_reqs,
            "SGLang on pair-n0",
        )
    finally:
        await reader.aclose()
    assert fleet.problem is None and fleet.prometheus_version.startswith("2.42")
    fleet = without_e2e(fleet)
    deployments = {d.key: d for d in fleet.deployments}
    assert set(deployments) == {
        "solo-01",
        "plain-02",
        "moonshotai/Kimi-K2.5@10.1.0.10:5757",
        "down-04",
        "gone-05",
        "real-06",  # declared for tests/e2e/test_fleet_export.py: down here
    }
    hosts = by_host(fleet)

    solo = hosts["solo-01"]
    assert solo.exporters == ("kvtop", "dcgm", "sglang", "node") and solo.up
    assert (solo.model, solo.state, solo.restarts, solo.tp, solo.nnodes) == (
        "Qwen/Qwen3-235B",
        "ready",
        3,
        8,
        1,
    )
    assert solo.mismatches == ("tp",) and solo.sources["gpus"] == (True, 0.5)
    assert [g.uuid for g in solo.gpus] == list(gpu_uuids("solo-01"))
    gpu = solo.gpus[0]
    assert gpu.segments_bytes["weights"] == pytest.approx(72.9 * GiB)
    assert gpu.total_bytes == DCGM_TOTAL_MIB * MIB and gpu.reserve_bytes == 2 * GiB
    assert (
        gpu.utilization_pct == 87
        and gpu.temperature_c == 64
        and gpu.name.startswith("NVIDIA RTX PRO 6000")
    )
    assert (solo.kv.running_reqs, solo.kv.queued_reqs, solo.kv.pool_tokens) == (5, 2, 159277)
    assert solo.kv.host_ram_available_bytes == 1500 * GiB

    plain = hosts["plain-02"]  # no kvtop: DCGM (`hostname` label), SGLang and node numbers
    assert plain.exporters == ("dcgm", "sglang", "node") and plain.state is None
    assert plain.model == "deepseek-ai/DeepSeek-V3"
    assert len(plain.gpus) == 8 and all(g.total_bytes == DCGM_TOTAL_MIB * MIB for g in plain.gpus)
    assert all(g.segments_bytes == {} and g.headroom_bytes is None for g in plain.gpus)
    assert plain.kv.used_tokens == 400 and plain.kv.pool_tokens == 2 * 159277  # two DP groups

    pair = deployments["moonshotai/Kimi-K2.5@10.1.0.10:5757"]
    assert [h.host for h in pair.hosts] == ["pair-n0", "pair-n1"]
    assert [h.node_rank for h in pair.hosts] == [0, 1]
    assert (pair.nnodes, pair.tp) == (2, 16)
    n0, n1 = pair.hosts
    assert n0.kv.used_tokens == 80000 and n1.kv.used_tokens is None  # SGLang only on node 0
    assert n1.exporters == ("kvtop", "dcgm", "node") and n1.kv.host_ram_available_bytes == 2 * GiB
    assert [g.ranks for g in n1.gpus][:2] == [("TP8",), ("TP9",)]

    down = hosts["down-04"]
    (kvtop_target,) = [t for t in down.targets if t.exporter == "kvtop"]
    assert not kvtop_target.up and "connection refused" in kvtop_target.error
    assert down.up and len(down.gpus) == 8  # its DCGM still answers


@pytest.mark.parametrize(
    ("selector", "hosts"),
    [
        # only solo-01's node target has cluster="eu": the host's other exporters come too
        ('cluster="eu"', {"solo-01"}),
        ('{job="kvtop"}', {"solo-01", "pair-n0", "pair-n1", "down-04", "gone-05", "real-06"}),
        ('job="sglang",host=~"p.*"', {"plain-02", "pair-n0"}),
    ],
)
async def test_the_selector_narrows_to_hosts_with_a_matching_target(
    fleet_bodies, selector, hosts
) -> None:
    reader = FleetReader(fleet_bodies.url, selector=selector)
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
    assert fleet.problem is None and set(by_host(without_e2e(fleet))) == hosts
    if selector == 'cluster="eu"':
        assert by_host(fleet)["solo-01"].exporters == ("kvtop", "dcgm", "sglang", "node")
        assert len(by_host(fleet)["solo-01"].gpus) == 8


async def test_a_bad_selector_is_a_sentence(fleet_bodies) -> None:
    reader = FleetReader(fleet_bodies.url, selector='job="kvtop')
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
    assert fleet.deployments == ()
    assert "bad_data" in fleet.problem and "--selector" in fleet.problem


async def test_a_selector_matching_nothing_is_a_sentence(fleet_bodies) -> None:
    reader = FleetReader(fleet_bodies.url, selector='job="gpu-prod"')
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
    assert fleet.deployments == ()
    assert fleet.problem.startswith('No target matches the selector job="gpu-prod"')


async def test_an_exporter_that_goes_away_is_last_seen(prometheus) -> None:
    port = prometheus.port("kvtop", "gone-05")
    body = kvtop_body(KvtopHost("gone-05", model="gone/model"))
    server = serve_bodies({port: body}, sockets=prometheus.take([port]))
    reader = FleetReader(prometheus.url)
    try:
        await read_until(
            reader, lambda f: by_host(f).get("gone-05", FleetHost("?")).up, "gone-05 up"
        )
        server.stop(port)
        fleet = await read_until(
            reader,
            lambda f: by_host(f)["gone-05"].last_seen_age_s is not None,
            "gone-05 down with a last-seen age",
        )
    finally:
        server.close()
        await reader.aclose()
    gone = by_host(fleet)["gone-05"]
    assert not gone.up and gone.last_seen_age_s >= 0
    assert gone.model == "gone/model"  # kvtop_info as last seen (last_over_time)
    assert gone.state is None and gone.gpus == ()  # no current numbers are invented


async def test_history_of_a_host(fleet_bodies) -> None:
    reader = FleetReader(fleet_bodies.url)
    try:
        end = time.monotonic() + 30
        series = await reader.history("solo-01", "running_reqs", minutes=5)
        while series is None and time.monotonic() < end:
            await asyncio.sleep(0.5)
            series = await reader.history("solo-01", "running_reqs", minutes=5)
    finally:
        await reader.aclose()
    assert series is not None and series.labels == {"host": "solo-01"}
    assert series.points and all(v == 5 for _, v in series.points)


async def test_prometheus_down_is_a_sentence() -> None:
    (port,) = free_ports(1)
    reader = FleetReader(f"http://127.0.0.1:{port}", timeout_s=30.0)
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
    assert fleet.deployments == ()
    assert fleet.problem.startswith(f"Cannot reach Prometheus at http://127.0.0.1:{port}")


async def test_prometheus_stuck_meets_the_deadline() -> None:
    stuck = RecordingServer(hang=True)
    reader = FleetReader(stuck.url, timeout_s=0.5)
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
        stuck.close()
    assert fleet.deployments == ()
    assert fleet.problem == (
        f"Prometheus at {stuck.url} did not answer within 0.5 s; check that it is not "
        "overloaded, or raise the timeout."
    )


async def test_the_bearer_token_reaches_prometheus_through_a_proxy(fleet_bodies, tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  tok-123\n")
    proxy = RecordingServer(forward=fleet_bodies.url)
    reader = FleetReader(proxy.url, bearer_token=read_bearer_token(token_file))
    try:
        fleet = await reader.read()
    finally:
        await reader.aclose()
        proxy.close()
    assert fleet.problem is None and "solo-01" in by_host(fleet)
    assert proxy.headers and all(h.get("Authorization") == "Bearer tok-123" for h in proxy.headers)


@pytest.mark.parametrize(
    ("content", "wanted"),
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("  \n", "is empty"),
        ("two words", "more than one word"),
        (b"\xff\xfe", "is not text"),
        ("dir", "is a directory"),
        ("tökén", "characters an HTTP header cannot carry"),
        ("x" * 20_000, "more than 16,384 characters"),
    ],
)
def test_bearer_file_problems_are_sentences(tmp_path, content, wanted) -> None:
    path = tmp_path / "token"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(BearerFileError, match=wanted) as caught:
        read_bearer_token(path)
    assert str(path) in str(caught.value) and str(caught.value).endswith(".")


def test_an_endless_bearer_file_is_refused() -> None:
    with pytest.raises(BearerFileError, match="more than 16,384 characters"):
        read_bearer_token("/dev/zero")


def test_a_bearer_file_others_may_read_is_warned_about(tmp_path) -> None:
    from kvtop.fleet.reader import bearer_file_warning

    path = tmp_path / "token"
    path.write_text("t0ken\n")
    path.chmod(0o600)
    assert bearer_file_warning(path) is None
    path.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(path)
    warning = bearer_file_warning(link)
    assert warning is not None and "mode 0644" in warning and f"chmod 600 {path}" in warning
    assert f"a link to {path}" in warning
