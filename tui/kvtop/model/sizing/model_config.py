"""A model's config.json (its text, read by tui/kvtop/sources/model_config_file.py) into KV-cache
dimensions and the cell size per token. Pure: no file or environment is read here."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
NESTED_LM_KEYS = ("text_config", "language_config", "llm_config")

# Bounds on a config's dimensions. The largest models have ~100 layers, ~128 heads and hidden
# sizes of ~20,000; a value past these bounds is no model, and would overflow the float
# arithmetic of the sizing (a 400-digit layer count) or make it loop for ever.
MAX_LAYERS = 10_000
MAX_HEADS = 100_000
MAX_DIM = 1_000_000
# Context lengths: the longest models read ~10 million tokens.
MAX_CONTEXT = 100_000_000
# A config.json is a few KB (a quantized MoE's module lists some hundred KB).
MAX_CONFIG_BYTES = 4 << 20

# The dimensions the KV cell multiplies or divides by: 0 is no model (a division by zero, or
# a pool of 0 bytes per token), so SGLang could not size it either.
_POSITIVE = frozenset(
    {
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "hidden_size",
        "kv_lora_rank",
    }
)
_BOUNDS = {
    "num_hidden_layers": MAX_LAYERS,
    "num_nextn_predict_layers": MAX_LAYERS,
    "num_attention_heads": MAX_HEADS,
    "num_key_value_heads": MAX_HEADS,
    "max_position_embeddings": MAX_CONTEXT,
    "max_sequence_length": MAX_CONTEXT,
    "seq_length": MAX_CONTEXT,
    "sliding_window": MAX_CONTEXT,
}


def bound_of(key: str) -> int:
    """The largest value kvtop reads for a config key (heads, layers, context or a dimension)."""
    if key in _BOUNDS:
        return _BOUNDS[key]
    if "heads" in key or "groups" in key:
        return MAX_HEADS
    return MAX_DIM


class ModelConfigError(ValueError):
    """A config.json that cannot be read or lacks what the KV sizing needs."""


class ConfigView:
    """A decoded config.json: the language model's own config first (a multimodal checkpoint's
    text_config, language_config or llm_config), then the top level."""

    __slots__ = ("_layers", "path", "top")

    def __init__(self, top: Mapping[str, Any], path: str) -> None:
        self.top = top
        self.path = path
        nested = next((top[k] for k in NESTED_LM_KEYS if isinstance(top.get(k), dict)), None)
        # Nested first: a multimodal top level may carry unrelated or vision values.
        self._layers: tuple[Mapping[str, Any], ...] = (nested, top) if nested else (top,)

    @property
    def layers(self) -> tuple[Mapping[str, Any], ...]:
        """The language model's config (when nested), then the top level."""
        return self._layers

    def get(self, *keys: str) -> Any:
        """The first value that is not None among `keys`, each looked up in the language
        model's config, then at the top level."""
        for key in keys:
            for cfg in self._layers:
                if cfg.get(key) is not None:
                    return cfg[key]
        return None

    def bounded_int(self, *keys: str) -> int | None:
        """The first of `keys` as a whole number; None when absent or not a whole number ≥ 0;
        ModelConfigError when it is past its bound (no model has it)."""
        for key in keys:
            value = self.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return None
            limit = bound_of(key)
            if value > limit:
                raise ModelConfigError(
                    f"model config {self.path}: {key!r} is {_short(value)}, past {limit:,} "
                    "(no model has that many)"
                )
            return value
        return None


def _short(value: int) -> str:
    text = str(value)
    return f"{text[:12]}… ({len(text)} digits)" if len(text) > 16 else f"{value:,}"


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


def decode_config(text: str, config_path: str | Path) -> ConfigView:
    """A config.json's text as a ConfigView; ModelConfigError naming the file on any problem."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ModelConfigError(
            f"model config {config_path} is over {MAX_CONFIG_BYTES >> 20} MiB: a config.json "
            "is a few KB. Check the path"
        )
    try:
        top = json.loads(text)
    except RecursionError:
        raise ModelConfigError(
            f"model config {config_path} nests its JSON too deep to read: a config.json is a "
            "few levels deep"
        ) from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
        raise ModelConfigError(f"model config {config_path} is not valid JSON: {exc}") from None
    if not isinstance(top, dict):
        raise ModelConfigError(f"model config {config_path} is not a JSON object")
    return ConfigView(top, str(config_path))


def parse_model_dims(text: str, config_path: str | Path) -> ModelDims:
    """Parse a config.json's text; raises ModelConfigError naming the file on any problem."""
    return dims_from_config(decode_config(text, config_path))


def dims_from_config(config: ConfigView) -> ModelDims:
    """The KV cell's dimensions of a decoded config.json."""
    config_path = config.path

    def optional_int(key: str) -> int | None:
        value = config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ModelConfigError(
                f"model config {config_path}: {key!r} should be a non-negative integer, "
                f"got {_quote(value)}"
            )
        bounded = config.bounded_int(key)
        if key in _POSITIVE and bounded == 0:
            raise ModelConfigError(
                f"model config {config_path}: {key!r} is 0, and no model has 0 of it (SGLang "
                "could not size its KV cache)"
            )
        return bounded

    def required_int(key: str) -> int:
        value = optional_int(key)
        if value is None:
            raise ModelConfigError(
                f"model config {config_path} has no {key!r} "
                "(looked in text_config/language_config and at the top level)"
            )
        return value

    top = config.top
    nested = config.layers[0] if len(config.layers) > 1 else {}
    architectures = top.get("architectures") or nested.get("architectures")
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
        num_kv_heads = optional_int("num_key_value_heads") or num_heads
        head_dim = optional_int("head_dim")
        if head_dim is None:
            head_dim = required_int("hidden_size") // num_heads
            if head_dim == 0:
                raise ModelConfigError(
                    f"model config {config_path}: hidden_size {config.get('hidden_size')} over "
                    f"{num_heads} attention heads leaves a head dimension of 0"
                )
        v_head_dim = optional_int("v_head_dim")

    torch_dtype = config.get("torch_dtype") or config.get("dtype")
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
        kv_cache_quant_fp8=_has_fp8_kv(config.layers),
        num_nextn_predict_layers=optional_int("num_nextn_predict_layers"),
        config_path=str(config_path),
    )


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _has_fp8_kv(layers: tuple[Mapping[str, Any], ...]) -> bool:
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
