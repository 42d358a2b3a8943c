"""The weights' size from a bare config.json, for planning before the checkpoint is downloaded.

The estimate counts every matrix the config describes (embeddings, attention, the MLP or the
experts, lm_head, norms, the MTP layers, a vision tower) at the bytes SGLang holds it in: the
model's dtype, or the checkpoint's quantization (fp8 with its scales, AWQ/GPTQ 4-bit with its
group scales and zeros, compressed-tensors, gpt-oss's mxfp4 experts). What the config does not
say is listed in `missing`, never guessed silently; a config from which nothing can be counted
raises ValueError with a sentence.

Pure: the config is passed in already parsed.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

GIB = 1 << 30

# Multimodal checkpoints nest the language model under one of these keys (as model_config.py).
_NESTED_LM_KEYS = ("text_config", "language_config", "llm_config")

EMBEDDINGS = "embeddings"
ATTENTION = "attention"
MLP = "MLP"
EXPERTS = "experts"
LM_HEAD = "lm_head"
NORMS = "norms"
MTP = "MTP layers"
VISION = "vision tower"
PART_ORDER = (EMBEDDINGS, ATTENTION, MLP, EXPERTS, LM_HEAD, NORMS, MTP, VISION)

# Families whose MLP is two matrices (up, down) rather than the gated three.
_UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode"}
# Families with biases on q, k and v (not o) without saying attention_bias.
_QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"}
# Gemma 2/3 carry four norms a layer (pre/post attention, pre/post feed-forward).
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


class ConfigView(Protocol):
    """A parsed config.json: `get` answers the first non-None of `keys`, looking in the language
    model's sub-config first (text_config, language_config, llm_config), then at the top level;
    `top` is the whole document (vision_config lives there)."""

    def get(self, *keys: str) -> Any: ...

    @property
    def top(self) -> Mapping[str, Any]: ...


class DictConfigView:
    """A ConfigView over a config.json already parsed into a dict."""

    def __init__(self, top: Mapping[str, Any]) -> None:
        if not isinstance(top, Mapping):
            raise ValueError("the model config is not a JSON object")
        self._top = top
        nested = next(
            (top[key] for key in _NESTED_LM_KEYS if isinstance(top.get(key), Mapping)), None
        )
        self._layers: tuple[Mapping[str, Any], ...] = (nested, top) if nested else (top,)

    @property
    def top(self) -> Mapping[str, Any]:
        return self._top

    def get(self, *keys: str) -> Any:
        for layer in self._layers:
            for key in keys:
                if layer.get(key) is not None:
                    return layer[key]
        return None


@dataclass(frozen=True, slots=True)
class WeightPart:
    """One part of the model: its parameters, its bytes as SGLang holds them, and how."""

    name: str
    parameters: int
    bytes: int
    held_as: str  # "bfloat16", "fp8 + 128×128 block scales", "AWQ 4-bit, groups of 128", ...
    loaded: bool = True  # False: in the checkpoint, loaded only for speculative decoding (MTP)


@dataclass(frozen=True, slots=True)
class WeightsEstimate:
    """What SGLang loads for the target model (`bytes`, `parameters`: the loaded parts), the
    checkpoint's whole size (`checkpoint_bytes`: the MTP layers too), each part, one line for an
    operator, and what the config lacked."""

    bytes: int
    parameters: int
    checkpoint_bytes: int
    checkpoint_parameters: int
    dtype: str  # the dtype SGLang runs the unquantized weights in
    parts: tuple[WeightPart, ...]
    explanation: str
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def bytes_per_parameter(self) -> float:
        return self.bytes / self.parameters if self.parameters else 0.0

    def part(self, name: str) -> WeightPart | None:
        return next((p for p in self.parts if p.name == name), None)


# --------------------------------------------------------------------------- the matrices


@dataclass(frozen=True, slots=True)
class _Matrix:
    """`count` matrices of out × inp under one module name (experts: all of a layer's)."""

    part: str
    module: str
    out: int
    inp: int
    count: int = 1

    @property
    def parameters(self) -> int:
        return self.out * self.inp * self.count


@dataclass(frozen=True, slots=True)
class _Vector:
    """Norm weights and biases: always at the model's dtype."""

    part: str
    parameters: int


class _Collector:
    def __init__(self) -> None:
        self.matrices: list[_Matrix] = []
        self.vectors: list[_Vector] = []

    def matrix(self, part: str, module: str, out: int, inp: int, count: int = 1) -> None:
        if out > 0 and inp > 0 and count > 0:
            self.matrices.append(_Matrix(part, module, out, inp, count))

    def vector(self, part: str, parameters: int) -> None:
        if parameters > 0:
            self.vectors.append(_Vector(part, parameters))


def _int(view: ConfigView, *keys: str) -> int | None:
    value = view.get(*keys)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _required(view: ConfigView, what: str, *keys: str) -> int:
    value = _int(view, *keys)
    if not value:
        raise ValueError(
            f"the config has no {keys[0]!r}: the weights' size cannot be estimated without {what}"
        )
    return value


# --------------------------------------------------------------------------- dtype


def _runtime_dtype(view: ConfigView, missing: list[str], notes: list[str]) -> str:
    raw = view.get("torch_dtype", "dtype")
    name = raw.strip().lower().removeprefix("torch.") if isinstance(raw, str) else None
    if name is None:
        missing.append(
            "config.json names no torch_dtype: SGLang then takes float32 and runs it as "
            "float16, so 2 B a parameter are counted"
        )
        return "float16"
    if name in ("float32", "float"):
        notes.append("a float32 checkpoint runs as float16 in SGLang: 2 B a parameter")
        return "float16"
    if name in ("bfloat16", "float16", "half"):
        return "float16" if name == "half" else name
    missing.append(f"torch_dtype {raw!r} is not one kvtop knows: 2 B a parameter counted")
    return name


# --------------------------------------------------------------------------- the layers


def _is_moe_layer(view: ConfigView, layer: int, experts: int) -> bool:
    if experts <= 0:
        return False
    first_dense = _int(view, "first_k_dense_replace")
    if first_dense is not None and layer < first_dense:
        return False
    freq = _int(view, "moe_layer_freq")
    if freq and first_dense is not None and layer % freq != 0:
        return False
    only = view.get("mlp_only_layers")
    if isinstance(only, list) and layer in only:
        return False
    step = _int(view, "decoder_sparse_step")
    return not (step and (layer + 1) % step != 0)


@dataclass(frozen=True, slots=True)
class _Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int | None
    experts: int
    moe_intermediate: int | None
    model_type: str


def _attention(view: ConfigView, s: _Shape, prefix: str, c: _Collector, part: str) -> None:
    h = s.hidden
    kv_lora = _int(view, "kv_lora_rank")
    if kv_lora:  # MLA (DeepSeek-V2/V3, Kimi): low-rank q and a shared latent for k and v
        nope = _int(view, "qk_nope_head_dim") or 0
        rope = _int(view, "qk_rope_head_dim") or 0
        v_dim = _int(view, "v_head_dim") or nope
        q_lora = _int(view, "q_lora_rank")
        if q_lora:
            c.matrix(part, f"{prefix}.q_a_proj", q_lora, h)
            c.vector(NORMS if part != MTP else MTP, q_lora)
            c.matrix(part, f"{prefix}.q_b_proj", s.heads * (nope + rope), q_lora)
        else:
            c.matrix(part, f"{prefix}.q_proj", s.heads * (nope + rope), h)
        c.matrix(part, f"{prefix}.kv_a_proj_with_mqa", kv_lora + rope, h)
        c.vector(NORMS if part != MTP else MTP, kv_lora)
        c.matrix(part, f"{prefix}.kv_b_proj", s.heads * (nope + v_dim), kv_lora)
        c.matrix(part, f"{prefix}.o_proj", h, s.heads * v_dim)
        index_heads = _int(view, "index_n_heads")
        index_dim = _int(view, "index_head_dim")
        if index_heads and index_dim:  # DeepSeek-V3.2's DSA indexer
            c.matrix(part, f"{prefix}.indexer.wq_b", index_heads * index_dim, q_lora or h)
            c.matrix(part, f"{prefix}.indexer.wk", index_dim, h)
            c.matrix(part, f"{prefix}.indexer.weights_proj", index_heads, h)
        return
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    c.matrix(part, f"{prefix}.q_proj", q, h)
    c.matrix(part, f"{prefix}.k_proj", kv, h)
    c.matrix(part, f"{prefix}.v_proj", kv, h)
    c.matrix(part, f"{prefix}.o_proj", h, q)
    if view.get("attention_bias") is True:
        c.vector(part, q + 2 * kv + h)
    elif s.model_type in _QKV_BIAS:
        c.vector(part, q + 2 * kv)
    if s.model_type == "gpt_oss":
        c.vector(part, s.heads)  # the attention sinks


def _mlp(view: ConfigView, s: _Shape, layer: int, prefix: str, c: _Collector, part: str) -> None:
    h = s.hidden
    if not _is_moe_layer(view, layer, s.experts):
        if s.intermediate:
            where = part if part == MTP else MLP
            if s.model_type not in _UNGATED_MLP:
                c.matrix(where, f"{prefix}.gate_proj", s.intermediate, h)
            c.matrix(where, f"{prefix}.up_proj", s.intermediate, h)
            c.matrix(where, f"{prefix}.down_proj", h, s.intermediate)
        return
    where = part if part == MTP else EXPERTS
    inter = s.moe_intermediate or 0
    e = s.experts
    c.matrix(where, f"{prefix}.experts.gate_up_proj", 2 * inter, h, e)
    c.matrix(where, f"{prefix}.experts.down_proj", h, inter, e)
    router = "router" if s.model_type == "gpt_oss" else "gate"
    c.matrix(where, f"{prefix}.{router}", e, h)
    if s.model_type == "gpt_oss":
        c.vector(where, e * (2 * inter + h) + e)  # the experts' and the router's biases
    if view.get("topk_method") == "noaux_tc":
        c.vector(where, e)  # e_score_correction_bias
    shared = _int(view, "n_shared_experts")
    shared_inter = _int(view, "shared_expert_intermediate_size")
    if shared:  # DeepSeek: n_shared_experts of the routed experts' size, fused
        c.matrix(where, f"{prefix}.shared_experts.gate_up_proj", 2 * inter * shared, h)
        c.matrix(where, f"{prefix}.shared_experts.down_proj", h, inter * shared)
    elif shared_inter:  # Qwen2-MoE: one shared expert with its own size and a sigmoid gate
        c.matrix(where, f"{prefix}.shared_expert.gate_up_proj", 2 * shared_inter, h)
        c.matrix(where, f"{prefix}.shared_expert.down_proj", h, shared_inter)
        c.matrix(where, f"{prefix}.shared_expert_gate", 1, h)


def _language_model(
    view: ConfigView, c: _Collector, missing: list[str], notes: list[str]
) -> tuple[_Shape, int]:
    hidden = _required(view, "the hidden size", "hidden_size", "d_model", "n_embd")
    layers = _required(view, "the layer count", "num_hidden_layers", "num_layers", "n_layer")
    heads = _required(view, "the attention heads", "num_attention_heads", "n_head")
    kv_heads = _int(view, "num_key_value_heads")
    if kv_heads is None and not _int(view, "kv_lora_rank"):
        missing.append("no num_key_value_heads: counted as num_attention_heads (MHA)")
    head_dim = _int(view, "head_dim") or hidden // heads
    model_type = str(view.get("model_type") or "").lower()
    experts = _int(view, "num_experts", "n_routed_experts", "num_local_experts") or 0
    intermediate = _int(view, "intermediate_size", "ffn_dim", "n_inner")
    moe_intermediate = _int(view, "moe_intermediate_size") or (intermediate if experts else None)
    shape = _Shape(
        hidden,
        heads,
        kv_heads or heads,
        head_dim,
        intermediate,
        experts,
        moe_intermediate,
        model_type,
    )
    if experts and not moe_intermediate:
        missing.append("no moe_intermediate_size or intermediate_size: the experts are left out")
    moe_layers = sum(_is_moe_layer(view, i, experts) for i in range(layers))
    if moe_layers < layers and not intermediate:
        missing.append("no intermediate_size: the dense MLP layers are left out")
    types = view.get("layer_types")
    odd = (
        {str(t) for t in types if any(w in str(t).lower() for w in ("mamba", "linear", "ssm"))}
        if isinstance(types, list)
        else set()
    )
    if odd or view.get("hybrid_override_pattern") or view.get("mamba_n_heads"):
        missing.append(
            "Mamba/linear-attention layers are counted as attention layers: rough for a hybrid"
        )
    if model_type in _QKV_BIAS or view.get("attention_bias") is True:
        notes.append("attention biases are counted; they are a negligible share of the weights")

    vocab = _int(view, "vocab_size")
    if vocab:
        c.matrix(EMBEDDINGS, "model.embed_tokens", vocab, hidden)
    else:
        missing.append("no vocab_size: the embeddings and lm_head are left out")
    tied = view.get("tie_word_embeddings")
    if tied is None:
        tied = model_type.startswith("gemma")
        missing.append(
            "no tie_word_embeddings: lm_head counted "
            + ("as the embeddings (Gemma ties them)" if tied else "as its own matrix")
        )
    if vocab and not tied:
        c.matrix(LM_HEAD, "lm_head", vocab, hidden)

    norms = 4 if model_type in _FOUR_NORMS else 2
    for i in range(layers):
        prefix = f"model.layers.{i}"
        _attention(view, shape, f"{prefix}.self_attn", c, ATTENTION)
        _mlp(view, shape, i, f"{prefix}.mlp", c, MLP)
        c.vector(NORMS, norms * hidden)
    c.vector(NORMS, hidden)  # the final norm
    return shape, layers


def _mtp(view: ConfigView, s: _Shape, layers: int, c: _Collector) -> int:
    """The MTP/nextn layers the checkpoint carries after the decoder layers: SGLang loads them
    only as the draft of speculative decoding, so they are their own part."""
    nextn = _int(view, "num_nextn_predict_layers") or 0
    qwen_mtp = _int(view, "mtp_num_hidden_layers") or 0
    vocab = _int(view, "vocab_size") or 0
    h = s.hidden
    for n in range(nextn):
        i = layers + n
        prefix = f"model.layers.{i}"
        _attention(view, s, f"{prefix}.self_attn", c, MTP)
        _mlp(view, s, max(i, layers - 1), f"{prefix}.mlp", c, MTP)
        # DeepSeek's layout: the layer keeps its own copies of the embeddings and the head.
        c.matrix(MTP, f"{prefix}.embed_tokens", vocab, h)
        c.matrix(MTP, f"{prefix}.shared_head.head", vocab, h)
        c.matrix(MTP, f"{prefix}.eh_proj", h, 2 * h)
        c.vector(MTP, 5 * h)  # enorm, hnorm, the layer's two norms, shared_head.norm
    for n in range(qwen_mtp):
        prefix = f"mtp.layers.{n}"
        _attention(view, s, f"{prefix}.self_attn", c, MTP)
        _mlp(view, s, layers - 1, f"{prefix}.mlp", c, MTP)
        c.vector(MTP, 2 * h)
    if qwen_mtp:
        c.matrix(MTP, "mtp.fc", h, 2 * h)
        c.vector(MTP, 3 * h)
    return nextn + qwen_mtp


def _vision(view: ConfigView, hidden_text: int, c: _Collector, missing: list[str]) -> bool:
    vc = view.top.get("vision_config")
    if not isinstance(vc, Mapping):
        return False
    vision = DictConfigView(vc)
    h = _int(vision, "hidden_size", "embed_dim", "width")
    layers = _int(vision, "num_hidden_layers", "depth", "num_layers", "layers")
    if not h or not layers:
        missing.append(
            "vision_config has no hidden_size or layer count: the vision tower is left out"
        )
        return False
    inter = _int(vision, "intermediate_size")
    if inter is None:
        ratio = vision.get("mlp_ratio")
        inter = int(h * ratio) if isinstance(ratio, (int, float)) and ratio > 0 else 4 * h
        if not isinstance(ratio, (int, float)):
            missing.append(
                "vision_config has no intermediate_size: the vision MLP counted as 4 × hidden"
            )
    patch = _int(vision, "patch_size", "spatial_patch_size")
    channels = _int(vision, "num_channels", "in_channels", "in_chans") or 3
    temporal = _int(vision, "temporal_patch_size") or 1
    image = _int(vision, "image_size")
    gated = str(vision.get("hidden_act") or "") == "silu"
    for i in range(layers):
        prefix = f"visual.blocks.{i}"
        c.matrix(VISION, f"{prefix}.attn.qkv", 3 * h, h)
        c.matrix(VISION, f"{prefix}.attn.proj", h, h)
        c.matrix(VISION, f"{prefix}.mlp.fc1", inter * (2 if gated else 1), h)
        c.matrix(VISION, f"{prefix}.mlp.fc2", h, inter)
        c.vector(VISION, 4 * h + inter + h + 4 * h)  # biases and the two layer norms
    if patch:
        c.matrix(VISION, "visual.patch_embed", h, channels * patch * patch * temporal)
    else:
        missing.append("vision_config has no patch_size: the patch embedding is left out")
    if image and patch:
        c.matrix(VISION, "visual.position_embedding", (image // patch) ** 2, h)
    merge = _int(vision, "spatial_merge_size")
    out = _int(vision, "out_hidden_size") or hidden_text
    if merge:  # Qwen-VL's merger: merge² patches into one token, an MLP to the LM's width
        merged = h * merge * merge
        c.matrix(VISION, "visual.merger.mlp.0", merged, merged)
        c.matrix(VISION, "visual.merger.mlp.2", out, merged)
    else:  # a projection from the vision width to the language model's
        c.matrix(VISION, "multi_modal_projector", out, h)
    c.vector(VISION, 3 * h)
    return True


# --------------------------------------------------------------------------- quantization


@dataclass(frozen=True, slots=True)
class _Scheme:
    """How a quantized linear weight is stored: bits a weight, plus scales and zeros."""

    words: str
    bits: float
    group: int | None = None  # weights per scale along the input dimension
    scale_bytes: float = 2.0  # bytes of one group's scale
    zero_bits: float = 0.0  # bits of one group's zero point
    block: tuple[int, int] | None = None  # fp8 block scaling (out, in), fp32 scales
    per_tensor_bytes: float = 0.0  # scales a whole matrix carries
    per_out_bytes: float = 0.0  # a per-channel scale a row
    per_in_bytes: float = 0.0  # GPTQ's g_idx: an int32 per input channel

    def bytes_of(self, m: _Matrix) -> float:
        one = m.out * m.inp * self.bits / 8
        if self.group:
            groups = math.ceil(m.inp / self.group) * m.out
            one += groups * (self.scale_bytes + self.zero_bits / 8)
        if self.block:
            bo, bi = self.block
            one += math.ceil(m.out / bo) * math.ceil(m.inp / bi) * 4
        one += self.per_tensor_bytes + m.out * self.per_out_bytes + m.inp * self.per_in_bytes
        return one * m.count


@dataclass(frozen=True, slots=True)
class _Quant:
    scheme: _Scheme | None  # None: not quantized
    skip: tuple[str, ...]  # modules left in the model's dtype
    only: tuple[str, ...] = ()  # when set, only these modules are quantized
    lm_head: bool = False  # quantized lm_head (AWQ/GPTQ "lm_head": true)


def _matches(module: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], module) is not None
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*")
    return pattern in module


def _names(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, str))
    return ()


def _fp8(q: Mapping[str, Any]) -> _Scheme:
    block = q.get("weight_block_size")
    if (
        isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and b > 0 for b in block)
    ):
        return _Scheme(f"fp8 + {block[0]}×{block[1]} block scales", 8, block=(block[0], block[1]))
    static = q.get("activation_scheme") == "static"
    return _Scheme("fp8 + per-tensor scales", 8, per_tensor_bytes=8 if static else 4)


def _int_groups(q: Mapping[str, Any], method: str) -> _Scheme:
    bits = q.get("bits", q.get("w_bit", 4))
    group = q.get("group_size", q.get("q_group_size", 128))
    bits = bits if isinstance(bits, int) and bits > 0 else 4
    group = group if isinstance(group, int) and group > 0 else None
    zero = q.get("zero_point", not q.get("sym", True)) if method == "awq" else True
    words = f"{method.upper()} {bits}-bit" + (f", groups of {group}" if group else "")
    if group is None:  # per-channel
        return _Scheme(words, bits, per_out_bytes=2 + (bits / 8 if zero else 0))
    # GPTQ always stores zeros (qzeros) and g_idx, an int32 per input channel.
    per_in = 4.0 if method == "gptq" else 0.0
    return _Scheme(words, bits, group, 2.0, bits if zero else 0.0, per_in_bytes=per_in)


def _compressed_tensors(
    q: Mapping[str, Any], missing: list[str]
) -> tuple[_Scheme | None, tuple[str, ...]]:
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        missing.append("compressed-tensors without config_groups: counted at the model's dtype")
        return None, ()
    first = next(iter(groups.values()))
    weights = first.get("weights") if isinstance(first, Mapping) else None
    if not isinstance(weights, Mapping):
        missing.append("compressed-tensors group without weights: counted at the model's dtype")
        return None, ()
    bits = weights.get("num_bits", 8)
    bits = bits if isinstance(bits, int) and bits > 0 else 8
    kind = str(weights.get("type") or "int")
    strategy = str(weights.get("strategy") or "tensor")
    symmetric = weights.get("symmetric", True) is not False
    group = weights.get("group_size")
    targets = _names(first.get("targets")) if isinstance(first, Mapping) else ()
    words = f"compressed-tensors {kind}{bits}, {strategy}"
    if strategy == "group" and isinstance(group, int) and group > 0:
        # nvfp4 keeps an fp8 scale a group of 16 (and a global scale a matrix).
        scale = 1.0 if kind == "float" and bits == 4 else 2.0
        scheme = _Scheme(
            f"{words} of {group}",
            bits,
            group,
            scale,
            0.0 if symmetric else bits,
            per_tensor_bytes=4,
        )
    elif strategy == "block":
        block = weights.get("block_structure")
        pair = (
            (block[0], block[1])
            if isinstance(block, list)
            and len(block) == 2
            and all(isinstance(b, int) for b in block)
            else (128, 128)
        )
        scheme = _Scheme(words, bits, block=pair)
    elif strategy == "channel":
        scheme = _Scheme(words, bits, per_out_bytes=2 + (0 if symmetric else bits / 8))
    else:
        scheme = _Scheme(words, bits, per_tensor_bytes=4)
    only = tuple(t for t in targets if t not in ("Linear",))
    return scheme, only


def _quantization(view: ConfigView, missing: list[str]) -> _Quant:
    q = view.get("quantization_config", "compression_config")
    if not isinstance(q, Mapping):
        return _Quant(None, ())
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    skip = (
        _names(q.get("modules_to_not_convert"))
        + _names(q.get("ignore"))
        + _names(q.get("ignored_layers"))
        + _names(q.get("exclude_modules"))
        + _names(q.get("llm_int8_skip_modules"))
    )
    lm_head = q.get("lm_head") is True
    if method in ("fp8", "fbgemm_fp8"):
        return _Quant(_fp8(q), skip)
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        return _Quant(_int_groups(q, method.split("_")[0]), skip, lm_head=lm_head)
    if method == "mxfp4":
        # gpt-oss: the experts in MXFP4, two weights a byte and an e8m0 scale a block of 32.
        mx = _Scheme("mxfp4, blocks of 32", 4, 32, 1.0)
        return _Quant(mx, skip, only=(".experts.",))
    if method == "compressed-tensors":
        scheme, only = _compressed_tensors(q, missing)
        return _Quant(scheme, skip, only=only)
    if method == "modelopt":
        algo = str(q.get("quant_algo") or "").upper()
        if algo == "NVFP4":
            group = q.get("group_size") if isinstance(q.get("group_size"), int) else 16
            return _Quant(
                _Scheme(f"NVFP4, groups of {group}", 4, group, 1.0, per_tensor_bytes=8), skip
            )
        return _Quant(_Scheme("fp8 + per-tensor scales", 8, per_tensor_bytes=8), skip)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return _Quant(_Scheme("bitsandbytes 4-bit, blocks of 64", 4, 64, 4.0), skip)
        return _Quant(_Scheme("bitsandbytes 8-bit", 8, per_out_bytes=4), skip)
    missing.append(
        f"quantization {method or 'without a quant_method'} is not one kvtop knows: its weights "
        "are counted at the model's dtype, which overstates them"
    )
    return _Quant(None, ())


def _held(quant: _Quant, m: _Matrix) -> _Scheme | None:
    """The scheme a matrix is stored with, or None for the model's dtype."""
    if quant.scheme is None:
        return None
    # Embeddings and lm_head stay unquantized unless the config says otherwise, and so do the
    # routers and the MTP layers' own embeddings, heads and projections (DeepSeek's layout).
    tail = m.module.rsplit(".", 1)[-1]
    if m.part in (EMBEDDINGS, VISION) or tail in (
        "embed_tokens",
        "head",
        "eh_proj",
        "gate",
        "router",
    ):
        return None
    if tail == "shared_expert_gate":
        return None
    if m.part == LM_HEAD and not quant.lm_head:
        return None
    if any(_matches(m.module, pattern) for pattern in quant.skip):
        return None
    if quant.only and not any(_matches(m.module, pattern) for pattern in quant.only):
        return None
    return quant.scheme


# --------------------------------------------------------------------------- the estimate


def _dtype_bytes(dtype: str) -> int:
    return 4 if dtype in ("float32", "float") else 2


def estimate_weights(config: ConfigView) -> WeightsEstimate:
    """The weights' size estimated from `config` alone (see the module doc)."""
    missing: list[str] = []
    notes: list[str] = []
    c = _Collector()
    dtype = _runtime_dtype(config, missing, notes)
    shape, layers = _language_model(config, c, missing, notes)
    mtp_layers = _mtp(config, shape, layers, c)
    if mtp_layers:
        notes.append(
            f"the checkpoint's {mtp_layers} MTP layer{'s load' if mtp_layers > 1 else ' loads'} "
            "only for speculative decoding (EAGLE/MTP): counted apart"
        )
    has_vision = _vision(config, shape.hidden, c, missing)
    if has_vision:
        notes.append("the vision tower is estimated from vision_config's sizes: approximate")
    quant = _quantization(config, missing)
    elem = _dtype_bytes(dtype)

    params: dict[str, int] = {}
    sizes: dict[str, float] = {}
    held: dict[str, set[str]] = {}
    for m in c.matrices:
        scheme = _held(quant, m)
        params[m.part] = params.get(m.part, 0) + m.parameters
        sizes[m.part] = sizes.get(m.part, 0.0) + (
            scheme.bytes_of(m) if scheme else m.parameters * elem
        )
        held.setdefault(m.part, set()).add(scheme.words if scheme else dtype)
    for v in c.vectors:
        params[v.part] = params.get(v.part, 0) + v.parameters
        sizes[v.part] = sizes.get(v.part, 0.0) + v.parameters * elem
        held.setdefault(v.part, set()).add(dtype)

    parts = tuple(
        WeightPart(
            name,
            params[name],
            round(sizes[name]),
            " and ".join(sorted(held[name], key=lambda w: (w == dtype, w))),
            loaded=name != MTP,
        )
        for name in PART_ORDER
        if params.get(name)
    )
    if not parts:
        raise ValueError("the config describes no weights kvtop can count")
    loaded = [p for p in parts if p.loaded]
    total_bytes = sum(p.bytes for p in loaded)
    total_params = sum(p.parameters for p in loaded)
    estimate = WeightsEstimate(
        bytes=total_bytes,
        parameters=total_params,
        checkpoint_bytes=sum(p.bytes for p in parts),
        checkpoint_parameters=sum(p.parameters for p in parts),
        dtype=dtype,
        parts=parts,
        explanation="",
        missing=tuple(missing),
        notes=tuple(notes),
    )
    return _explained(estimate, quant.scheme is not None)


def _explained(e: WeightsEstimate, quantized: bool) -> WeightsEstimate:
    from dataclasses import replace

    billions = e.parameters / 1e9
    gib = e.bytes / GIB
    if quantized:
        schemes = [w for w in _flatten(p.held_as for p in e.parts if p.loaded) if w != e.dtype]
        how = f"{e.bytes_per_parameter:.2f} B ({'; '.join(schemes)}; the rest {e.dtype})"
    else:
        how = f"{_dtype_bytes(e.dtype)} B ({e.dtype})"
    line = f"≈ {billions:,.2f} B parameters × {how} = {gib:,.2f} GiB, estimated from config.json"
    mtp = e.part(MTP)
    if mtp is not None:
        line += f"; + {mtp.bytes / GIB:,.2f} GiB of MTP layers with speculative decoding"
    return replace(e, explanation=line)


def _flatten(words: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for w in words:
        for one in w.split(" and "):
            if one not in seen:
                seen.append(one)
    return seen


def estimate_from_config(config: Mapping[str, Any]) -> WeightsEstimate:
    """`estimate_weights` for a config.json already parsed into a dict."""
    return estimate_weights(DictConfigView(config))


# --------------------------------------------------------------------------- per rank


@dataclass(frozen=True, slots=True)
class RankLayout:
    """How SGLang spreads the weights over the GPUs of one launch.

    `attn_tp` is the attention's TP (TP / DP with --enable-dp-attention). The routed experts
    are split over all TP ranks whatever --ep-size (EP × the experts' own TP = TP); what DP
    attention changes is the attention, the embeddings and (with --enable-dp-lm-head) the
    head: split over the attention's TP only, so whole on every rank when DP = TP."""

    tp: int = 1
    pp: int = 1
    attn_tp: int = 1
    dp_lm_head: bool = False  # --enable-dp-lm-head: lm_head over the attention's TP
    dense_tp: int | None = None  # --moe-dense-tp-size: the dense MLP layers' TP
    shared_experts_whole: bool = False  # DeepEP / Mooncake all-to-all: shared experts whole


@dataclass(frozen=True, slots=True)
class RankShare:
    """The most loaded rank's bytes of the estimate (`bytes`) out of the loaded whole
    (`total_bytes`), and each part's divisor in words."""

    bytes: int
    total_bytes: int
    split: tuple[tuple[str, str], ...]  # (part, "over 4" / "whole on every rank" / ...)
    # What the parts' sizes come from: the config's dimensions, or the checkpoint's own
    # tensors (the safetensors headers: exact bytes per tensor, quantized or not).
    basis: str = "config.json's dimensions"

    @property
    def fraction(self) -> float:
        return self.bytes / self.total_bytes if self.total_bytes else 0.0

    def words(self) -> str:
        return "; ".join(f"{part} {how}" for part, how in self.split)


_REPLICATED_ATTENTION = ("q_a_proj", "kv_a_proj_with_mqa", "wk", "weights_proj")


def _layer_of(module: str) -> int | None:
    match = re.match(r"model\.layers\.(\d+)\.", module)
    return int(match.group(1)) if match else None


def _stage_of(layer: int, layers: int, pp: int) -> int:
    """SGLang's get_pp_indices: layers split evenly, the last `remainder` stages one more."""
    base, remainder = divmod(layers, pp)
    stage, start = 0, 0
    while stage < pp - 1:
        size = base + (1 if stage >= pp - remainder else 0)
        if layer < start + size:
            return stage
        start += size
        stage += 1
    return pp - 1


def _matrix_divisor(m: _Matrix, s: _Shape, layout: RankLayout) -> int:
    return divisor_of(m.part, m.module, s.kv_heads, layout)


def divisor_of(part: str, module: str, kv_heads: int, layout: RankLayout) -> int:
    """Over how many ranks SGLang splits one matrix (`module`, e.g.
    `model.layers.3.self_attn.k_proj`) of `part` under `layout`: 1 is whole on every rank."""
    tail = module.rsplit(".", 1)[-1]
    if part == EMBEDDINGS:
        return layout.attn_tp
    if part == LM_HEAD:
        return layout.attn_tp if layout.dp_lm_head else layout.tp
    if part == ATTENTION:
        if tail in _REPLICATED_ATTENTION:
            return 1  # MLA's down-projections and the DSA indexer: ReplicatedLinear
        if tail in ("k_proj", "v_proj"):
            # Fewer KV heads than attention ranks: each rank keeps one whole head.
            return max(1, min(layout.attn_tp, kv_heads))
        return layout.attn_tp
    if part == MLP:
        return layout.dense_tp or layout.tp
    if part == EXPERTS:
        if tail in ("gate", "router", "shared_expert_gate"):
            return 1
        if ".shared_expert" in module:
            return 1 if layout.shared_experts_whole else layout.tp
        return layout.tp
    if part == VISION:
        return layout.tp
    return 1


def _vector_divisor(v: _Vector, s: _Shape, layout: RankLayout) -> int:
    if v.part == ATTENTION:
        return layout.attn_tp
    if v.part == EXPERTS and s.model_type == "gpt_oss":
        return layout.tp
    return 1


def rank_share(config: ConfigView, layout: RankLayout) -> RankShare:
    """The share of the loaded weights the most loaded rank holds under `layout`, from the
    model's structure: each matrix over the ranks SGLang splits it across (see RankLayout),
    norms and routers whole on every rank, the layers over the pipeline stages (the embeddings
    on the first, lm_head and the final norm on the last). Quantized parts at their stored
    bytes and the parts a quantization leaves in bf16 at theirs, so a checkpoint's unquantized
    share is weighted as it loads. Raises ValueError where estimate_weights does."""
    missing: list[str] = []
    notes: list[str] = []
    c = _Collector()
    dtype = _runtime_dtype(config, missing, notes)
    shape, layers = _language_model(config, c, missing, notes)
    _vision(config, shape.hidden, c, missing)
    gaps = [m for m in missing if "left out" in m]
    if gaps:
        # A part the config does not size would skew every other part's share.
        raise ValueError(f"the weights' split per rank needs the whole structure: {gaps[0]}")
    quant = _quantization(config, missing)
    elem = _dtype_bytes(dtype)
    tally = StageTally(layers, layout.pp)
    for m in c.matrices:
        if m.part == MTP:
            continue
        scheme = _held(quant, m)
        size = scheme.bytes_of(m) if scheme else m.parameters * elem
        tally.place(_layer_of(m.module), m.part, size, _matrix_divisor(m, shape, layout))
    # Vectors carry no module name: the per-layer ones spread evenly over the stages.
    for v in c.vectors:
        if v.part != MTP:
            tally.spread(v.part, v.parameters * elem, _vector_divisor(v, shape, layout))
    if not tally.total:
        raise ValueError("the config describes no weights kvtop can count")
    return tally.share()


class StageTally:
    """The weights placed on the pipeline stages, each part over its divisor: the most loaded
    stage's bytes are the most loaded rank's (the config's estimate and the checkpoint's
    tensors both place through it)."""

    def __init__(self, layers: int, pp: int) -> None:
        self.layers = layers
        self.pp = max(1, min(pp, layers))
        self.stages = [0.0] * self.pp
        self.total = 0.0
        self.split: dict[str, set[int]] = {}

    def place(self, layer: int | None, part: str, size: float, divisor: int) -> None:
        """A part of one layer (None: outside the layers) on its stage."""
        self.total += size
        self.split.setdefault(part, set()).add(divisor)
        if layer is not None:
            stage = _stage_of(layer, self.layers, self.pp)
        elif part in (EMBEDDINGS, VISION):
            stage = 0
        else:
            stage = self.pp - 1  # lm_head and the final norm
        self.stages[stage] += size / divisor

    def spread(self, part: str, size: float, divisor: int) -> None:
        """A part of every layer whose layer is not named: evenly over the stages."""
        self.total += size
        self.split.setdefault(part, set()).add(divisor)
        for stage in range(self.pp):
            self.stages[stage] += size / divisor / self.pp

    def share(self, basis: str | None = None) -> RankShare:
        words = _split_words(self.split, self.pp)
        if basis is None:
            return RankShare(round(max(self.stages)), round(self.total), words)
        return RankShare(round(max(self.stages)), round(self.total), words, basis)


def _split_words(split: Mapping[str, set[int]], pp: int) -> tuple[tuple[str, str], ...]:
    """Each part's divisors in words, in PART_ORDER, and the pipeline stages."""
    words = []
    for part in PART_ORDER:
        if part not in split:
            continue
        divisors = sorted(split[part])
        if divisors == [1]:
            words.append((part, "whole on every rank"))
        else:
            words.append((part, "over " + " or ".join(str(d) for d in divisors)))
    if pp > 1:
        words.append(("layers", f"over {pp} pipeline stages (the fullest counted)"))
    return tuple(words)
