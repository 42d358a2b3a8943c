"""The most loaded rank's weights from the checkpoint's own tensors: each tensor's stored bytes
(from the safetensors headers, quantized or not) placed by its name into the part SGLang splits
the same way (weights_estimate.divisor_of), over the pipeline stage its layer falls in.

Exact where the config's dimensions are an estimate: a quantized checkpoint's unquantized parts
(norms, routers, a vision tower, the layers a quantizer left alone), tied or untied heads, the
scales and zero points beside each quantized matrix. The MTP/nextn layers are left out, as SGLang
loads them only as the draft.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvtop.model.sizing.weights_estimate import (
    ATTENTION,
    EMBEDDINGS,
    EXPERTS,
    LM_HEAD,
    MLP,
    NORMS,
    VISION,
    ConfigView,
    RankLayout,
    RankShare,
    StageTally,
    divisor_of,
)

TENSORS_BASIS = "the checkpoint's tensors (safetensors headers)"

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_VISION = (
    "visual.",
    "vision_tower",
    "vision_model",
    "multi_modal_projector",
    "mm_projector",
    "vision_embed",
    "audio_tower",
)
_EMBEDDING = ("embed_tokens", "wte.", "word_embeddings", "tok_embeddings")
# Quantization's companions of a matrix: they follow the matrix's module.
_COMPANIONS = (
    "weight",
    "qweight",
    "qzeros",
    "scales",
    "g_idx",
    "weight_scale",
    "weight_scale_inv",
    "weight_packed",
    "weight_shape",
    "weight_zero_point",
    "input_scale",
    "bias",
    "weight_global_scale",
    "input_global_scale",
    "weight_scale_2",
)


def _module(name: str) -> str:
    head, _, tail = name.rpartition(".")
    return head if tail in _COMPANIONS and head else name


def part_of(name: str) -> str | None:
    """The part one tensor belongs to; None for the MTP layers (not the target's)."""
    if name.startswith("mtp.") or ".mtp." in name:
        return None
    if any(key in name for key in _VISION):
        return VISION
    if "lm_head" in name or name.startswith("output."):
        return LM_HEAD
    if any(key in name for key in _EMBEDDING):
        return EMBEDDINGS
    tail = _module(name).rsplit(".", 1)[-1]
    if "norm" in tail or tail in ("ln_1", "ln_2", "ln_f"):
        return NORMS
    if ".experts." in name or ".shared_expert" in name or tail in ("gate", "router"):
        return EXPERTS
    if "e_score_correction_bias" in name or "shared_expert_gate" in name:
        return EXPERTS
    if ".mlp." in name or ".feed_forward." in name:
        return MLP
    if ".self_attn." in name or ".attn." in name or ".attention." in name:
        return ATTENTION
    if ".linear_attn." in name or ".mixer." in name:
        return ATTENTION  # GDN / Mamba mixers: split over the attention's TP as the attention
    return NORMS  # anything else a layer holds (a scalar, a bias): whole on every rank


def share_from_tensors(
    tensors: Mapping[str, int], config: ConfigView, layout: RankLayout
) -> RankShare:
    """The most loaded rank's bytes of `tensors` (name → stored bytes) under `layout`. Raises
    ValueError when the tensors hold nothing kvtop can place."""
    layers = config.get("num_hidden_layers", "num_layers", "n_layer")
    kv_heads = config.get("num_key_value_heads") or config.get("num_attention_heads") or 1
    if not isinstance(layers, int) or layers <= 0:
        raise ValueError("the config gives no layer count to place the tensors by")
    tally = StageTally(layers, layout.pp)
    for name, size in tensors.items():
        part = part_of(name)
        match = _LAYER.search(name)
        layer = int(match.group(1)) if match and part != VISION else None
        if part is None or (layer is not None and layer >= layers):
            continue  # MTP/nextn layers after the decoder's: the draft's, loaded apart
        module = _module(name)
        divisor = divisor_of(part, module, int(kv_heads), layout)
        if part == NORMS or (part == ATTENTION and module == name):
            # A vector: a norm whole; an attention bias or a GDN/Mamba scalar over the
            # attention's TP like its matrix.
            divisor = 1 if part == NORMS else layout.attn_tp
        tally.place(layer, part, size, divisor)
    if not tally.total:
        raise ValueError("the checkpoint's tensors hold nothing kvtop can place")
    return tally.share(TENSORS_BASIS)
