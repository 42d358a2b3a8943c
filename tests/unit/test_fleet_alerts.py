"""The fleet's alerts (tui/kvtop/fleet/alerts.py): the thresholds, kinds and levels of the
single-host rule (docs/alerts.md), judged on a fleet as Prometheus gives it. Fleets are built
directly (tests/support/fleet_examples.py: known numbers, no Prometheus to start)."""

from __future__ import annotations

from dataclasses import replace

from kvtop.fleet.alerts import deployment_alerts, fleet_alerts, host_alerts
from kvtop.fleet.model import AMD, DCGM, KVTOP, SGLANG, FleetKv, TargetState
from kvtop.model.status.levels import Level, Thresholds
from tests.support.fleet_examples import (
    kimi_deployment,
    kimi_gpu,
    kimi_host,
    qwen_host,
    story_fleet,
)


def kinds(found) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(a.level, a.kind) for a in found]


def test_a_healthy_fleet_has_no_alert() -> None:
    """The story's fleet: node 1 of the TP16 has no SGLang /metrics (SGLang serves it on node
    0 only), which is no fault; the DCGM+SGLang host has no kvtop, which is no fault either."""
    found = fleet_alerts(story_fleet())
    assert found.everything() == ()
    assert found.level == "ok"


def test_kv_usage_against_the_thresholds() -> None:
    warn = kimi_host(0, kv=FleetKv(token_usage=0.879, used_tokens=140_000, pool_tokens=159_277))
    (alert,) = host_alerts(warn)
    assert (alert.level, alert.kind) == (Level.WARNING, "kv_usage")
    assert alert.text == (
        "gpu-node-01: KV cache 87.9% full (140,000 of 159,277 tokens, warning from 85%)"
    )
    crit = kimi_host(0, kv=FleetKv(token_usage=0.96))
    assert kinds(host_alerts(crit)) == [(Level.CRITICAL, "kv_usage")]
    # The user's thresholds (the config file's) move the bands.
    assert host_alerts(warn, Thresholds(kv_usage_warning_pct=90.0)) == ()
    # 84.96 % under an 85 % threshold: no alert (and never written as 85.0%).
    assert host_alerts(kimi_host(0, kv=FleetKv(token_usage=0.8496))) == ()


def test_worst_headroom_under_the_safe_margin_names_its_gpu() -> None:
    gpus = tuple(kimi_gpu(i, 1, headroom_gib=3.2 if i == 5 else 7.4) for i in range(8))
    (alert,) = host_alerts(kimi_host(1, gpus=gpus))
    assert (alert.level, alert.kind, alert.subject) == (
        Level.WARNING,
        "headroom",
        "gpu-node-02 GPU 5",
    )
    assert "3.20 GiB free after startup, under the 5 GiB safe margin" in alert.text
    assert host_alerts(kimi_host(1, gpus=gpus), Thresholds(safe_margin_gib=3.0)) == ()


def test_temperature_bands() -> None:
    gpus = (kimi_gpu(0, 0, temp=84), kimi_gpu(1, 0, temp=91), kimi_gpu(2, 0))
    found = host_alerts(kimi_host(0, gpus=gpus))
    assert kinds(found) == [(Level.CRITICAL, "temperature"), (Level.WARNING, "temperature")]
    assert found[0].text == "gpu-node-01 GPU 1 at 91 °C (critical from 90 °C)"


def test_failed_and_stopped_servers_are_critical() -> None:
    assert kinds(host_alerts(kimi_host(0, state="failed"))) == [(Level.CRITICAL, "startup_failed")]
    assert kinds(host_alerts(kimi_host(0, state="stopped"))) == [(Level.CRITICAL, "server_stopped")]


def test_a_long_startup_is_a_warning_when_the_phases_tell() -> None:
    slow = kimi_host(0, state="starting", phases=(("TP0", "target", "load weights", 1900.0),))
    found = host_alerts(slow)
    assert kinds(found) == [(Level.WARNING, "startup_slow")]
    assert "after at least 31m40s (warning after 30m00s)" in found[0].text
    quick = replace(slow, phases=(("TP0", "target", "load weights", 200.0),))
    assert host_alerts(quick) == ()
    assert host_alerts(replace(slow, phases=())) == ()  # unknown: no alert


def test_a_target_down_says_which_exporter_and_prometheus_error() -> None:
    error = 'Get "http://gpu-node-01:9877/metrics": dial tcp: connect: connection refused'
    targets = tuple(
        replace(t, up=False, error=error) if t.exporter in (KVTOP, DCGM) else t
        for t in kimi_host(0).targets
    )
    found = host_alerts(kimi_host(0, targets=targets))
    # kvtop's exporter down (a restart of it) is a warning, as documented: the server may be fine.
    assert kinds(found) == [(Level.WARNING, "source_down"), (Level.WARNING, "source_down")]
    assert found[0].text == (
        f"gpu-node-01: kvtop exporter at gpu-node-01:9877 is down (Prometheus: {error})"
    )
    assert found[1].text.startswith("gpu-node-01: DCGM exporter at gpu-node-01:9400 is down")


def test_sglang_down_is_critical_server_down() -> None:
    host = qwen_host(
        targets=(
            TargetState(DCGM, "gpu-node-03:9400", True),
            TargetState(SGLANG, "gpu-node-03:30000", False, 4.0, "context deadline exceeded"),
        )
    )
    (alert,) = host_alerts(host)
    assert (alert.level, alert.kind) == (Level.CRITICAL, "server_down")
    assert "SGLang server (/metrics) at gpu-node-03:30000 is down" in alert.text
    assert "context deadline exceeded" in alert.text


def test_a_host_no_longer_scraped_is_stale() -> None:
    (alert,) = host_alerts(kimi_host(0, last_seen_age_s=185.0))
    assert (alert.level, alert.kind) == (Level.WARNING, "source_down")
    assert "last seen 3m05s ago" in alert.text
    # Its kvtop target down already says so: one alert, not two.
    targets = tuple(
        replace(t, up=False) if t.exporter == KVTOP else t for t in kimi_host(0).targets
    )
    found = host_alerts(kimi_host(0, last_seen_age_s=185.0, targets=targets))
    assert kinds(found) == [(Level.WARNING, "source_down")]


def test_sglang_answering_404_is_a_warning_not_a_server_down() -> None:
    """SGLang without --enable-metrics answers /metrics with 404: it is up."""
    host = qwen_host(
        targets=(
            TargetState(DCGM, "gpu-node-03:9400", True),
            TargetState(
                SGLANG, "gpu-node-03:30000", False, 4.0, "server returned HTTP status 404 Not Found"
            ),
        )
    )
    (alert,) = host_alerts(host)
    assert (alert.level, alert.kind) == (Level.WARNING, "source_down")
    assert "without --enable-metrics" in alert.text


def test_a_host_is_judged_by_its_kvtop_verdict() -> None:
    """kvtop there publishes its verdict: its alerts are the host's (its thresholds, its
    judgement), the fleet adds only what Prometheus alone can tell."""
    hot = kimi_host(0, kv=FleetKv(token_usage=0.96))  # the fleet's own rule: critical
    calm = replace(hot, verdict="warning", kvtop_alerts=(("queue", "warning", "queue"),))
    (alert,) = host_alerts(calm)
    assert (alert.level, alert.kind, alert.subject) == (Level.WARNING, "queue", "gpu-node-01 queue")
    assert alert.text == "gpu-node-01 queue: queue (warning; kvtop --once on gpu-node-01 says why)"
    lost = replace(calm, kvtop_alerts=(("gpu_lost", "critical", "GPU 3"),), verdict="critical")
    assert kinds(host_alerts(lost)) == [(Level.CRITICAL, "gpu_lost")]
    nothing = replace(calm, kvtop_alerts=(), verdict="unknown")
    assert kinds(host_alerts(nothing)) == [(Level.WARNING, "source_down")]
    assert kinds(host_alerts(replace(calm, kvtop_alerts=(), verdict="ok"))) == []


def test_kvtop_sources_down_and_mismatches_are_warnings() -> None:
    host = kimi_host(
        0,
        sources={"gpus": (False, 12.0), "log": (True, 1.0), "metrics": (True, 1.0)},
        mismatches=("model", "tp"),
    )
    found = host_alerts(host)
    assert kinds(found) == [(Level.WARNING, "mismatch"), (Level.WARNING, "source_down")]
    assert found[0].text == (
        "gpu-node-01: kvtop's sources disagree about model, tp (run kvtop there to see)"
    )
    assert found[1].text == "gpu-node-01: kvtop cannot read its gpus source, last read 12s ago"
    # /metrics is node 0's only: kvtop on node 1 not reading it is no alert.
    assert host_alerts(kimi_host(1, sources={"metrics": (False, None)})) == ()
    assert kinds(host_alerts(kimi_host(0, sources={"metrics": (False, None)}))) == [
        (Level.WARNING, "source_down")
    ]


def test_a_multi_node_deployment_missing_a_node() -> None:
    lonely = kimi_deployment(kimi_host(0))
    (alert,) = deployment_alerts(lonely)
    assert (alert.level, alert.kind) == (Level.WARNING, "source_down")
    assert "1 of 2 nodes seen (node_rank 1 missing" in alert.text
    assert deployment_alerts(kimi_deployment()) == ()


def test_levels_roll_up_to_the_deployment_and_the_fleet() -> None:
    hot = kimi_host(1, gpus=(kimi_gpu(0, 1, temp=95),))
    fleet = story_fleet(deployments=(kimi_deployment(kimi_host(0), hot),))
    found = fleet_alerts(fleet)
    deployment = fleet.deployments[0]
    assert found.host_level(deployment, deployment.hosts[0]) == "ok"
    assert found.host_level(deployment, hot) == Level.CRITICAL
    assert found.deployment_level(deployment) == Level.CRITICAL
    assert found.level == Level.CRITICAL


def test_unknown_numbers_raise_nothing() -> None:
    """A host with only DCGM (no state, no headroom, no KV numbers) has nothing to alert on."""
    bare = qwen_host(
        kv=FleetKv(), gpus=tuple(replace(g, temperature_c=None) for g in qwen_host().gpus)
    )
    assert host_alerts(bare) == ()


def test_a_lost_gpu_is_critical_and_named() -> None:
    host = kimi_host(0)
    gpus = list(host.gpus)
    gpus[3] = replace(gpus[3], lost=True, segments_bytes={}, free_bytes=None)
    found = host_alerts(replace(host, gpus=tuple(gpus)))
    assert ("critical", "gpu_lost") in kinds(found)
    (lost,) = [a for a in found if a.kind == "gpu_lost"]
    assert lost.subject == "gpu-node-01 GPU 3"
    assert "is lost" in lost.text and "nvidia-smi" in lost.text


def test_headroom_from_the_log_when_no_gpu_is_read() -> None:
    """No GPU reading on the host: the log's free-after-startup still warns, naming its rank."""
    host = replace(kimi_host(0), gpus=(), log_headroom_bytes=2.5 * 2**30, log_headroom_rank="TP0")
    (alert,) = [a for a in host_alerts(host) if a.kind == "headroom"]
    assert alert.level == Level.WARNING
    assert "TP0 (the log's reference rank): 2.50 GiB free after startup" in alert.text


def test_amds_exporter_down_is_named_in_the_operators_words() -> None:
    targets = (TargetState(AMD, "mi300-01:5000", False, error="connection refused"),)
    (alert,) = host_alerts(kimi_host(0, targets=targets))
    assert (alert.level, alert.kind) == (Level.WARNING, "source_down")
    assert alert.text == (
        "gpu-node-01: AMD device metrics exporter at mi300-01:5000 is down "
        "(Prometheus: connection refused)"
    )
