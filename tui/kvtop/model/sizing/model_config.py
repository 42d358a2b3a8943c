"""A model's config.json (its text, read by tui/kvtop/sources/model_config_file.py) into KV-cache
dimensions and the cell size per token. Pure: no file or environment is read here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtop.model.sizing.formula import (
    GIB,
    element_size_bytes,
    inferred_cell_size_bytes,
    kv_cache_dtype_name,
    kv_heads_per_rank,
    mha_cell_size_bytes,
    mla_cell_size_bytes,
)

# Multimodal checkpoints nest the language model under one of these keys.
_NESTED_LM_KEYS = ("text_config", "language_config", "llm_config")


class ModelConfigError(ValueError):
    """A config.json that cannot be read or lacks what the KV sizing needs."""


@dataclass(frozen=True, slots=True)
class ModelDims:
    """The parts of a model's config that decide its KV-cache bytes per token."""

    architecture: str | None
    num_layers: int
    attention: str
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    num_kv_heads: int | None
    head_dim: int | None
    v_head_dim: int | None
    torch_dtype: str | None
    kv_cache_quant_fp8: bool
    num_nextn_predict_layers: int | None
    config_path: str


@dataclass(frozen=True, slots=True)
class CellSize:
    """KV bytes per token per rank, where the number came from, and its arithmetic."""

    bytes: float
    source: str
    explanation: str


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A model's config.json as read from disk (tui/kvtop/sources/model_config_file.py): its text, or
    why it could not be read. Parsing it is pure; finding and reading it is a source's job."""

    path: str
    text: str | None
    problem: str | None = None


def parse_model_dims(text: str, config_path: str | Path) -> ModelDims:
    """Parse a config.json's text; raises ModelConfigError naming the file on any problem."""
    try:
        top = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"model config {config_path} is not valid JSON: {exc}") from exc
    if not isinstance(top, dict):
        raise ModelConfigError(f"model config {config_path} is not a JSON object")

    nested = next(
        (top[key] for key in _NESTED_LM_KEYS if isinstance(top.get(key), dict)),
        None,
    )
    # Nested first: a multimodal top level may carry unrelated or vision values.
    layers: list[dict[str, Any]] = [nested, top] if nested is not None else [top]

    def get(key: str) -> Any:
        for cfg in layers:
            if cfg.get(key) is not None:
                return cfg[key]
        return None

    def optional_int(key: str) -> int | None:
        value = get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ModelConfigError(
                f"model config {config_path}: {key!r} should be a non-negative integer, "
                f"got {value!r}"
            )
        return value

    def required_int(key: str) -> int:
        value = optional_int(key)
        if value is None:
            raise ModelConfigError(
                f"model config {config_path} has no {key!r} "
                "(looked in text_config/language_config and at the top level)"
            )
        return value

    architectures = top.get("architectures") or (nested or {}).get("architectures")
    architecture = (
        architectures[0]
        if isinstance(architectures, list) and architectures and isinstance(architectures[0], str)
        else None
    )
    num_layers = required_int("num_hidden_layers")

    kv_lora_rank = optional_int("kv_lora_rank")
    num_kv_heads: int | None
    head_dim: int | None
    v_head_dim: int | None
    if kv_lora_rank is not None:
        attention = "MLA"
        qk_rope_head_dim: int | None = required_int("qk_rope_head_dim")
        num_kv_heads = head_dim = v_head_dim = None
    else:
        attention = "MHA"
        qk_rope_head_dim = None
        num_heads = required_int("num_attention_heads")
        if num_heads == 0:
            raise ModelConfigError(f"model config {config_path}: num_attention_heads is 0")
        num_kv_heads = optional_int("num_key_value_heads") or num_heads
        head_dim = optional_int("head_dim")
        if head_dim is None:
            head_dim = required_int("hidden_size") // num_heads
        v_head_dim = optional_int("v_head_dim")

    torch_dtype = get("torch_dtype") or get("dtype")
    return ModelDims(
        architecture=architecture,
        num_layers=num_layers,
        attention=attention,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        torch_dtype=torch_dtype if isinstance(torch_dtype, str) else None,
        kv_cache_quant_fp8=_has_fp8_kv(layers),
        num_nextn_predict_layers=optional_int("num_nextn_predict_layers"),
        config_path=str(config_path),
    )


def _has_fp8_kv(layers: list[dict[str, Any]]) -> bool:
    """SGLang's ``auto`` KV dtype turns into FP8 when the checkpoint ships FP8 KV scales."""
    for cfg in layers:
        quant = cfg.get("quantization_config")
        if not isinstance(quant, dict):
            continue
        algo = quant.get("kv_cache_quant_algo")
        if isinstance(algo, str) and algo.upper() == "FP8":
            return True
        if quant.get("kv_cache_scheme") is not None:
            return True
    return False


# --------------------------------------------------------------------------- cell size


def sglang_model_dtype(config_dtype: str | None) -> str:
    """The dtype SGLang runs a model in with ``--dtype auto``."""
    # SGLang (like vLLM) treats a missing torch_dtype as float32 and runs float32 checkpoints
    # in float16.
    if config_dtype is None or config_dtype.strip().lower().removeprefix("torch.") in (
        "float32",
        "float",
    ):
        return "float16"
    return config_dtype


def cell_size_from_dims(
    dims: ModelDims,
    kv_cache_dtype: str | None,
    attn_tp_size: int = 1,
    pp_size: int = 1,
    model_dtype: str | None = None,
) -> CellSize:
    """Bytes per token per rank from the config, as SGLang's get_cell_size_per_token.

    ``model_dtype`` is the runtime dtype when known (the ``dtype=`` of "Load weight end");
    otherwise it follows from the config. With ``pp_size`` > 1 the layer count per stage is
    num_layers // pp_size, an approximation: SGLang's split gives some stages one more layer.
    """
    if attn_tp_size < 1 or pp_size < 1:
        raise ValueError(f"attn_tp_size and pp_size must be >= 1, got {attn_tp_size}, {pp_size}")
    runtime_dtype = model_dtype or sglang_model_dtype(dims.torch_dtype)
    dtype_name = kv_cache_dtype_name(kv_cache_dtype, runtime_dtype, dims.kv_cache_quant_fp8)
    elem = element_size_bytes(kv_cache_dtype, runtime_dtype, dims.kv_cache_quant_fp8)
    if dtype_name is None or elem is None:
        raise ValueError(f"unknown KV cache dtype {kv_cache_dtype!r}")

    layers = max(1, dims.num_layers // pp_size)
    layers_text = f"{layers} layers"
    if pp_size > 1:
        layers_text = f"{layers} layers ({dims.num_layers} // PP {pp_size}, approx.)"
    elem_text = f"{_fmt_bytes(elem)} B ({dtype_name})"

    if dims.attention == "MLA":
        if dims.kv_lora_rank is None or dims.qk_rope_head_dim is None:
            raise ValueError(f"MLA dims from {dims.config_path} lack kv_lora_rank/qk_rope_head_dim")
        size = mla_cell_size_bytes(dims.kv_lora_rank, dims.qk_rope_head_dim, layers, elem)
        explanation = (
            f"({dims.kv_lora_rank} + {dims.qk_rope_head_dim}) × {layers_text} × {elem_text}"
            f" = {size:,} B/token"
        )
        return CellSize(bytes=size, source="config", explanation=explanation)

    if dims.num_kv_heads is None or dims.head_dim is None:
        raise ValueError(f"MHA dims from {dims.config_path} lack num_kv_heads/head_dim")
    v_dim = dims.head_dim if dims.v_head_dim is None else dims.v_head_dim
    heads = kv_heads_per_rank(dims.num_kv_heads, attn_tp_size)
    size = mha_cell_size_bytes(
        dims.num_kv_heads, dims.head_dim, v_dim, layers, elem, attn_tp_size=attn_tp_size
    )
    heads_text = f"{heads} KV heads"
    if attn_tp_size > 1:
        heads_text = f"{heads} KV heads per rank (max(1, {dims.num_kv_heads} // TP {attn_tp_size}))"
    explanation = (
        f"{heads_text} × ({dims.head_dim} + {v_dim}) × {layers_text} × {elem_text}"
        f" = {size:,} B/token"
    )
    return CellSize(bytes=size, source="config", explanation=explanation)


def cell_size_inferred(kv_gib: float, tokens: int, page_size: int = 1) -> CellSize:
    """Bytes per token back-computed from a "KV Cache is allocated" line."""
    size = inferred_cell_size_bytes(kv_gib, tokens, page_size)
    # The log prints two decimals, so the true pool size is only known to ±0.005 GiB.
    spread = 0.005 * GIB / (tokens + page_size)
    explanation = (
        f"{kv_gib:.2f} GiB × 2^30 / ({tokens:,} + {page_size}) tokens ≈ {size:,.0f} B/token "
        f"(inferred from the KV Cache line; ±0.005 GiB rounding, ±{spread:,.0f} B)"
    )
    return CellSize(bytes=size, source="inferred", explanation=explanation)


def _fmt_bytes(value: float) -> str:
    return f"{value:g}"
