"""What a model's config.json says beyond the plain cell size: context length, which layers are
full attention, sliding-window or Mamba/linear attention, the state a Mamba layer keeps per
request, an MTP draft's layers, and the weights' bytes from model.safetensors.index.json.

Pure: the texts are read by tui/kvtop/sources/model_files.py. Each field is None where the config
does not say; `missing` lists in words what the plan then has to guess or cannot tell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvtop.model.sizing.model_config import ModelConfigError

_NESTED_LM_KEYS = ("text_config", "language_config", "llm_config")
# layer_types spellings (Hugging Face) by kind.
_SWA_WORDS = ("sliding", "swa", "local")
_MAMBA_WORDS = ("mamba", "linear", "ssm", "gdn", "deltanet")
_FULL_WORDS = ("full", "attention", "global")
# SGLang keeps the Mamba2 SSM state in float32 unless --mamba-ssm-dtype says otherwise.
DEFAULT_MAMBA_SSM_BYTES = 4
MAMBA_CONV_BYTES = 2  # the conv state is kept in the model's dtype (bf16)


@dataclass(frozen=True, slots=True)
class MambaState:
    """One request's Mamba/linear-attention state per layer, split over TP."""

    kind: str  # "mamba2" or "gdn"
    conv_elements: int  # conv state elements per layer (before the TP split)
    ssm_elements: int  # SSM state elements per layer (before the TP split)
    tp_split_heads: int  # heads split over TP (the state is divided by min(tp, heads))

    def bytes_per_request(self, layers: int, tp: int, ssm_bytes: int) -> int:
        """conv + ssm bytes of one request slot on one rank, over `layers` Mamba layers."""
        split = max(1, min(tp, self.tp_split_heads))
        conv = self.conv_elements // split * MAMBA_CONV_BYTES
        ssm = self.ssm_elements // split * ssm_bytes
        return (conv + ssm) * layers


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The layout of a model's layers and its limits, as far as its config.json says."""

    num_layers: int
    context_len: int | None
    full_layers: int  # layers whose KV grows with every token
    swa_layers: int  # sliding-window layers (own pool)
    mamba_layers: int  # Mamba / linear-attention layers (state per request, no KV)
    sliding_window: int | None
    swa_num_kv_heads: int | None
    swa_head_dim: int | None
    swa_v_head_dim: int | None
    swa_full_tokens_ratio: float | None  # a model's own --swa-full-tokens-ratio
    mamba: MambaState | None
    nextn_layers: int | None  # MTP draft layers (DeepSeek/GLM/MiMo)
    dsa_index_head_dim: int | None  # DeepSeek-V3.2 sparse attention's indexer
    multimodal: bool
    missing: tuple[str, ...]

    @property
    def hybrid(self) -> str | None:
        if self.mamba_layers:
            return "mamba"
        if self.swa_layers:
            return "swa"
        return None


def _layers(top: dict[str, Any]) -> list[dict[str, Any]]:
    nested = next((top[k] for k in _NESTED_LM_KEYS if isinstance(top.get(k), dict)), None)
    return [nested, top] if nested is not None else [top]


def _getter(layers: list[dict[str, Any]]) -> Any:
    def get(*keys: str) -> Any:
        for key in keys:
            for cfg in layers:
                if cfg.get(key) is not None:
                    return cfg[key]
        return None

    return get


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _kind(word: str) -> str:
    low = word.lower()
    if any(w in low for w in _MAMBA_WORDS):
        return "mamba"
    if any(w in low for w in _SWA_WORDS):
        return "swa"
    return "full"


def _layer_kinds(get: Any, num_layers: int) -> tuple[list[str] | None, str | None]:
    """Each layer's kind from layer_types / hybrid_override_pattern / full_attention_interval."""
    types = get("layer_types", "layers_block_type")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return [_kind(t) for t in types], None
    pattern = get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H: M = Mamba, * = attention, - = MLP (no state).
        kinds = ["mamba" if c == "M" else "full" for c in pattern if c in "M*"]
        return kinds, None
    interval = _int(get("full_attention_interval"))
    if interval and get("linear_num_value_heads") is not None:
        # Qwen3-Next: every `interval`-th layer is full attention, the others linear (GDN).
        return ["full" if (i + 1) % interval == 0 else "mamba" for i in range(num_layers)], None
    if get("sliding_window") and get("sliding_window_pattern") is not None:
        every = _int(get("sliding_window_pattern"))
        if every:
            # Gemma 3: every `pattern`-th layer is global, the rest local.
            kinds = ["full" if (i + 1) % every == 0 else "swa" for i in range(num_layers)]
            return kinds, None
    if get("hybrid_layer_pattern") is not None:
        return None, (
            "its hybrid_layer_pattern (a per-model layout kvtop does not read): the layers are "
            "taken as all full attention"
        )
    return None, None


def _mamba_state(get: Any) -> MambaState | None:
    # Gated DeltaNet (Qwen3-Next, Kimi-Linear style linear attention).
    v_heads = _int(get("linear_num_value_heads"))
    if v_heads:
        k_heads = _int(get("linear_num_key_heads")) or v_heads
        k_dim = _int(get("linear_key_head_dim")) or 0
        v_dim = _int(get("linear_value_head_dim")) or 0
        kernel = _int(get("linear_conv_kernel_dim")) or 4
        conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
        return MambaState("gdn", conv_dim * (kernel - 1), v_heads * k_dim * v_dim, v_heads)
    # Mamba2 (Granite-4.0-H, Nemotron-H, Falcon-H1).
    heads = _int(get("mamba_n_heads", "mamba_num_heads"))
    head_dim = _int(get("mamba_d_head", "mamba_head_dim"))
    state = _int(get("mamba_d_state", "ssm_state_size", "state_size"))
    if not (heads and head_dim and state):
        return None
    groups = _int(get("mamba_n_groups", "n_groups")) or 1
    kernel = _int(get("mamba_d_conv", "conv_kernel")) or 4
    intermediate = heads * head_dim
    conv_dim = intermediate + 2 * groups * state
    return MambaState("mamba2", conv_dim * (kernel - 1), heads * head_dim * state, heads)


def parse_model_shape(text: str, config_path: str) -> ModelShape:
    """The layout and limits from a config.json's text (raises ModelConfigError if not JSON)."""
    try:
        top = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"model config {config_path} is not valid JSON: {exc}") from exc
    if not isinstance(top, dict):
        raise ModelConfigError(f"model config {config_path} is not a JSON object")
    get = _getter(_layers(top))
    num_layers = _int(get("num_hidden_layers")) or 0
    missing: list[str] = []
    context = _int(get("max_position_embeddings", "max_sequence_length", "seq_length"))
    if context is None:
        missing.append(
            "no max_position_embeddings: the context length must come from --context-length"
        )
    kinds, problem = _layer_kinds(get, num_layers)
    if problem:
        missing.append(problem)
    swa = kinds.count("swa") if kinds else 0
    mamba_layers = kinds.count("mamba") if kinds else 0
    full = len(kinds) - swa - mamba_layers if kinds else num_layers
    state = _mamba_state(get) if mamba_layers else None
    if mamba_layers and state is None:
        missing.append(
            "Mamba layers without mamba_n_heads/mamba_d_head/mamba_d_state (or linear_* for "
            "Gated DeltaNet): the state per request is unknown"
        )
    window = _int(get("sliding_window"))
    ratio = get("swa_full_tokens_ratio")
    return ModelShape(
        num_layers=num_layers,
        context_len=context,
        full_layers=full,
        swa_layers=swa,
        mamba_layers=mamba_layers,
        sliding_window=window,
        swa_num_kv_heads=_int(get("swa_num_key_value_heads")),
        swa_head_dim=_int(get("swa_head_dim")),
        swa_v_head_dim=_int(get("swa_v_head_dim")),
        swa_full_tokens_ratio=float(ratio)
        if isinstance(ratio, int | float) and ratio > 0
        else None,
        mamba=state,
        nextn_layers=_int(get("num_nextn_predict_layers")),
        dsa_index_head_dim=_int(get("index_head_dim")),
        multimodal=any(isinstance(top.get(k), dict) for k in ("vision_config", "audio_config")),
        missing=tuple(missing),
    )


def weights_bytes_from_index(text: str, index_path: str) -> int:
    """metadata.total_size of model.safetensors.index.json: the checkpoint's bytes."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{index_path} is not valid JSON: {exc}") from exc
    meta = data.get("metadata") if isinstance(data, dict) else None
    size = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(size, bool) or not isinstance(size, int | float) or size <= 0:
        raise ModelConfigError(f"{index_path} has no metadata.total_size")
    return int(size)
