"""SGLang's own sizing functions, transcribed from its released wheels for the engine's tests.

Each function keeps the structure, names and order of operations of the SGLang code it is
written from (named in its docstring, with the wheel), not kvtop's: the grid test
(tests/unit/test_sizing_engine_grid.py) runs kvtop's engine and these side by side on the same
inputs. The wheels read: sglang 0.4.6, 0.4.6.post5, 0.4.7, 0.4.9, 0.5.8.post1, 0.5.10.post1, 0.5.14,
0.5.19, 0.5.23.
What SGLang measures on a GPU (free memory before and after the weights) is an input here, as it
is to SGLang's own functions.
"""

from __future__ import annotations

import math

ONE_GIB = 1 << 30


def v3(version: tuple[int, ...]) -> tuple[int, int, int]:
    padded = (*version, 0, 0, 0)
    return (padded[0], padded[1], padded[2])


# --------------------------------------------------------------------------- default fraction


def default_mfs_046(gpu_mem: float, tp_size: int) -> float:
    """ServerArgs.__post_init__, sglang 0.4.6 (server_args.py)."""
    if gpu_mem <= 81920:
        if tp_size >= 16:
            mem_fraction_static = 0.79
        elif tp_size >= 8:
            mem_fraction_static = 0.81
        elif tp_size >= 4:
            mem_fraction_static = 0.85
        elif tp_size >= 2:
            mem_fraction_static = 0.87
        else:
            mem_fraction_static = 0.88
    else:
        mem_fraction_static = (gpu_mem - 1024 * 13) / gpu_mem
    return mem_fraction_static


def default_mfs_047(
    gpu_mem: float, tp_size: int, pp_size: int = 1, speculative_algorithm: str | None = None
) -> float:
    """ServerArgs.__post_init__, sglang 0.4.7 on CUDA (0.4.6.post5 has the same without the
    180,000 MiB and draft terms)."""
    parallel_size = tp_size * pp_size
    if gpu_mem <= 81920:
        if parallel_size >= 16:
            mem_fraction_static = 0.79
        elif parallel_size >= 8:
            mem_fraction_static = 0.81
        elif parallel_size >= 4:
            mem_fraction_static = 0.85
        elif parallel_size >= 2:
            mem_fraction_static = 0.87
        else:
            mem_fraction_static = 0.88
    else:
        mem_fraction_static = 0.88
    if gpu_mem > 180 * 1000:
        mem_fraction_static = 0.79
    elif gpu_mem > 96 * 1024:
        mem_fraction = mem_fraction_static
        reserve_mem = 1024 * 18
        if speculative_algorithm is not None:
            reserve_mem = 1024 * 20
        mem_fraction_static = min(
            mem_fraction + 48 * 1024 * (1 - mem_fraction) / gpu_mem,
            (gpu_mem - reserve_mem) / gpu_mem,
        )
    else:
        if speculative_algorithm is not None:
            mem_fraction_static *= 0.95
    return mem_fraction_static


def default_mfs_049(
    gpu_mem: float,
    tp_size: int,
    pp_size: int = 1,
    speculative_algorithm: str | None = None,
    enable_dp_attention: bool = False,
    is_multimodal: bool = False,
) -> float:
    """ServerArgs.__post_init__, sglang 0.4.9 (server_args.py)."""
    parallel_size = tp_size * pp_size
    # SGLang's own branches, kept as written (two classes share a reserve).
    if gpu_mem < 20 * 1024:  # noqa: SIM114
        reserved_mem = (2.8 + parallel_size / 10) * 1024
    elif gpu_mem < 35 * 1024:
        reserved_mem = (2.8 + parallel_size / 10) * 1024
    elif gpu_mem < 90 * 1024:
        reserved_mem = (9.5 + parallel_size / 2) * 1024
    elif gpu_mem < 100 * 1024:  # noqa: SIM114
        reserved_mem = (12 + parallel_size / 2) * 1024
    elif gpu_mem < 160 * 1024:
        reserved_mem = (12 + parallel_size / 2) * 1024
    else:
        reserved_mem = 32 * 1024
    if speculative_algorithm is not None:
        reserved_mem += 2 * 1024
    if enable_dp_attention:
        reserved_mem += 4 * 1024
    mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3)
    if is_multimodal:
        mem_fraction_static *= 0.90
    return mem_fraction_static


def default_mfs_058(
    gpu_mem: float,
    tp_size: int,
    pp_size: int = 1,
    speculative_algorithm: str | None = None,
    vision: tuple[int, int] | None = None,
) -> float:
    """ServerArgs._handle_gpu_memory_settings + adjust_mem_fraction_for_vlm, sglang 0.5.8.post1
    (no DP attention, piecewise CUDA graphs off: their default)."""
    if gpu_mem < 20 * 1024:
        chunked_prefill_size, cuda_graph_max_bs = 2048, 8
    elif gpu_mem < 35 * 1024:
        chunked_prefill_size, cuda_graph_max_bs = 2048, 24 if tp_size < 4 else 80
    elif gpu_mem < 60 * 1024:
        chunked_prefill_size, cuda_graph_max_bs = 4096, 32 if tp_size < 4 else 160
    elif gpu_mem < 160 * 1024:
        chunked_prefill_size, cuda_graph_max_bs = 8192, 256 if tp_size < 4 else 512
    else:
        chunked_prefill_size, cuda_graph_max_bs = 16384, 512
    reserved_mem = 512
    reserved_mem += max(chunked_prefill_size, 2048) * 1.5
    reserved_mem += cuda_graph_max_bs * 2
    reserved_mem += tp_size * pp_size / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved_mem = max(reserved_mem, 10 * 1024)
    if speculative_algorithm is not None:
        if speculative_algorithm == "STANDALONE":
            reserved_mem += 6 * 1024
        elif speculative_algorithm != "NGRAM":
            reserved_mem += 2 * 1024
    mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3)
    if vision is not None:
        mem_fraction_static = adjust_mem_fraction_for_vlm(mem_fraction_static, *vision)
    return mem_fraction_static


def adjust_mem_fraction_for_vlm(
    mem_fraction_static: float, vit_num_layers: int = 24, vit_hidden_size: int = 1024
) -> float:
    """ServerArgs.adjust_mem_fraction_for_vlm, sglang 0.5.8.post1 (memory_hook in 0.5.23)."""
    base_mem_fraction_reduction_ratio = 0.95
    current_complexity_score = vit_num_layers * (vit_hidden_size**2)
    baseline_complexity_score = 24 * (1024**2)
    complexity_ratio = current_complexity_score / baseline_complexity_score
    dynamic_adjustment_factor = 1.0 - 0.1 * (complexity_ratio - 1.0)
    dynamic_adjustment_factor = max(0.8, min(1.05, dynamic_adjustment_factor))
    return mem_fraction_static * base_mem_fraction_reduction_ratio * dynamic_adjustment_factor


# --------------------------------------------------------------------------- cells and layers


def get_pp_indices(num_hidden_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """sglang.srt.distributed.utils.get_pp_indices, 0.5.23 (no SGLANG_PP_LAYER_PARTITION)."""
    base_layers = num_hidden_layers // pp_size
    remainder = num_hidden_layers % pp_size
    if pp_rank >= pp_size - remainder:
        partitions_without_extra_layer = pp_size - remainder
        start_layer = pp_rank * (base_layers + 1) - partitions_without_extra_layer
        end_layer = start_layer + (base_layers + 1)
    else:
        start_layer = pp_rank * base_layers
        end_layer = start_layer + base_layers
    return (start_layer, end_layer)


def mha_cell_size(
    total_kv_heads: int, head_dim: int, v_head_dim: int, num_layers: int, kv_size: int, tp: int
) -> int:
    """get_cell_size_per_token (MHA branch), sglang 0.5.8.post1."""
    return max(1, total_kv_heads // tp) * (head_dim + v_head_dim) * num_layers * kv_size


def mla_cell_size(kv_lora_rank: int, qk_rope_head_dim: int, num_layers: int, kv_size: int) -> int:
    """get_cell_size_per_token (MLA branch), sglang 0.5.8.post1."""
    return (kv_lora_rank + qk_rope_head_dim) * num_layers * kv_size


# --------------------------------------------------------------------------- pools


def rest_memory(available_gpu_memory: float, total_gpu_memory: float, mfs: float) -> float:
    """profile_max_num_token, sglang 0.5.8.post1: GiB for the pools."""
    return available_gpu_memory - total_gpu_memory * (1 - mfs)


def handle_max_mamba_cache_058(total_rest_memory: float, per_req: int, ratio: float = 0.9):
    """ModelRunner.handle_max_mamba_cache (ratio split, no speculative), sglang 0.5.8.post1:
    the rest left for the KV cache and the slots."""
    mamba_state_memory_raw = total_rest_memory * ratio / (1 + ratio)
    max_mamba_cache_size = int((mamba_state_memory_raw * (1 << 30)) // per_req)
    mamba_state_memory = max_mamba_cache_size * per_req / (1 << 30)
    return total_rest_memory - mamba_state_memory, max_mamba_cache_size


def handle_max_mamba_cache_0523(total_rest_memory: float, per_req: int, ratio: float = 0.9):
    """KVCacheConfigurator.handle_max_mamba_cache (ratio split, no speculative, no ReplaySSM),
    sglang 0.5.23: the padding slot is inside the budget."""
    mamba_budget = total_rest_memory * ratio / (1 + ratio)
    mamba_budget_bytes = mamba_budget * (1 << 30)
    per_slot = per_req
    max_mamba_cache_size = int((mamba_budget_bytes - per_slot) // per_slot)
    mamba_state_memory = (max_mamba_cache_size + 1) * per_slot / (1 << 30)
    return total_rest_memory - mamba_state_memory, max_mamba_cache_size


def plain_tokens(rest: float, cell_size: float, page_size: int, max_total_tokens: int | None):
    """profile → --max-total-tokens → page alignment (init_memory_pool, 0.5.8.post1;
    DefaultPoolConfigurator, 0.5.23)."""
    tokens = int(int(rest * (1 << 30)) // cell_size)
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return tokens // page_size * page_size


def swa_tokens_058(
    max_total_num_tokens: int,
    num_hidden_layers: int,
    full_layers_num: int,
    swa_layers_num: int,
    swa_full_tokens_ratio: float,
    page_size: int,
) -> tuple[int, int]:
    """ModelRunner.set_num_tokens_hybrid_swa, sglang 0.5.8.post1: (full, swa)."""
    total_tokens = max_total_num_tokens * num_hidden_layers
    denominator = swa_full_tokens_ratio * swa_layers_num + full_layers_num
    full_max_total_num_tokens = int(total_tokens / denominator)
    swa_max_total_num_tokens = int(full_max_total_num_tokens * swa_full_tokens_ratio)
    full_max_total_num_tokens = full_max_total_num_tokens // page_size * page_size
    swa_max_total_num_tokens = swa_max_total_num_tokens // page_size * page_size
    return full_max_total_num_tokens, swa_max_total_num_tokens


def swa_tokens_0523(
    available_bytes: int,
    full_per_token: int,
    swa_per_token: int,
    full_layers_num: int,
    swa_layers_num: int,
    swa_full_tokens_ratio: float,
    page_size: int,
) -> tuple[int, int]:
    """HybridSWAPoolConfigurator._recompute_cell_size / calculate_pool_sizes / _solve_pool_sizes,
    sglang 0.5.23 (no draft, no unified memory): (full, swa)."""
    cell_size = full_per_token * full_layers_num + swa_full_tokens_ratio * (
        swa_per_token * swa_layers_num
    )
    max_total_num_tokens = int(available_bytes // cell_size)
    full_tokens = max_total_num_tokens // page_size * page_size
    swa_tokens = int(full_tokens * swa_full_tokens_ratio) // page_size * page_size
    return full_tokens, swa_tokens


# --------------------------------------------------------------------------- requests


def max_running_requests(
    version: tuple[int, ...],
    token_capacity: int,
    context_len: int,
    given: int | None,
    attn_dp_size: int = 1,
) -> int:
    """max_running_requests per DP worker: TpModelWorker (0.4.6.post5) / ModelRunner.__init__
    (0.5.8.post1) over init_memory_pool's request pool; _resolve_max_num_reqs (0.5.10.post1,
    0.5.14); KVCacheConfigurator.resolve_max_num_reqs (0.5.23)."""
    estimated = min(max(int(token_capacity / context_len * 512), 2048), 4096)
    v = v3(version)
    if v < (0, 5, 10):
        max_num_reqs = given if given is not None else estimated
        pool_size = max_num_reqs + 1 if v < (0, 5, 8) else max_num_reqs
        wanted = token_capacity // 2 if given is None else given // attn_dp_size
        return min(wanted, pool_size)
    if v < (0, 5, 14):
        if given is not None:
            return min(given // attn_dp_size, estimated)
        return min(estimated, token_capacity // 2)
    if given is not None:
        return min(max(1, given // attn_dp_size), token_capacity // 2)
    return min(estimated, token_capacity // 2)


def pp_min_tokens(per_stage: list[int]) -> int:
    """The all-reduce MIN over pipeline stages (init_memory_pool, 0.5.8.post1)."""
    return min(per_stage) if per_stage else 0


def ceil_div(a: int, b: int) -> int:
    return math.ceil(a / b)


# --------------------------------------------------------------------------- DeepSeek sparse attention

DSA_QUANT_BLOCK_SIZE = 128  # DSATokenToKVPool.quant_block_size
DSA_ROPE_STORAGE_ITEMSIZE = 2  # DSATokenToKVPool.rope_storage_dtype = torch.bfloat16
DSA_INDEX_BUFFER_ITEMSIZE = 1  # DSATokenToKVPool.index_k_with_scale_buffer_dtype = torch.uint8


def default_dsa_kv_cache_dtype(
    version: tuple[int, ...], kv_cache_dtype: str, major: int, has_attention_sinks: bool = False
) -> str:
    """_set_default_dsa_kv_cache_dtype (server_args.py, 0.5.14; 0.5.8 and 0.5.10 alike) and the
    DSA kv-cache-dtype pass of arg_groups/overrides.py (0.5.19; 0.5.23 adds the sinks)."""
    if kv_cache_dtype == "auto":
        if v3(version) >= (0, 5, 23):
            kv_cache_dtype = "fp8_e4m3" if major >= 10 and not has_attention_sinks else "bfloat16"
        elif major >= 10:
            kv_cache_dtype = "fp8_e4m3"
        else:
            kv_cache_dtype = "bfloat16"
    if kv_cache_dtype == "bf16":
        kv_cache_dtype = "bfloat16"
    return kv_cache_dtype


def default_dsa_backends(version: tuple[int, ...], kv_cache_dtype: str, major: int) -> str:
    """_set_default_dsa_backends (server_args.py 0.5.14; 0.5.10's _set_default_nsa_backends):
    the decode backend with none given, on CUDA. 0.5.8 sets flashmla_kv for fp8 on any GPU."""
    if v3(version) < (0, 5, 10):
        return "flashmla_kv" if kv_cache_dtype == "fp8_e4m3" else "fa3"
    if kv_cache_dtype == "fp8_e4m3":
        return "trtllm" if major >= 10 else "flashmla_kv"
    return "trtllm" if major >= 10 else "fa3"


def calculate_mla_kv_cache_dim(
    version: tuple[int, ...],
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    kv_cache_dtype: str,
    dsa_decode_backend: str,
) -> int:
    """calculate_mla_kv_cache_dim (model_runner_kv_cache_mixin.py 0.5.10/0.5.14,
    kv_cache_configurator.py 0.5.19/0.5.23); in 0.5.8 NSATokenToKVPool.__init__'s
    override_dim, used whenever the cache is fp8. CUDA only (ROCm's tilelang is not here)."""
    kv_cache_dim = kv_lora_rank + qk_rope_head_dim
    if v3(version) >= (0, 5, 10) and dsa_decode_backend == "trtllm":
        return kv_cache_dim
    if kv_cache_dtype == "fp8_e4m3":
        return (
            kv_lora_rank
            + kv_lora_rank // DSA_QUANT_BLOCK_SIZE * 4
            + qk_rope_head_dim * DSA_ROPE_STORAGE_ITEMSIZE
        )
    return kv_cache_dim


def dsa_indexer_cell_size(index_head_dim: int, num_layers: int) -> int:
    """The indexer term of get_cell_size_per_token (0.5.8–0.5.14) /
    _compute_dsa_indexer_cell_size (pool_configurator.py 0.5.19)."""
    indexer_size_per_token = index_head_dim + index_head_dim // DSA_QUANT_BLOCK_SIZE * 4
    return indexer_size_per_token * num_layers * DSA_INDEX_BUFFER_ITEMSIZE


def dsa_profile_cell_size(
    version: tuple[int, ...],
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    index_head_dim: int,
    num_layers: int,
    kv_cache_dtype: str,
    dsa_decode_backend: str,
) -> int:
    """What rest memory is divided by: get_cell_size_per_token's MLA branch (0.5.8–0.5.14:
    (kv_lora_rank + qk_rope_head_dim) × kv_size) / MLAPoolConfigurator (0.5.19, 0.5.23:
    calculate_mla_kv_cache_dim × kv_size), plus the indexer."""
    kv_size = 1 if kv_cache_dtype == "fp8_e4m3" else 2
    if v3(version) >= (0, 5, 19):
        dim = calculate_mla_kv_cache_dim(
            version, kv_lora_rank, qk_rope_head_dim, kv_cache_dtype, dsa_decode_backend
        )
    else:
        dim = kv_lora_rank + qk_rope_head_dim
    return dim * num_layers * kv_size + dsa_indexer_cell_size(index_head_dim, num_layers)


def dsa_pool_bytes_per_token(
    version: tuple[int, ...],
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    index_head_dim: int,
    num_layers: int,
    kv_cache_dtype: str,
    dsa_decode_backend: str,
) -> int:
    """DSATokenToKVPool.get_kv_size_bytes per token: kv_buffer rows of kv_cache_dim × itemsize
    (uint8 rows for fp8) on every layer, plus the index_k_with_scale_buffer."""
    kv_size = 1 if kv_cache_dtype == "fp8_e4m3" else 2
    dim = calculate_mla_kv_cache_dim(
        version, kv_lora_rank, qk_rope_head_dim, kv_cache_dtype, dsa_decode_backend
    )
    return dim * num_layers * kv_size + dsa_indexer_cell_size(index_head_dim, num_layers)
