"""`--once --json` for the fleet (schema kvtop-fleet/1, tui/kvtop/fleet/json_report.py): every field
of docs/fleet.md, GiB to 4 digits, null never 0 for what Prometheus did not give. Fleets are
built directly (tests/support/fleet_examples.py: known numbers, no Prometheus to start)."""

from __future__ import annotations

import json
from dataclasses import replace

from kvtop.fleet.json_report import fleet_json
from kvtop.fleet.model import FleetKv
from kvtop.report.json_report import snapshot_json
from tests.support.fleet_examples import URL, down_fleet, kimi_deployment, kimi_host, story_fleet
from tests.support.tui_support import demo_snapshot

TOP = {"schema", "taken_at", "prometheus", "level", "deployments"}
PROMETHEUS = {"url", "version", "selector", "problem", "warnings"}
DEPLOYMENT = {
    "key", "model", "tp", "dp", "pp", "nnodes", "disaggregation_mode", "state", "restarts",
    "worst_headroom_gib", "level", "alerts", "hosts",
}  # fmt: skip
HOST = {
    "host", "hostname", "node_rank", "state", "model", "sglang_version", "tp", "dp", "pp",
    "nnodes", "disaggregation_mode", "dist_init_addr", "restarts", "exporters", "targets",
    "sources", "mismatches", "kvtop_verdict", "phases", "last_seen_age_s", "worst_headroom_gib", "level",
    "alerts", "gpus", "kv",
}  # fmt: skip
GPU = {
    "index", "uuid", "name", "status", "total_gib", "used_gib", "free_gib", "reserve_gib", "headroom_gib",
    "utilization_pct", "temperature_c", "power_w", "power_limit_w", "ranks", "readings_from", "breakdown",
}  # fmt: skip
KV = {
    "token_usage", "used_tokens", "pool_tokens", "predicted_tokens", "running_reqs",
    "queued_reqs", "gen_throughput", "host_ram_total_gb", "host_ram_available_gb",
}  # fmt: skip


def test_every_field_of_the_schema() -> None:
    data = json.loads(json.dumps(fleet_json(story_fleet())))  # plain JSON, nothing else
    assert set(data) == TOP
    assert data["schema"] == "kvtop-fleet/1"
    assert set(data["prometheus"]) == PROMETHEUS
    assert data["prometheus"]["url"] == URL and data["prometheus"]["problem"] is None
    for deployment in data["deployments"]:
        assert set(deployment) == DEPLOYMENT
        for host in deployment["hosts"]:
            assert set(host) == HOST
            assert set(host["kv"]) == KV
            for gpu in host["gpus"]:
                assert set(gpu) == GPU


def test_the_two_node_deployment_is_one_with_both_hosts() -> None:
    (kimi, qwen) = fleet_json(story_fleet())["deployments"]
    assert (kimi["model"], kimi["tp"], kimi["nnodes"], kimi["state"]) == (
        "moonshotai/Kimi-K2.5", 16, 2, "ready",
    )  # fmt: skip
    assert [(h["host"], h["node_rank"]) for h in kimi["hosts"]] == [
        ("gpu-node-01", 0),
        ("gpu-node-02", 1),
    ]
    assert kimi["worst_headroom_gib"] == 7.4 and kimi["level"] == "ok"
    assert [len(h["gpus"]) for h in kimi["hosts"]] == [8, 8]
    assert kimi["hosts"][1]["gpus"][0]["ranks"] == ["TP8"]
    assert qwen["hosts"][0]["exporters"] == ["dcgm", "sglang"]


def test_gib_to_four_digits_and_the_breakdown_keys_of_kvtop_1() -> None:
    gpu = fleet_json(story_fleet())["deployments"][0]["hosts"][0]["gpus"][0]
    assert gpu["total_gib"] == 95.5928  # 97,887 MiB
    assert gpu["free_gib"] == 7.4 and gpu["headroom_gib"] == 7.4
    assert gpu["used_gib"] == round(95.5928 - 7.4, 4)
    breakdown = gpu["breakdown"]
    assert breakdown["weights_gib"] == 61.2 and breakdown["graphs_gib"] == 1.52
    assert breakdown["other_processes_gib"] is None  # not exported: unknown, not 0
    single_host = set(snapshot_json(demo_snapshot())["gpus"][0]["breakdown"])
    assert set(breakdown) <= single_host


def test_unknown_is_null_never_zero() -> None:
    """The DCGM+SGLang-only host: no state, no segments, no headroom, no restarts."""
    host = fleet_json(story_fleet())["deployments"][1]["hosts"][0]
    assert host["state"] is None and host["restarts"] is None and host["node_rank"] is None
    assert host["worst_headroom_gib"] is None
    gpu = host["gpus"][0]
    assert gpu["headroom_gib"] is None and gpu["reserve_gib"] is None
    assert gpu["total_gib"] == 95.5928 and gpu["used_gib"] == 88.1777
    assert all(v is None for k, v in gpu["breakdown"].items() if k != "total_gib")
    assert host["kv"]["predicted_tokens"] is None and host["kv"]["host_ram_total_gb"] is None
    assert host["kv"]["token_usage"] == 0.512 and host["kv"]["queued_reqs"] == 2
    node1 = fleet_json(story_fleet())["deployments"][0]["hosts"][1]
    assert node1["kv"]["token_usage"] is None and node1["kv"]["host_ram_total_gb"] == 1081.0


def test_alerts_with_level_kind_subject_and_text() -> None:
    hot = kimi_host(0, kv=FleetKv(token_usage=0.97, used_tokens=154_500, pool_tokens=159_277))
    data = fleet_json(story_fleet(deployments=(kimi_deployment(hot, kimi_host(1)),)))
    (kimi,) = data["deployments"]
    assert data["level"] == kimi["level"] == "critical"
    assert kimi["alerts"] == []  # the deployment's own; the host lists its own
    (alert,) = kimi["hosts"][0]["alerts"]
    assert alert == {
        "level": "critical",
        "kind": "kv_usage",
        "subject": "gpu-node-01",
        "text": "gpu-node-01: KV cache 97.0% full (154,500 of 159,277 tokens, critical from 95%)",
    }
    assert kimi["hosts"][0]["level"] == "critical" and kimi["hosts"][1]["level"] == "ok"


def test_prometheus_down_is_a_sentence_and_no_deployment() -> None:
    data = fleet_json(down_fleet())
    assert data["deployments"] == []
    assert "connection refused" in data["prometheus"]["problem"]
    assert data["level"] == "unknown"  # nothing judged: a script must not read "ok"
    warned = fleet_json(replace(story_fleet(), warnings=("partial data",), selector='job="x"'))
    assert warned["prometheus"]["warnings"] == ["partial data"]
    assert warned["prometheus"]["selector"] == 'job="x"'
