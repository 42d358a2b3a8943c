"""SGLang's own default mem_fraction_static (when --mem-fraction-static is not given), by version.

SGLang reads the GPU's total memory (nvidia-smi's memory.total, MiB, the smallest GPU), picks
chunked_prefill_size and the decode CUDA graphs' largest batch from it, estimates what
activations and graphs take ("reserved_mem", MiB) and sets
mem_fraction_static = round((gpu_mem − reserved_mem) / gpu_mem, 3). The rule changed over
versions (docs/plan.md, "Where SGLang decides"):

* ≤0.4.9: fixed fractions by TP × PP (and a step for GPUs over 96 GiB);
* 0.4.10–0.5.5: reserved_mem by GPU size class, + speculative and DP-attention terms;
* 0.5.6–0.5.13: 512 + activations × 1.5 + graphs + TP × PP / 8 GiB, at least 10 GiB on GPUs
  over 60 GiB, + a flat 2 GiB (4 GiB from 0.5.10) for an EAGLE/MTP draft, 6 GiB STANDALONE;
* 0.5.14 on (memory_hook.handle_gpu_memory_settings in 0.5.23): the same skeleton without the
  draft term (the draft is inside the budget), + 2 GiB with DeepEP.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvtop.model.sizing import sglang_rules

MIB_PER_GIB = 1024
_TEN_GIB_MB = 10 * 1024


@dataclass(frozen=True, slots=True)
class LaunchShape:
    """The launch arguments SGLang's default rule reads."""

    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    speculative_algorithm: str | None = None
    moe_a2a_backend: str | None = None
    disaggregation_mode: str | None = None
    mla: bool = False
    # A multimodal model's vision tower (ViT layers, hidden size; None: SGLang's defaults 24,
    # 1024): SGLang lowers its default fraction for it (sglang_rules "vlm_fraction").
    multimodal: bool = False
    vision_layers: int | None = None
    vision_hidden_size: int | None = None


@dataclass(frozen=True, slots=True)
class DefaultMfs:
    """SGLang's default and how it got there."""

    mem_fraction_static: float
    reserved_mb: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    steps: tuple[str, ...]
    rule: str  # which version's rule, in words


def _version3(version: tuple[int, ...] | None) -> tuple[int, int, int]:
    padded = (*(version or (0, 5, 23)), 0, 0, 0)
    return (padded[0], padded[1], padded[2])


def graph_defaults(gpu_mem_mb: float, tp: int, version: tuple[int, ...] | None) -> tuple[int, int]:
    """chunked_prefill_size and the decode graphs' max batch SGLang picks for this GPU size."""
    v = _version3(version)
    big_tp = tp >= 4
    if gpu_mem_mb < 20 * 1024:
        return 2048, 8
    if gpu_mem_mb < 35 * 1024:
        if v >= (0, 5, 14):
            return 4096, 160 if big_tp else 48
        return 2048, 80 if big_tp else 24
    if gpu_mem_mb < 60 * 1024:
        return 4096, 160 if big_tp else 32
    if gpu_mem_mb < 160 * 1024:
        return 8192, 512 if big_tp else 256
    return 16384, 512


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The prefill (piecewise) CUDA graph sizes SGLang captures up to `max_tokens`."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1024 + 1, 64))
        + list(range(1280, 4096 + 1, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return [s for s in sizes if s <= max_tokens]


def _speculative(shape: LaunchShape) -> str | None:
    algo = (shape.speculative_algorithm or "").upper()
    return algo or None


def _fixed_fraction(parallel: int) -> float:
    """0.4.x's fractions by parallel size, for GPUs of at most 80 GiB."""
    if parallel >= 16:
        return 0.79
    if parallel >= 8:
        return 0.81
    if parallel >= 4:
        return 0.85
    return 0.87 if parallel >= 2 else 0.88


def _fraction_by_tp(gpu_mem_mb: float, shape: LaunchShape, before_040: bool) -> DefaultMfs:
    """0.3.x–0.4.5 (ServerArgs.__post_init__ in the 0.3.6, 0.4.0 and 0.4.3.post4 wheels): by TP
    size whatever the GPU's memory (TP 8 took 0.82 before 0.4.0). Not rounded."""
    mfs = _fixed_fraction(shape.tp_size)
    if before_040 and 8 <= shape.tp_size < 16:
        mfs = 0.82
    steps = [f"TP = {shape.tp_size} (any GPU size before 0.4.6) → {mfs:g}"]
    rule = "0.3.x" if before_040 else "0.4.0–0.4.5"
    return DefaultMfs(mfs, gpu_mem_mb * (1 - mfs), 8192, 160, tuple(steps), rule)


def _fraction_046(gpu_mem_mb: float, shape: LaunchShape) -> DefaultMfs:
    """≤0.4.6 (ServerArgs.__post_init__ in the 0.4.6 wheel): by TP size; over 80 GiB the GPU
    less 13 GiB. Not rounded."""
    if gpu_mem_mb <= 81920:
        mfs = _fixed_fraction(shape.tp_size)
        steps = [f"TP = {shape.tp_size} on a GPU of at most 80 GiB → {mfs:g}"]
    else:
        mfs = (gpu_mem_mb - 13 * 1024) / gpu_mem_mb
        steps = [f"GPU over 80 GiB: ({gpu_mem_mb:,.0f} − 13 GiB) / {gpu_mem_mb:,.0f} = {mfs:.4f}"]
    return DefaultMfs(mfs, gpu_mem_mb * (1 - mfs), 8192, 160, tuple(steps), "≤0.4.6")


def _fraction_047(gpu_mem_mb: float, shape: LaunchShape) -> DefaultMfs:
    """0.4.7 (and the 0.4.6 post releases): by TP × PP, stepped up on GPUs over 96 GiB, 0.79 on
    CUDA GPUs over 180,000 MiB. Not rounded."""
    parallel = shape.tp_size * shape.pp_size
    mfs = _fixed_fraction(parallel) if gpu_mem_mb <= 81920 else 0.88
    steps = [f"TP × PP = {parallel} on a {gpu_mem_mb:,.0f} MiB GPU → {mfs:g}"]
    speculative = _speculative(shape) is not None
    if gpu_mem_mb > 180 * 1000:
        mfs = 0.79
        steps.append("GPU over 180,000 MiB → 0.79")
    elif gpu_mem_mb > 96 * 1024:
        reserve = (20 if speculative else 18) * 1024
        bigger = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mem_mb, (gpu_mem_mb - reserve) / gpu_mem_mb)
        steps.append(
            f"GPU over 96 GiB: min({mfs:g} + 48 GiB × (1 − {mfs:g}) / gpu, (gpu − "
            f"{reserve // 1024} GiB) / gpu) = {bigger:.4f}"
        )
        mfs = bigger
    elif speculative:
        mfs *= 0.95
        steps.append(f"× 0.95 for speculative decoding = {mfs:.4f}")
    return DefaultMfs(mfs, gpu_mem_mb * (1 - mfs), 8192, 160, tuple(steps), "0.4.7")


def _size_class_reserve(gpu_mem_mb: float, shape: LaunchShape, any_draft: bool) -> DefaultMfs:
    """0.4.8–0.5.5: reserved_mem by GPU size class, + the draft's and DP attention's terms.
    0.4.8–0.4.9 add 2 GiB for any draft (`any_draft`); from 0.4.10 2 GiB for an EAGLE/MTP draft
    and 6 GiB for a STANDALONE one."""
    parallel = shape.tp_size * shape.pp_size
    if gpu_mem_mb < 35 * 1024:
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_mem_mb < 90 * 1024:
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_mem_mb < 160 * 1024:
        reserved = (12 + parallel / 2) * 1024
    else:
        reserved = 32 * 1024
    steps = [f"reserved by GPU size class (TP × PP = {parallel}): {reserved:,.0f} MiB"]
    algo = _speculative(shape)
    if algo is not None and any_draft:
        reserved += 2 * 1024
        steps.append("+ 2048 MiB for the draft")
    elif algo in ("EAGLE", "EAGLE3", "NEXTN"):
        reserved += 2 * 1024
        steps.append("+ 2048 MiB for the EAGLE/MTP draft")
    elif algo == "STANDALONE":
        reserved += 6 * 1024
        steps.append("+ 6144 MiB for the STANDALONE draft")
    if shape.enable_dp_attention:
        reserved += 4 * 1024
        steps.append("+ 4096 MiB for DP attention")
    if any_draft:
        return _finish(gpu_mem_mb, reserved, 8192, 160, steps, "0.4.8–0.4.9")
    chunked, max_bs = graph_defaults(gpu_mem_mb, shape.tp_size, (0, 5, 2))
    return _finish(gpu_mem_mb, reserved, chunked, max_bs, steps, "0.4.10–0.5.5")


def _finish(
    gpu_mem_mb: float, reserved: float, chunked: int, max_bs: int, steps: list[str], rule: str
) -> DefaultMfs:
    mfs = round((gpu_mem_mb - reserved) / gpu_mem_mb, 3)
    steps.append(f"round(({gpu_mem_mb:,.0f} − {reserved:,.0f}) / {gpu_mem_mb:,.0f}, 3) = {mfs:.3f}")
    return DefaultMfs(mfs, reserved, chunked, max_bs, tuple(steps), rule)


def default_mem_fraction_static(
    gpu_mem_mb: float, shape: LaunchShape, version: tuple[int, ...] | None
) -> DefaultMfs:
    """SGLang's mem_fraction_static for a GPU of `gpu_mem_mb` MiB total and these flags."""
    if not gpu_mem_mb > 0:
        raise ValueError(f"GPU memory must be positive, got {gpu_mem_mb} MiB")
    default = _by_version(gpu_mem_mb, shape, version)
    if shape.multimodal and sglang_rules.holds("vlm_fraction_flat", version):
        mfs = default.mem_fraction_static * 0.90
        step = f"multimodal: × 0.90 = {mfs:.4f}"
        return replace(
            default,
            mem_fraction_static=mfs,
            steps=(*default.steps, step),
            rule=default.rule + ", multimodal",
        )
    if shape.multimodal and sglang_rules.holds("vlm_fraction", version):
        factor = sglang_rules.vlm_fraction_factor(shape.vision_layers, shape.vision_hidden_size)
        mfs = default.mem_fraction_static * factor
        layers = shape.vision_layers or 24
        hidden = shape.vision_hidden_size or 1024
        step = (
            f"multimodal: × {factor:.4f} (0.95 × clamp(1 − 0.1 × ({layers} × {hidden}² / "
            f"(24 × 1024²) − 1), 0.8, 1.05)) = {mfs:.4f}"
        )
        return replace(
            default,
            mem_fraction_static=mfs,
            steps=(*default.steps, step),
            rule=default.rule + ", multimodal",
        )
    return default


def _by_version(
    gpu_mem_mb: float, shape: LaunchShape, version: tuple[int, ...] | None
) -> DefaultMfs:
    v = _version3(version)
    if version is not None and v < (0, 4, 6):
        return _fraction_by_tp(gpu_mem_mb, shape, before_040=v < (0, 4, 0))
    if v < (0, 4, 7):
        return _fraction_046(gpu_mem_mb, shape)
    if v < (0, 4, 8):
        return _fraction_047(gpu_mem_mb, shape)
    if v < (0, 5, 6):
        return _size_class_reserve(gpu_mem_mb, shape, any_draft=v < (0, 4, 10))
    chunked, max_bs = graph_defaults(gpu_mem_mb, shape.tp_size, version)
    chunked = shape.chunked_prefill_size or chunked
    if shape.cuda_graph_max_bs:
        max_bs = shape.cuda_graph_max_bs
    elif (
        shape.max_running_requests is not None
        and max_bs > shape.max_running_requests
        and sglang_rules.holds("graph_batch_capped_by_requests", version)
    ):
        max_bs = shape.max_running_requests
    steps: list[str] = [
        f"GPU {gpu_mem_mb:,.0f} MiB → chunked_prefill_size {chunked}, decode graphs up to "
        f"batch {max_bs}"
    ]
    activation = max(chunked, 2048) if chunked > 0 else 2048
    parallel = shape.tp_size * shape.pp_size
    reserved = 512 + activation * 1.5 + parallel / 8 * 1024
    steps.append(
        f"512 + {activation} × 1.5 (activations) + {parallel} / 8 × 1024 (TP × PP) = "
        f"{reserved:,.0f} MiB"
    )
    graphs = graph_reserve_mb(shape, chunked, max_bs, v)
    if graphs:
        reserved += graphs
        steps.append(f"+ {graphs:,.0f} MiB for CUDA graphs")
    if gpu_mem_mb > 60 * 1024 and reserved < _TEN_GIB_MB:
        reserved = _TEN_GIB_MB
        steps.append("at least 10240 MiB on a GPU over 60 GiB")
    algo = _speculative(shape)
    if v < (0, 5, 14) and algo in ("EAGLE", "EAGLE3", "NEXTN"):
        extra = 4 * 1024 if v >= (0, 5, 10) else 2 * 1024
        reserved += extra
        steps.append(f"+ {extra} MiB for the {algo} draft (not budgeted before 0.5.14)")
    elif v < (0, 5, 14) and algo == "STANDALONE":
        reserved += 6 * 1024
        steps.append("+ 6144 MiB for the STANDALONE draft")
    deepep = (shape.moe_a2a_backend or "").lower() == "deepep"
    decode_graphs = shape.disaggregation_mode != "prefill" and not shape.disable_cuda_graph
    if v >= (0, 5, 14) and deepep and decode_graphs:
        reserved += 2 * 1024
        steps.append("+ 2048 MiB for DeepEP all-to-all buffers")
    rule = "0.5.6–0.5.13" if v < (0, 5, 14) else "0.5.14 on"
    return _finish(gpu_mem_mb, reserved, chunked, max_bs, steps, rule)


def graph_reserve_mb(
    shape: LaunchShape, chunked: int, max_bs: int, v: tuple[int, int, int]
) -> float:
    """SGLang's reserve_for_graph_mb: decode graphs, DP attention, prefill graphs."""
    reserved = 0.0
    decode_graphs = not shape.disable_cuda_graph and shape.disaggregation_mode != "prefill"
    if decode_graphs:
        reserved += max_bs * 2
    if shape.enable_dp_attention and shape.disaggregation_mode != "prefill":
        dp = max(1, shape.dp_size)
        reserved += max_bs * dp * 3
        if max_bs > 300:
            reserved += max_bs * dp * 1.5
    if v >= (0, 5, 10) and shape.disaggregation_mode != "decode" and not shape.disable_cuda_graph:
        if shape.mla:
            reserved += 1.5 * 1024
        else:
            prefill_max = chunked if chunked > 0 else 8192
            if shape.max_total_tokens is not None:
                prefill_max = min(prefill_max, shape.max_total_tokens)
            reserved += len(prefill_graph_sizes(prefill_max)) * 8
    return reserved
