"""One line per SGLang version and variant (reference section a and e) -> the expected event."""

from __future__ import annotations

import pytest

from kvtop.sglang import events as ev
from kvtop.sglang.log_line import parse_line

P = "[2026-02-27 09:02:11 TP3] "

# (id, line, event type, expected attributes)
CASES: list[tuple[str, str, type, dict[str, object]]] = [
    # --- prefixes ---------------------------------------------------------------------------
    (
        "prefix-0.4.0-tp0-single",
        "[2024-11-29 10:00:00 TP0] Load weight begin. avail mem=78.84 GB",
        ev.LoadWeightBegin,
        {"avail_gib": 78.84},
    ),
    (
        "prefix-none-single-gpu",
        "[2025-05-14 09:29:03] Memory pool end. avail mem=7.64 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 7.64},
    ),
    (
        "prefix-ms",
        "[2026-02-27 09:02:11.042 DP1 TP1 EP1] Memory pool end. avail mem=7.64 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 7.64},
    ),
    (
        "prefix-0.4.10-order-dp-tp-ep-pp",
        "[2025-08-01 10:00:00 DP1 TP5 EP5 PP1] Memory pool end. avail mem=1.00 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 1.0},
    ),
    (
        "prefix-0.5.9-full",
        "[2026-05-07 13:39:14 DP1 PP0 ATTN_CP2 MOE_DP1 TP1 EP1] Memory pool end. avail mem=2.00 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 2.0},
    ),
    (
        "prefix-after-tqdm",
        "Loading shards:  94% | 15/16 [00:04<00:00][2026-05-07 13:39:14 TP1] Memory pool end. avail mem=3.00 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 3.0},
    ),
    (
        "prefix-after-journalctl-header",
        "Feb 27 09:02:11 gpu-host python3[4242]: [2026-02-27 09:02:11 TP3] Memory pool end. avail mem=11.18 GB",
        ev.MemoryPoolEnd,
        {"avail_gib": 11.18},
    ),
    # --- init / baseline ----------------------------------------------------------------------
    (
        "init-begin",
        P + "Init torch distributed begin.",
        ev.InitBegin,
        {"step": "torch distributed"},
    ),
    (
        "init-end-0.4.3",
        P + "Init torch distributed ends. mem usage=1.25 GB",
        ev.InitEnd,
        {"mem_usage_gib": 1.25, "elapsed_s": None},
    ),
    (
        "init-end-0.5.9",
        P + "Init torch distributed ends. elapsed=3.21 s, mem usage=0.98 GB",
        ev.InitEnd,
        {"mem_usage_gib": 0.98, "elapsed_s": 3.21},
    ),
    ("init-parallel-begin-0.5.20", P + "Init parallel begin.", ev.InitBegin, {"step": "parallel"}),
    (
        "init-parallel-end-0.5.20",
        P + "Init parallel ends. elapsed=2.50 s",
        ev.InitEnd,
        {"step": "parallel", "elapsed_s": 2.5},
    ),
    (
        "baseline-0.5.20",
        P + "Memory baseline taken. mem usage=1.10 GB",
        ev.MemoryBaseline,
        {"mem_usage_gib": 1.1},
    ),
    (
        "unbalanced-0.5.10",
        P
        + "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. pre_model_load_memory=87.1, local_gpu_memory=93.2",
        ev.UnbalancedMemory,
        {},
    ),
    # --- weights ------------------------------------------------------------------------------
    (
        "load-end-0.3.6",
        P + "Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=60.12 GB",
        ev.LoadWeightEnd,
        {
            "model_type": "LlamaForCausalLM",
            "dtype": "torch.float16",
            "avail_gib": 60.12,
            "mem_usage_gib": None,
        },
    ),
    (
        "load-end-0.4.3",
        P
        + "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=31.87 GB, mem usage=105.59 GB.",
        ev.LoadWeightEnd,
        {"model_type": "DeepseekV3ForCausalLM", "avail_gib": 31.87, "mem_usage_gib": 105.59},
    ),
    (
        "load-end-0.5.9",
        P
        + "Load weight end. elapsed=5.05 s, type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=121.90 GB, mem usage=16.39 GB.",
        ev.LoadWeightEnd,
        {"elapsed_s": 5.05, "dtype": "torch.bfloat16", "avail_gib": 121.9, "mem_usage_gib": 16.39},
    ),
    (
        "load-end-0.5.10-quant",
        P
        + "Load weight end. elapsed=41.20 s, type=DeepseekV4ForCausalLM, quant=fp8, fmt=e4m3, avail mem=12.25 GB, mem usage=125.65 GB.",
        ev.LoadWeightEnd,
        {
            "quant": "quant=fp8, fmt=e4m3",
            "dtype": None,
            "avail_gib": 12.25,
            "mem_usage_gib": 125.65,
        },
    ),
    (
        "load-end-0.5.10-noquant",
        P
        + "Load weight end. elapsed=5.05 s, type=Qwen3MoeForCausalLM, avail mem=121.90 GB, mem usage=16.39 GB.",
        ev.LoadWeightEnd,
        {"quant": None, "model_type": "Qwen3MoeForCausalLM", "avail_gib": 121.9},
    ),
    (
        "kv-dtype",
        P + "Using KV cache dtype: torch.float8_e4m3fn",
        ev.KvCacheDtype,
        {"dtype": "torch.float8_e4m3fn"},
    ),
    # --- KV cache -------------------------------------------------------------------------------
    (
        "kv-0.4.1",
        P + "KV Cache is allocated. K size: 27.80 GB, V size: 27.80 GB.",
        ev.KvCacheAllocated,
        {"tokens": None, "k_gib": 27.8, "v_gib": 27.8, "kv_gib": None},
    ),
    (
        "kv-mha-0.4.3",
        P + "KV Cache is allocated. #tokens: 404890, K size: 27.80 GB, V size: 27.80 GB",
        ev.KvCacheAllocated,
        {"tokens": 404890, "k_gib": 27.8, "v_gib": 27.8, "kv_gib": None, "total_gib": 55.6},
    ),
    (
        "kv-mla-0.4.5",
        P + "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
        ev.KvCacheAllocated,
        {"tokens": 159277, "kv_gib": 10.42, "k_gib": None, "v_gib": None},
    ),
    (
        "kv-mha-0.5.13-dtype",
        P
        + "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
        ev.KvCacheAllocated,
        {"dtype": "torch.bfloat16", "tokens": 1000, "k_gib": 1.0},
    ),
    (
        "kv-mla-0.5.13-dtype",
        P + "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 300000, KV size: 9.81 GB",
        ev.KvCacheAllocated,
        {"dtype": "torch.float8_e4m3fn", "tokens": 300000, "kv_gib": 9.81},
    ),
    (
        "kv-named-0.5.19",
        P
        + "Lightning KV Cache is allocated. dtype: torch.bfloat16, #tokens: 5000, K size: 0.50 GB, V size: 0.50 GB",
        ev.KvCacheAllocated,
        {"cache_name": "Lightning KV Cache", "tokens": 5000},
    ),
    (
        "kv-va-0.5.19",
        P
        + "KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, K size: 40.00 GB, V size: 40.00 GB",
        ev.KvCacheAllocated,
        {"va_upper_bound": True, "tokens": 900000},
    ),
    (
        "kv-post-capture",
        P
        + "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 800000, KV size: 30.00 GB, avail mem=5.00 GB",
        ev.KvCacheAllocated,
        {"post_capture": True, "tokens": 800000, "kv_gib": 30.0, "avail_gib": 5.0},
    ),
    (
        "mamba",
        P
        + "Mamba Cache is allocated. max_mamba_cache_size: 656, conv_state size: 0.12GB, ssm_state size: 3.45GB ",
        ev.MambaCacheAllocated,
        {"max_mamba_cache_size": 656, "conv_state_gib": 0.12, "ssm_state_gib": 3.45},
    ),
    (
        "swa",
        P + "SWAKVPool mem usage: 12.5 GB, swa size: 100000, full size: 400000",
        ev.SwaPoolAllocated,
        {"mem_usage_gib": 12.5, "swa_tokens": 100000, "full_tokens": 400000},
    ),
    (
        "sliding",
        P + "Use sliding window memory pool. full_layer_tokens=400000, swa_layer_tokens=100000",
        ev.SlidingWindowPool,
        {"full_layer_tokens": 400000, "swa_layer_tokens": 100000},
    ),
    ("pool-end", P + "Memory pool end. avail mem=11.18 GB", ev.MemoryPoolEnd, {"avail_gib": 11.18}),
    # --- CUDA graphs ---------------------------------------------------------------------------
    (
        "cg-begin-0.3.6",
        P + "Capture cuda graph begin. This can take up to several minutes.",
        ev.GraphCaptureBegin,
        {"role": None, "graph": "decode", "avail_gib": None},
    ),
    (
        "cg-end-0.4.0",
        P + "Capture cuda graph end. Time elapsed: 12.00 s",
        ev.GraphCaptureEnd,
        {"elapsed_s": 12.0, "mem_usage_gib": None, "avail_gib": None},
    ),
    (
        "cg-begin-0.4.3",
        P + "Capture cuda graph begin. This can take up to several minutes. avail mem=11.12 GB",
        ev.GraphCaptureBegin,
        {"avail_gib": 11.12},
    ),
    (
        "cg-end-0.4.3-avail-first",
        P + "Capture cuda graph end. Time elapsed: 6.83 s. avail mem=9.41 GB. mem usage=1.71 GB.",
        ev.GraphCaptureEnd,
        {"elapsed_s": 6.83, "avail_gib": 9.41, "mem_usage_gib": 1.71},
    ),
    (
        "cg-end-0.4.6-usage-first",
        P + "Capture cuda graph end. Time elapsed: 6.83 s. mem usage=1.71 GB. avail mem=9.41 GB.",
        ev.GraphCaptureEnd,
        {"elapsed_s": 6.83, "avail_gib": 9.41, "mem_usage_gib": 1.71},
    ),
    (
        "cg-cpu-0.5",
        P + "Capture cpu graph end. Time elapsed: 1.00 s. mem usage=0.00 GB. avail mem=100.00 GB.",
        ev.GraphCaptureEnd,
        {"graph": "decode", "avail_gib": 100.0},
    ),
    (
        "cg-piecewise-begin",
        P + "Capture piecewise CUDA graph begin. avail mem=20.00 GB",
        ev.GraphCaptureBegin,
        {"graph": "piecewise", "avail_gib": 20.0, "role": None},
    ),
    (
        "cg-piecewise-end",
        P
        + "Capture piecewise CUDA graph end. Time elapsed: 30.00 s. mem usage=1.50 GB. avail mem=18.50 GB.",
        ev.GraphCaptureEnd,
        {"graph": "piecewise", "mem_usage_gib": 1.5, "avail_gib": 18.5},
    ),
    (
        "cg-draft-begin",
        P
        + "Capture draft cuda graph begin. This can take up to several minutes. avail mem=7.85 GB",
        ev.GraphCaptureBegin,
        {"role": "draft", "graph": "decode", "avail_gib": 7.85},
    ),
    (
        "cg-draft-end-0.4.10",
        P
        + "Capture draft cuda graph end. Time elapsed: 3.12 s. mem usage=0.31 GB. avail mem=7.54 GB.",
        ev.GraphCaptureEnd,
        {"role": "draft", "mem_usage_gib": 0.31, "avail_gib": 7.54},
    ),
    (
        "cg-draft-end-0.4.5",
        P
        + "Capture draft cuda graph end. Time elapsed: 3.12 s. avail mem=7.54 GB. mem usage=0.31 GB.",
        ev.GraphCaptureEnd,
        {"role": "draft", "mem_usage_gib": 0.31, "avail_gib": 7.54},
    ),
    (
        "cg-draft-extend",
        P
        + "Capture draft extend cuda graph end. Time elapsed: 2.05 s. mem usage=0.14 GB. avail mem=7.40 GB.",
        ev.GraphCaptureEnd,
        {"role": "draft", "graph": "extend", "elapsed_s": 2.05, "avail_gib": 7.4},
    ),
    (
        "cg-0.5.14-target-verify-begin",
        P
        + "Capture target verify CUDA graph begin. backend=fa3, num_tokens_per_bs=4, bs=[1, 2, 4], avail mem=11.10 GB",
        ev.GraphCaptureBegin,
        {"role": "target", "graph": "verify", "avail_gib": 11.1},
    ),
    (
        "cg-0.5.14-target-decode-end",
        P
        + "Capture target decode CUDA graph end. elapsed=6.00 s, mem usage=1.70 GB, avail mem=9.40 GB.",
        ev.GraphCaptureEnd,
        {
            "role": "target",
            "graph": "decode",
            "elapsed_s": 6.0,
            "mem_usage_gib": 1.7,
            "avail_gib": 9.4,
        },
    ),
    (
        "cg-0.5.23-end-bs",
        P
        + "Capture draft decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=3.00 s, mem usage=0.30 GB, avail mem=7.50 GB.",
        ev.GraphCaptureEnd,
        {"role": "draft", "graph": "decode", "elapsed_s": 3.0, "avail_gib": 7.5},
    ),
    (
        "cg-0.5.23-begin-no-bs",
        P
        + "Capture target decode CUDA graph begin. backend=flashinfer, num_tokens_per_req=1, avail mem=30.00 GB",
        ev.GraphCaptureBegin,
        {"role": "target", "graph": "decode", "avail_gib": 30.0},
    ),
    (
        "cg-prefill",
        P
        + "Capture target prefill CUDA graph end. elapsed=9.00 s, mem usage=1.20 GB, avail mem=28.80 GB.",
        ev.GraphCaptureEnd,
        {"graph": "prefill", "mem_usage_gib": 1.2},
    ),
    (
        "cg-draft-extend-0.5.23",
        P
        + "Capture draft extend CUDA graph begin. backend=fa3, num_tokens_per_req=1, avail mem=7.54 GB",
        ev.GraphCaptureBegin,
        {"role": "draft", "graph": "extend", "avail_gib": 7.54},
    ),
    (
        "cg-bs-list",
        P + "Capture cuda graph bs [1, 2, 4, 8, 16]",
        ev.GraphBatchSizes,
        {"batch_sizes": (1, 2, 4, 8, 16)},
    ),
    (
        "tqdm-capturing-0.5",
        "Capturing batches (bs=32 avail_mem=27.49 GB):  50%|█████     | 5/10 [00:01<00:01,  3.1it/s]",
        ev.GraphCaptureProgress,
        {"bs": 32, "avail_gib": 27.49},
    ),
    (
        "tqdm-capturing-0.4.6",
        "Capturing batches (avail_mem=5.64 GB): 100%|██████████| 23/23 [00:05<00:00,  3.95it/s]",
        ev.GraphCaptureProgress,
        {"bs": None, "avail_gib": 5.64},
    ),
    (
        "cg-failed",
        P + "Capture cuda graph failed: CUDA error: out of memory",
        ev.Failure,
        {"kind": "out_of_memory", "oom": ev.OomSizes()},  # a driver-level OOM: no sizes
    ),
    # --- summary -------------------------------------------------------------------------------
    (
        "summary-0.3.6",
        P
        + "max_total_num_tokens=404890, max_prefill_tokens=16384, max_running_requests=4097, context_len=8096",
        ev.Summary,
        {"max_total_num_tokens": 404890, "chunked_prefill_size": None, "context_len": 8096},
    ),
    (
        "summary-0.4.6",
        "[2025-05-14 09:29:10] max_total_num_tokens=404890, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4097, context_len=8096",
        ev.Summary,
        {"chunked_prefill_size": 8192, "available_gpu_mem_gib": None},
    ),
    (
        "summary-0.4.10",
        P
        + "max_total_num_tokens=159277, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=262144, available_gpu_mem=7.40 GB",
        ev.Summary,
        {"max_total_num_tokens": 159277, "max_running_requests": 48, "available_gpu_mem_gib": 7.4},
    ),
    (
        "summary-cpu",
        P
        + "max_total_num_tokens=1000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=4096, available_cpu_mem=100.00 GB",
        ev.Summary,
        {"available_gpu_mem_gib": 100.0},
    ),
    (
        "capped",
        P
        + "max_total_tokens=500000 is larger than the profiled value 159277. Use the profiled value instead.",
        ev.MaxTotalTokensCapped,
        {"user_tokens": 500000, "profiled_tokens": 159277},
    ),
    (
        "capped-negative",
        P
        + "max_total_tokens=500000 is larger than the profiled value -1234. Use the profiled value instead.",
        ev.MaxTotalTokensCapped,
        {"profiled_tokens": -1234},
    ),
    # --- hierarchical cache ----------------------------------------------------------------------
    (
        "hicache-old",
        P + "Allocating 44.77 GB host memory for hierarchical KV cache.",
        ev.HostKvAllocated,
        {"gb": 44.77, "tokens": None},
    ),
    (
        "hicache-new",
        P + "Allocating hierarchical KV host pool: 637109 tokens, 44.77 GB host memory.",
        ev.HostKvAllocated,
        {"gb": 44.77, "tokens": 637109, "label": None},
    ),
    (
        "hicache-new-label",
        P
        + "Allocating MLA hierarchical KV host pool: 637109 tokens, 44.77 GB host memory, packed MTP KV layers: target_layers=61, draft_layers=1, total_layers=62.",
        ev.HostKvAllocated,
        {"gb": 44.77, "tokens": 637109, "label": "MLA"},
    ),
    (
        "hicache-v4",
        P
        + "Allocating 12.50 GB host memory for V4 paged pool 'c4' (layers=61, pages=100, item_bytes=10, layout=layer_first).",
        ev.HostKvAllocated,
        {"gb": 12.5, "label": "c4"},
    ),
    (
        "hicache-headroom",
        P + "HiCache memory headroom: host 412.3 GiB, cgroup 500.0 GiB",
        ev.HostMemoryHeadroom,
        {"host_gib": 412.3, "cgroup_gib": 500.0},
    ),
    (
        "hicache-no-host-mem",
        P
        + "Not enough host memory available. Requesting 400.00 GB but only have 380.00 GB free. Please reduce the size of the hierarchical cache.",
        ev.Failure,
        {"kind": "host_memory", "requested_gb": 400.0, "free_gb": 380.0},
    ),
    # --- readiness and failures ----------------------------------------------------------------
    (
        "ready",
        "[2026-02-27 09:06:31] The server is fired up and ready to roll!",
        ev.ServerReady,
        {},
    ),
    (
        "uvicorn",
        "[2025-05-14 09:29:11] INFO:     Uvicorn running on http://0.0.0.0:8200 (Press CTRL+C to quit)",
        ev.ServerListening,
        {"url": "http://0.0.0.0:8200"},
    ),
    (
        "warmup-failed",
        "[2026-02-27 09:06:31] Initialization failed. warmup error: Traceback",
        ev.Failure,
        {"kind": "warmup"},
    ),
    (
        "not-enough-0.5.8",
        P
        + "Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.88",
        ev.Failure,
        {"kind": "not_enough_memory", "mem_fraction_static": 0.88},
    ),
    (
        "not-enough-0.5.10",
        P
        + "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7",
        ev.Failure,
        {"kind": "not_enough_memory", "mem_fraction_static": 0.7},
    ),
    (
        "not-enough-traceback",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ev.Failure,
        {"kind": "not_enough_memory"},
    ),
    (
        "loaded-weights-0.5.14",
        P
        + "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88. Raise --mem-fraction-static above 0.911 (minimum viable = 1 - available/pre = 0.9112). If using speculative decoding, draft weights are now counted.",
        ev.Failure,
        {
            "kind": "not_enough_memory",
            "mem_fraction_static": 0.88,
            "raise_above": 0.911,
            "min_viable": 0.9112,
        },
    ),
    (
        "cuda-oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ev.Failure,
        {"kind": "out_of_memory", "oom": ev.OomSizes(tried_gib=2.0), "exception_line": True},
    ),
    (
        "scheduler-exception",
        P + "Scheduler hit an exception: Traceback (most recent call last):",
        ev.Failure,
        {"kind": "scheduler_exception"},
    ),
    (
        "max-running-reset",
        "[2026-02-27 09:02:05] Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.",
        ev.MaxRunningRequestsReset,
        {"value": 48},
    ),
    # --- batch lines (reference e) ----------------------------------------------------------------
    (
        "prefill-0.3.6",
        P
        + "Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, cache hit rate: 12.50%, token usage: 0.01, #running-req: 0, #queue-req: 0",
        ev.BatchStats,
        {
            "kind": "prefill",
            "new_seqs": 1,
            "new_tokens": 6,
            "cache_hit_rate": 0.125,
            "token_usage": 0.01,
            "running_reqs": 0,
        },
    ),
    (
        "decode-0.3.6",
        P
        + "Decode batch. #running-req: 3, #token: 900, token usage: 0.05, gen throughput (token/s): 120.50, #queue-req: 0",
        ev.BatchStats,
        {
            "kind": "decode",
            "running_reqs": 3,
            "tokens": 900,
            "gen_throughput": 120.5,
            "queued_reqs": 0,
        },
    ),
    (
        "decode-0.4.6-accept",
        P
        + "Decode batch. #running-req: 3, #token: 900, token usage: 0.05, accept len: 2.50, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 1",
        ev.BatchStats,
        {"accept_len": 2.5, "cuda_graph": True, "queued_reqs": 1},
    ),
    (
        "prefill-0.5.2-trailing",
        P
        + "Prefill batch. #new-seq: 2, #new-token: 100, #cached-token: 5, token usage: 0.10, #running-req: 1, #queue-req: 0, ",
        ev.BatchStats,
        {"kind": "prefill", "cached_tokens": 5, "queued_reqs": 0},
    ),
    (
        "decode-0.5.8",
        P
        + "Decode batch, #running-req: 12, #token: 48211, token usage: 0.30, accept len: 2.81, accept rate: 0.60, cuda graph: True, gen throughput (token/s): 512.34, #queue-req: 0, ",
        ev.BatchStats,
        {
            "running_reqs": 12,
            "tokens": 48211,
            "token_usage": 0.3,
            "accept_len": 2.81,
            "accept_rate": 0.6,
            "gen_throughput": 512.34,
            "queued_reqs": 0,
        },
    ),
    (
        "decode-0.5.9-no-trailing",
        P
        + "Decode batch, #running-req: 2, #token: 100, token usage: 0.01, cuda graph: False, gen throughput (token/s): 50.00, #queue-req: 4",
        ev.BatchStats,
        {"cuda_graph": False, "queued_reqs": 4},
    ),
    (
        "prefill-0.5.10-input",
        P
        + "Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.20, #running-req: 3, #queue-req: 2, cuda graph: False, input throughput (token/s): 9000.00",
        ev.BatchStats,
        {"input_throughput": 9000.0, "queued_reqs": 2},
    ),
    (
        "prefill-0.5.23-pending",
        P
        + "Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, #pending-token: 5, token usage: 0.20, #running-req: 3, #queue-req: 2",
        ev.BatchStats,
        {"token_usage": 0.2},
    ),
    (
        "decode-hybrid",
        P
        + "Decode batch, #running-req: 2, #full token: 1000, full token usage: 0.10, #swa token: 500, swa token usage: 0.05, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0",
        ev.BatchStats,
        {"tokens": 1000, "token_usage": 0.1},
    ),
    (
        "decode-iter",
        P
        + "Decode batch [123], #running-req: 2, #token: 10, token usage: 0.00, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
        ev.BatchStats,
        {"running_reqs": 2},
    ),
]


@pytest.mark.parametrize(
    ("line", "kind", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_line_formats(line: str, kind: type, expected: dict[str, object]) -> None:
    event = parse_line(line)
    assert isinstance(event, kind), f"{line!r} -> {event!r}"
    for name, value in expected.items():
        actual = getattr(event, name)
        if isinstance(value, float):
            assert actual == pytest.approx(value), name
        else:
            assert actual == value, name


def test_prefix_tags_decoded_in_any_order() -> None:
    event = parse_line(
        "[2026-05-07 13:39:14 EP3 TP2 DP1 MOE_DP4 ATTN_CP5 PP6] Memory pool end. avail mem=1.00 GB"
    )
    assert event is not None
    p = event.prefix
    assert (p.dp, p.pp, p.attn_cp, p.moe_dp, p.tp, p.ep) == (1, 6, 5, 4, 2, 3)
    assert p.rank == "EP3 TP2 DP1 MOE_DP4 ATTN_CP5 PP6"
    assert p.timestamp is not None and p.timestamp.second == 14


def test_milliseconds_kept() -> None:
    event = parse_line("[2026-02-27 09:02:11.042 TP0] Memory pool end. avail mem=1.00 GB")
    assert event is not None and event.prefix.timestamp is not None
    assert event.prefix.timestamp.microsecond == 42000
    assert event.prefix.time_text == "2026-02-27 09:02:11.042"


@pytest.mark.parametrize(
    "line",
    [
        '[2026-02-27 09:06:29] INFO:     127.0.0.1:41234 - "GET /get_model_info HTTP/1.1" 200 OK',
        "[2026-02-27 09:02:05] WARNING: something unrelated happened",
        "/usr/lib/python3/warnings.py:109: UserWarning: blah",
        "Loading safetensors checkpoint shards:  50% Completed | 32/64 [00:40<00:40,  1.2it/s]",
        "",
        "   ",
    ],
)
def test_lines_that_are_not_sglang_events(line: str) -> None:
    assert parse_line(line) is None


def test_a_rank_line_kvtop_does_not_read_still_says_the_rank_exists() -> None:
    event = parse_line("[2026-02-27 09:02:11 TP3] Load weights maybe?")
    assert isinstance(event, ev.RankSeen)
    assert event.prefix.rank == "TP3"
