"""SGLang's sizing decisions that changed between releases, in one table.

Each rule names the range of versions it holds for and the SGLang function it mirrors, as read in
the released wheels (0.4.6, 0.4.6.post5, 0.4.7, 0.4.9, 0.5.8.post1, 0.5.10.post1, 0.5.14, 0.5.19,
0.5.23). A version between two wheels read is sized by the older wheel's rule; kvtop reads no
post-release number, so a 0.4.6.postN is sized as 0.4.6. The engine (engine.py, plan.py,
default_mfs.py) asks this module which rule applies instead of comparing versions itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Version = tuple[int, int, int]


def version3(version: tuple[int, ...] | None) -> Version:
    """(major, minor, patch); an unknown version is the latest whose rules kvtop read."""
    padded = (*(version or LATEST_READ), 0, 0, 0)
    return (padded[0], padded[1], padded[2])


LATEST_READ: Version = (0, 5, 23)

# SGLang's defaults of --swa-full-tokens-ratio and --mamba-full-memory-ratio (0.5.2–0.5.23).
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9


@dataclass(frozen=True, slots=True)
class Rule:
    """One of SGLang's sizing decisions for a range of versions."""

    name: str
    since: Version  # the first version this rule holds for
    until: Version | None  # the first version it no longer holds for (None: still holds)
    mirrors: str  # the SGLang function (and file) it mirrors
    words: str  # what SGLang does, in an operator's words

    def holds(self, version: tuple[int, ...] | None) -> bool:
        v = version3(version)
        return self.since <= v and (self.until is None or v < self.until)

    def range_text(self) -> str:
        low = ".".join(map(str, self.since))
        if self.until is None:
            return f"≥{low}"
        return f"{low} – before {'.'.join(map(str, self.until))}"


RULES: tuple[Rule, ...] = (
    # ---- max_running_requests (per DP worker)
    Rule(
        "max_running_requests",
        (0, 0, 0),
        (0, 5, 10),
        "TpModelWorker.__init__ / ModelRunner.init_memory_pool (0.4.6, 0.5.8)",
        "set: given // DP-attention size; unset: min(tokens // 2, the request pool "
        "clamp(int(tokens / context × 512), 2048, 4096))",
    ),
    Rule(
        "max_running_requests",
        (0, 5, 10),
        (0, 5, 14),
        "ModelRunner._resolve_max_num_reqs (0.5.10)",
        "set: min(given // DP-attention size, clamp(int(tokens / context × 512), 2048, 4096)); "
        "unset: min(that clamp, tokens // 2)",
    ),
    Rule(
        "max_running_requests",
        (0, 5, 14),
        None,
        "ModelRunner._resolve_max_num_reqs (0.5.14) / KVCacheConfigurator.resolve_max_num_reqs "
        "(0.5.19, 0.5.23)",
        "set: min(max(1, given // DP-attention size), tokens // 2); unset: "
        "min(clamp(int(tokens / context × 512), 2048, 4096), tokens // 2)",
    ),
    # ---- the request pool's extra row
    Rule(
        "request_pool_extra_row",
        (0, 0, 0),
        (0, 5, 8),
        "ModelRunner.init_memory_pool (0.4.6: ReqToTokenPool(size=max_num_reqs + 1))",
        "the request pool has one row more than max_num_reqs, which caps max_running_requests",
    ),
    # ---- the decode graphs' largest batch
    Rule(
        "graph_batch_capped_by_requests",
        (0, 5, 23),
        None,
        "arg_groups/memory_hook.handle_gpu_memory_settings (0.5.23; absent in 0.5.19)",
        "a default --cuda-graph-max-bs above --max-running-requests is lowered to it",
    ),
    # ---- hybrid sliding-window memory
    Rule(
        "swa_pools",
        (0, 5, 2),
        None,
        "ModelRunner.set_num_token_hybrid (0.5.2; absent in 0.4.6)",
        "sliding-window layers get a pool of their own; before, every layer keeps the whole "
        "context",
    ),
    Rule(
        "swa_split",
        (0, 5, 2),
        (0, 5, 10),
        "ModelRunner.set_num_tokens_hybrid_swa (0.5.8)",
        "profile as if every layer were full attention (T tokens), then full = "
        "int(T × layers / (ratio × SWA layers + full layers)), SWA = int(full × ratio), "
        "both page-aligned",
    ),
    Rule(
        "swa_split",
        (0, 5, 10),
        (0, 5, 14),
        "ModelRunner profile + set_num_tokens_hybrid_swa (0.5.10)",
        "profile with the full and SWA layers' own sizes (T tokens), then full = "
        "align(int(T × cell / (F + ratio × S)))",
    ),
    Rule(
        "swa_split",
        (0, 5, 14),
        None,
        "HybridSWAPoolConfigurator (0.5.14, 0.5.19, 0.5.23)",
        "full = available bytes // (F + ratio × S), SWA = align(int(full × ratio))",
    ),
    # ---- Mamba state slots
    Rule(
        "mamba_slots",
        (0, 0, 0),
        (0, 5, 19),
        "ModelRunner.handle_max_mamba_cache (0.5.8, 0.5.10, 0.5.14)",
        "slots = int(rest × r / (1 + r) × 2^30 // per slot); the padding slot is allocated "
        "beside the budget",
    ),
    Rule(
        "mamba_slots",
        (0, 5, 19),
        None,
        "KVCacheConfigurator.handle_max_mamba_cache (0.5.19, 0.5.23)",
        "slots = int((rest × r / (1 + r) × 2^30 − per slot) // per slot); the padding slot is "
        "inside the budget",
    ),
    # ---- multimodal models
    Rule(
        "vlm_fraction",
        (0, 4, 10),
        None,
        "ServerArgs.adjust_mem_fraction_for_vlm (0.5.8) / memory_hook.adjust_mem_fraction_for_vlm "
        "(0.5.23); 0.4.8–0.4.9 a flat × 0.90 (vlm_fraction_flat), 0.4.6–0.4.7 none",
        "SGLang's own default fraction × 0.95 × clamp(1 − 0.1 × (ViT layers × hidden² / "
        "(24 × 1024²) − 1), 0.8, 1.05)",
    ),
    Rule(
        "vlm_fraction_flat",
        (0, 4, 8),
        (0, 4, 10),
        "ServerArgs.__post_init__ (0.4.8, 0.4.9)",
        "SGLang's own default fraction × 0.90 for a multimodal model",
    ),
    Rule(
        "vlm_reservation",
        (0, 5, 19),
        None,
        "kv_cache_configurator.mm_runtime_reservation_gb (0.5.19, 0.5.23; absent in 0.5.14)",
        "SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default) is taken out of the KV budget",
    ),
    # ---- DeepSeek sparse attention (DeepSeek-V3.2, GLM-5: an `index_head_dim` in config.json)
    Rule(
        "dsa_default_kv_fp8",
        (0, 5, 3),
        None,
        "ServerArgs._handle_model_specific_adjustments (0.5.3, 0.5.8) / "
        "_set_default_nsa_kv_cache_dtype (0.5.10) / _set_default_dsa_kv_cache_dtype (0.5.14) / "
        "overrides.py's DSA kv-cache-dtype pass (0.5.19, 0.5.23)",
        "without --kv-cache-dtype a DSA model's KV cache is fp8_e4m3 on a GPU of compute "
        "capability 10 or more (Blackwell), bfloat16 below (Hopper, ROCm); from 0.5.23 "
        "bfloat16 for a model with learnable attention sinks",
    ),
    Rule(
        "dsa_profile_indexer",
        (0, 5, 4),
        None,
        "ModelRunner.profile_max_num_token: the indexer's keys counted from the change that "
        "followed 0.5.3 (a public 8 × B200 boot before and after it: 1,462,784 → 975,424 tokens)",
        "the token count is sized with the indexer's bytes per layer; in 0.5.3 with the latent "
        "alone, so the pool (which allocates the indexer too) outgrows the budget",
    ),
    Rule(
        "dsa_forced_mem_fraction",
        (0, 5, 3),
        (0, 5, 8),
        "ServerArgs._handle_model_specific_adjustments (0.5.3; gone in 0.5.8)",
        "a DSA model off NPU runs with mem_fraction_static 0.8, DP attention on every TP rank "
        "and page size 64 whatever was given",
    ),
    Rule(
        "dsa_fp8_latent_scaled",
        (0, 5, 3),
        None,
        "NSATokenToKVPool's kv_cache_dim 656 (0.5.3), override_kv_cache_dim (0.5.8) / "
        "calculate_mla_kv_cache_dim (0.5.10–0.5.23)",
        "an fp8 DSA cache stores per layer the 512-dim latent in fp8, one 4-byte scale per 128 "
        "of it and the 64-dim rope part in bf16: 656 bytes; from 0.5.10 the trtllm DSA backend "
        "(Blackwell's default with fp8) and ROCm's tilelang/aiter keep the plain 576",
    ),
    Rule(
        "dsa_profile_scaled_latent",
        (0, 5, 19),
        None,
        "MLAPoolConfigurator cell size via calculate_mla_kv_cache_dim (pool_configurator.py, "
        "0.5.19, 0.5.23); 0.5.8–0.5.14's get_cell_size_per_token profiles 576 × element size",
        "the token count is sized with the stored latent's bytes (656 with fp8) plus the "
        "indexer's 132; before 0.5.19 with 576 × the element size plus 132, while the pool "
        "allocates the stored bytes",
    ),
    # ---- the default fraction (default_mfs.py holds the arithmetic of each)
    Rule(
        "default_fraction",
        (0, 0, 0),
        (0, 4, 7),
        "ServerArgs.__post_init__ (0.4.6)",
        "by TP size (0.79–0.88); over 80 GiB the GPU less 13 GiB; not rounded",
    ),
    Rule(
        "default_fraction",
        (0, 4, 7),
        (0, 4, 8),
        "ServerArgs.__post_init__ (0.4.7; the 0.4.6 post releases alike)",
        "by TP × PP, stepped up over 96 GiB (less 18 GiB, 20 with a draft), 0.79 over "
        "180,000 MiB; not rounded",
    ),
    Rule(
        "default_fraction",
        (0, 4, 8),
        (0, 5, 6),
        "ServerArgs.__post_init__ (0.4.8, 0.4.9) / _handle_gpu_memory_settings (0.5.2)",
        "reserved memory by GPU size class, + draft and DP-attention terms; rounded to 3 decimals",
    ),
    Rule(
        "default_fraction",
        (0, 5, 6),
        None,
        "ServerArgs._handle_gpu_memory_settings (0.5.8) / memory_hook.handle_gpu_memory_settings "
        "(0.5.23)",
        "512 + activations × 1.5 + graphs + TP × PP / 8 GiB, at least 10 GiB over 60 GiB; "
        "rounded to 3 decimals",
    ),
)

# Architectures whose model overrides switch hybrid SWA memory off, so every layer keeps the
# whole context (ServerArgs._handle_model_specific_adjustments in 0.5.8;
# arg_groups/model_overrides/gemma2_gemma3.py and olmo2.py in 0.5.23).
SWA_MEMORY_OFF_ARCHITECTURES = frozenset(
    {
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma3nForCausalLM",
        "Gemma3nForConditionalGeneration",
        "Olmo2ForCausalLM",
    }
)
# exaone.py (0.5.23): off when the config has a sliding_window_pattern.
SWA_MEMORY_OFF_WITH_PATTERN = frozenset(
    {"Exaone4ForCausalLM", "ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"}
)

VLM_CACHE_SIZE_MB = 100  # SGLANG_VLM_CACHE_SIZE_MB's default (environ.py, 0.5.19 and 0.5.23)
_VIT_BASELINE_LAYERS, _VIT_BASELINE_HIDDEN = 24, 1024  # ViT-L/14, SGLang's baseline
_VIT_DEFAULT_LAYERS, _VIT_DEFAULT_HIDDEN = 24, 1024  # SGLang's getattr defaults


def rule(name: str, version: tuple[int, ...] | None) -> Rule:
    """The rule named `name` that holds for `version`."""
    for candidate in RULES:
        if candidate.name == name and candidate.holds(version):
            return candidate
    raise LookupError(f"no {name} rule for SGLang {version3(version)}")


def holds(name: str, version: tuple[int, ...] | None) -> bool:
    """Whether a rule that exists only from some version on holds for `version`."""
    return any(r.name == name and r.holds(version) for r in RULES)


def swa_memory_off(architecture: str | None, has_pattern: bool) -> bool:
    """SGLang's model overrides turn hybrid SWA memory off for this architecture."""
    if architecture in SWA_MEMORY_OFF_ARCHITECTURES:
        return True
    return architecture in SWA_MEMORY_OFF_WITH_PATTERN and has_pattern


def vlm_fraction_factor(vision_layers: int | None, vision_hidden: int | None) -> float:
    """adjust_mem_fraction_for_vlm's factor on SGLang's default fraction."""
    layers = _VIT_DEFAULT_LAYERS if vision_layers is None else vision_layers
    hidden = _VIT_DEFAULT_HIDDEN if vision_hidden is None else vision_hidden
    ratio = layers * hidden**2 / (_VIT_BASELINE_LAYERS * _VIT_BASELINE_HIDDEN**2)
    dynamic = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return 0.95 * dynamic


def vlm_reservation_gib(multimodal: bool, version: tuple[int, ...] | None) -> float:
    """What a multimodal model's runtime takes out of the KV budget (GiB)."""
    if not multimodal or not holds("vlm_reservation", version):
        return 0.0
    return VLM_CACHE_SIZE_MB / 1024


def pp_stage_layers(num_layers: int, pp_size: int) -> int:
    """Layers on the fullest pipeline stage (get_pp_indices: the last `remainder` stages get one
    more). Every stage sizes its own pool and the token count is the minimum over stages, so
    the fullest stage decides."""
    if pp_size <= 1:
        return num_layers
    return math.ceil(num_layers / pp_size)


@dataclass(frozen=True, slots=True)
class RequestLimit:
    value: int
    words: str


def max_running_requests(
    tokens: int,
    context_len: int,
    given: int | None,
    attn_dp_size: int,
    version: tuple[int, ...] | None,
) -> RequestLimit:
    """max_running_requests per DP worker for a pool of `tokens`, by version (before the Mamba
    cap, which every version applies after)."""
    which = rule("max_running_requests", version)
    dp = max(1, attn_dp_size)
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    clamp = f"clamp(int({tokens:,} / {context_len:,} × 512), 2048, 4096) = {estimated:,}"
    if which.until == (0, 5, 10):
        pool = estimated + 1 if holds("request_pool_extra_row", version) else estimated
        if given is not None:
            value = given // dp
            pool = given + 1 if holds("request_pool_extra_row", version) else given
            value = min(value, pool)
            return RequestLimit(value, f"{given:,} set // DP {dp} (SGLang {which.range_text()})")
        value = min(tokens // 2, pool)
        return RequestLimit(value, f"min({tokens:,} // 2, request pool {pool:,}: {clamp})")
    if which.until == (0, 5, 14):
        if given is not None:
            value = min(given // dp, estimated)
            return RequestLimit(value, f"min({given:,} set // DP {dp}, {clamp})")
        return RequestLimit(min(estimated, tokens // 2), f"min({clamp}, {tokens:,} // 2)")
    if given is not None:
        per_worker = max(1, given // dp)
        return RequestLimit(
            min(per_worker, tokens // 2), f"min({per_worker:,} set, per DP worker, {tokens:,} // 2)"
        )
    return RequestLimit(min(estimated, tokens // 2), f"min({clamp}, {tokens:,} // 2)")


# The DSA indexer's keys per layer: index_head_dim (128) fp8 bytes + one 4-byte scale per
# 128 (DSATokenToKVPool.quant_block_size), stored as uint8 (get_cell_size_per_token, 0.5.8).
DSA_QUANT_BLOCK = 128
DSA_ROPE_STORAGE_BYTES = 2  # DSATokenToKVPool.rope_storage_dtype: bfloat16


def dsa_indexer_bytes(index_head_dim: int) -> int:
    """The DSA indexer's bytes per token per layer (132 for DeepSeek-V3.2's 128 dims)."""
    return index_head_dim + index_head_dim // DSA_QUANT_BLOCK * 4


def dsa_default_kv_fp8(
    version: tuple[int, ...] | None, compute_major: int | None, learnable_sink: bool = False
) -> bool | None:
    """Whether SGLang picks an fp8 KV cache for a DSA model launched without --kv-cache-dtype
    (None: the GPU's compute capability is unknown, so kvtop cannot say)."""
    if not holds("dsa_default_kv_fp8", version) or compute_major is None:
        return None if compute_major is None else False
    if learnable_sink and version3(version) >= (0, 5, 23):
        return False
    return compute_major >= 10


@dataclass(frozen=True, slots=True)
class DsaLatent:
    """A DSA layer's latent bytes per token: what the pool allocates and what the token count
    was sized with (they differ with fp8 before 0.5.19)."""

    stored: float
    profiled: float
    words: str


def dsa_latent_bytes(
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    elem: float,
    version: tuple[int, ...] | None,
    plain_layout: bool,
) -> DsaLatent:
    """calculate_mla_kv_cache_dim × element size, and the profile's own figure by version.
    `plain_layout`: a trtllm DSA backend (or ROCm's tilelang/aiter) keeps 576 × 1 with fp8."""
    plain = (kv_lora_rank + qk_rope_head_dim) * elem
    trtllm_matters = version3(version) >= (0, 5, 10)
    scaled = holds("dsa_fp8_latent_scaled", version)
    if elem != 1 or not scaled or (plain_layout and trtllm_matters):
        words = f"({kv_lora_rank} + {qk_rope_head_dim}) × {elem:g} B"
        if elem == 1 and plain_layout and trtllm_matters:
            words += " (trtllm/tilelang DSA backend: no per-tile scales)"
        return DsaLatent(plain, plain, words)
    scales = kv_lora_rank // DSA_QUANT_BLOCK * 4
    stored = kv_lora_rank + scales + qk_rope_head_dim * DSA_ROPE_STORAGE_BYTES
    words = (
        f"{kv_lora_rank} fp8 + {kv_lora_rank // DSA_QUANT_BLOCK} × 4 B scales + "
        f"{qk_rope_head_dim} × 2 B bf16 rope = {stored} B"
    )
    if holds("dsa_profile_scaled_latent", version):
        return DsaLatent(float(stored), float(stored), words)
    words += f"; sized with {plain:g} B (SGLang before 0.5.19 profiles 576 × 1 B)"
    return DsaLatent(float(stored), plain, words)


# GPUs by name whose compute capability is 10 or more (Blackwell: B100/B200/B300, GB200/GB300,
# GB10, RTX 50xx and RTX PRO Blackwell); any other named NVIDIA GPU is taken as below 10.
_BLACKWELL_WORDS = ("B100", "B200", "B300", "GB200", "GB300", "GB10", "BLACKWELL", "RTX 50")


def compute_major_from_name(name: str | None) -> int | None:
    """The GPU's compute capability major as far as its name tells (None: no name, or not an
    NVIDIA GPU kvtop can place)."""
    if not name:
        return None
    upper = name.upper()
    if any(word in upper for word in _BLACKWELL_WORDS):
        return 10
    if any(word in upper for word in ("H100", "H200", "H800", "H20", "GH200")):
        return 9
    if any(word in upper for word in ("A100", "A800", "A10", "A30", "A40", "L40", "L4", "RTX")):
        return 8
    return None
