"""`kvtop --prometheus URL --check`: the fleet judged as a monitoring plugin says it, with the
output contract of tui/kvtop/report/check.py (docs/alerts.md): one line, exit 0/1/2/3, performance
data after `|`. The judgement runs on fleets built directly (tests/support/fleet_examples.py: known
numbers, no Prometheus to start); the command line's own failures run through the real `kvtop`
entry point (kvtop.cli.main)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from kvtop.cli import main
from kvtop.fleet.check import fleet_check
from kvtop.fleet.model import FleetKv
from kvtop.model.status.levels import Thresholds
from tests.support.fleet_examples import (
    down_fleet,
    kimi_deployment,
    kimi_gpu,
    kimi_host,
    qwen_deployment,
    story_fleet,
)

LINE = re.compile(r"^KVTOP (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| [^\n]+)?$")
PERF_ITEM = re.compile(r"^('[^']+'|[a-z_]+)=-?[0-9.]+(%|GB)?;[0-9.:]*;[0-9.]*;[0-9.]*;[0-9.]*$")


def perf(line: str) -> dict[str, str]:
    data = line.split(" | ", 1)[1]
    items = data.split(" ")
    assert all(PERF_ITEM.match(i) for i in items), items
    return dict(i.split("=", 1) for i in items)


def test_ok_says_what_was_judged() -> None:
    result = fleet_check(story_fleet())
    assert result.exit_code == 0
    assert LINE.match(result.line)
    assert result.line.startswith("KVTOP OK - 2 deployments on 3 hosts, fine (1 ready) | ")
    data = perf(result.line)
    assert data["deployments"] == "2;;;0;" and data["hosts"] == "3;;;0;"
    assert data["hosts_down"] == "0;;;0;"
    assert data["'moonshotai/Kimi-K2.5@10.0.0.1:5000_kv_usage'"] == "30.27%;85;95;0;100"
    assert data["'moonshotai/Kimi-K2.5@10.0.0.1:5000_headroom'"] == "7.40GB;5:;;0;"
    assert data["'Qwen/Qwen3-32B@gpu-node-03_kv_usage'"] == "51.20%;85;95;0;100"


def test_warning_names_the_alert() -> None:
    gpus = tuple(kimi_gpu(i, 1, headroom_gib=3.2 if i == 2 else 7.4) for i in range(8))
    fleet = story_fleet(deployments=(kimi_deployment(kimi_host(0), kimi_host(1, gpus=gpus)),))
    result = fleet_check(fleet)
    assert result.exit_code == 1
    assert result.line.startswith(
        "KVTOP WARNING - gpu-node-02 GPU 2: 3.20 GiB free after startup, under the 5 GiB safe "
        "margin: large prefills may run out of memory | "
    )
    assert perf(result.line)["warning"] == "1;;;0;"


def test_critical_first_at_most_three_then_a_count() -> None:
    hosts = [
        kimi_host(0, state="failed"),
        kimi_host(1, gpus=(kimi_gpu(0, 1, temp=91),), kv=FleetKv(token_usage=0.88)),
    ]
    qwen = qwen_deployment()
    sick = replace(
        qwen.hosts[0], targets=tuple(replace(t, up=False) for t in qwen.hosts[0].targets)
    )
    fleet = story_fleet(deployments=(kimi_deployment(*hosts), replace(qwen, hosts=(sick,))))
    result = fleet_check(fleet)
    assert result.exit_code == 2
    words = result.line.split(" | ")[0]
    assert words.startswith("KVTOP CRITICAL - gpu-node-01: the server failed (kvtop); ")
    assert words.endswith("; and 2 more")  # KV 88 % and DCGM down: warnings
    assert perf(result.line)["hosts_down"] == "1;;;0;"


def test_the_thresholds_are_the_users() -> None:
    fleet = story_fleet(deployments=(kimi_deployment(kimi_host(0, kv=FleetKv(token_usage=0.5))),))
    assert fleet_check(fleet, Thresholds(kv_usage_warning_pct=40.0)).exit_code == 1
    # The one-node-of-two deployment warns even without thresholds crossed.
    assert fleet_check(fleet).exit_code == 1


def test_prometheus_down_is_unknown_with_the_sentence() -> None:
    result = fleet_check(down_fleet())
    assert result.exit_code == 3
    assert result.line == (
        "KVTOP UNKNOWN - Prometheus: nothing listens on http://127.0.0.1:9090 (connection "
        "refused): is Prometheus running, and is --prometheus right?"
    )


def test_no_host_is_unknown() -> None:
    result = fleet_check(story_fleet(deployments=(), selector='job="nope"'))
    assert result.exit_code == 3
    assert 'has no kvtop, DCGM or SGLang host matching job="nope"' in result.line


def test_no_bar_before_the_performance_data() -> None:
    host = kimi_host(0, state="failed", host="gpu|node")
    result = fleet_check(story_fleet(deployments=(kimi_deployment(host, kimi_host(1)),)))
    assert result.line.count(" | ") == 1 and "gpu/node" in result.line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--prometheus", "ftp://prom:9090"], "http:// or https://"),
        (["--prometheus", "http://prom:9090", "--once"], "leave out --once and --json"),
        (["--prometheus", "http://prom:9090", "--unit", "sglang"], "read one host"),
        (["--selector", 'job="x"'], "--selector goes with --prometheus URL"),
        (["--prometheus", "http://prom:9090", "--export"], "give one or the other"),
        (["--prometheus"], "the command line is not valid"),
    ],
)
def test_check_failures_of_its_own_are_unknown(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", *argv]) == 3
    out = capsys.readouterr().out
    assert out.startswith("KVTOP UNKNOWN - ") and says in out
