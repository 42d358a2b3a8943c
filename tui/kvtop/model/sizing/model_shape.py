"""What a model's config.json says beyond the plain cell size: context length, which layers are
full attention, sliding-window or Mamba/linear attention, the state a Mamba layer keeps per
request, an MTP draft's layers, and the weights' bytes from model.safetensors.index.json.

Pure: the texts are read by tui/kvtop/plan/gather.py and decoded once by
tui/kvtop/model/sizing/model_config.py (parse_model). Each field is None where the config does
not say; `missing` lists in words what the plan then has to guess or cannot tell.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtop.model.sizing.model_config import (
    ConfigView,
    ModelConfigError,
    ModelDims,
    decode_config,
    dims_from_config,
)

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
    architecture: str | None = None
    # vision_config's num_hidden_layers and hidden_size: SGLang's multimodal default fraction
    # reads them (24 and 1024 where the vision_config lacks them; None here, the engine's
    # defaults apply).
    vision_layers: int | None = None
    vision_hidden_size: int | None = None
    # config.json's learnable_sink: SGLang 0.5.23 keeps such a DSA model's KV cache bfloat16.
    learnable_sink: bool = False
    # The embedding and lm_head parameters (vocab × hidden, once if tied): --cpu-offload-gb
    # never moves them to host RAM (SGLang offloads only the decoder layers). None: the config
    # lacks vocab_size or hidden_size.
    embedding_params: int | None = None

    @property
    def hybrid(self) -> str | None:
        if self.mamba_layers:
            return "mamba"
        if self.swa_layers:
            return "swa"
        return None


def _kind(word: str) -> str:
    low = word.lower()
    if any(w in low for w in _MAMBA_WORDS):
        return "mamba"
    if any(w in low for w in _SWA_WORDS):
        return "swa"
    return "full"


def _layer_kinds(config: ConfigView, num_layers: int) -> tuple[list[str] | None, str | None]:
    """Each layer's kind from layer_types / hybrid_override_pattern / full_attention_interval."""
    get, _int = config.get, config.bounded_int
    types = get("layer_types", "layers_block_type")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        return [_kind(t) for t in types], None
    pattern = get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H: M = Mamba, * = attention, - = MLP (no state).
        kinds = ["mamba" if c == "M" else "full" for c in pattern if c in "M*"]
        return kinds, None
    interval = _int("full_attention_interval")
    if interval and get("linear_num_value_heads") is not None:
        # Qwen3-Next: every `interval`-th layer is full attention, the others linear (GDN).
        return ["full" if (i + 1) % interval == 0 else "mamba" for i in range(num_layers)], None
    if get("sliding_window") and get("sliding_window_pattern") is not None:
        every = _int("sliding_window_pattern")
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


def _mamba_state(config: ConfigView) -> MambaState | None:
    _int = config.bounded_int
    # Gated DeltaNet (Qwen3-Next, Kimi-Linear style linear attention).
    v_heads = _int("linear_num_value_heads")
    if v_heads:
        k_heads = _int("linear_num_key_heads") or v_heads
        k_dim = _int("linear_key_head_dim") or 0
        v_dim = _int("linear_value_head_dim") or 0
        kernel = _int("linear_conv_kernel_dim") or 4
        conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
        return MambaState("gdn", conv_dim * (kernel - 1), v_heads * k_dim * v_dim, v_heads)
    # Mamba2 (Granite-4.0-H, Nemotron-H, Falcon-H1).
    heads = _int("mamba_n_heads", "mamba_num_heads")
    head_dim = _int("mamba_d_head", "mamba_head_dim")
    state = _int("mamba_d_state", "ssm_state_size", "state_size")
    if not (heads and head_dim and state):
        return None
    groups = _int("mamba_n_groups", "n_groups") or 1
    kernel = _int("mamba_d_conv", "conv_kernel") or 4
    intermediate = heads * head_dim
    conv_dim = intermediate + 2 * groups * state
    return MambaState("mamba2", conv_dim * (kernel - 1), heads * head_dim * state, heads)


def parse_model_shape(text: str, config_path: str) -> ModelShape:
    """The layout and limits from a config.json's text (raises ModelConfigError if not JSON)."""
    return shape_from_config(decode_config(text, config_path))


def shape_from_config(config: ConfigView) -> ModelShape:
    """The layout and limits of a decoded config.json (ModelConfigError for a value past its
    bound)."""
    get, _int = config.get, config.bounded_int
    num_layers = _int("num_hidden_layers") or 0
    missing: list[str] = []
    context = _int("max_position_embeddings", "max_sequence_length", "seq_length")
    if context is None:
        missing.append(
            "no max_position_embeddings: the context length must come from --context-length"
        )
    kinds, problem = _layer_kinds(config, num_layers)
    if problem:
        missing.append(problem)
    swa = kinds.count("swa") if kinds else 0
    mamba_layers = kinds.count("mamba") if kinds else 0
    full = len(kinds) - swa - mamba_layers if kinds else num_layers
    state = _mamba_state(config) if mamba_layers else None
    if mamba_layers and state is None:
        missing.append(
            "Mamba layers without mamba_n_heads/mamba_d_head/mamba_d_state (or linear_* for "
            "Gated DeltaNet): the state per request is unknown"
        )
    window = _int("sliding_window")
    ratio = get("swa_full_tokens_ratio")
    top = config.top
    vision = top.get("vision_config")
    vision_view = (
        ConfigView(vision, f"{config.path} (vision_config)") if isinstance(vision, dict) else None
    )
    return ModelShape(
        num_layers=num_layers,
        context_len=context,
        full_layers=full,
        swa_layers=swa,
        mamba_layers=mamba_layers,
        sliding_window=window,
        swa_num_kv_heads=_int("swa_num_key_value_heads"),
        swa_head_dim=_int("swa_head_dim"),
        swa_v_head_dim=_int("swa_v_head_dim"),
        swa_full_tokens_ratio=_ratio(ratio),
        mamba=state,
        nextn_layers=_int("num_nextn_predict_layers"),
        dsa_index_head_dim=_int("index_head_dim"),
        multimodal=any(isinstance(top.get(k), dict) for k in ("vision_config", "audio_config")),
        missing=tuple(missing),
        architecture=_architecture(config),
        vision_layers=vision_view.bounded_int("num_hidden_layers") if vision_view else None,
        vision_hidden_size=vision_view.bounded_int("hidden_size") if vision_view else None,
        learnable_sink=get("learnable_sink") is True,
        embedding_params=_embedding_params(config),
    )


def _embedding_params(config: ConfigView) -> int | None:
    vocab, hidden = config.bounded_int("vocab_size"), config.bounded_int("hidden_size")
    if not vocab or not hidden:
        return None
    return vocab * hidden * (1 if config.get("tie_word_embeddings") is True else 2)


# A model's own SWA/full pool ratio is around 1; past this it is no ratio SGLang would use.
_MAX_RATIO = 1000.0


def _ratio(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and value > _MAX_RATIO:
        return None  # float() of a 400-digit integer overflows
    ratio = float(value)
    return ratio if math.isfinite(ratio) and 0 < ratio <= _MAX_RATIO else None


def _architecture(config: ConfigView) -> str | None:
    for cfg in (config.top, *config.layers):
        names = cfg.get("architectures")
        if isinstance(names, list) and names and isinstance(names[0], str):
            return names[0]
    return None


# A checkpoint's bytes: the largest released models are ~2 TB; 100 TiB is past any, and keeps
# the sizing's float arithmetic exact (below 2^53).
MAX_WEIGHTS_BYTES = 100 << 40


def read_index(text: str, index_path: str) -> tuple[int, dict[str, object] | None]:
    """model.safetensors.index.json read once: metadata.total_size (the checkpoint's bytes)
    and its `weight_map` (tensor name → shard file; None where it has none)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ModelConfigError(f"{index_path} nests its JSON too deep to read") from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
        raise ModelConfigError(f"{index_path} is not valid JSON: {exc}") from None
    meta = data.get("metadata") if isinstance(data, dict) else None
    size = meta.get("total_size") if isinstance(meta, dict) else None
    if size is None:
        raise ModelConfigError(f"{index_path} has no metadata.total_size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= MAX_WEIGHTS_BYTES:
        shown = repr(size)
        if len(shown) > 20:
            shown = f"{shown[:12]}… ({len(shown)} characters)"
        raise ModelConfigError(
            f"{index_path}: metadata.total_size {shown} is not a checkpoint's size in "
            "bytes (a whole number above 0 and at most 100 TiB, past any model)"
        )
    found = data.get("weight_map")
    return size, (found if isinstance(found, dict) and found else None)


@dataclass(frozen=True, slots=True)
class ParsedModel:
    """A config.json read once: the KV cell's dimensions, the layers' layout and limits, and
    the decoded config for what else reads it (the weights' estimate)."""

    dims: ModelDims
    shape: ModelShape
    config: ConfigView


def parse_model(text: str, config_path: str | Path) -> ParsedModel:
    """Parse a config.json's text once into its dims, its shape and the decoded view; raises
    ModelConfigError naming the file and the key on any problem."""
    config = decode_config(text, config_path)
    dims = dims_from_config(config)
    return ParsedModel(dims, shape_from_config(config), config)
