"""Real SGLang excerpts and the story log: every value their sidecars list must come out exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtop.sglang.start_state import ModelMemory
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS, STORY_LOG, STORY_SIDECAR

# sidecar key -> attribute of ModelMemory
FIELDS = {
    "init_dist_mem_usage_gb": "init_dist_gib",
    "avail_before_weight_load_gb": "avail_before_load_gib",
    "avail_after_weight_load_gb": "avail_after_load_gib",
    "weight_mem_usage_gb": "weights_gib",
    "kv_tokens": "kv_tokens",
    "k_size_gb": "k_gib",
    "v_size_gb": "v_gib",
    "avail_after_mem_pool_gb": "avail_after_pool_gib",
    "avail_before_cuda_graph_gb": "avail_before_graph_gib",
    "avail_after_cuda_graph_gb": "avail_after_graph_gib",
    "cuda_graph_mem_usage_gb": "graph_gib",
}


def fold(path: Path) -> StartupTracker:
    with path.open(encoding="utf-8", errors="replace", newline=None) as handle:
        return fold_lines(handle)


def check_model(model: ModelMemory, expected: dict[str, object], where: str) -> None:
    for key, attr in FIELDS.items():
        assert getattr(model, attr) == pytest.approx(expected[key]), f"{where}: {key}"
    if expected.get("kv_size_gb") is not None:
        assert model.kv_gib == pytest.approx(expected["kv_size_gb"]), f"{where}: kv_size_gb"
    elif expected.get("k_size_gb") is not None:
        # MHA: kv_gib is K + V
        total = expected["k_size_gb"] + expected["v_size_gb"]  # type: ignore[operator]
        assert model.kv_gib == pytest.approx(total), f"{where}: K+V"
    if "cuda_graph_capture_s" in expected:
        assert model.graph_s == pytest.approx(expected["cuda_graph_capture_s"]), f"{where}: graph s"


REAL = sorted(REAL_LOGS.glob("*.log"))


@pytest.mark.parametrize("log", REAL, ids=[p.stem[:2] for p in REAL])
def test_real_excerpt_values(log: Path) -> None:
    sidecar = json.loads(log.with_suffix(".json").read_text())
    startup = fold(log).current
    expected_ranks = sidecar["ranks"]
    # Sidecars name a tagless single rank "rank0" or "rank?"; kvtop keys it "" (as logged).
    names = {name: ("" if name.startswith("rank") else name) for name in expected_ranks}
    for name, expected in expected_ranks.items():
        if not any(v is not None for v in expected.values()):
            continue
        rank = startup.ranks.get(names[name])
        assert rank is not None, f"rank {name} missing; have {sorted(startup.ranks)}"
        check_model(rank.target, expected, name)
        assert rank.draft is None or not rank.draft.seen
    hicache = sidecar.get("hicache") or {}
    if "host_gb_per_rank_decimal" in hicache:
        for name in expected_ranks:
            assert startup.ranks[names[name]].host_kv_gb == hicache["host_gb_per_rank_decimal"]
    summary = sidecar["summary_line"]
    if summary is None:
        assert startup.summary is None
    else:
        s = startup.summary
        assert s is not None
        assert s.max_total_num_tokens == summary["max_total_num_tokens"]
        assert s.chunked_prefill_size == summary["chunked_prefill_size"]
        assert s.max_prefill_tokens == summary["max_prefill_tokens"]
        assert s.max_running_requests == summary["max_running_requests"]
        assert s.context_len == summary["context_len"]
        assert s.available_gpu_mem_gib == summary["available_gpu_mem_gb"]
    if sidecar["failure"]:
        assert startup.state == "failed"
        assert startup.failure is not None
        assert startup.failure.message.startswith(sidecar["failure"])
    else:
        assert startup.failure is None
    extra = sidecar.get("extra") or {}
    if "cuda_graph_capture_s" in extra:
        (rank,) = startup.ranks.values()
        assert rank.target.graph_s == extra["cuda_graph_capture_s"]
    for dp, seconds in (extra.get("weight_load_elapsed_s") or {}).items():
        rank = next(r for r in startup.ranks.values() if r.rank.startswith(dp + " "))
        assert rank.target.load_s == seconds


def test_excerpt_20_is_listening_but_not_ready() -> None:
    """The 0.4.6 excerpt ends at `Uvicorn running`: the HTTP server is up, warmup not confirmed."""
    startup = fold(REAL_LOGS / "20-issue6291-v046-single-gpu-qwen3-full.log").current
    assert startup.state == "starting"
    assert startup.listening_url == "http://0.0.0.0:8200"
    assert startup.version.low <= (0, 4, 6) <= startup.version.high


def test_excerpt_02_glued_prefix_and_dp_tags() -> None:
    startup = fold(REAL_LOGS / "02-pr17392-dp4-tp4-ep4-qwen3moe-a.log").current
    rank = startup.ranks["DP1 TP1 EP1"]
    assert (rank.dp, rank.tp, rank.ep, rank.pp) == (1, 1, 1, None)
    assert rank.target.load_s == 5.05
    assert startup.kv_cache_dtype == "torch.bfloat16"


def test_story_log_matches_its_sidecar() -> None:
    sidecar = json.loads(STORY_SIDECAR.read_text())
    startup = fold(STORY_LOG).current
    assert startup.state == "ready"
    assert startup.restarts == 0
    assert sorted(startup.ranks) == sorted(sidecar["ranks"])
    for name, expected in sidecar["ranks"].items():
        rank = startup.ranks[name]
        check_model(rank.target, expected, name)
        assert rank.draft is not None
        check_model(rank.draft, expected["draft"], f"{name} draft")
        assert rank.host_kv_gb == expected["host_kv_gb"]
        assert rank.tp == int(name[2:])
    summary = sidecar["summary_line"]
    assert startup.summary is not None
    assert startup.summary.max_total_num_tokens == summary["max_total_num_tokens"]
    assert startup.summary.available_gpu_mem_gib == summary["available_gpu_mem_gb"]
    args = startup.server_args
    assert args is not None
    for key, value in sidecar["server_args"].items():
        assert getattr(args, key) == value, key
    assert startup.phased_draft_init is False  # 0.5.8: the draft loads after the target graphs
    assert startup.version.high == (0, 5, 8)
    assert startup.latest_batch["TP0"].tokens == 48211


ENDINGS = sorted(p for p in REAL_LOGS.glob("7[0-9]-*.log"))


@pytest.mark.parametrize("log", ENDINGS, ids=[p.stem[:2] for p in ENDINGS])
def test_how_the_run_ended(log: Path) -> None:
    """70-79: the state, kind, phase and cause a careful reader takes from how the run ended."""
    from kvtop.model.analysis import analyse
    from kvtop.report.json_report import to_json

    expected = json.loads(log.with_suffix(".json").read_text())["ending"]
    startup = to_json(analyse(fold(log), log.name))["startup"]
    assert isinstance(startup, dict)
    assert startup["state"] == expected["state"]
    assert startup["failure_kind"] == expected["failure_kind"]
    assert startup["failed_phase"] == expected["failed_phase"]
    assert startup["failure"] == expected["failure"]
    assert str(startup["failure_line"]).startswith(expected["failure_line"])
    assert startup["startup_in_log"] == expected["startup_in_log"]
