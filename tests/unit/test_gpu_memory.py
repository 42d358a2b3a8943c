"""The per-GPU picture: NVML joined with the log, and ranks placed on GPUs."""

from __future__ import annotations

import pytest

from kvtop.model.memory.gpu_memory import (
    choose_rank_mapping,
    parse_visible_devices,
    ranks_by_order,
    reconcile,
)
from kvtop.model.memory.rank_memory import MemoryBreakdown

TP0 = MemoryBreakdown(
    rank="TP0",
    init_dist_gib=1.25,
    pre_load_free_gib=93.17,
    weights_gib=71.57,
    kv_cache_gib=10.42,
    draft_weights_gib=0.95,
    draft_kv_gib=0.60,
    graphs_gib=2.16,
    startup_other_gib=0.07,
    free_after_startup_gib=7.40,
    free_after_startup_source="summary",
    reserve_gib=93.17 * 0.12,
    free_after_pool_gib=11.18,
)


def test_segments_add_up_to_the_card() -> None:
    memory = reconcile(95.59, 7.30, TP0)
    assert memory.baseline_gib == pytest.approx(95.59 - 93.17)
    assert sum(v for _, v in memory.segments()) == pytest.approx(95.59)
    # runtime: what NVML sees in use beyond everything the log itemises
    assert memory.runtime_gib == pytest.approx(95.59 - 7.30 - (95.59 - 93.17) - 85.70)
    assert memory.reserve_starts_at_gib == pytest.approx(95.59 - 11.1804)


def test_without_a_log_only_used_and_free() -> None:
    memory = reconcile(80.0, 30.0, None)
    assert [name for name, _ in memory.segments()] == ["runtime", "free"]
    assert memory.runtime_gib == 50.0


def test_more_itemised_than_in_use_is_unknown_never_negative() -> None:
    memory = reconcile(95.59, 40.0, TP0)  # the server has exited but the log is still shown
    assert memory.runtime_gib is None
    assert memory.log_excess_gib == pytest.approx(32.53, abs=0.01)
    assert all(value >= 0 for _, value in memory.segments())


def test_order_mapping_with_base_gpu_id_and_visible_devices() -> None:
    ranks = ["TP0", "TP1", "TP2", "TP3"]
    assert ranks_by_order(range(8), ranks, base_gpu_id=4) == {
        4: ("TP0",),
        5: ("TP1",),
        6: ("TP2",),
        7: ("TP3",),
    }
    assert ranks_by_order(range(8), ranks, 0, [6, 7, 2, 3]) == {
        6: ("TP0",),
        7: ("TP1",),
        2: ("TP2",),
        3: ("TP3",),
    }
    assert ranks_by_order(range(8), ranks, 2, [6, 7, 2]) == {2: ("TP0",)}


def test_visible_devices_by_index_or_uuid() -> None:
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]
    assert parse_visible_devices("2,0", uuids) == [2, 0]
    assert parse_visible_devices("GPU-cccc, GPU-aaaa-1", uuids) == [2, 0]
    assert parse_visible_devices("MIG-1234", uuids) is None
    assert parse_visible_devices("", uuids) is None
    assert parse_visible_devices(None, uuids) is None


def test_process_titles_win_over_order() -> None:
    mapping, how = choose_rank_mapping([0, 1], ["TP0", "TP1"], {0: ("TP1",), 1: ("TP0",)})
    assert how == "process" and mapping == {0: ("TP1",), 1: ("TP0",)}
    mapping, how = choose_rank_mapping([0, 1], ["TP0", "TP1"], {})
    assert how == "order" and mapping == {0: ("TP0",), 1: ("TP1",)}
    assert choose_rank_mapping([0], [], {}) == ({}, "none")
