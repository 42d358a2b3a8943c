"""The weights' size from a bare config.json against published checkpoints: each estimate is
within 3 % of the checkpoint's bytes (the error measured here is kept beside each figure), every
quantization scheme is counted at its own bytes, and what a config lacks is said."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from kvtop.model.sizing.weights_estimate import (
    EMBEDDINGS,
    EXPERTS,
    LM_HEAD,
    MTP,
    VISION,
    DictConfigView,
    estimate_from_config,
    estimate_weights,
)
from tests.support.paths import FIXTURES

MODELS = FIXTURES / "models"

# (fixture directory, the checkpoint's bytes, where the figure comes from, the error measured
# when this test was written, in %). The bytes are model.safetensors.index.json's
# metadata.total_size unless said otherwise.
PUBLISHED = {
    # meta-llama/Llama-3.1-8B-Instruct, bf16
    "llama-3.1-8b-instruct": (16_060_522_496, "total_size", 0.000),
    # Qwen/Qwen3-30B-A3B, bf16, 128 experts (16 shards); the estimate leaves out q_norm/k_norm
    "qwen3-30b-a3b": (61_064_245_248, "total_size", -0.00004),
    # deepseek-ai/DeepSeek-V3 (and R1, the same files' size), fp8 with 128×128 block scales and
    # one MTP layer: the 163 safetensors files' bytes, headers included
    "deepseek-v3": (688_586_727_753, "the files' bytes", -0.0017),
    # google/medgemma-27b-it: Gemma-3-27B's architecture with the SigLIP vision tower, bf16
    "medgemma-27b-it": (54_864_813_280, "total_size", -0.00006),
    # openai/gpt-oss-20b: mxfp4 experts, the rest bf16
    "gpt-oss-20b": (13_761_264_768, "total_size", 0.000),
    # WizardLM-2-8x22B (a mirror of the Hugging Face repository): Mixtral-8x22B's
    # architecture, bf16
    "wizardlm-2-8x22b": (281_241_268_224, "total_size", 0.000),
}


def _config(name: str) -> dict[str, Any]:
    data = json.loads((MODELS / name / "config.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_the_estimate_is_within_3_percent_of_the_published_checkpoint(name: str) -> None:
    total, _source, measured = PUBLISHED[name]
    estimate = estimate_from_config(_config(name))
    error = (estimate.checkpoint_bytes - total) / total * 100
    assert abs(error) <= 3.0
    assert error == pytest.approx(measured, abs=0.001)  # the figure written down above


def test_a_dense_model_reads_as_parameters_times_its_dtype() -> None:
    e = estimate_from_config(_config("llama-3.1-8b-instruct"))
    assert e.parameters == 8_030_261_248
    assert e.bytes == 2 * e.parameters
    assert e.explanation == (
        "≈ 8.03 B parameters × 2 B (bfloat16) = 14.96 GiB, estimated from config.json"
    )
    assert e.missing == ()
    lm_head = e.part(LM_HEAD)
    assert lm_head is not None and lm_head.parameters == 128_256 * 4096


def test_deepseek_mtp_layer_is_its_own_part_and_not_loaded() -> None:
    e = estimate_from_config(_config("deepseek-v3"))
    mtp = e.part(MTP)
    assert mtp is not None and not mtp.loaded
    assert e.checkpoint_bytes == e.bytes + mtp.bytes
    # 671 B in the main model, 14 B in the MTP module, as DeepSeek's model card says
    assert e.parameters / 1e9 == pytest.approx(671, abs=1)
    assert mtp.parameters / 1e9 == pytest.approx(14, abs=1)
    experts = e.part(EXPERTS)
    assert experts is not None and "fp8 + 128×128 block scales" in experts.held_as
    embeddings = e.part(EMBEDDINGS)
    assert embeddings is not None and embeddings.held_as == "bfloat16"  # not quantized
    assert "MTP layers with speculative decoding" in e.explanation


def test_gpt_oss_quantizes_only_the_experts() -> None:
    e = estimate_from_config(_config("gpt-oss-20b"))
    experts = e.part(EXPERTS)
    assert experts is not None
    # the experts at 4 bits and an e8m0 scale per 32 weights; the router in the model's dtype
    assert experts.bytes / experts.parameters == pytest.approx(0.5 + 1 / 32, abs=0.002)
    attention = e.part("attention")
    assert attention is not None and attention.bytes == 2 * attention.parameters
    # no torch_dtype in gpt-oss's config: said, not guessed silently
    assert any("torch_dtype" in m for m in e.missing)


def test_awq_counts_half_a_byte_and_the_group_scales_and_zeros() -> None:
    e = estimate_from_config(_config("qwen2.5-7b-instruct-awq"))
    attention = e.part("attention")
    assert attention is not None
    # q and o 3584×3584, k and v 512×3584 per layer: 4 bits a weight plus, per 128 inputs and
    # output, a float16 scale and a 4-bit zero; the q/k/v biases at 2 B
    q_o = 2 * 3584 * 3584
    k_v = 2 * 512 * 3584
    matrices = (q_o + k_v) // 2 + (q_o + k_v) // 128 * 2.5
    biases = (3584 + 2 * 512) * 2
    assert attention.bytes == pytest.approx(28 * (matrices + biases), abs=1)
    embeddings, lm_head = e.part(EMBEDDINGS), e.part(LM_HEAD)
    assert embeddings is not None and embeddings.held_as == "float16"
    assert lm_head is not None and lm_head.bytes == 2 * 152_064 * 3584
    assert any("negligible" in n for n in e.notes)  # Qwen2's attention biases
    assert e.bytes_per_parameter == pytest.approx(0.73, abs=0.02)


def test_modules_left_out_of_the_quantization_stay_in_the_model_dtype() -> None:
    config = _config("qwen2.5-7b-instruct-awq")
    config["quantization_config"]["modules_to_not_convert"] = ["self_attn"]
    e = estimate_from_config(config)
    attention = e.part("attention")
    assert attention is not None and attention.bytes == 2 * attention.parameters


def test_fp8_per_tensor_and_compressed_tensors() -> None:
    config = _config("llama-3.1-8b-instruct")
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    fp8 = estimate_from_config(config)
    mlp = fp8.part("MLP")
    assert mlp is not None and mlp.bytes == pytest.approx(mlp.parameters, rel=1e-6)
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            }
        },
        "ignore": ["lm_head"],
    }
    w4 = estimate_from_config(config)
    mlp = w4.part("MLP")
    assert mlp is not None
    assert mlp.bytes / mlp.parameters == pytest.approx(0.5 + 2 / 128, abs=0.001)
    assert w4.bytes < fp8.bytes < estimate_from_config(_config("llama-3.1-8b-instruct")).bytes


def test_a_float32_checkpoint_is_counted_at_two_bytes() -> None:
    config = _config("llama-3.1-8b-instruct")
    config["torch_dtype"] = "float32"
    e = estimate_from_config(config)
    assert e.bytes == 2 * e.parameters
    assert any("float32" in n for n in e.notes)


def test_the_vision_tower_is_a_part_of_its_own() -> None:
    e = estimate_from_config(_config("medgemma-27b-it"))
    vision = e.part(VISION)
    assert vision is not None and vision.loaded
    assert vision.parameters / 1e6 == pytest.approx(420, abs=10)  # SigLIP-400M + projector
    assert e.part(LM_HEAD) is None  # Gemma ties lm_head to the embeddings
    assert any("tie_word_embeddings" in m for m in e.missing)


def test_what_a_config_lacks_is_said() -> None:
    config = _config("llama-3.1-8b-instruct")
    for key in ("vocab_size", "num_key_value_heads", "tie_word_embeddings"):
        del config[key]
    e = estimate_from_config(config)
    said = " ".join(e.missing)
    assert "vocab_size" in said and "num_key_value_heads" in said
    assert e.part(EMBEDDINGS) is None


@pytest.mark.parametrize(
    "config",
    [{"hidden_size": 10}, {"num_hidden_layers": 2, "num_attention_heads": 2}, {}],
)
def test_a_config_with_nothing_to_count_is_a_sentence(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="the weights' size cannot be estimated"):
        estimate_from_config(config)


def test_not_a_json_object_is_a_sentence() -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        DictConfigView([1, 2])  # type: ignore[arg-type]


class _OtherView:
    """Any object with get(*keys) and top works (the model_config's view, say)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.top = data

    def get(self, *keys: str) -> Any:
        return next((self.top[k] for k in keys if self.top.get(k) is not None), None)


def test_any_config_view_works() -> None:
    config = _config("llama-3.1-8b-instruct")
    assert estimate_weights(_OtherView(config)).bytes == estimate_from_config(config).bytes


def test_the_language_model_under_text_config_is_read_first() -> None:
    config = _config("medgemma-27b-it")
    view = DictConfigView(config)
    assert view.get("hidden_size") == 5376
    assert view.get("model_type") == "gemma3_text"
    assert view.top["model_type"] == "gemma3"
