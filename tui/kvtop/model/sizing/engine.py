"""The one sizing engine's inputs: from what is known of a deployment (model files, an earlier
boot's log, GPUs, launch arguments) to the Planner that replays SGLang's sizing at any
mem_fraction_static (tui/kvtop/model/sizing/plan.py). `kvtop plan`, the formula screen's what-if and
the replay of a logged boot all size through it. Pure: no file is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kvtop.model.sizing import formula, sglang_rules
from kvtop.model.sizing.calibration import EXCERPT_SOURCE, Calibration
from kvtop.model.sizing.default_mfs import (
    DefaultMfs,
    LaunchShape,
    default_mem_fraction_static,
    graph_defaults,
    graph_reserve_mb,
)
from kvtop.model.sizing.launch_args import LaunchArgs, kv_dtype_name
from kvtop.model.sizing.model_config import ModelDims, cell_size_from_dims, sglang_model_dtype
from kvtop.model.sizing.model_shape import DEFAULT_MAMBA_SSM_BYTES, ModelShape
from kvtop.model.sizing.plan import (
    DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    DEFAULT_SWA_FULL_TOKENS_RATIO,
    AfterPool,
    Anchor,
    Planner,
    PoolCells,
    RankMemory,
    RequestRules,
)
from kvtop.model.sizing.startup_memory import (
    CUDA_ONE,
    CUDA_TP_LARGE,
    StartupRow,
    measured_now,
    row_for,
)
from kvtop.model.sizing.tensor_share import TENSORS_BASIS, share_from_tensors
from kvtop.model.sizing.weights_estimate import (
    ConfigView,
    RankLayout,
    RankShare,
    WeightsEstimate,
    rank_share,
)

GIB = formula.GIB
LATEST_KNOWN_VERSION = (0, 5, 23)
# Free memory SGLang measures before the weights is the card's total less what the platform
# takes first (startup_memory.py: a row per platform and TP size, from real boots). The CUDA
# rows keep the old fixed figures: 1.2 GiB on one GPU, 2.4 GiB per rank with TP 8.
CONTEXT_OVERHEAD_GIB = {True: CUDA_TP_LARGE.gib, False: CUDA_ONE.gib}
_SPEC_WITH_DRAFT_POOL = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# Launch flags that change no GPU memory: a plan ignoring them is still a firm answer. Any other
# flag the engine does not model makes the verdict say so.
NO_MEMORY_EFFECT = frozenset(
    {
        "--host",
        "--port",
        "--served-model-name",
        "--log-level",
        "--log-level-http",
        "--log-requests",
        "--log-requests-level",
        "--api-key",
        "--trust-remote-code",
        "--tokenizer-path",
        "--tokenizer-mode",
        "--chat-template",
        "--completion-template",
        "--reasoning-parser",
        "--tool-call-parser",
        "--enable-metrics",
        "--show-time-cost",
        "--random-seed",
        "--skip-server-warmup",
        "--watchdog-timeout",
        "--decode-log-interval",
        "--revision",
        "--download-dir",
        "--dist-init-addr",
        "--nnodes",
        "--node-rank",
        "--enable-cache-report",
        "--device",
        "--attention-backend",
        "--sampling-backend",
        "--grammar-backend",
        "--schedule-policy",
        "--schedule-conservativeness",
        "--stream-interval",
        "--enable-p2p-check",
        "--hicache-ratio",
        "--hicache-size",
        "--enable-hierarchical-cache",
        "--hicache-io-backend",
        "--hicache-mem-layout",
        "--hicache-storage-backend",
        "--collect-tokens-histogram",
        "--crash-dump-folder",
        "--bucket-time-to-first-token",
        "--bucket-inter-token-latency",
        "--bucket-e2e-request-latency",
        "--prompt-tokens-buckets",
        "--generation-tokens-buckets",
    }
)


class PlanInputError(ValueError):
    """The inputs cannot make a plan; the message says what is missing and what to give."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    dims: ModelDims
    shape: ModelShape
    weights_bytes: int | None  # the checkpoint's total (model.safetensors.index.json)
    path: str
    # Without the checkpoint's index: the weights' bytes estimated from config.json's
    # dimensions and dtype / quantization (weights_estimate.py), said so in the plan.
    estimate: WeightsEstimate | None = None
    weights_source: str = "model.safetensors.index.json"
    # The decoded config.json: which parts SGLang splits over which ranks (rank_share). None:
    # the weights are taken as the whole over TP × PP.
    config_view: ConfigView | None = None
    # Each tensor's stored bytes where the shards are downloaded (their safetensors headers):
    # the split per rank from the checkpoint itself rather than the config's dimensions.
    tensor_bytes: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Gpus:
    count: int
    total_mib: float  # the smallest GPU's total memory (nvidia-smi's memory.total)
    name: str | None
    source: str  # "NVML" or "--gpu-memory"
    # The smallest GPU's free memory measured now (--gpu-memory free): the pre-load estimate
    # starts from it instead of the total less the platform's start-up figure.
    free_mib: float | None = None


@dataclass(frozen=True, slots=True)
class Built:
    planner: Planner
    mem_fraction_static: float
    mfs_source: str  # "given", "log", "SGLang default"
    default: DefaultMfs | None
    version: tuple[int, ...]
    version_source: str
    cell_explanation: str
    notes: tuple[str, ...]
    # The version as the report shows it: the log's range where a log narrows it no further
    # ("0.4.3–0.4.9"), else the version whose rules applied.
    version_text: str = ""
    # The start-up memory row the pre-load estimate used (None: a log measured it).
    startup: StartupRow | None = None
    # What the calibration log measured and what the plan estimated in its place.
    calibrated: tuple[str, ...] = ()
    estimated: tuple[str, ...] = ()


def _elem_bytes(kv_dtype: str | None, dims: ModelDims | None, args: LaunchArgs) -> float:
    runtime = args.str_of("dtype")
    model_dtype = None if runtime in (None, "auto") else runtime
    if dims is not None:
        model_dtype = model_dtype or sglang_model_dtype(dims.torch_dtype)
    elem = formula.element_size_bytes(
        kv_dtype or "auto", model_dtype, dims.kv_cache_quant_fp8 if dims else False
    )
    if elem is None:
        raise PlanInputError(f"unknown KV cache dtype {kv_dtype!r}")
    return elem


def _draft_layers(model: ModelInfo | None, args: LaunchArgs) -> int | None:
    """Layers of the draft's KV pool: an MTP's nextn layers, a one-layer EAGLE head otherwise."""
    algo = args.speculative
    if algo not in _SPEC_WITH_DRAFT_POOL:
        return None
    if (
        model is not None
        and model.shape.nextn_layers
        and not args.str_of("speculative_draft_model_path")
    ):
        return model.shape.nextn_layers
    return 1


def _swa_pooled(model: ModelInfo, args: LaunchArgs, version: tuple[int, ...]) -> str | None:
    """Why a sliding-window model's SWA layers keep the whole context (None: they get their
    own pool)."""
    if not model.shape.swa_layers:
        return None
    if args.flag("disable_hybrid_swa_memory"):
        return "--disable-hybrid-swa-memory"
    if not sglang_rules.holds("swa_pools", version):
        return f"SGLang {formula.format_version(version)} has no sliding-window pool"
    pattern = model.shape.sliding_window is not None and model.shape.swa_layers > 0
    if sglang_rules.swa_memory_off(model.dims.architecture, pattern):
        return f"SGLang's overrides for {model.dims.architecture} turn hybrid SWA memory off"
    return None


def _dsa_default_kv_dtype(
    model: ModelInfo, args: LaunchArgs, version: tuple[int, ...], gpu_name: str | None
) -> tuple[str | None, tuple[str, str, str] | None]:
    """The KV dtype SGLang picks for a DSA model launched without --kv-cache-dtype, and the
    step that says so (nothing for other models or a dtype given)."""
    dims, shape = model.dims, model.shape
    if dims.attention != "MLA" or not shape.dsa_index_head_dim:
        return args.str_of("kv_cache_dtype"), None
    given = args.str_of("kv_cache_dtype")
    if given not in (None, "auto") or not sglang_rules.holds("dsa_default_kv_fp8", version):
        return given, None
    which = sglang_rules.rule("dsa_default_kv_fp8", version)
    major = sglang_rules.compute_major_from_name(gpu_name)
    fp8 = sglang_rules.dsa_default_kv_fp8(version, major, shape.learnable_sink)
    if fp8 is None:
        words = (
            "no --kv-cache-dtype: SGLang picks fp8_e4m3 on Blackwell, bfloat16 below; the GPU "
            "is not known here, so bfloat16"
        )
        return given, ("KV cache dtype (DSA default)", words, "bfloat16?")
    picked = "fp8_e4m3" if fp8 else "bfloat16"
    words = f"no --kv-cache-dtype, compute capability {'≥ 10' if major and major >= 10 else '< 10'}"
    words += f" ({gpu_name}): SGLang {which.range_text()} picks {picked}"
    return picked, ("KV cache dtype (DSA default)", words, picked)


def _dsa_plain_layout(gpu_name: str | None, kv_dtype: str | None) -> bool:
    """Whether SGLang's default DSA backends keep the plain 576-byte fp8 latent: trtllm on
    Blackwell (_set_default_dsa_backends from 0.5.10), tilelang on ROCm."""
    if gpu_name is None or not kv_dtype or "fp8" not in kv_dtype:
        return False
    upper = gpu_name.upper()
    if "AMD" in upper or "INSTINCT" in upper or upper.startswith("MI"):
        return True
    major = sglang_rules.compute_major_from_name(gpu_name)
    return major is not None and major >= 10


def _config_cells(
    model: ModelInfo, args: LaunchArgs, version: tuple[int, ...], gpu_name: str | None = None
) -> tuple[PoolCells, str]:
    dims, shape = model.dims, model.shape
    kv_dtype, dsa_dtype_step = _dsa_default_kv_dtype(model, args, version, gpu_name)
    runtime = args.str_of("dtype")
    model_dtype = None if runtime in (None, "auto") else runtime
    steps: list[tuple[str, str, str]] = []
    if dsa_dtype_step is not None:
        steps.append(dsa_dtype_step)
    swa_off = _swa_pooled(model, args, version)
    if swa_off is not None:
        steps.append(("sliding window", f"{swa_off}: every layer keeps the whole context", "—"))

    # Layers on the fullest pipeline stage: it decides the token count (PP MIN).
    def stage(layers: int) -> int:
        return sglang_rules.pp_stage_layers(layers, args.pp)

    full_layers = shape.full_layers if shape.hybrid else dims.num_layers
    if swa_off is not None:
        full_layers = shape.full_layers + shape.swa_layers
    swa_layers = 0 if swa_off is not None else shape.swa_layers
    full_dims = replace(dims, num_layers=stage(full_layers) if full_layers else 1)
    try:
        cell = cell_size_from_dims(
            full_dims, kv_dtype or "auto", attn_tp_size=args.attn_tp, model_dtype=model_dtype
        )
    except ValueError as exc:
        raise PlanInputError(str(exc)) from None
    full = float(cell.bytes) if full_layers else 0.0
    explanation = cell.explanation
    if args.pp > 1:
        explanation += f" ({full_layers} layers over PP {args.pp}: the fullest stage decides)"
    steps.append(("cell size (full attention)", explanation, f"{full:,.0f} B/token"))
    elem = _elem_bytes(kv_dtype, dims, args)
    v = (*version, 0, 0)[:3]
    dsa_stored: float | None = None
    if dims.attention == "MLA" and shape.dsa_index_head_dim:
        # DeepSeek-V3.2 / GLM-5: the latent as the DSA pool stores it, plus the indexer's keys
        # (index_head_dim fp8 bytes and their 4-byte scales, uint8) on every layer.
        layers = stage(dims.num_layers)
        latent = sglang_rules.dsa_latent_bytes(
            dims.kv_lora_rank or 0,
            dims.qk_rope_head_dim or 0,
            elem,
            version,
            _dsa_plain_layout(gpu_name, kv_dtype),
        )
        indexer = sglang_rules.dsa_indexer_bytes(shape.dsa_index_head_dim)
        sized_indexer = indexer if sglang_rules.holds("dsa_profile_indexer", version) else 0
        full = float((latent.profiled + sized_indexer) * layers)
        dsa_stored = float((latent.stored + indexer) * layers)
        sized_words = (
            f"{indexer} indexer"
            if sized_indexer
            else f"0 indexer: SGLang 0.5.3 sizes without its {indexer} B"
        )
        steps.append(
            (
                "DSA latent + indexer",
                f"({latent.words} + {sized_words}) × {layers} layers",
                f"{full:,.0f} B/token",
            )
        )
    budget: float = full
    if dsa_stored is not None and dsa_stored != full:
        # Before 0.5.19 the token count is sized with 576 × 1 B per layer while the pool
        # allocates the stored fp8 layout: the pool comes out larger than the budget.
        full = dsa_stored
        steps.append(
            ("DSA pool as allocated", "the stored latent + indexer", f"{full:,.0f} B/token")
        )
    swa_bytes = swa_ratio = None
    split = "budget"
    profile: float | None = None
    if swa_layers:
        heads = shape.swa_num_kv_heads or dims.num_kv_heads or 1
        hd = shape.swa_head_dim or dims.head_dim or 0
        vd = shape.swa_v_head_dim or shape.swa_head_dim or dims.v_head_dim or hd
        per_rank = max(1, heads // args.attn_tp)
        swa_bytes = float(int(per_rank * (hd + vd) * stage(swa_layers) * elem))
        swa_ratio = (
            args.float_of("swa_full_tokens_ratio")
            or shape.swa_full_tokens_ratio
            or DEFAULT_SWA_FULL_TOKENS_RATIO
        )
        budget = full + swa_ratio * swa_bytes
        steps.append(
            (
                "cell size (sliding window)",
                f"{per_rank} KV heads × ({hd} + {vd}) × {swa_layers} layers × {elem:g} B",
                f"{swa_bytes:,.0f} B/token",
            )
        )
        which = sglang_rules.rule("swa_split", version)
        if which.until == (0, 5, 10):
            split = "profile_all"
            # Profiled as if every layer had the full layers' size (plus a distinct SWA
            # layout's own bytes, as MiMo's).
            per_full_layer = full / max(1, stage(full_layers))
            if shape.swa_num_kv_heads or shape.swa_head_dim:
                profile = full + swa_bytes
            else:
                profile = per_full_layer * stage(full_layers + swa_layers)
            steps.append(
                (
                    "profile (every layer full)",
                    f"SGLang {which.range_text()}: {which.words}",
                    f"{profile:,.0f} B/token",
                )
            )
        elif which.until == (0, 5, 14):
            split = "profile_mixed"
            profile = full + swa_bytes
            steps.append(
                ("profile (full + SWA)", f"SGLang {which.range_text()}", f"{profile:,.0f} B/token")
            )
        steps.append(
            (
                "rest per full-pool token",
                f"full + {swa_ratio:g} × SWA = {full:,.0f} + {swa_ratio:g} × {swa_bytes:,.0f}",
                f"{budget:,.0f} B/token",
            )
        )
    state_bytes = None
    if shape.mamba_layers and shape.mamba is not None:
        ssm_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(
            args.str_of("mamba_ssm_dtype") or "float32", DEFAULT_MAMBA_SSM_BYTES
        )
        state_bytes = shape.mamba.bytes_per_request(stage(shape.mamba_layers), args.tp, ssm_bytes)
        steps.append(
            (
                "Mamba state per request",
                f"conv + ssm state × {shape.mamba_layers} {shape.mamba.kind} layers, per rank",
                f"{state_bytes / (1 << 20):,.2f} MiB",
            )
        )
    draft_bytes = 0.0
    layers_d = _draft_layers(model, args)
    if layers_d and shape.num_layers:
        layer_bytes = full / max(1, full_dims.num_layers)
        draft_bytes = layer_bytes * layers_d
        if v >= formula.FIRST_DRAFT_BUDGETED_VERSION:
            extra = int(budget * layers_d / max(1, full_dims.num_layers))
            budget += extra
            steps.append(
                (
                    "draft layers in the budget",
                    f"+ int(cell × {layers_d} draft layer(s) / {full_dims.num_layers} layers) "
                    "(SGLang ≥0.5.14)",
                    f"{budget:,.0f} B/token",
                )
            )
    mm = sglang_rules.vlm_reservation_gib(shape.multimodal, version)
    if mm:
        steps.append(
            (
                "multimodal reservation",
                "SGLANG_VLM_CACHE_SIZE_MB (100 MiB by default) out of the KV budget",
                f"{mm:.2f} GiB",
            )
        )
    cells = PoolCells(
        full_bytes=full,
        budget_bytes=budget,
        draft_bytes=draft_bytes,
        swa_bytes=swa_bytes,
        swa_ratio=swa_ratio,
        mamba_state_bytes=state_bytes,
        mamba_full_memory_ratio=args.float_of("mamba_full_memory_ratio")
        or DEFAULT_MAMBA_FULL_MEMORY_RATIO,
        mamba_slots_fixed=args.int_of("max_mamba_cache_size"),
        steps=tuple(steps),
        swa_split=split,
        profile_bytes=profile,
        full_layers=stage(full_layers),
        swa_layers=stage(swa_layers) if swa_layers else 0,
        mamba_padding_in_budget=sglang_rules.rule("mamba_slots", version).until is None,
        taken_from_rest_gib=mm,
    )
    return cells, cell.explanation


def _log_elem(calib: Calibration) -> float | None:
    return formula.element_size_bytes(calib.kv_dtype) if calib.kv_dtype else None


def _log_cells(
    calib: Calibration, args: LaunchArgs, version: tuple[int, ...]
) -> tuple[PoolCells, str]:
    """The bytes per token the logged pool implies, rescaled for a new KV dtype."""
    if calib.budget_bytes is None or calib.full_bytes is None:
        raise PlanInputError(
            "the log has no `KV Cache is allocated` line to take the bytes per token from: "
            "give --model DIR (its config.json)"
        )
    scale = 1.0
    words = "from the log's KV Cache line"
    new_dtype = kv_dtype_name(args.str_of("kv_cache_dtype"))
    old = _log_elem(calib)
    if new_dtype is not None and old is not None and "kv_cache_dtype" in args.given:
        new = formula.element_size_bytes(new_dtype)
        if new is not None and new != old:
            scale = new / old
            words += f", × {new:g}/{old:g} B for --kv-cache-dtype {args.str_of('kv_cache_dtype')}"
    if args.tp != calib.tp_size and "tp_size" in args.given and not calib.mla:
        raise PlanInputError(
            f"the log's boot ran TP{calib.tp_size}; for TP{args.tp} the bytes per token depend "
            "on the model's KV heads: give --model DIR (its config.json) as well"
        )
    cells = PoolCells(
        full_bytes=calib.full_bytes * scale,
        budget_bytes=calib.budget_bytes * scale,
        draft_bytes=calib.draft_bytes * scale,
        swa_bytes=None,
        swa_ratio=calib.swa_ratio,
        steps=(("cell size (log)", words, f"{calib.budget_bytes * scale:,.0f} B/token"),),
        mamba_padding_in_budget=sglang_rules.rule("mamba_slots", version).until is None,
    )
    return cells, words


def _estimated_ranks(
    model: ModelInfo | None, gpus: Gpus | None, args: LaunchArgs
) -> tuple[RankMemory, ...]:
    if gpus is None:
        raise PlanInputError(
            "no GPU memory to plan with: NVML found no GPU here; give --gpu-memory GIB (the "
            "memory of one GPU, e.g. 80 for an H100) or --from-log LOG"
        )
    loaded = _weights_loaded(model)
    if model is None or loaded is None:
        raise PlanInputError(
            "the weights' size is unknown: give --model DIR with model.safetensors.index.json "
            "(its metadata.total_size), --weights-gib GIB, or --from-log LOG of a boot of this "
            "model"
        )
    ranks_n = args.tp * args.pp
    startup = startup_row(gpus, args)
    pre = (gpus.free_mib if gpus.free_mib is not None else gpus.total_mib) / 1024 - startup.gib
    share = weights_share(model, args)
    if share is not None and share.basis == TENSORS_BASIS:
        weights = share.bytes / GIB  # the tensors' own bytes: the draft's MTP layers left out
    else:
        weights = loaded * (share.fraction if share else 1 / ranks_n) / GIB
    offload = args.float_of("cpu_offload_gb") or 0.0
    weights = weights_after_offload(model, weights, offload, args.tp)
    names = [
        f"PP{p} TP{t}" if args.pp > 1 else f"TP{t}" for p in range(args.pp) for t in range(args.tp)
    ]
    if ranks_n == 1:
        names = ["GPU"]
    source = "estimate" if not offload else "estimate, less --cpu-offload-gb"
    if model.weights_bytes is None:
        source += ", weights from config.json"
    return tuple(RankMemory(name, pre, weights, pre - weights, source) for name in names)


def rank_layout(args: LaunchArgs) -> RankLayout:
    """The launch's split of the weights: TP, PP, the attention's TP under DP attention."""
    a2a = (args.str_of("moe_a2a_backend") or "none").lower()
    return RankLayout(
        tp=args.tp,
        pp=args.pp,
        attn_tp=args.attn_tp,
        dp_lm_head=args.flag("enable_dp_lm_head") and args.flag("enable_dp_attention"),
        dense_tp=args.int_of("moe_dense_tp_size"),
        shared_experts_whole=a2a in ("deepep", "mooncake", "ascend_fuseep"),
    )


def weights_share(model: ModelInfo | None, args: LaunchArgs) -> RankShare | None:
    """The most loaded rank's share of the weights from the model's structure, or None where
    the config does not describe it (the whole over TP × PP then)."""
    if model is None or model.config_view is None:
        return None
    layout = rank_layout(args)
    if model.tensor_bytes:
        try:
            return share_from_tensors(model.tensor_bytes, model.config_view, layout)
        except ValueError:
            pass  # the config's estimate of the split below
    try:
        return rank_share(model.config_view, layout)
    except ValueError:
        return None


def startup_row(gpus: Gpus, args: LaunchArgs) -> StartupRow:
    """The start-up memory row for these GPUs and launch (measured now: nothing subtracted)."""
    row = row_for(gpus.name, args.tp * args.pp, args.str_of("device"))
    return measured_now(row) if gpus.free_mib is not None else row


def _startup_words(gpus: Gpus, startup: StartupRow) -> str:
    start = (
        f"the {gpus.free_mib / 1024:.2f} GiB free now"
        if gpus.free_mib is not None
        else f"the GPU's {gpus.total_mib / 1024:.2f} GiB less {startup.gib:g} GiB"
    )
    return f"{start} ({startup.words}, ±{startup.spread_gib:g} GiB over the boots it comes from)"


# SGLang 0.5.3–0.5.7 forces this fraction on a DSA model (DeepSeek-V3.2) off NPU.
DSA_FORCED_MEM_FRACTION = 0.8

# The bytes per parameter of the embedding and lm_head a checkpoint keeps unquantized (bf16).
EMBEDDING_BYTES = 2


def weights_after_offload(
    model: ModelInfo, weights_gib: float, offload_gib: float, tp: int
) -> float:
    """A rank's weights on the GPU with --cpu-offload-gb: OffloaderV1 (utils/offloader.py) moves
    the decoder layers' parameters to host RAM until cpu_offload_gb × 1024³ bytes, so at most
    that much leaves; the embedding and lm_head (split over TP) are built outside make_layers
    and stay on the GPU, so the weights never fall below them."""
    if offload_gib <= 0:
        return weights_gib
    params = model.shape.embedding_params
    resident = params * EMBEDDING_BYTES / max(1, tp) / GIB if params else 0.0
    return max(min(resident, weights_gib), weights_gib - offload_gib)


def _excerpt_pre_load(
    ranks: tuple[RankMemory, ...],
    model: ModelInfo | None,
    gpus: Gpus | None,
    args: LaunchArgs,
    notes: list[str],
) -> tuple[RankMemory, ...]:
    """A log that starts after the weights gives the free memory SGLang sized the pool from,
    not the free memory before the weights: that is the GPU's total less the CUDA context, or
    the post-load figure plus the checkpoint's share, or (neither known) the post-load figure."""
    if not any(r.source == EXCERPT_SOURCE for r in ranks):
        return ranks
    row = row_for(gpus.name if gpus else None, args.tp * args.pp, args.str_of("device"))
    overhead = row.gib
    loaded = _weights_loaded(model)
    out = []
    for rank in ranks:
        if rank.source != EXCERPT_SOURCE:
            out.append(rank)
            continue
        post = rank.post_load_free_gib
        if gpus is not None:
            pre = max(post, gpus.total_mib / 1024 - overhead)
            words = f"the GPU's {gpus.total_mib / 1024:.2f} GiB less {overhead:g} GiB ({row.words})"
        elif loaded is not None:
            pre = post + loaded / (args.tp * args.pp) / GIB
            words = "free after the weights + the checkpoint's bytes over TP × PP"
        else:
            pre = post
            words = ""
        out.append(replace(rank, pre_load_free_gib=pre, weights_gib=pre - post or None))
    if words:
        notes.append(
            "the log starts after the weights: free memory before them is estimated ("
            f"{words}); a log with the `Load weight` lines measures it"
        )
    else:
        notes.append(
            "the log starts after the weights and neither the GPU's memory nor the weights "
            "are known: a different --mem-fraction-static is planned as if the weights took "
            "nothing (give --gpu-memory GIB or --model DIR)"
        )
    return tuple(out)


def _weights_loaded(model: ModelInfo | None) -> int | None:
    """The bytes SGLang loads for the target: the checkpoint's index (or --weights-gib), else
    the estimate from config.json (MTP layers left out: they load only as a draft)."""
    if model is None:
        return None
    if model.weights_bytes is not None:
        return model.weights_bytes
    return model.estimate.bytes if model.estimate is not None else None


def _weights_words(model: ModelInfo | None, args: LaunchArgs) -> str:
    share = weights_share(model, args)
    if share is None or args.tp * args.pp == 1:
        return "the checkpoint's bytes over TP × PP"
    return (
        f"the checkpoint's bytes × {share.fraction:.4f} on the most loaded rank "
        f"({share.words()}; from {share.basis})"
    )


def _log_ranks(calib: Calibration, args: LaunchArgs) -> tuple[tuple[RankMemory, ...], float]:
    """The log's ranks; with another TP each rank's weights rescaled (returned: post shift)."""
    if args.tp == calib.tp_size or not calib.ranks:
        return calib.ranks, 0.0
    pre = min(r.pre_load_free_gib for r in calib.ranks)
    old_post = min(r.post_load_free_gib for r in calib.ranks)
    weights = max((r.weights_gib or 0.0) for r in calib.ranks)
    kept = pre - weights - old_post  # what else the log's boot took before sizing
    new_weights = weights * calib.tp_size / args.tp
    post = pre - new_weights - kept
    ranks = tuple(
        RankMemory(f"TP{i}", pre, new_weights, post, f"log TP{calib.tp_size}, rescaled")
        for i in range(args.tp * args.pp)
    )
    return ranks, post - old_post


def build(
    model: ModelInfo | None,
    calib: Calibration | None,
    args: LaunchArgs,
    gpus: Gpus | None,
    version: tuple[int, ...] | None,
    version_source: str,
) -> Built:
    notes: list[str] = []
    if version is None:
        version = LATEST_KNOWN_VERSION
        version_source = "assumed"
        notes.append(
            "SGLang version unknown (no log, no installed sglang, no --sglang-version): the rules "
            "of 0.5.23 are used"
        )
    v = (*version, 0, 0)[:3]
    page = args.int_of("page_size", 1) or 1
    mla = model.dims.attention == "MLA" if model else bool(calib and calib.mla)
    # ---- bytes per token
    if model is not None:
        cells, cell_words = _config_cells(model, args, version, gpus.name if gpus else None)
        notes.extend(f"model config: {m}" for m in model.shape.missing)
    elif calib is not None:
        cells, cell_words = _log_cells(calib, args, version)
    else:
        raise PlanInputError("nothing to plan from: give --model DIR or --from-log LOG")
    # ---- free memory per rank
    startup = None
    if calib is not None:
        ranks, _shift = _log_ranks(calib, args)
        ranks = _excerpt_pre_load(ranks, model, gpus, args, notes)
    else:
        ranks = _estimated_ranks(model, gpus, args)
        assert gpus is not None  # _estimated_ranks refuses a plan without GPUs
        startup = startup_row(gpus, args)
        notes.append(
            f"pre-load free memory is estimated: {_startup_words(gpus, startup)}; the "
            f"weights are {_weights_words(model, args)}. --from-log LOG of a boot on these "
            "GPUs replaces both with measured figures."
        )
        if model is not None and model.weights_bytes is None and model.estimate is not None:
            notes.append(
                f"weights estimated: {model.estimate.explanation} (no "
                "model.safetensors.index.json; --weights-gib GIB gives the checkpoint's size)"
            )
            notes.extend(f"weights estimate: {m}" for m in model.estimate.missing)
    # ---- mem_fraction_static
    default = None
    mfs = args.float_of("mem_fraction_static")
    if (forced := _forced_mfs(model, calib, args, version, notes)) is not None:
        mfs, source = forced, "SGLang's DSA override"
    elif "mem_fraction_static" in args.given and mfs is not None:
        source = "given"
    elif mfs is not None and calib is not None:
        source = "log"
    elif (implied := _implied_mfs(calib, cells, ranks)) is not None:
        mfs, source = implied, "log"
        notes.append(
            f"mem_fraction_static is not in the log: {implied:.3f} is the value its pool implies"
        )
    else:
        if gpus is None:
            raise PlanInputError(
                "mem_fraction_static is not given and SGLang's default needs the GPU's total "
                "memory: NVML shows no GPU here; give --gpu-memory GIB or "
                "-- --mem-fraction-static VALUE"
            )
        default = default_mem_fraction_static(
            gpus.total_mib, _launch_shape(args, mla, model), version
        )
        mfs, source = default.mem_fraction_static, "SGLang default"
    # ---- calibration anchor and what startup takes after the pool
    anchor = None
    if calib is not None and calib.tokens and not calib.capped:
        anchor_cell = calib.budget_bytes or cells.budget_bytes
        anchor_state = calib.state_gib
        if model is not None and _same_pool_launch(calib, args):
            cells, cell_words, anchor_cell, anchor_state = _anchor_cells(
                calib, args, version, cells, cell_words, notes
            )
        logged_mfs = calib.mem_fraction_static or _implied_mfs(calib, cells, ranks)
        if logged_mfs is not None:
            anchor = Anchor(
                tokens=calib.tokens,
                budget_bytes=anchor_cell,
                page_size=calib.page_size,
                mem_fraction_static=logged_mfs,
                post_load_free_gib=min(r.post_load_free_gib for r in calib.ranks),
                state_gib=anchor_state,
            )
    if calib is not None and args.speculative is None:
        cells = replace(cells, draft_bytes=0.0)
    elif calib is not None and calib.speculative and calib.draft_bytes:
        cells = replace(cells, draft_bytes=calib.draft_bytes)
    if calib is not None and calib.mamba_slot_bytes and model is None:
        cells = replace(cells, mamba_state_bytes=calib.mamba_slot_bytes)
    after = _after_pool(calib, args, model, mla, v, gpus, cells, notes)
    context = args.int_of("context_length") or (calib.context_len if calib else None)
    if context is None and model is not None:
        context = model.shape.context_len
    rules = RequestRules(
        context_len=context,
        max_running_requests=args.int_of("max_running_requests"),
        attn_dp_size=args.attn_dp,
        speculative=args.speculative is not None,
        version=version,
    )
    planner = Planner(
        ranks=ranks,
        cells=cells,
        page_size=page,
        max_total_tokens=args.int_of("max_total_tokens"),
        after_pool=after,
        rules=rules,
        anchor=anchor,
        tp_size=args.tp,
        disable_radix_cache=args.flag("disable_radix_cache"),
        notes=tuple(notes),
        unmodelled_flags=tuple(f for f in args.ignored if f not in NO_MEMORY_EFFECT),
        startup_spread_gib=startup.spread_gib if startup is not None else 0.0,
    )
    assert mfs is not None
    shown = calib.version_text if calib is not None and version_source == "log" else ""
    return Built(
        planner,
        mfs,
        source,
        default,
        version,
        version_source,
        cell_words,
        tuple(notes),
        shown or formula.format_version(version),
        startup=startup,
        calibrated=calib.calibrated if calib is not None else (),
        estimated=calib.estimated if calib is not None else (),
    )


def _anchor_cells(
    calib: Calibration,
    args: LaunchArgs,
    version: tuple[int, ...],
    cells: PoolCells,
    cell_words: str,
    notes: list[str],
) -> tuple[PoolCells, str, float, float]:
    """For a launch like the logged one: the cells to plan with and the anchor's cell and
    state. The config's exact cell when it gives the logged pool (its GiB rounds the same);
    else, for a plain pool, the log's own (the boot measured it)."""
    anchor_cell = calib.budget_bytes or cells.budget_bytes
    anchor_state = calib.state_gib
    if calib.kv_pool_gib is None:
        notes.append(
            "the log has no KV pool line (SGLang 0.4.0 and earlier printed none): the config's "
            f"{cells.budget_bytes:,.0f} B/token is taken with the summary's token count"
        )
    elif _matches_log(calib, cells):
        anchor_cell = cells.budget_bytes
        if cells.mamba_state_bytes and calib.mamba_slots:
            anchor_state = calib.mamba_slots * cells.mamba_state_bytes / GIB
    elif calib.swa_ratio is None and not calib.state_gib and calib.full_bytes:
        # A layout kvtop does not model, or another model's config: the logged pool is what
        # this launch gets.
        config_cell = cells.budget_bytes
        cells, cell_words = _log_cells(calib, args, version)
        anchor_cell = cells.budget_bytes
        notes.append(
            f"the config's {config_cell:,.0f} B/token does not give the logged pool "
            f"({calib.kv_pool_gib} GiB for {calib.tokens:,} tokens): the log's "
            f"{cells.budget_bytes:,.0f} B/token is used (the config may not be this "
            "boot's model, or SGLang stored the cache in a layout kvtop does not model)"
        )
    else:
        notes.append(
            f"the config's {cells.budget_bytes:,.0f} B/token does not give the logged "
            f"pool ({calib.kv_pool_gib} GiB for {calib.tokens:,} tokens): the config may "
            "not be this boot's model"
        )
    return cells, cell_words, anchor_cell, anchor_state


def _forced_mfs(
    model: ModelInfo | None,
    calib: Calibration | None,
    args: LaunchArgs,
    version: tuple[int, ...],
    notes: list[str],
) -> float | None:
    """The fraction SGLang sets whatever was given: 0.8 for a DSA model off NPU in 0.5.3 to
    0.5.7 (a log's boot says its own)."""
    if model is None or calib is not None or not model.shape.dsa_index_head_dim:
        return None
    if model.dims.attention != "MLA" or (args.str_of("device") or "").lower() == "npu":
        return None
    if not sglang_rules.holds("dsa_forced_mem_fraction", version):
        return None
    forced = sglang_rules.rule("dsa_forced_mem_fraction", version)
    notes.append(
        f"SGLang {forced.range_text()} sets mem_fraction_static to 0.8 for a DSA model "
        "whatever was given (off NPU)"
    )
    return DSA_FORCED_MEM_FRACTION


def _same_pool_launch(calib: Calibration, args: LaunchArgs) -> bool:
    return (
        args.tp == calib.tp_size
        and "kv_cache_dtype" not in args.given
        and ("speculative_algorithm" not in args.given)
    )


def _matches_log(calib: Calibration, cells: PoolCells) -> bool:
    if not calib.tokens or calib.kv_pool_gib is None or calib.budget_bytes is None:
        return False
    if calib.swa_ratio is not None or calib.state_gib:
        # Hybrid: the logged budget per token is the pools' sum; compare within 1 %.
        return abs(cells.budget_bytes - calib.budget_bytes) <= 0.01 * calib.budget_bytes
    pool = (calib.tokens + calib.page_size) * cells.full_bytes / GIB
    return abs(pool - calib.kv_pool_gib) <= 0.0051


def _implied_mfs(
    calib: Calibration | None, cells: PoolCells, ranks: tuple[RankMemory, ...] = ()
) -> float | None:
    """The 3-decimal mem_fraction_static a logged pool implies when the log does not say it
    (`ranks`: the plan's own, where it estimated what the log lacks)."""
    ranks = ranks or (calib.ranks if calib is not None else ())
    if calib is None or not calib.tokens or not ranks:
        return None
    pre = min(r.pre_load_free_gib for r in ranks)
    post = min(r.post_load_free_gib for r in ranks)
    cell = calib.budget_bytes or cells.budget_bytes
    rest = (calib.tokens + calib.page_size / 2) * cell / GIB + calib.state_gib
    return round(1 - (post - rest) / pre, 3)


def _launch_shape(args: LaunchArgs, mla: bool, model: ModelInfo | None = None) -> LaunchShape:
    shape = model.shape if model is not None else None
    return LaunchShape(
        multimodal=bool(shape and shape.multimodal),
        vision_layers=getattr(shape, "vision_layers", None),
        vision_hidden_size=getattr(shape, "vision_hidden_size", None),
        tp_size=args.tp,
        pp_size=args.pp,
        dp_size=args.dp,
        enable_dp_attention=args.flag("enable_dp_attention"),
        chunked_prefill_size=args.int_of("chunked_prefill_size"),
        cuda_graph_max_bs=args.int_of("cuda_graph_max_bs"),
        disable_cuda_graph=args.flag("disable_cuda_graph"),
        max_running_requests=args.int_of("max_running_requests"),
        max_total_tokens=args.int_of("max_total_tokens"),
        speculative_algorithm=args.speculative,
        moe_a2a_backend=args.str_of("moe_a2a_backend"),
        disaggregation_mode=args.str_of("disaggregation_mode"),
        mla=mla,
    )


def _after_pool(
    calib: Calibration | None,
    args: LaunchArgs,
    model: ModelInfo | None,
    mla: bool,
    v: tuple[int, ...],
    gpus: Gpus | None,
    cells: PoolCells,
    notes: list[str],
) -> AfterPool | None:
    budgeted = v >= formula.FIRST_DRAFT_BUDGETED_VERSION
    if (
        calib is not None
        and calib.pool_overhead_gib is not None
        and calib.cuda_graph_gib is not None
    ):
        graphs = calib.cuda_graph_gib
        source = "log"
        old_bs = _int(calib.server_args.get("cuda_graph_max_bs"))
        new_bs = args.int_of("cuda_graph_max_bs")
        if args.flag("disable_cuda_graph"):
            graphs, source = 0.0, "--disable-cuda-graph"
        elif "cuda_graph_max_bs" in args.given and old_bs and new_bs and new_bs != old_bs:
            graphs = graphs * new_bs / old_bs
            source = f"log, × {new_bs}/{old_bs} for --cuda-graph-max-bs"
        draft_w = 0.0 if budgeted else calib.draft_weights_gib
        if args.speculative is None and calib.speculative:
            draft_w = 0.0
            notes.append(
                "the log's boot had a draft model; this plan has none (its weights, KV "
                "and graphs are left out)"
            )
        elif args.speculative is not None and not calib.speculative:
            notes.append(
                "the log's boot had no draft model: the draft's weights and graphs "
                "are not in this plan's free memory after startup"
            )
        return AfterPool(
            pool_overhead_gib=calib.pool_overhead_gib,
            cuda_graph_gib=graphs,
            draft_weights_gib=draft_w,
            other_gib=calib.other_gib,
            cuda_graph_source=source,
        )
    if calib is not None and calib.ranks:
        notes.append(
            "the log ends before the CUDA graphs: free memory after startup is "
            "estimated with SGLang's own graph reserve"
        )
    # SGLang's own estimate of the graphs, in its default-fraction rule.
    gpu_mib = gpus.total_mib if gpus else 80 * 1024
    chunked, max_bs = graph_defaults(gpu_mib, args.tp, v)
    shape = _launch_shape(args, mla)
    max_bs = shape.cuda_graph_max_bs or max_bs
    graphs_mb = graph_reserve_mb(shape, shape.chunked_prefill_size or chunked, max_bs, v[:3])  # type: ignore[arg-type]
    context = args.int_of("context_length") or (model.shape.context_len if model else None) or 4096
    reqs = args.int_of("max_running_requests") or (48 if args.speculative else 4096)
    overhead = (reqs + 1) * (context + 4) * 4 / GIB
    notes.append(
        f"CUDA graphs estimated at {graphs_mb / 1024:.2f} GiB (SGLang's own reserve_for_graph "
        "estimate); the req_to_token table at "
        f"{overhead:.2f} GiB; a boot's log (--from-log) measures both"
    )
    return AfterPool(
        pool_overhead_gib=overhead,
        cuda_graph_gib=graphs_mb / 1024,
        cuda_graph_source="estimate (SGLang's reserve_for_graph)",
    )


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
