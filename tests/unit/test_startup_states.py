"""The startup state machine: target vs draft in both SGLang orders, restarts, failures."""

from __future__ import annotations

from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines

ARGS_SPEC = (
    "server_args=ServerArgs(model_path='/models/m', tp_size=2, mem_fraction_static=0.85, "
    "page_size=1, speculative_algorithm='EAGLE3', enable_metrics=True)"
)
ARGS_PLAIN = "server_args=ServerArgs(model_path='/models/m', tp_size=2, mem_fraction_static=0.85)"


def run(lines: list[str]) -> StartupTracker:
    return fold_lines(lines)


def rank_lines(time: str, rank: str, messages: list[str]) -> list[str]:
    return [f"[2026-06-27 {time} {rank}] {m}" for m in messages]


def phased_0_5_14(rank: str) -> list[str]:
    """≥0.5.14: all weights, then all pools, then all graphs."""
    return rank_lines(
        "10:00:01",
        rank,
        [
            "Init torch distributed begin.",
            "Init torch distributed ends. elapsed=2.00 s, mem usage=1.00 GB",
            "Load weight begin. avail mem=90.00 GB",
            "Load weight end. elapsed=30.00 s, type=DeepseekV3ForCausalLM, avail mem=30.00 GB, mem usage=60.00 GB.",
            "Load weight begin. avail mem=30.00 GB",
            "Load weight end. elapsed=1.00 s, type=DeepseekV3ForCausalLMNextN, avail mem=28.00 GB, mem usage=2.00 GB.",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 200000, KV size: 13.09 GB",
            "Memory pool end. avail mem=14.90 GB",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 200000, KV size: 0.21 GB",
            "Memory pool end. avail mem=14.69 GB",
            "Capture target verify CUDA graph begin. backend=fa3, num_tokens_per_bs=4, avail mem=14.60 GB",
            "Capture target verify CUDA graph end. elapsed=5.00 s, mem usage=1.50 GB, avail mem=13.10 GB.",
            "Capture draft decode CUDA graph begin. backend=fa3, num_tokens_per_req=1, bs=[1, 2], avail mem=13.10 GB",
            "Capture draft decode CUDA graph end. elapsed=2.00 s, mem usage=0.30 GB, avail mem=12.80 GB.",
            "Capture draft extend CUDA graph begin. backend=fa3, num_tokens_per_req=1, avail mem=12.80 GB",
            "Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.10 GB, avail mem=12.70 GB.",
        ],
    )


def test_phased_order_0_5_14_attributes_target_and_draft() -> None:
    lines = [f"[2026-06-27 10:00:00] {ARGS_SPEC}", *phased_0_5_14("TP0"), *phased_0_5_14("TP1")]
    startup = run(lines).current
    rank = startup.ranks["TP1"]
    assert rank.target.weights_gib == 60.0
    assert rank.target.model_type == "DeepseekV3ForCausalLM"
    assert rank.target.kv_gib == 13.09
    assert rank.target.avail_after_pool_gib == 14.90
    assert rank.target.graph_gib == 1.5
    assert rank.draft is not None
    assert rank.draft.weights_gib == 2.0
    assert rank.draft.model_type == "DeepseekV3ForCausalLMNextN"
    assert rank.draft.kv_gib == 0.21
    assert rank.draft.avail_after_pool_gib == 14.69
    assert rank.draft.graph_gib == 0.4
    assert rank.draft.avail_before_graph_gib == 13.10
    assert rank.draft.avail_after_graph_gib == 12.70
    # SGLang profiles after both loads in this order: post-load free is after the draft.
    assert rank.post_load_free_gib == 28.0
    assert startup.phased_draft_init is True
    assert startup.version.low >= (0, 5, 14)
    assert startup.state == "starting" and startup.restarts == 0


def test_draft_after_graphs_order_0_5_8() -> None:
    msgs = [
        "Load weight begin. avail mem=93.17 GB",
        "Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=21.60 GB, mem usage=71.57 GB.",
        "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
        "Memory pool end. avail mem=11.18 GB",
        "Capture cuda graph begin. This can take up to several minutes. avail mem=11.12 GB",
        "Capture cuda graph end. Time elapsed: 6.83 s. mem usage=1.71 GB. avail mem=9.41 GB.",
        "Init torch distributed begin.",
        "Init torch distributed ends. mem usage=0.00 GB",
        "Load weight begin. avail mem=9.41 GB",
        "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=8.46 GB, mem usage=0.95 GB.",
        "KV Cache is allocated. #tokens: 159277, K size: 0.30 GB, V size: 0.30 GB",
        "Memory pool end. avail mem=7.85 GB",
    ]
    startup = run(rank_lines("09:05:00", "TP0", msgs)).current  # no server_args: spec unknown
    rank = startup.ranks["TP0"]
    assert rank.target.kv_gib == 10.42 and rank.target.weights_gib == 71.57
    assert rank.draft is not None and rank.draft.weights_gib == 0.95
    assert rank.draft.k_gib == 0.30 and rank.draft.kv_gib == 0.60
    assert rank.draft.init_dist_gib == 0.0
    assert rank.post_load_free_gib == 21.60
    assert startup.phased_draft_init is False
    assert startup.restarts == 0


def test_second_server_args_starts_a_new_startup() -> None:
    first = [
        f"[2026-06-27 10:00:00] {ARGS_PLAIN}",
        *rank_lines(
            "10:00:05",
            "TP0",
            ["Load weight begin. avail mem=90.00 GB", "Memory pool end. avail mem=9.00 GB"],
        ),
    ]
    second = [
        f"[2026-06-27 11:00:00] {ARGS_PLAIN.replace('0.85', '0.9')}",
        *rank_lines("11:00:05", "TP0", ["Load weight begin. avail mem=88.00 GB"]),
    ]
    tracker = run(first + second)
    startup = tracker.current
    assert startup.restarts == 1
    assert startup.server_args is not None and startup.server_args.mem_fraction_static == 0.9
    assert startup.ranks["TP0"].target.avail_before_load_gib == 88.0
    assert startup.ranks["TP0"].target.avail_after_pool_gib is None
    assert tracker.previous is not None
    assert tracker.previous.ranks["TP0"].target.avail_after_pool_gib == 9.0


def test_load_after_ready_is_a_restart_even_without_server_args() -> None:
    lines = rank_lines("10:00:05", "TP0", ["Load weight begin. avail mem=90.00 GB"])
    lines += ["[2026-06-27 10:01:00] The server is fired up and ready to roll!"]
    lines += rank_lines(
        "10:30:00",
        "TP0",
        ["Init torch distributed begin.", "Load weight begin. avail mem=89.00 GB"],
    )
    startup = run(lines).current
    assert startup.restarts == 1
    assert startup.state == "starting"
    assert startup.ranks["TP0"].target.avail_before_load_gib == 89.0
    assert startup.ranks["TP0"].draft is None


def test_non_speculative_second_load_is_a_restart() -> None:
    lines = [f"[2026-06-27 10:00:00] {ARGS_PLAIN}"]
    lines += rank_lines("10:00:05", "TP0", ["Load weight begin. avail mem=90.00 GB"])
    lines += rank_lines("10:00:50", "TP0", ["Load weight begin. avail mem=91.00 GB"])
    startup = run(lines).current
    assert startup.restarts == 1
    assert startup.ranks["TP0"].target.avail_before_load_gib == 91.0


def test_failure_then_restart() -> None:
    lines = [f"[2026-06-27 10:00:00] {ARGS_PLAIN}"]
    lines += rank_lines(
        "10:00:05",
        "TP1",
        [
            "Load weight begin. avail mem=90.00 GB",
            "Load weight end. type=X, dtype=torch.bfloat16, avail mem=10.00 GB, mem usage=80.00 GB.",
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.85",
        ],
    )
    lines += ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."]
    tracker = run(lines)
    failed = tracker.current
    assert failed.state == "failed"
    assert failed.failure is not None and failed.failure.kind == "not_enough_memory"
    assert failed.failure.mem_fraction_static == 0.85
    assert failed.ranks["TP1"].failure is failed.failure
    assert len(failed.failures) == 2
    assert "" not in failed.ranks  # the traceback line has no rank: it must not invent one
    # systemd restarts the unit: a new server_args line begins a fresh, starting story
    tracker = fold_lines([f"[2026-06-27 10:01:00] {ARGS_PLAIN}"], tracker)
    assert tracker.current.state == "starting" and tracker.current.restarts == 1
    assert tracker.current.failure is None


def test_ready_after_failure_stays_failed() -> None:
    lines = [
        "[2026-06-27 10:00:00 TP0] Scheduler hit an exception: boom",
        "[2026-06-27 10:00:01] The server is fired up and ready to roll!",
    ]
    assert run(lines).current.state == "failed"


def test_tqdm_progress_credits_tp0_open_capture() -> None:
    lines = rank_lines(
        "10:00:00",
        "TP0",
        ["Capture cuda graph begin. This can take up to several minutes. avail mem=11.00 GB"],
    )
    lines += rank_lines(
        "10:00:00",
        "TP1",
        ["Capture cuda graph begin. This can take up to several minutes. avail mem=11.10 GB"],
    )
    lines += ["Capturing batches (bs=4 avail_mem=10.20 GB):  50%|#####     | 5/10"]
    startup = run(lines).current
    assert startup.ranks["TP0"].target.graphs[0].progress_avail_gib == 10.2
    assert startup.ranks["TP1"].target.graphs[0].progress_avail_gib is None


def test_post_capture_sizing_replaces_va_upper_bound() -> None:
    lines = rank_lines(
        "10:00:00",
        "TP0",
        [
            "KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, K size: 40.00 GB, V size: 40.00 GB",
            "Memory pool end. avail mem=50.00 GB",
            "Capture target decode CUDA graph end. elapsed=6.00 s, mem usage=1.70 GB, avail mem=48.30 GB.",
            "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 700000, KV size: 30.00 GB, avail mem=18.00 GB",
        ],
    )
    target = run(lines).current.ranks["TP0"].target
    assert target.kv_va_tokens == 900000
    assert target.kv_tokens == 700000
    assert target.kv_gib == 30.0
    assert target.avail_after_pool_gib == 18.0


def test_capture_end_without_begin_recovers_before_from_usage() -> None:
    lines = rank_lines(
        "10:00:00",
        "TP0",
        ["Capture cuda graph end. Time elapsed: 5.00 s. mem usage=1.44 GB. avail mem=38.05 GB."],
    )
    graph = run(lines).current.ranks["TP0"].target.graphs[0]
    assert graph.avail_before_gib == 39.49
    assert graph.avail_after_gib == 38.05


def test_batch_lines_latest_per_rank_and_count() -> None:
    lines = []
    for i in range(1000):
        for dp in range(2):
            lines.append(
                f"[2026-06-27 10:00:00 DP{dp} TP{dp}] Decode batch, #running-req: {i}, #token: {i * 10 + dp}, "
                "token usage: 0.10, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, "
            )
    startup = run(lines).current
    assert startup.batch_lines == 2000
    assert startup.latest_batch["DP0 TP0"].tokens == 9990
    assert startup.latest_batch["DP1 TP1"].tokens == 9991


def test_batch_lines_before_a_restart_stay_with_the_old_start() -> None:
    lines = [
        "[2026-06-27 10:00:00 TP0] Decode batch, #running-req: 5, #token: 50, token usage: 0.10, #queue-req: 0"
    ]
    lines += [f"[2026-06-27 11:00:00] {ARGS_PLAIN}"]
    tracker = run(lines)
    assert tracker.current.latest_batch == {}
    assert tracker.previous is not None and tracker.previous.latest_batch["TP0"].tokens == 50
