"""parse_exposition / parse_server_info on prometheus_client output and hostile text."""

from __future__ import annotations

import math

import pytest

from kvtop.sglang.metrics import MetricsSample, parse_exposition, parse_server_info
from tests.support.sglang_http import Deployment, build_exposition, build_server_info


def test_tp8_one_publisher() -> None:
    text = build_exposition(Deployment(version="0.5.12", tp_size=8))
    assert 100_000 < len(text) < 140_000  # like a real 0.5.2x scrape
    sample = parse_exposition(text)
    assert list(sample.per_rank) == ["TP0"]
    assert sample.max_total_num_tokens == 159277
    assert sample.used_tokens == 48211
    assert sample.token_usage == pytest.approx(48211 / 159277)
    assert sample.running_requests == 12
    assert sample.queued_requests == 0
    assert sample.gen_throughput == 512.0
    assert sample.cache_hit_rate == pytest.approx(0.41)
    assert sample.spec_accept_length == 2.5
    assert sample.page_size == 1
    assert sample.num_pages == 159277
    assert sample.context_len == 262144
    assert sample.values["kv_available_tokens"] == 159277 - 48211
    assert sample.values["startup_available_gpu_memory_gb"] == pytest.approx(93.2)
    assert sample.families_seen > 10


def test_dp4_sums_across_dp_groups() -> None:
    dep = Deployment(version="0.5.23", tp_size=4, dp_size=4, num_used_tokens=(10, 20, 30, 40))
    sample = parse_exposition(build_exposition(dep))
    assert list(sample.per_rank) == ["DP0 TP0", "DP1 TP1", "DP2 TP2", "DP3 TP3"]
    assert sample.max_total_num_tokens == 4 * 159277
    assert sample.used_tokens == 100
    assert sample.token_usage == pytest.approx(100 / (4 * 159277))
    assert sample.running_requests == 48
    assert sample.gen_throughput == 4 * 512.0
    assert sample.cache_hit_rate == pytest.approx(0.41)  # averaged, not summed
    assert sample.per_rank["DP2 TP2"]["num_used_tokens"] == 30
    # per-GPU sizes are not added up
    assert sample.weight_gib == pytest.approx(72.9)
    assert sample.kv_cache_gib == pytest.approx(10.42)
    assert dict(sample.graph_memory_gib_by_phase) == {"decode": 1.5, "draft_decode": 0.6}
    assert sample.graph_memory_gib == pytest.approx(2.1)
    assert sample.per_rank["DP0 TP0"]["graph_memory_usage_gb"] == pytest.approx(2.1)
    assert sample.startup_seconds_by_phase["load_weights"] == 95.0
    assert sample.startup_seconds_by_phase["total"] == 183.0  # the slowest rank
    assert sample.values["startup_available_gpu_memory_gb"] == pytest.approx(92.9)  # min


def test_all_schedulers_never_sums_tp_ranks_of_one_dp_group() -> None:
    # --enable-metrics-for-all-schedulers: 8 ranks publish, 2 per DP group, same pool each.
    dep = Deployment(tp_size=8, dp_size=4, all_schedulers=True, num_used_tokens=(10, 20, 30, 40))
    sample = parse_exposition(build_exposition(dep))
    assert len(sample.per_rank) == 8
    assert sample.max_total_num_tokens == 4 * 159277
    assert sample.used_tokens == 100
    tp8 = parse_exposition(build_exposition(Deployment(tp_size=8, all_schedulers=True)))
    assert len(tp8.per_rank) == 8
    assert tp8.max_total_num_tokens == 159277
    assert tp8.running_requests == 12


def test_page_size_from_0_5_10_info_gauge_and_0_5_12_gauges() -> None:
    old = parse_exposition(build_exposition(Deployment(version="0.5.10", page_size=64)))
    new = parse_exposition(build_exposition(Deployment(version="0.5.12", page_size=64)))
    assert "cache_config_info" in build_exposition(Deployment(version="0.5.10"))
    for sample in (old, new):
        assert sample.page_size == 64
        assert sample.num_pages == 159277 // 64
    assert old.context_len is None
    assert new.context_len == 262144


def test_old_engine_startup_names() -> None:
    text = (
        'sglang:engine_startup_time{model_name="m",tp_rank="0"} 81.5\n'
        'sglang:engine_load_weights_time{model_name="m",tp_rank="0"} 40.25\n'
    )
    sample = parse_exposition(text)
    assert sample.values["engine_startup_time"] == 81.5
    assert sample.values["engine_load_weights_time"] == 40.25


def test_blanks_and_tabs_between_tokens() -> None:
    """The text format separates tokens by blanks or tabs, and allows blanks before the
    labels (Prometheus's own parser does; prometheus_client writes single blanks). Found by
    tests/unit/test_metrics_oracle.py: kvtop refused `name {labels} value` and dropped tab-separated
    lines without labels."""
    text = (
        "sglang:num_running_reqs\t12\n"
        'sglang:num_queue_reqs {tp_rank="0"}  3\t1700000000000\n'
        'sglang:max_total_num_tokens\t{tp_rank="0"}\t159277\n'
    )
    sample = parse_exposition(text)
    assert sample.rejected == ()
    assert sample.running_requests == 12
    assert sample.queued_requests == 3
    assert sample.max_total_num_tokens == 159277
    assert sample.families_seen == 3


def test_hostile_lines() -> None:
    text = "\r\n".join(
        [
            "# HELP sglang:token_usage The token usage.",
            "# TYPE sglang:token_usage gauge",
            'sglang:num_running_reqs{model_name="a \\"quoted\\" } name",tp_rank="0"} 3 1700000000000',
            'sglang:num_queue_reqs{tp_rank="0"} NaN',
            'sglang:gen_throughput{tp_rank="0"} +Inf',
            'sglang:cache_hit_rate{tp_rank="0"} 0.5',
            'sglang:cache_hit_rate{tp_rank="0"} 0.25',  # duplicate: last wins
            "sglang:max_total_num_tokens 1000",
            'sglang:num_used_tokens{tp_rank="0" 12',  # unterminated labels
            'sglang:num_used_tokens{tp_rank="0"} twelve',
            "sglang:token_usage",
            "\x00\xff garbage ☃",
            'sglang:spec_accept_length{model_name="back\\\\slash\\nnl",tp_rank="0"} 3.0',
            "# EOF",
            "",
        ]
    )
    sample = parse_exposition(text)
    assert sample.running_requests == 3
    assert "num_queue_reqs" not in sample.values
    assert "gen_throughput" not in sample.values
    assert sample.cache_hit_rate == 0.25
    assert sample.max_total_num_tokens == 1000
    assert sample.used_tokens is None
    assert sample.token_usage is None
    assert sample.spec_accept_length == 3.0
    assert set(sample.per_rank) == {"TP0", "all"}


@pytest.mark.parametrize(
    "text", ["", "<html><body>nginx</body></html>", "\x00" * 100, "{}" * 50, "sglang:"]
)
def test_no_families(text: str) -> None:
    sample = parse_exposition(text)
    assert isinstance(sample, MetricsSample)
    assert sample.families_seen == 0
    assert dict(sample.values) == {}


def test_server_info_full() -> None:
    data = build_server_info(
        Deployment(version="0.5.23", dp_size=2, tp_size=8), api_key="sk-test-secret-123"
    )
    info = parse_server_info(data)
    assert info.version == "0.5.23"
    assert info.status == "ready"
    assert info.max_total_num_tokens == 159277
    assert info.server_args is not None
    assert info.server_args.tp_size == 8
    assert info.server_args.mem_fraction_static == 0.88
    assert info.server_args.api_key_set
    assert "sk-test-secret-123" not in repr(info)
    assert len(info.memory_by_dp) == 2
    mem = info.memory_by_dp[0]
    assert mem.weight_gib == 72.9
    assert mem.kv_cache_gib == 10.42
    assert mem.graph_gib == pytest.approx(2.1)
    assert dict(mem.graph_gib_by_phase) == {"decode": 1.5, "draft_decode": 0.6}
    assert mem.token_capacity == 159277


def test_server_info_old_shapes() -> None:
    info = parse_server_info(
        {
            "max_total_num_tokens": 5000,
            "internal_states": [{"memory_usage": {"weight": 1, "kvcache": 2, "cuda_graph": 0.5}}],
        }
    )
    assert info.max_total_num_tokens == 5000
    assert info.memory_by_dp[0].graph_gib == 0.5
    assert info.memory_by_dp[0].token_capacity is None


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        "x",
        {"scheduler_info": "nope", "internal_states": {"a": 1}, "version": 5},
        {"max_total_num_tokens": "many", "internal_states": [None, 3, {"memory_usage": []}]},
        {
            "max_total_num_tokens": math.inf,
            "internal_states": [
                {"memory_usage": {"weight": "1", "kvcache": True, "graph": {"d": "x", 3: 1}}}
            ],
        },
        {"tp_size": {"nested": []}, "page_size": -4},
    ],
)
def test_server_info_wrong_types_never_raise(data: object) -> None:
    info = parse_server_info(data)  # type: ignore[arg-type]
    assert info.max_total_num_tokens is None
    assert info.version is None
    for mem in info.memory_by_dp:
        assert mem.weight_gib is None
        assert mem.kv_cache_gib is None
        assert mem.graph_gib is None
