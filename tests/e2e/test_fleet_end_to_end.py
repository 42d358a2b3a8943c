"""The fleet end to end, with every part real: three `kvtop --export` processes (each with its
own fake libnvidia-ml state and its own log, standing for a host), loopback servers serving
DCGM, SGLang and node-exporter bodies in their real formats, the session's real Prometheus
scraping all of them every second, and the installed `kvtop --prometheus URL --once --json`
reading the fleet back. What the fleet says of each host must be what that host's own
`kvtop --once --json` says.

The hosts: a two-node TP16 deployment (node 0 with DCGM, SGLang and node exporter; node 1 with
DCGM only, as SGLang 0.5.23 serves /metrics on node 0 only) and a single TP8 host with kvtop only.
The two nodes' logs are the story log (Kimi-K2.5 TP8, SGLang 0.5.8) with its server_args made
two-node (`nnodes=2`, `node_rank`, `dist_init_addr`, `tp_size=16`) and, on node 1, the ranks
renamed TP8-TP15: constructed from a real log, not captured.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kvtop.fleet.model import Fleet
from kvtop.fleet.reader import FleetReader
from tests.support.export_tools import exporter, fake_nvml_env, kvtop_command
from tests.support.fake_nvml import eight_gpus, kvtop_once, write_state
from tests.support.fault_host import STORY_LOG
from tests.support.fleet_bodies import dcgm_body, gpu_uuids, node_body, serve_bodies, sglang_body
from tests.support.tmux_tools import descendants

pytestmark = pytest.mark.slow  # the session's Prometheus and four kvtop processes

HOSTS = ("e2e-n0", "e2e-n1", "e2e-solo")
# Each host's exporters: the targets the session's Prometheus scrapes for it.
TARGETS = (
    ("kvtop", "e2e-n0"),
    ("dcgm", "e2e-n0"),
    ("sglang", "e2e-n0"),
    ("node", "e2e-n0"),
    ("kvtop", "e2e-n1"),
    ("dcgm", "e2e-n1"),
    ("kvtop", "e2e-solo"),
)
SELECTOR = 'host=~"e2e-.*"'
GIB = 1024**3
# The story's cards as DCGM's fixture has them: 97,887 MiB, 604 reserved, 89,690 in use.
TOTAL_MIB, RESERVED_MIB, USED_MIB = 97_887, 604, 89_690
# Both sides round GiB to 4 digits (the fleet from bytes the exporter rounded to the byte).
ROUNDING_GIB = 2e-4


def host_log(directory: Path, node_rank: int | None) -> Path:
    """The story log; for a node of the two-node deployment, made two-node as the docstring says."""
    text = STORY_LOG.read_text(encoding="utf-8")
    if node_rank is None:
        return STORY_LOG
    text = text.replace("nnodes=1, node_rank=0", f"nnodes=2, node_rank={node_rank}")
    text = text.replace("dist_init_addr=None", "dist_init_addr='10.0.0.1:5000'")
    text = text.replace("tp_size=8", "tp_size=16")
    if node_rank == 1:
        text = re.sub(r"\bTP(\d+)\b", lambda m: f"TP{int(m.group(1)) + 8}", text)
    path = directory / f"node{node_rank}.log"
    path.write_text(text, encoding="utf-8")
    return path


def host_gpus(host: str) -> dict[int, dict[str, object]]:
    """Eight cards as DCGM's body for `host` has them (same UUIDs, so the two join)."""
    gpus = eight_gpus(
        name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        total_mib=TOTAL_MIB,
        reserved_mib=RESERVED_MIB,
        used_mib=USED_MIB,
    )
    for index, uuid in enumerate(gpu_uuids(host)):
        gpus[index]["uuid"] = uuid
    return gpus


def complete(fleet: Fleet) -> bool:
    """Every host in with its state and its GPUs' segments, the nodes' GPUs named by DCGM, and
    node 0's SGLang and node-exporter numbers."""
    hosts = {h.host: h for h in fleet.hosts}
    if set(hosts) != set(HOSTS):
        return False
    for host in hosts.values():
        if host.state != "ready" or len(host.gpus) != 8:
            return False
        if any(not g.segments_bytes for g in host.gpus):
            return False
    if any(g.name is None for name in ("e2e-n0", "e2e-n1") for g in hosts[name].gpus):
        return False
    n0 = hosts["e2e-n0"]
    return n0.kv.used_tokens is not None and n0.kv.host_ram_total_bytes is not None


async def read_until_complete(url: str) -> Fleet:
    reader = FleetReader(url, selector=SELECTOR)
    try:
        end = time.monotonic() + 45
        fleet = await reader.read()
        while not complete(fleet) and time.monotonic() < end:
            await asyncio.sleep(0.25)
            fleet = await reader.read()
    finally:
        await reader.aclose()
    assert complete(fleet), f"after 45 s the fleet was not complete: {fleet}"
    return fleet


@pytest.fixture(scope="module")
def fleet_of_exporters(
    prometheus, lib_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict]]:
    """The three hosts running (for the module: their ports are handed over once); yields each
    host's own `--once --json`."""
    tmp_path = tmp_path_factory.mktemp("e2e")
    logs = {
        "e2e-n0": host_log(tmp_path, 0),
        "e2e-n1": host_log(tmp_path, 1),
        "e2e-solo": host_log(tmp_path, None),
    }
    bodies = {
        prometheus.port("dcgm", "e2e-n0"): dcgm_body(
            "e2e-n0", used_mib=dict.fromkeys(range(8), USED_MIB)
        ),
        prometheus.port("dcgm", "e2e-n1"): dcgm_body(
            "e2e-n1", used_mib=dict.fromkeys(range(8), USED_MIB)
        ),
        prometheus.port("sglang", "e2e-n0"): sglang_body("kimi-k2.5", tp=16, used_tokens=(61_000,)),
        prometheus.port("node", "e2e-n0"): node_body(
            "e2e-n0", total_bytes=1024 * GIB, available_bytes=600 * GIB
        ),
    }
    own: dict[str, dict] = {}
    with ExitStack() as stack:
        served = serve_bodies(bodies, sockets=prometheus.take(bodies))
        stack.callback(served.close)
        for host in HOSTS:
            state = write_state(tmp_path / f"{host}.state", host_gpus(host))
            env = fake_nvml_env(lib_dir, state)
            port = prometheus.port("kvtop", host)
            # The port was held bound (not listening) so no other test could get it; kvtop
            # binds it itself.
            prometheus.take([port])[port].close()
            command = kvtop_command(
                "--export", f"127.0.0.1:{port}", "--no-metrics", "--log-file", str(logs[host])
            )
            stack.enter_context(exporter(command=command, env=env))
            # the host's own report: `kvtop --once --json` with the same GPUs and log
            own[host] = json.loads(kvtop_once(lib_dir, state, logs[host], "--json").stdout)
        # Every target of the three hosts scraped and up before any test reads the fleet: a
        # host's exporters are the targets Prometheus has an `up` for, and the GPU names that
        # `complete` waits for come from kvtop's own series as well as DCGM's.
        prometheus.wait_up(prometheus.port(job, host) for job, host in TARGETS)
        yield own


def kvtop_fleet_json(url: str) -> dict:
    result = subprocess.run(
        kvtop_command("--prometheus", url, "--selector", SELECTOR, "--once", "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


async def test_the_fleet_says_what_each_host_says(prometheus, fleet_of_exporters) -> None:
    await read_until_complete(prometheus.url)
    fleet = kvtop_fleet_json(prometheus.url)
    assert fleet["schema"] == "kvtop-fleet/1"
    assert fleet["prometheus"]["problem"] is None
    hosts = {h["host"]: h for d in fleet["deployments"] for h in d["hosts"]}
    assert set(hosts) == set(HOSTS)

    # The two nodes are one deployment, node 0 first; the single host is its own.
    shapes = sorted([h["host"] for h in d["hosts"]] for d in fleet["deployments"])
    assert shapes == [["e2e-n0", "e2e-n1"], ["e2e-solo"]]
    pair = next(d for d in fleet["deployments"] if len(d["hosts"]) == 2)
    assert (pair["nnodes"], pair["tp"]) == (2, 16)

    for name, own in fleet_of_exporters.items():
        host = hosts[name]
        assert host["state"] == own["startup"]["state"] == "ready"
        # kvtop's verdict there, read back: the same level and the same alerts.
        assert host["kvtop_verdict"] == own["verdict"]["level"], name
        assert sorted(a["kind"] for a in host["alerts"]) == sorted(
            a["name"] for a in own["verdict"]["alerts"]
        ), name
        assert host["model"] == own["server_args"]["served_model_name"]
        assert host["node_rank"] == own["deployment"]["node_rank"]
        pools = [r["target"]["kv_tokens"] for r in own["ranks"]]
        assert host["kv"]["pool_tokens"] == max(pools)
        assert len(host["gpus"]) == len(own["gpus"]) == 8
        for shown, read in zip(host["gpus"], own["gpus"], strict=True):
            assert shown["uuid"] == read["uuid"]
            assert shown["ranks"] == read["ranks"], name
            assert shown["total_gib"] == pytest.approx(read["total_gib"], abs=ROUNDING_GIB)
            for key, value in shown["breakdown"].items():
                wanted = read["breakdown"][key]
                if key == "mamba_gib":  # the exporter's one segment for both
                    parts = [read["breakdown"][k] for k in ("mamba_gib", "other_caches_gib")]
                    wanted = sum(p for p in parts if p is not None) if any(parts) else None
                if wanted is None:
                    assert value is None, (name, key, value)  # unknown stays unknown
                else:
                    assert value == pytest.approx(wanted, abs=ROUNDING_GIB), (name, key)
        # Worst headroom: what the host's --check calls headroom (least free on a server GPU).
        free = [g["free_gib"] for g in own["gpus"] if g["ranks"]]
        assert host["worst_headroom_gib"] == pytest.approx(min(free), abs=ROUNDING_GIB)

    # The exporters each host has, and what DCGM, SGLang and node exporter add.
    assert hosts["e2e-n0"]["exporters"] == ["kvtop", "dcgm", "sglang", "node"]
    assert hosts["e2e-n1"]["exporters"] == ["kvtop", "dcgm"]
    assert hosts["e2e-solo"]["exporters"] == ["kvtop"]
    assert hosts["e2e-n0"]["gpus"][0]["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert hosts["e2e-n0"]["kv"]["used_tokens"] == 61_000
    assert hosts["e2e-n0"]["kv"]["host_ram_total_gb"] == pytest.approx(1024 * GIB / 1e9, abs=0.01)
    assert hosts["e2e-solo"]["kv"]["used_tokens"] is None  # no SGLang target: unknown, not 0


async def test_a_host_without_dcgm_is_complete(prometheus, fleet_of_exporters) -> None:
    """e2e-solo runs kvtop alone: its GPUs' name, temperature, power (and limit), utilisation
    and memory in use come from kvtop's own NVML families, each what that host's `kvtop --once
    --json` says. The nodes with DCGM keep DCGM's readings (64 °C, 412.3 W, 87 % on GPU 0 of
    DCGM's fixture, where the fake NVML says 50 °C, 400 W, 60 %), kvtop adding the limit."""
    await read_until_complete(prometheus.url)
    fleet = kvtop_fleet_json(prometheus.url)
    hosts = {h["host"]: h for d in fleet["deployments"] for h in d["hosts"]}
    own = fleet_of_exporters["e2e-solo"]
    for shown, read in zip(hosts["e2e-solo"]["gpus"], own["gpus"], strict=True):
        assert shown["name"] == read["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert shown["temperature_c"] == read["temperature_c"] == 50 + read["index"]
        assert shown["power_w"] == read["power_w"] == 400 + read["index"]
        assert shown["power_limit_w"] == read["power_limit_w"] == 700
        assert shown["utilization_pct"] == read["utilization_pct"] == 60 + read["index"]
        in_use = read["total_gib"] - read["free_gib"]
        assert shown["used_gib"] == pytest.approx(in_use, abs=ROUNDING_GIB)
    gpu0 = hosts["e2e-n0"]["gpus"][0]
    assert (gpu0["temperature_c"], gpu0["power_w"], gpu0["utilization_pct"]) == (64, 412.3, 87)
    assert gpu0["power_limit_w"] == 700


def host_row(screen: str, host: str) -> bool:
    """The host's row with its state and the node it is: `  e2e-n1   ready   n1 …`."""
    return any(re.search(rf"\b{host}\s+ready\b", line) for line in screen.splitlines())


async def test_the_fleet_view_in_a_terminal(prometheus, fleet_of_exporters, tmux, tmp_path) -> None:
    """The installed command in tmux at 120×40: the fleet, Enter into node 1's GPUs (TP8-TP15,
    from Prometheus), Escape back, q exits 0."""
    await read_until_complete(prometheus.url)
    status = tmp_path / "status"
    argv = kvtop_command("--prometheus", prometheus.url, "--selector", SELECTOR, "--interval", "1")
    script = f"env -u NO_COLOR -u COLUMNS -u LINES {shlex.join(argv)}; echo $? > {status}"
    tmux.new_session("fleet", f"sh -c {shlex.quote(script)}", width=120, height=40)
    screen = tmux.wait_for(
        "fleet",
        "the three hosts ready, the two nodes under one TP16 deployment",
        lambda s: all(host_row(s, h) for h in HOSTS) and "TP16" in s,
    )
    lines = screen.splitlines()
    pair = next(i for i, line in enumerate(lines) if "TP16" in line)
    assert "e2e-n0" in lines[pair + 1] and "e2e-n1" in lines[pair + 2], screen

    # The selection starts on the first row; move to node 1 of the pair and open it.
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("▶"))
    for _ in range(pair + 2 - first):
        tmux.send("fleet", "Down")
    tmux.wait_for("fleet", "node 1 selected", lambda s: re.search(r"▶\s+e2e-n1\b", s) is not None)
    tmux.send("fleet", "Enter")
    tmux.wait_for(
        "fleet",
        "node 1's eight GPU rows, ranks TP8-TP15",
        lambda s: all(re.search(rf"^\S?\s*{i}\s+TP{i + 8}\b", s, re.M) for i in range(8)),
    )
    tmux.send("fleet", "Escape")
    tmux.wait_for("fleet", "the fleet again", lambda s: all(host_row(s, h) for h in HOSTS))
    tmux.send("fleet", "q")
    end = time.monotonic() + 20
    while time.monotonic() < end and not (status.exists() and status.read_text().strip()):
        time.sleep(0.2)
    assert status.read_text().strip() == "0", tmux.capture("fleet")
    assert "Traceback" not in tmux.capture("fleet")


async def test_the_fleet_view_leaves_cleanly_on_sigterm(
    prometheus, fleet_of_exporters, tmux, tmp_path
) -> None:
    """systemd (or kill) sends SIGTERM: the fleet view leaves with status 0, as the live view
    does (tui/kvtop/live/base.py), not killed by the signal (143)."""
    await read_until_complete(prometheus.url)
    pid_file, status = tmp_path / "pid", tmp_path / "status"
    argv = kvtop_command("--prometheus", prometheus.url, "--selector", SELECTOR)
    # The shell waits for kvtop (its child, in the foreground) and writes its exit status.
    core = f"env -u NO_COLOR -u COLUMNS -u LINES {shlex.join(argv)}"
    script = f"echo $$ > {pid_file}; {core}; echo $? > {status}"
    tmux.new_session("term", f"sh -c {shlex.quote(script)}", width=120, height=40)
    tmux.wait_for("term", "the three hosts", lambda s: all(host_row(s, h) for h in HOSTS))
    shell = int(pid_file.read_text())
    (kvtop,) = [
        p for p in descendants(shell) if b"kvtop" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    os.kill(kvtop, signal.SIGTERM)
    end = time.monotonic() + 20
    while time.monotonic() < end and not (status.exists() and status.read_text().strip()):
        time.sleep(0.1)
    assert status.read_text().strip() == "0", "killed by SIGTERM (143) instead of leaving"
