"""One fleet host as the single-host overview's Snapshot (tui/kvtop/fleet/host_snapshot.py): what
each number becomes, and what stays unknown. Fleets built directly
(tests/support/fleet_examples.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.fleet.host_snapshot import fleet_snapshot
from kvtop.fleet.model import FleetGpu, FleetKv
from kvtop.live.widgets.gpu_rows import bar_segments
from kvtop.model.kv_usage import kv_now
from kvtop.model.snapshot import SourceState
from kvtop.model.status.gpu_alerts import gpu_alerts
from tests.support.fleet_examples import KIMI_SEGMENTS_GIB, TAKEN_AT, kimi_gpu, kimi_host, qwen_host


def test_kvtop_segments_become_the_bar() -> None:
    snapshot = fleet_snapshot(kimi_host(0), TAKEN_AT)
    assert len(snapshot.gpus) == 8
    gpu = snapshot.gpus[0]
    assert gpu.ranks == ("TP0",)
    assert gpu.sample.total_gib == pytest.approx(95.5928, abs=1e-4)  # 97,887 MiB
    assert gpu.sample.free_gib == pytest.approx(7.4)
    memory = gpu.memory
    assert memory.weights_gib == pytest.approx(KIMI_SEGMENTS_GIB["weights"])
    assert memory.kv_cache_gib == pytest.approx(KIMI_SEGMENTS_GIB["kv_cache"])
    assert memory.graphs_gib == pytest.approx(KIMI_SEGMENTS_GIB["cuda_graphs"])
    assert memory.draft_weights_gib == pytest.approx(KIMI_SEGMENTS_GIB["draft_weights"])
    assert memory.reserve_gib == pytest.approx(5.72)
    assert memory.reserve_starts_at_gib == pytest.approx(95.5928 - 5.72, abs=1e-3)
    names = [name for name, _ in bar_segments(gpu)]
    assert names[:3] == ["baseline", "weights", "KV cache"]
    assert names[-1] == "free"


def test_a_dcgm_only_host_draws_used_and_free() -> None:
    """No kvtop exporter: only in use and free, like a GPU with no log."""
    snapshot = fleet_snapshot(qwen_host(), TAKEN_AT)
    gpu = snapshot.gpus[0]
    segments = dict(bar_segments(gpu))
    assert list(segments) == ["in use", "free"]
    assert segments["in use"] == pytest.approx((89_690 + 604) / 1024, abs=1e-3)
    assert segments["free"] == pytest.approx(7_593 / 1024, abs=1e-3)
    assert gpu.memory.weights_gib is None and gpu.memory.reserve_gib is None
    assert gpu.ranks == ()
    assert any("no kvtop exporter" in note for note in snapshot.notes)


def test_the_kv_numbers_feed_the_kv_panel() -> None:
    usage = kv_now(fleet_snapshot(kimi_host(0), TAKEN_AT))
    assert usage.source_kind == "metrics"
    # From the exact counts (48,211 / 159,277), which agree with the gauge's 0.3027.
    assert usage.usage_pct == pytest.approx(100 * 48_211 / 159_277)
    assert (usage.used_tokens, usage.max_tokens) == (48_211, 159_277)
    assert usage.load.running_requests == 16 and usage.load.queued_requests == 0
    assert usage.load.gen_throughput == pytest.approx(674.2)
    # Node 1 of the TP16 has no SGLang metrics: no numbers, not zeros.
    assert fleet_snapshot(kimi_host(1), TAKEN_AT).metrics is None


def test_host_ram_in_decimal_gb() -> None:
    host = fleet_snapshot(kimi_host(0), TAKEN_AT).host
    assert host is not None
    assert (host.total_gb, host.available_gb, host.used_gb) == (1081.0, 668.0, 413.0)
    assert fleet_snapshot(qwen_host(), TAKEN_AT).host is None


def test_sources_say_which_exporters_prometheus_scrapes() -> None:
    snapshot = fleet_snapshot(kimi_host(1), TAKEN_AT)
    assert [(s.name, s.state) for s in snapshot.sources] == [
        ("kvtop", SourceState.OK),
        ("dcgm", SourceState.OK),
        ("node", SourceState.OK),
    ]
    targets = tuple(
        replace(t, up=False, error="connection refused") if t.exporter == "dcgm" else t
        for t in kimi_host(1).targets
    )
    down = fleet_snapshot(kimi_host(1, targets=targets), TAKEN_AT).sources[1]
    assert (down.name, down.state) == ("dcgm", SourceState.DEGRADED)
    assert down.detail == "gpu-node-02:9400: connection refused"


def test_a_gpu_without_memory_numbers_is_unreadable_not_zero() -> None:
    host = kimi_host(0, gpus=(FleetGpu(index=3, temperature_c=60.0),), kv=FleetKv())
    gpu = fleet_snapshot(host, TAKEN_AT).gpus[0]
    assert gpu.sample.status == "error" and gpu.lost
    assert not gpu.memory.known
    assert "Prometheus has no memory numbers" in gpu.sample.field_errors[0][1]


def test_gpus_in_index_order_and_the_taken_at_kept() -> None:
    host = kimi_host(0)
    shuffled = replace(host, gpus=tuple(reversed(host.gpus)))
    snapshot = fleet_snapshot(shuffled, TAKEN_AT)
    assert [g.sample.index for g in snapshot.gpus] == list(range(8))
    assert snapshot.taken_at == TAKEN_AT
    assert snapshot.analysis.lines_seen == 0  # no log: nothing claimed from one


def test_a_ready_hosts_gpu_rows_judge_free_memory_after_startup() -> None:
    """The overview's row glyph: GPU 5 of a ready host under the 5 GiB safe margin is a
    warning on its free cell, as the fleet's headroom alert says; a starting host's is not."""
    gpus = tuple(kimi_gpu(i, 1, headroom_gib=3.2 if i == 5 else 7.4) for i in range(8))
    ready = gpu_alerts(fleet_snapshot(kimi_host(1, gpus=gpus), TAKEN_AT))
    assert ready[5].free == "warning" and ready[4].free == "ok"
    starting = gpu_alerts(fleet_snapshot(kimi_host(1, gpus=gpus, state="starting"), TAKEN_AT))
    assert starting[5].free == "ok"


def test_a_lost_gpu_is_drawn_lost_in_the_drill_down() -> None:
    """The host's overview shows a GPU kvtop lost as the single-host view does: no numbers,
    status lost, a critical alert on its row."""
    host = kimi_host(0)
    gpus = list(host.gpus)
    gpus[2] = replace(gpus[2], lost=True, segments_bytes={}, free_bytes=None)
    snapshot = fleet_snapshot(replace(host, gpus=tuple(gpus)), TAKEN_AT)
    view = snapshot.gpus[2]
    assert view.lost and view.sample.status == "lost"
    assert not view.memory.known
    assert not snapshot.gpus[1].lost
