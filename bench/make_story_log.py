#!/usr/bin/env python3
"""Write the story's SGLang 0.5.8 log (or its sidecar) deterministically.

    python bench/make_story_log.py         > tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log
    python bench/make_story_log.py --json  > tests/fixtures/kimi-k25-tp8-eagle3-hicache-0.5.8.json
    python bench/make_story_log.py --check   # exit 1 if the committed fixtures differ

Standard library only. The output depends on nothing but this file (fixed seed, fixed
clock), so the committed fixture and its sidecar cannot drift apart.

Deployment (the one `kvtop --demo` replays): 8 x NVIDIA RTX PRO 6000 Blackwell (96 GB card, 95.59 GiB),
Kimi-K2.5 INT4 (`KimiK25ForConditionalGeneration`), TP8 without DP/EP/PP, so every scheduler
line carries the 0.5.8 prefix `[YYYY-MM-DD HH:MM:SS TPn]`; EAGLE-3 draft
`lightseekorg/kimi-k2.5-eagle3` (3 steps, topk 1, 4 draft tokens); mem_fraction_static=0.88,
page_size 1, kv_cache_dtype 'auto' (bf16 KV), context 262144, HiCache ratio 4.0, metrics on,
0.0.0.0:30000. Line formats are SGLang 0.5.8.post1's (its startup and batch lines): no
`elapsed=` on init/load lines, `dtype=` on Load weight end, the draft model initialised after
the target's CUDA graphs, the 0.5.8 trailing ", " on Prefill/Decode batch lines.

The numbers (TP0, SGLang "GB" = GiB for device memory):

* Card free at start 94.42; torch.distributed/NCCL init takes 1.25 -> `Load weight begin.
  avail mem=93.17` (= pre_model_load_memory, the MIN over ranks: TP0 is the lowest rank).
* Weights: 93.17 - 71.57 = 21.60 after load.
* cell_size (MLA) = (512 + 64) x 61 layers x 2 B = 70,272 B/token. The profiler's unrounded
  values are pre = 93.1700 and post = 21.60445 GiB: rest = post - pre x (1 - 0.88)
  = 21.60445 - 11.1804 = 10.42405 GiB -> int(rest x 2^30) // 70,272 = 159,277 tokens.
  (From the rounded log values, 21.60 - 11.1804 = 10.4196 -> 159,209: a check on logged
  figures is only good to about +-70 tokens.) KV size = (159,277 + 1) x 70,272 / 2^30
  = 10.424 -> "10.42 GB", the same on every rank (tokens are the MIN over ranks).
* Memory pool end 21.60 - 10.42 = 11.18 (= 0.12 x 93.17, SGLang's reserve). The ~0.05 GiB
  req_to_token pool (49 x 262,152 x int32) is inside the rounding here, as in the real story.
* Attention backend buffers 0.06 -> graph capture begins at 11.12; target graphs use 1.71
  -> 9.41 (bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]: max_running_requests reset to 48).
* Draft (after the target graphs, 0.5.8 order): init 0.00; weights 9.41 - 0.95 = 8.46;
  draft KV (EAGLE-3 is Llama-style MHA, 1 layer, 1024 = 8 heads x 128 per rank):
  (159,277 + 1) x 1024 x 2 B / 2^30 = 0.304 -> "K size: 0.30 GB, V size: 0.30 GB";
  8.46 - 0.61 = 7.85; draft graphs 0.31 -> 7.54; draft extend graphs 0.14 -> 7.40, which is
  the summary line's available_gpu_mem. Draft extend ends at 09:06:12 on TP0.
* HiCache host pool per rank (decimal GB): 159,277 x 4 = 637,108 tokens, + 1 page
  = 637,109 x 70,272 B = 44.77e9 -> "Allocating 44.77 GB host memory ..." on each rank.
* Other ranks: every avail figure is TP0's plus a per-rank delta of 0.01..0.04 (their init
  took that much less), usages and KV lines identical; capture times differ slightly.
* The server is ready at 09:06:31; then a few minutes of traffic in 0.5.8 Prefill/Decode
  lines, ending with "#running-req: 12, #token: 48211, token usage: 0.30".

Server-args order follows the code, not a hand-written story: SGLang resets
max_running_requests in ServerArgs.__post_init__, so the "Max running requests is reset to
48" warning comes *before* the `server_args=ServerArgs(...)` line, which then shows
`max_running_requests=48`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import random
import sys
from pathlib import Path

SEED = 20260227
DAY = dt.datetime(2026, 2, 27)
NUM_RANKS = 8

# ---- sizing constants -----------------------------------------------------------------
GIB = 1 << 30
LAYERS = 61
CELL_BYTES = (512 + 64) * LAYERS * 2  # MLA latent, bf16: 70,272 B/token per rank
DRAFT_KV_DIM = 8 * 128  # EAGLE-3 draft: 8 KV heads x head_dim 128 per rank, 1 layer
KV_TOKENS = 159277
HICACHE_RATIO = 4.0
MFS = 0.88
CONTEXT_LEN = 262144
CHUNKED_PREFILL = 8192
MAX_PREFILL = 16384
MAX_RUNNING = 48
CAPTURE_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
SHARDS = 64

# ---- TP0 values in hundredths of a GiB (exactly what the log prints) ------------------
TP0 = {
    "init_usage": 125,
    "pre": 9317,
    "weights": 7157,
    "kv": 1042,
    "pool_end": 1118,
    "cg_begin": 1112,
    "cg_usage": 171,
    "draft_weights": 95,
    "draft_k": 30,
    "draft_v": 30,
    "draft_pool_end": 785,
    "dcg_usage": 31,
    "dext_usage": 14,
}
# Per-rank delta (hundredths) added to every avail figure; TP0 is the minimum.
RANK_DELTA = [0, 2, 1, 3, 2, 4, 1, 3]
# Per-rank capture durations (s): target, draft, draft extend.
CAPTURE_S = [
    (6.83, 3.12, 2.05),
    (6.86, 3.10, 2.07),
    (6.81, 3.14, 2.04),
    (6.90, 3.11, 2.06),
    (6.84, 3.13, 2.05),
    (6.88, 3.09, 2.08),
    (6.85, 3.12, 2.03),
    (6.87, 3.15, 2.06),
]


def gb(centi: int) -> str:
    """Format hundredths of a GiB the way SGLang's `:.2f` prints them."""
    return f"{centi // 100}.{centi % 100:02d}"


def kv_size_centi(tokens: int, bytes_per_token: int) -> int:
    return round((tokens + 1) * bytes_per_token / GIB * 100)


def host_kv_bytes(tokens: int) -> int:
    host_tokens = int(tokens * HICACHE_RATIO)
    page_num = host_tokens // 1 + 1  # page_size 1
    return page_num * CELL_BYTES


def rank_values(rank: int) -> dict[str, int]:
    """All avail/usage figures of one rank, in hundredths of a GiB."""
    d = RANK_DELTA[rank]
    v = dict(TP0)
    v["init_usage"] = TP0["init_usage"] - d
    v["pre"] = TP0["pre"] + d
    v["after_load"] = v["pre"] - v["weights"]
    v["pool_end"] = TP0["pool_end"] + d
    v["cg_begin"] = TP0["cg_begin"] + d
    v["cg_after"] = v["cg_begin"] - v["cg_usage"]
    v["draft_pre"] = v["cg_after"]
    v["draft_after_load"] = v["draft_pre"] - v["draft_weights"]
    v["draft_pool_end"] = TP0["draft_pool_end"] + d
    v["dcg_begin"] = v["draft_pool_end"]
    v["dcg_after"] = v["dcg_begin"] - v["dcg_usage"]
    v["dext_begin"] = v["dcg_after"]
    v["dext_after"] = v["dext_begin"] - v["dext_usage"]
    return v


def _self_check() -> None:
    assert kv_size_centi(KV_TOKENS, CELL_BYTES) == TP0["kv"]
    assert kv_size_centi(KV_TOKENS, DRAFT_KV_DIM * 2) == TP0["draft_k"]
    # The profiler's unrounded values reproduce the logged token count.
    rest = 21.60445 - 93.17 * (1 - MFS)
    assert int(rest * GIB) // CELL_BYTES == KV_TOKENS
    assert f"{host_kv_bytes(KV_TOKENS) / 1e9:.2f}" == "44.77"
    for r in range(NUM_RANKS):
        v = rank_values(r)
        assert abs(v["after_load"] - v["kv"] - v["pool_end"]) <= 1, r
        draft_kv = v["draft_k"] + v["draft_v"] + 1  # 0.304 + 0.304 = 0.61
        assert abs(v["draft_after_load"] - draft_kv - v["draft_pool_end"]) <= 1, r
    assert rank_values(0)["dext_after"] == 740
    assert rank_values(0)["cg_after"] == 941


# ---- log text helpers ------------------------------------------------------------------
def ts(sec: float) -> str:
    return (DAY + dt.timedelta(seconds=int(sec))).strftime("%Y-%m-%d %H:%M:%S")


def at(h: int, m: int, s: float) -> float:
    return h * 3600 + m * 60 + s


def tqdm_clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


def tqdm_rate(n: int, elapsed: float) -> str:
    if n == 0 or elapsed <= 0:
        return "?it/s"
    rate = n / elapsed
    return f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"


def shards_bar(n: int, elapsed: float, total: int = SHARDS) -> str:
    """SGLang's safetensors bar (custom bar_format, no bar glyphs)."""
    if n == 0:
        times = "00:00<?, ?it/s"
    else:
        remaining = (total - n) * elapsed / n
        times = f"{tqdm_clock(elapsed)}<{tqdm_clock(remaining)}, {tqdm_rate(n, elapsed)}"
    pct = f"{100 * n / total:3.0f}"
    return f"Loading safetensors checkpoint shards: {pct}% Completed | {n}/{total} [{times}]"


def capture_bar(bs: int, avail: str, n: int, total: int, elapsed: float) -> str:
    """Default tqdm bar (width 10) as cuda_graph_runner prints it."""
    filled = n * 10 // total
    bar = "█" * filled + " " * (10 - filled)
    if n == 0:
        times = "00:00<?, ?it/s"
    else:
        remaining = (total - n) * elapsed / n
        times = f"{tqdm_clock(elapsed)}<{tqdm_clock(remaining)}, {tqdm_rate(n, elapsed)}"
    pct = f"{100 * n / total:3.0f}"
    return f"Capturing batches (bs={bs} avail_mem={avail} GB): {pct}%|{bar}| {n}/{total} [{times}]"


class Event:
    """One piece of output from one process: `text` may hold several physical lines."""

    __slots__ = ("t", "text")

    def __init__(self, t: float, text: str) -> None:
        self.t = t
        self.text = text


def tagged(t: float, rank: int | None, msg: str) -> str:
    tag = "" if rank is None else f" TP{rank}"
    return f"[{ts(t)}{tag}] {msg}"


# ---- server_args ---------------------------------------------------------------------
def server_args_repr() -> str:
    """A 0.5.8-era `ServerArgs` repr (field order as SGLang prints it)."""
    fields: list[tuple[str, object]] = [
        ("model_path", "moonshotai/Kimi-K2.5"),
        ("tokenizer_path", "moonshotai/Kimi-K2.5"),
        ("tokenizer_mode", "auto"),
        ("tokenizer_worker_num", 1),
        ("skip_tokenizer_init", False),
        ("load_format", "auto"),
        ("model_loader_extra_config", "{}"),
        ("trust_remote_code", True),
        ("context_length", CONTEXT_LEN),
        ("is_embedding", False),
        ("enable_multimodal", None),
        ("revision", None),
        ("model_impl", "auto"),
        ("host", "0.0.0.0"),
        ("port", 30000),
        ("fastapi_root_path", ""),
        ("grpc_mode", False),
        ("skip_server_warmup", False),
        ("warmups", None),
        ("nccl_port", None),
        ("checkpoint_engine_wait_weights_before_ready", False),
        ("dtype", "auto"),
        ("quantization", None),
        ("quantization_param_path", None),
        ("kv_cache_dtype", "auto"),
        ("enable_fp32_lm_head", False),
        ("modelopt_quant", None),
        ("modelopt_checkpoint_restore_path", None),
        ("modelopt_checkpoint_save_path", None),
        ("modelopt_export_path", None),
        ("quantize_and_serve", False),
        ("rl_quant_profile", None),
        ("mem_fraction_static", MFS),
        ("max_running_requests", MAX_RUNNING),
        ("max_queued_requests", None),
        ("max_total_tokens", None),
        ("chunked_prefill_size", CHUNKED_PREFILL),
        ("enable_dynamic_chunking", False),
        ("max_prefill_tokens", MAX_PREFILL),
        ("prefill_max_requests", None),
        ("schedule_policy", "fcfs"),
        ("enable_priority_scheduling", False),
        ("abort_on_priority_when_disabled", False),
        ("schedule_low_priority_values_first", False),
        ("priority_scheduling_preemption_threshold", 10),
        ("schedule_conservativeness", 1.0),
        ("page_size", 1),
        ("swa_full_tokens_ratio", 0.8),
        ("disable_hybrid_swa_memory", False),
        ("radix_eviction_policy", "lru"),
        ("device", "cuda"),
        ("tp_size", NUM_RANKS),
        ("pp_size", 1),
        ("pp_max_micro_batch_size", None),
        ("pp_async_batch_depth", 0),
        ("stream_interval", 1),
        ("stream_output", False),
        ("random_seed", 872363271),
        ("constrained_json_whitespace_pattern", None),
        ("constrained_json_disable_any_whitespace", False),
        ("watchdog_timeout", 300),
        ("soft_watchdog_timeout", None),
        ("dist_timeout", None),
        ("download_dir", None),
        ("model_checksum", None),
        ("base_gpu_id", 0),
        ("gpu_id_step", 1),
        ("sleep_on_idle", False),
        ("custom_sigquit_handler", None),
        ("log_level", "info"),
        ("log_level_http", None),
        ("log_requests", False),
        ("log_requests_level", 2),
        ("log_requests_format", "text"),
        ("log_requests_target", None),
        ("uvicorn_access_log_exclude_prefixes", []),
        ("crash_dump_folder", None),
        ("show_time_cost", False),
        ("enable_metrics", True),
        ("enable_metrics_for_all_schedulers", False),
        ("tokenizer_metrics_custom_labels_header", "x-custom-labels"),
        ("tokenizer_metrics_allowed_custom_labels", None),
        ("extra_metric_labels", None),
        ("bucket_time_to_first_token", None),
        ("bucket_inter_token_latency", None),
        ("bucket_e2e_request_latency", None),
        ("collect_tokens_histogram", False),
        ("prompt_tokens_buckets", None),
        ("generation_tokens_buckets", None),
        ("gc_warning_threshold_secs", 0.0),
        ("decode_log_interval", 40),
        ("enable_request_time_stats_logging", False),
        ("kv_events_config", None),
        ("enable_trace", False),
        ("otlp_traces_endpoint", "localhost:4317"),
        ("export_metrics_to_file", False),
        ("export_metrics_to_file_dir", None),
        ("api_key", None),
        ("admin_api_key", None),
        ("served_model_name", "kimi-k2.5"),
        ("weight_version", "default"),
        ("chat_template", None),
        ("hf_chat_template_name", None),
        ("completion_template", None),
        ("file_storage_path", "sglang_storage"),
        ("enable_cache_report", True),
        ("reasoning_parser", "kimi_k2"),
        ("tool_call_parser", "kimi_k2"),
        ("tool_server", None),
        ("sampling_defaults", "model"),
        ("dp_size", 1),
        ("load_balance_method", "round_robin"),
        ("dist_init_addr", None),
        ("nnodes", 1),
        ("node_rank", 0),
        ("json_model_override_args", "{}"),
        ("preferred_sampling_params", '{"temperature": 1.0, "top_p": 0.95}'),
        ("enable_lora", None),
        ("max_lora_rank", None),
        ("lora_target_modules", None),
        ("lora_paths", None),
        ("max_loaded_loras", None),
        ("max_loras_per_batch", 8),
        ("lora_eviction_policy", "lru"),
        ("lora_backend", "csgmv"),
        ("max_lora_chunk_size", 16),
        ("attention_backend", "flashinfer"),
        ("decode_attention_backend", None),
        ("prefill_attention_backend", None),
        ("sampling_backend", "flashinfer"),
        ("grammar_backend", "xgrammar"),
        ("mm_attention_backend", None),
        ("fp8_gemm_runner_backend", "auto"),
        ("fp4_gemm_runner_backend", "auto"),
        ("nsa_prefill_backend", None),
        ("nsa_decode_backend", None),
        ("disable_flashinfer_autotune", False),
        ("speculative_algorithm", "EAGLE3"),
        ("speculative_draft_model_path", "lightseekorg/kimi-k2.5-eagle3"),
        ("speculative_draft_model_revision", None),
        ("speculative_draft_load_format", None),
        ("speculative_num_steps", 3),
        ("speculative_eagle_topk", 1),
        ("speculative_num_draft_tokens", 4),
        ("speculative_accept_threshold_single", 1.0),
        ("speculative_accept_threshold_acc", 1.0),
        ("speculative_token_map", None),
        ("speculative_attention_mode", "prefill"),
        ("speculative_draft_attention_backend", None),
        ("speculative_moe_runner_backend", "auto"),
        ("speculative_moe_a2a_backend", None),
        ("speculative_draft_model_quantization", None),
        ("speculative_ngram_min_match_window_size", 1),
        ("speculative_ngram_max_match_window_size", 12),
        ("speculative_ngram_min_bfs_breadth", 1),
        ("speculative_ngram_max_bfs_breadth", 10),
        ("speculative_ngram_match_type", "BFS"),
        ("speculative_ngram_branch_length", 18),
        ("speculative_ngram_capacity", 10000000),
        ("enable_multi_layer_eagle", False),
        ("ep_size", 1),
        ("moe_a2a_backend", "none"),
        ("moe_runner_backend", "auto"),
        ("flashinfer_mxfp4_moe_precision", "default"),
        ("enable_flashinfer_allreduce_fusion", False),
        ("deepep_mode", "auto"),
        ("ep_num_redundant_experts", 0),
        ("ep_dispatch_algorithm", None),
        ("init_expert_location", "trivial"),
        ("enable_eplb", False),
        ("eplb_algorithm", "auto"),
        ("eplb_rebalance_num_iterations", 1000),
        ("eplb_rebalance_layers_per_chunk", None),
        ("eplb_min_rebalancing_utilization_threshold", 1.0),
        ("expert_distribution_recorder_mode", None),
        ("expert_distribution_recorder_buffer_size", 1000),
        ("enable_expert_distribution_metrics", False),
        ("deepep_config", None),
        ("moe_dense_tp_size", None),
        ("elastic_ep_backend", None),
        ("mooncake_ib_device", None),
        ("max_mamba_cache_size", None),
        ("mamba_ssm_dtype", "float32"),
        ("mamba_full_memory_ratio", 0.9),
        ("mamba_scheduler_strategy", "no_buffer"),
        ("mamba_track_interval", 256),
        ("enable_hierarchical_cache", True),
        ("hicache_ratio", HICACHE_RATIO),
        ("hicache_size", 0),
        ("hicache_write_policy", "write_through"),
        ("hicache_io_backend", "kernel"),
        ("hicache_mem_layout", "layer_first"),
        ("disable_hicache_numa_detect", False),
        ("hicache_storage_backend", None),
        ("hicache_storage_prefetch_policy", "best_effort"),
        ("hicache_storage_backend_extra_config", None),
        ("enable_lmcache", False),
        ("kt_weight_path", None),
        ("kt_method", None),
        ("kt_cpuinfer", None),
        ("kt_threadpool_count", None),
        ("kt_num_gpu_experts", None),
        ("kt_max_deferred_experts_per_token", None),
        ("dllm_algorithm", None),
        ("dllm_algorithm_config", None),
        ("enable_double_sparsity", False),
        ("ds_channel_config_path", None),
        ("ds_heavy_channel_num", 32),
        ("ds_heavy_token_num", 256),
        ("ds_heavy_channel_type", "qk"),
        ("ds_sparse_decode_threshold", 4096),
        ("cpu_offload_gb", 0),
        ("offload_group_size", -1),
        ("offload_num_in_group", 1),
        ("offload_prefetch_step", 1),
        ("offload_mode", "cpu"),
        ("multi_item_scoring_delimiter", None),
        ("disable_radix_cache", False),
        ("cuda_graph_max_bs", MAX_RUNNING),
        ("cuda_graph_bs", list(CAPTURE_BS)),
        ("disable_cuda_graph", False),
        ("disable_cuda_graph_padding", False),
        ("enable_profile_cuda_graph", False),
        ("enable_cudagraph_gc", False),
        ("enable_layerwise_nvtx_marker", False),
        ("enable_nccl_nvls", False),
        ("enable_symm_mem", False),
        ("disable_flashinfer_cutlass_moe_fp4_allgather", False),
        ("enable_tokenizer_batch_encode", False),
        ("disable_tokenizer_batch_decode", False),
        ("disable_outlines_disk_cache", False),
        ("disable_custom_all_reduce", False),
        ("enable_mscclpp", False),
        ("enable_torch_symm_mem", False),
        ("disable_overlap_schedule", False),
        ("enable_mixed_chunk", False),
        ("enable_dp_attention", False),
        ("enable_dp_lm_head", False),
        ("enable_two_batch_overlap", False),
        ("enable_single_batch_overlap", False),
        ("tbo_token_distribution_threshold", 0.48),
        ("enable_torch_compile", False),
        ("enable_piecewise_cuda_graph", False),
        ("enable_torch_compile_debug_mode", False),
        ("torch_compile_max_bs", 32),
        ("piecewise_cuda_graph_max_tokens", 4096),
        (
            "piecewise_cuda_graph_tokens",
            [
                *range(4, 33, 4),
                *range(48, 257, 16),
                *range(288, 513, 32),
                *range(640, 1025, 128),
                *range(1280, 2049, 256),
                2560,
                3072,
                3584,
                4096,
            ],
        ),
        ("piecewise_cuda_graph_compiler", "eager"),
        ("torchao_config", ""),
        ("enable_nan_detection", False),
        ("enable_p2p_check", False),
        ("triton_attention_reduce_in_fp32", False),
        ("triton_attention_num_kv_splits", 8),
        ("triton_attention_split_tile_size", None),
        ("num_continuous_decode_steps", 1),
        ("delete_ckpt_after_loading", False),
        ("enable_memory_saver", False),
        ("enable_weights_cpu_backup", False),
        ("enable_draft_weights_cpu_backup", False),
        ("allow_auto_truncate", False),
        ("enable_custom_logit_processor", False),
        ("flashinfer_mla_disable_ragged", False),
        ("disable_shared_experts_fusion", False),
        ("disable_chunked_prefix_cache", False),
        ("disable_fast_image_processor", False),
        ("keep_mm_feature_on_device", False),
        ("enable_return_hidden_states", False),
        ("enable_return_routed_experts", False),
        ("scheduler_recv_interval", 1),
        ("numa_node", None),
        ("enable_deterministic_inference", False),
        ("rl_on_policy_target", None),
        ("enable_attn_tp_input_scattered", False),
        ("enable_nsa_prefill_context_parallel", False),
        ("enable_fused_qk_norm_rope", False),
        ("enable_dynamic_batch_tokenizer", False),
        ("dynamic_batch_tokenizer_batch_size", 32),
        ("dynamic_batch_tokenizer_batch_timeout", 0.002),
        ("debug_tensor_dump_output_folder", None),
        ("debug_tensor_dump_layers", None),
        ("debug_tensor_dump_input_file", None),
        ("debug_tensor_dump_inject", False),
        ("disaggregation_mode", "null"),
        ("disaggregation_transfer_backend", "mooncake"),
        ("disaggregation_bootstrap_port", 8998),
        ("disaggregation_decode_tp", None),
        ("disaggregation_decode_dp", None),
        ("disaggregation_prefill_pp", 1),
        ("disaggregation_ib_device", None),
        ("disaggregation_decode_enable_offload_kvcache", False),
        ("num_reserved_decode_tokens", 512),
        ("disaggregation_decode_polling_interval", 1),
        ("encoder_only", False),
        ("language_only", False),
        ("encoder_transfer_backend", "zmq_to_scheduler"),
        ("encoder_urls", []),
        ("custom_weight_loader", []),
        ("weight_loader_disable_mmap", False),
        ("remote_instance_weight_loader_seed_instance_ip", None),
        ("remote_instance_weight_loader_seed_instance_service_port", None),
        ("remote_instance_weight_loader_send_weights_group_ports", None),
        ("enable_pdmux", False),
        ("pdmux_config_path", None),
        ("sm_group_num", 8),
        ("mm_max_concurrent_calls", 32),
        ("mm_per_request_timeout", 10.0),
        ("enable_broadcast_mm_inputs_process", False),
        ("mm_process_config", {"image": {"max_pixels": 3211264, "min_pixels": 3136}}),
        ("limit_mm_data_per_request", None),
        ("decrypted_config_file", None),
        ("decrypted_draft_config_file", None),
        ("forward_hooks", None),
    ]
    body = ", ".join(f"{k}={v!r}" for k, v in fields)
    return f"ServerArgs({body})"


# ---- startup -----------------------------------------------------------------------------
def startup_events(rng: random.Random) -> tuple[list[Event], list[list[Event]]]:
    """Main-process events and one event list per rank, each in its own order."""
    main: list[Event] = []
    ranks: list[list[Event]] = [[] for _ in range(NUM_RANKS)]

    def m(t: float, msg: str) -> None:
        main.append(Event(t, tagged(t, None, msg)))

    def raw_main(t: float, text: str) -> None:
        main.append(Event(t, text))

    t = at(9, 2, 4.2)
    raw_main(
        t,
        "/opt/sglang/.venv/lib/python3.12/site-packages/torch/cuda/__init__.py:63: "
        "FutureWarning: The pynvml package is deprecated. Please install nvidia-ml-py instead. "
        "If you did not install pynvml directly, please report this to the maintainers of the "
        "package that installed pynvml for you.\n  import pynvml  # type: ignore[import]",
    )
    t = at(9, 2, 5.1)
    m(
        t,
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests.",
    )
    m(t + 0.2, f"server_args={server_args_repr()}")
    raw_main(
        at(9, 2, 6.4),
        "WARNING:transformers.tokenization_utils_base:Special tokens have been added in the "
        "vocabulary, make sure the associated word embeddings are fine-tuned or trained.",
    )
    m(at(9, 2, 7.0), "Using default HuggingFace chat template with detected content format: openai")
    raw_main(
        at(9, 2, 9.3),
        "<frozen importlib._bootstrap_external>:1184: FutureWarning: The cuda.cudart module is "
        "deprecated and will be removed in a future release, please switch to use the "
        "cuda.bindings.runtime module instead.",
    )

    tp5_glue_done = False
    for r in range(NUM_RANKS):
        v = rank_values(r)
        ev = ranks[r]
        j = rng.uniform(0, 0.9)

        def e(t: float, msg: str, _r: int = r, _ev: list[Event] = ev) -> None:
            _ev.append(Event(t, tagged(t, _r, msg)))

        def raw(t: float, text: str, _ev: list[Event] = ev) -> None:
            _ev.append(Event(t, text))

        e(at(9, 2, 11.0) + j * 0.4, "Init torch distributed begin.")
        raw(
            at(9, 2, 11.5) + j * 0.4,
            f"[Gloo] Rank {r} is connected to 7 peer ranks. "
            "Expected number of connected peer ranks is : 7",
        )
        if r == 0:
            e(at(9, 2, 12.5), "sglang is using nccl==2.27.5")
        e(
            at(9, 2, 13.0) + j * 0.3,
            "Custom allreduce is disabled because it's not supported on more than two "
            "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
            "explicitly.",
        )
        e(
            at(9, 2, 13.3) + j * 0.3,
            f"Init torch distributed ends. mem usage={gb(v['init_usage'])} GB",
        )
        load_t0 = at(9, 2, 14.0) + j * 0.5
        e(load_t0, f"Load weight begin. avail mem={gb(v['pre'])} GB")
        load_s = 214.0 + rng.uniform(-1.5, 1.5)
        checkpoints = [0, 16, 32, 48, 64] if r == 0 else [0, 32, 64]
        load_end_line = (
            f"Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
            f"avail mem={gb(v['after_load'])} GB, mem usage={gb(v['weights'])} GB."
        )
        for n in checkpoints:
            el = load_s * n / SHARDS
            if n == SHARDS and r == 5 and not tp5_glue_done:
                # Real-log artefact: a rank's log line lands on the end of a progress bar
                # that has not printed its newline yet (cf. fixtures/sglang-logs/02).
                bar = shards_bar(63, load_s * 63 / SHARDS)
                t_end = load_t0 + load_s + 0.4
                raw(t_end, bar + tagged(t_end, 5, load_end_line) + "\n")
                tp5_glue_done = True
                continue
            raw(load_t0 + el, shards_bar(n, el))
        if r == 0:
            # tqdm's final refresh and close print the finished bar twice, then a newline.
            raw(load_t0 + load_s, shards_bar(SHARDS, load_s) + "\n")
        if r != 5:
            e(load_t0 + load_s + 0.4, load_end_line)

        t_kv = at(9, 5, 50.2) + j
        if r == 0:
            e(t_kv, "Using KV cache dtype: torch.bfloat16")
        e(t_kv + 0.1, f"KV Cache is allocated. #tokens: {KV_TOKENS}, KV size: {gb(v['kv'])} GB")
        e(t_kv + 0.3, f"Memory pool end. avail mem={gb(v['pool_end'])} GB")
        cg_t0 = at(9, 5, 52.1) + j * 0.2
        cg_s, dcg_s, dext_s = CAPTURE_S[r]
        e(
            cg_t0,
            "Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={gb(v['cg_begin'])} GB",
        )
        if r == 0:
            e(cg_t0 + 0.05, f"Capture cuda graph bs {CAPTURE_BS}")
            raw(cg_t0 + 0.1, "\n".join(target_capture_bars(cg_s)))
        e(
            cg_t0 + cg_s,
            f"Capture cuda graph end. Time elapsed: {cg_s:.2f} s. "
            f"mem usage={gb(v['cg_usage'])} GB. avail mem={gb(v['cg_after'])} GB.",
        )

        # Draft model (EAGLE-3): 0.5.8 initialises it after the target's CUDA graphs.
        d0 = cg_t0 + cg_s + 0.2
        e(d0, "Init torch distributed begin.")
        e(d0 + 0.1, "Init torch distributed ends. mem usage=0.00 GB")
        e(d0 + 0.2, f"Load weight begin. avail mem={gb(v['draft_pre'])} GB")
        if r == 0:
            raw(d0 + 2.5, shards_bar(1, 2.3, total=1))
        e(
            d0 + 2.6 + j * 0.2,
            "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
            f"avail mem={gb(v['draft_after_load'])} GB, mem usage={gb(v['draft_weights'])} GB.",
        )
        e(
            d0 + 3.0 + j * 0.2,
            f"KV Cache is allocated. #tokens: {KV_TOKENS}, K size: {gb(v['draft_k'])} GB, "
            f"V size: {gb(v['draft_v'])} GB",
        )
        e(d0 + 3.1 + j * 0.2, f"Memory pool end. avail mem={gb(v['draft_pool_end'])} GB")
        dcg_t0 = at(9, 6, 6.3) + j * 0.3
        e(
            dcg_t0,
            "Capture draft cuda graph begin. This can take up to several minutes. "
            f"avail mem={gb(v['dcg_begin'])} GB",
        )
        if r == 0:
            raw(
                dcg_t0 + dcg_s - 0.1,
                capture_bar(1, gb(v["dcg_after"] + 2), 10, 10, dcg_s - 0.15),
            )
        e(
            dcg_t0 + dcg_s,
            f"Capture draft cuda graph end. Time elapsed: {dcg_s:.2f} s. "
            f"mem usage={gb(v['dcg_usage'])} GB. avail mem={gb(v['dcg_after'])} GB.",
        )
        dext_t0 = at(9, 6, 10.1) + j * 0.05
        e(
            dext_t0,
            "Capture draft extend cuda graph begin. This can take up to several minutes. "
            f"avail mem={gb(v['dext_begin'])} GB",
        )
        e(
            dext_t0 + dext_s,
            f"Capture draft extend cuda graph end. Time elapsed: {dext_s:.2f} s. "
            f"mem usage={gb(v['dext_usage'])} GB. avail mem={gb(v['dext_after'])} GB.",
        )
        t_sum = dext_t0 + dext_s + 0.2
        if r == 0:
            e(
                t_sum,
                f"max_total_num_tokens={KV_TOKENS}, chunked_prefill_size={CHUNKED_PREFILL}, "
                f"max_prefill_tokens={MAX_PREFILL}, max_running_requests={MAX_RUNNING}, "
                f"context_len={CONTEXT_LEN}, available_gpu_mem={gb(v['dext_after'])} GB",
            )
        host_gb = host_kv_bytes(KV_TOKENS) / 1e9
        e(t_sum + 0.5, f"Allocating {host_gb:.2f} GB host memory for hierarchical KV cache.")

    # Server comes up (main process), warmup request, ready.
    m(at(9, 6, 27.2), "INFO:     Started server process [12345]")
    m(at(9, 6, 27.3), "INFO:     Waiting for application startup.")
    m(at(9, 6, 27.4), "INFO:     Application startup complete.")
    m(at(9, 6, 27.5), "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    m(at(9, 6, 29.1), 'INFO:     127.0.0.1:41234 - "GET /get_model_info HTTP/1.1" 200 OK')
    ranks[0].append(
        Event(
            at(9, 6, 30.2),
            tagged(
                at(9, 6, 30.2),
                0,
                "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, ",
            ),
        )
    )
    m(at(9, 6, 31.0), 'INFO:     127.0.0.1:41240 - "POST /generate HTTP/1.1" 200 OK')
    m(at(9, 6, 31.3), "The server is fired up and ready to roll!")
    return main, ranks


def target_capture_bars(total_s: float) -> list[str]:
    """TP0's 'Capturing batches' progress output (bs largest first), as it lands in a file."""
    order = list(reversed(CAPTURE_BS))
    avail = ["11.06", "10.71", "10.38", "10.09", "9.83", "9.68", "9.57", "9.50", "9.47", "9.45"]
    total = len(order)
    per = (total_s - 0.25) / total
    # The first refreshes arrive without newlines (carriage returns dropped by the log).
    first = "  0%|          | 0/10 [00:00<?, ?it/s]" + capture_bar(order[0], avail[0], 0, total, 0)
    first += capture_bar(order[0], avail[0], 1, total, per)
    first += capture_bar(order[1], avail[1], 1, total, per)
    lines = [first]
    for n in (4, 7):
        lines.append(
            capture_bar(order[n - 1], avail[n - 1], n, total, per * n)
            + capture_bar(order[n], avail[n], n, total, per * n)
        )
    lines.append(capture_bar(order[-1], avail[-1], total, total, per * total))
    lines.append("")
    return lines


# ---- runtime ----------------------------------------------------------------------------
def fmt_prefill(
    new_seq: int, new_tok: int, cached: int, used: int, running: int, queued: int
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: {cached}, "
        f"token usage: {used / KV_TOKENS:.2f}, #running-req: {running}, #queue-req: {queued}, "
    )


def fmt_decode(running: int, used: int, acc: float, thr: float, queued: int) -> str:
    return (
        f"Decode batch, #running-req: {running}, #token: {used}, "
        f"token usage: {used / KV_TOKENS:.2f}, accept len: {acc:.2f}, "
        f"accept rate: {(acc - 1) / 3:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {thr:.2f}, #queue-req: {queued}, "
    )


# Requests arriving per decode-log interval: a first wave (long prompts, short answers) fills
# the pool to about two thirds and drains; a second wave of 12 long answers is still running
# at the end of the log.
WAVE1 = [3, 2, 4, 3, 2, 3, 1, 2, 0, 1, 0, 1, 0, 1]
WAVE2_START = 30
WAVE2 = [2, 1, 2, 1, 2, 1, 2, 1]
INTERVALS = 39
FINAL = {"running": 12, "token": 48211, "accept_len": 2.81, "throughput": 512.34, "queued": 0}


def _arrivals(i: int) -> int:
    if i < len(WAVE1):
        return WAVE1[i]
    if WAVE2_START <= i < WAVE2_START + len(WAVE2):
        return WAVE2[i - WAVE2_START]
    return 0


def simulate(
    rng: random.Random, last_cached_extra: int
) -> tuple[list[tuple[float, str, bool]], dict]:
    """Return (t, message, is_scheduler_line) events after 'ready', and the final state."""
    out: list[tuple[float, str, bool]] = []
    t = at(9, 6, 58.0)
    reqs: list[list[int]] = []  # [kv_tokens, out_left]
    queue: list[tuple[int, int, int]] = []  # (new, cached, out_len)
    port = 50412
    n_wave2 = sum(WAVE2)
    seen_wave2 = 0
    for i in range(INTERVALS):
        for _ in range(_arrivals(i)):
            wave2 = i >= WAVE2_START
            # Chats share a system prompt; HiCache also serves longer shared documents.
            if i == 0 and not reqs and not queue:
                cached = 0
            else:
                cached = rng.choice((1536, 2304, 3072, 5120))
            if wave2:
                cached = 1536
                new = rng.randrange(300, 2400)
                out_len = rng.randrange(1800, 4000)
                seen_wave2 += 1
                if seen_wave2 == n_wave2:
                    cached += last_cached_extra
            else:
                new = rng.randrange(600, 5200)
                out_len = rng.randrange(300, 2600)
            queue.append((new, cached, out_len))
            t += rng.uniform(0.05, 0.4)
            client = f"10.20.0.{15 + port % 7}:{port}"
            access = f'INFO:     {client} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            out.append((t, access, False))
            port += rng.randrange(3, 40)
        # Admit in prefill batches of at most chunked_prefill_size new tokens, while the
        # pool keeps room for the answers (SGLang's new_token_ratio does the same, roughly).
        while queue:
            batch: list[tuple[int, int, int]] = []
            budget = CHUNKED_PREFILL
            used = sum(r[0] + r[1] // 2 for r in reqs)
            while queue and queue[0][0] <= budget and len(reqs) + len(batch) < MAX_RUNNING:
                new, cached, out_len = queue[0]
                if used + new + cached + out_len // 2 > KV_TOKENS * 0.9:
                    break
                batch.append(queue.pop(0))
                budget -= new
                used += new + cached + out_len // 2
            if not batch:
                break
            running_before = len(reqs)
            for new, cached, out_len in batch:
                reqs.append([new + cached, out_len])
            t += rng.uniform(0.3, 0.9)
            new_tok = sum(b[0] for b in batch)
            cached_tok = sum(b[1] for b in batch)
            used = sum(r[0] for r in reqs)
            line = fmt_prefill(len(batch), new_tok, cached_tok, used, running_before, len(queue))
            out.append((t, line, True))
        if not reqs:
            t += 2.5  # idle: SGLang logs nothing
            continue
        # One decode log interval (decode_log_interval=40 steps).
        acc = rng.uniform(2.55, 3.05)
        step_s = 0.055 + 0.0011 * len(reqs)
        interval = 40 * step_s * rng.uniform(0.97, 1.04)
        gen = 0
        for r in reqs:
            g = min(r[1], int(40 * acc * rng.uniform(0.9, 1.1)))
            r[0] += g
            r[1] -= g
            gen += g
        t += interval
        used = sum(r[0] for r in reqs)
        out.append((t, fmt_decode(len(reqs), used, acc, gen / interval, len(queue)), True))
        reqs = [r for r in reqs if r[1] > 0]
    state = {"running": len(reqs), "token": sum(r[0] for r in reqs), "t": t}
    return out, state


def runtime_events() -> list[Event]:
    _, state = simulate(random.Random(SEED + 1), 0)
    # Give the last request a longer cached prefix so that the final decode line lands on
    # the story's 48,211 tokens (the figure the README's and docs' examples show).
    # The final line is one more decode interval: 12 requests x 40 steps x 2.81 tokens.
    growth = FINAL["running"] * int(40 * FINAL["accept_len"])
    extra = FINAL["token"] - growth - state["token"]
    events, state = simulate(random.Random(SEED + 1), extra)
    assert state["running"] == FINAL["running"], state
    assert state["token"] + growth == FINAL["token"], state
    t_final = state["t"] + 2.64
    events.append(
        (
            t_final,
            fmt_decode(
                FINAL["running"],
                FINAL["token"],
                FINAL["accept_len"],
                FINAL["throughput"],
                FINAL["queued"],
            ),
            True,
        )
    )
    # Prometheus scrapes /metrics every 15 s (enable_metrics=True).
    t = at(9, 6, 45.0)
    while t < t_final:
        events.append((t, 'INFO:     10.20.0.2:39012 - "GET /metrics HTTP/1.1" 200 OK', False))
        t += 15.0
    result = []
    for t, msg, sched in events:
        result.append(Event(t, tagged(t, 0 if sched else None, msg)))
    result.sort(key=lambda ev: ev.t)
    return result


# ---- merge and sidecar ----------------------------------------------------------------
def merge(streams: list[list[Event]], rng: random.Random) -> list[Event]:
    """Interleave streams: global time order, ties broken at random, each stream's order kept."""
    pos = [0] * len(streams)
    out: list[Event] = []
    while True:
        heads = [i for i, s in enumerate(streams) if pos[i] < len(s)]
        if not heads:
            return out
        t_min = min(int(streams[i][pos[i]].t) for i in heads)
        ready = [i for i in heads if int(streams[i][pos[i]].t) == t_min]
        i = rng.choice(ready)
        out.append(streams[i][pos[i]])
        pos[i] += 1


def build_log() -> str:
    _self_check()
    rng = random.Random(SEED)
    main, ranks = startup_events(rng)
    for s in [main, *ranks]:
        for a, b in itertools.pairwise(s):
            assert a.t <= b.t, (a.text[:80], b.text[:80])
    startup = merge([main, *ranks], rng)
    lines = [ev.text for ev in startup] + [ev.text for ev in runtime_events()]
    return "\n".join(lines) + "\n"


def rank_sidecar(r: int) -> dict:
    v = rank_values(r)
    cg_s, dcg_s, dext_s = CAPTURE_S[r]

    def f(c: int) -> float:
        return c / 100

    draft = {
        "init_dist_mem_usage_gb": 0.0,
        "avail_before_weight_load_gb": f(v["draft_pre"]),
        "avail_after_weight_load_gb": f(v["draft_after_load"]),
        "weight_mem_usage_gb": f(v["draft_weights"]),
        "kv_tokens": KV_TOKENS,
        "k_size_gb": f(v["draft_k"]),
        "v_size_gb": f(v["draft_v"]),
        "kv_size_gb": None,
        "avail_after_mem_pool_gb": f(v["draft_pool_end"]),
        "avail_before_cuda_graph_gb": f(v["dcg_begin"]),
        "avail_after_cuda_graph_gb": f(v["dext_after"]),
        "cuda_graph_mem_usage_gb": f(v["dcg_usage"] + v["dext_usage"]),
        "cuda_graph_capture_s": round(dcg_s + dext_s, 2),
    }
    return {
        "init_dist_mem_usage_gb": f(v["init_usage"]),
        "avail_before_weight_load_gb": f(v["pre"]),
        "avail_after_weight_load_gb": f(v["after_load"]),
        "weight_mem_usage_gb": f(v["weights"]),
        "kv_tokens": KV_TOKENS,
        "k_size_gb": None,
        "v_size_gb": None,
        "kv_size_gb": f(v["kv"]),
        "avail_after_mem_pool_gb": f(v["pool_end"]),
        "avail_before_cuda_graph_gb": f(v["cg_begin"]),
        "avail_after_cuda_graph_gb": f(v["cg_after"]),
        "cuda_graph_mem_usage_gb": f(v["cg_usage"]),
        "cuda_graph_capture_s": cg_s,
        "draft": draft,
        "host_kv_gb": round(host_kv_bytes(KV_TOKENS) / 1e9, 2),
    }


def build_sidecar(log_text: str) -> dict:
    lines = log_text.splitlines()
    prefill = [ln for ln in lines if "] Prefill batch, " in ln]
    decode = [ln for ln in lines if "] Decode batch, " in ln]
    return {
        "source": "synthetic: bench/make_story_log.py (the design story, design.md 'The job')",
        "source_title": "Kimi-K2.5 INT4 on 8 x RTX PRO 6000 Blackwell, TP8, EAGLE-3, HiCache",
        "posted": None,
        "sglang_version": "0.5.8.post1",
        "sglang_version_basis": "generated in the 0.5.8.post1 formats of reference/sglang.md",
        "gpu_type": "NVIDIA RTX PRO 6000 Blackwell (96 GB, 95.59 GiB)",
        "gpu_count": NUM_RANKS,
        "tp_size": NUM_RANKS,
        "dp_size": 1,
        "ep_size": 1,
        "pp_size": 1,
        "model": "KimiK25ForConditionalGeneration (moonshotai/Kimi-K2.5, INT4)",
        "attention": "MLA (KV size), 61 layers, 512 + 64",
        "kv_cache_dtype": "torch.bfloat16",
        "mem_fraction_static": MFS,
        "speculative": {
            "algorithm": "EAGLE3",
            "draft_model_path": "lightseekorg/kimi-k2.5-eagle3",
            "draft_type": "LlamaForCausalLMEagle3",
            "num_steps": 3,
            "eagle_topk": 1,
            "num_draft_tokens": 4,
        },
        "hicache": {
            "ratio": HICACHE_RATIO,
            "host_tokens_per_rank": int(KV_TOKENS * HICACHE_RATIO) + 1,
            "host_gb_per_rank_decimal": round(host_kv_bytes(KV_TOKENS) / 1e9, 2),
            "total_host_gb_decimal": round(NUM_RANKS * host_kv_bytes(KV_TOKENS) / 1e9, 2),
        },
        "log_prefix_style": "[ts TPn] (TP8, no DP/EP/PP tags)",
        "complete_log": True,
        "excerpt_notes": (
            "Complete startup of 8 interleaved scheduler processes plus the main process, "
            "tqdm noise (one TP5 'Load weight end' glued to a progress bar), then traffic."
        ),
        "ranks": {f"TP{r}": rank_sidecar(r) for r in range(NUM_RANKS)},
        "summary_line": {
            "max_total_num_tokens": KV_TOKENS,
            "chunked_prefill_size": CHUNKED_PREFILL,
            "max_prefill_tokens": MAX_PREFILL,
            "max_running_requests": MAX_RUNNING,
            "context_len": CONTEXT_LEN,
            "available_gpu_mem_gb": rank_values(0)["dext_after"] / 100,
        },
        "server_args": {
            "model_path": "moonshotai/Kimi-K2.5",
            "mem_fraction_static": MFS,
            "tp_size": NUM_RANKS,
            "page_size": 1,
            "kv_cache_dtype": "auto",
            "speculative_algorithm": "EAGLE3",
            "enable_hierarchical_cache": True,
            "hicache_ratio": HICACHE_RATIO,
            "context_length": CONTEXT_LEN,
            "port": 30000,
            "host": "0.0.0.0",
            "max_running_requests": MAX_RUNNING,
        },
        "startup_succeeded": True,
        "startup_succeeded_basis": "'The server is fired up and ready to roll!'",
        "failure": None,
        "extra": {
            "capture_bs_max": max(CAPTURE_BS),
            "cell_size_bytes": CELL_BYTES,
            "draft_extend_end_tp0": "2026-02-27 09:06:12",
            "ready_at": "2026-02-27 09:06:31",
            "prefill_batch_lines": len(prefill),
            "decode_batch_lines": len(decode),
            "last_decode": {
                "running_req": FINAL["running"],
                "token": FINAL["token"],
                "token_usage": round(FINAL["token"] / KV_TOKENS, 2),
                "accept_len": FINAL["accept_len"],
                "accept_rate": round((FINAL["accept_len"] - 1) / 3, 2),
                "gen_throughput": FINAL["throughput"],
                "queue_req": FINAL["queued"],
            },
        },
        "notes": (
            "Draft values: cuda_graph_mem_usage_gb and cuda_graph_capture_s are draft + draft "
            "extend captures summed; avail_before_cuda_graph_gb is the draft capture's begin, "
            "avail_after_cuda_graph_gb the draft extend capture's end. Target: pre 93.17 x "
            "0.12 = 11.18 GiB reserve = Memory pool end; 7.40 GiB left after draft and graphs."
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="write the sidecar JSON instead")
    p.add_argument("--check", action="store_true", help="compare with the committed fixtures")
    a = p.parse_args(argv)
    log_text = build_log()
    json_text = json.dumps(build_sidecar(log_text), indent=2, ensure_ascii=False) + "\n"
    if a.check:
        fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
        stem = "kimi-k25-tp8-eagle3-hicache-0.5.8"
        ok = True
        for path, text in (
            (fixtures.parent.parent / "tui" / "kvtop" / "data" / f"{stem}.log", log_text),
            (fixtures / f"{stem}.json", json_text),
        ):
            same = path.exists() and path.read_text(encoding="utf-8") == text
            print(f"{path.name}: {'up to date' if same else 'DIFFERS'}")
            ok = ok and same
        return 0 if ok else 1
    sys.stdout.buffer.write((json_text if a.json else log_text).encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
