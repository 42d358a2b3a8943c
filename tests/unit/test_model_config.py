"""Finding and reading config.json into KV-cache dimensions and cell sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kvtop.model.sizing.model_config import (
    CellSize,
    ModelConfigError,
    ModelDims,
    cell_size_from_dims,
    cell_size_inferred,
    sglang_model_dtype,
)
from kvtop.sources.model_config_file import find_config_json, load_model_dims
from tests.support.paths import STORY_LOG

# Shaped like Kimi-K2.5's config: the DeepSeek-V3 language model sits in text_config.
KIMI_LIKE: dict[str, Any] = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "vision_config": {"num_hidden_layers": 27, "hidden_size": 1152},
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "num_nextn_predict_layers": 0,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "compressed-tensors", "format": "int4"},
    },
}

QWEN3_8B_LIKE: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
}


def _write(path: Path, config: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- loading


def test_mla_in_text_config(tmp_path: Path) -> None:
    path = _write(tmp_path / "kimi" / "config.json", KIMI_LIKE)
    dims = load_model_dims(path)
    assert dims == ModelDims(
        architecture="KimiK25ForConditionalGeneration",
        num_layers=61,
        attention="MLA",
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        num_kv_heads=None,
        head_dim=None,
        v_head_dim=None,
        torch_dtype="bfloat16",
        kv_cache_quant_fp8=False,
        num_nextn_predict_layers=0,
        config_path=str(path),
    )


def test_mla_cell_size_from_config(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", KIMI_LIKE))
    cell = cell_size_from_dims(dims, "auto", attn_tp_size=8)
    assert cell == CellSize(
        bytes=70_272,
        source="config",
        explanation="(512 + 64) × 61 layers × 2 B (bfloat16) = 70,272 B/token",
    )
    assert cell_size_from_dims(dims, "fp8_e4m3").bytes == 35_136
    assert "float8_e4m3fn" in cell_size_from_dims(dims, "fp8_e4m3").explanation


def test_language_config_nesting(tmp_path: Path) -> None:
    config = {"architectures": ["SomeVLM"], "language_config": dict(QWEN3_8B_LIKE)}
    dims = load_model_dims(_write(tmp_path / "config.json", config))
    assert dims.architecture == "SomeVLM"
    assert dims.attention == "MHA"
    assert dims.num_layers == 36


def test_gqa_model(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", QWEN3_8B_LIKE))
    assert dims.attention == "MHA"
    assert (dims.num_kv_heads, dims.head_dim, dims.v_head_dim) == (8, 128, None)
    assert dims.kv_lora_rank is None
    cell = cell_size_from_dims(dims, None)
    assert cell.bytes == 8 * (128 + 128) * 36 * 2 == 147_456
    assert cell.explanation == (
        "8 KV heads × (128 + 128) × 36 layers × 2 B (bfloat16) = 147,456 B/token"
    )


def test_gqa_tensor_parallel_splits_heads(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", QWEN3_8B_LIKE))
    assert cell_size_from_dims(dims, "bf16", attn_tp_size=4).bytes == 2 * 256 * 36 * 2
    # More ranks than KV heads: each rank keeps one replicated head.
    tp16 = cell_size_from_dims(dims, "bf16", attn_tp_size=16)
    assert tp16.bytes == 1 * 256 * 36 * 2
    assert "max(1, 8 // TP 16)" in tp16.explanation


def test_pipeline_parallel_divides_layers(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", KIMI_LIKE))
    cell = cell_size_from_dims(dims, "bf16", pp_size=2)
    assert cell.bytes == 576 * 30 * 2
    assert "approx" in cell.explanation


def test_mha_defaults_from_hidden_size(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32}
    dims = load_model_dims(_write(tmp_path / "config.json", config))
    assert dims.num_kv_heads == 32
    assert dims.head_dim == 128
    assert dims.architecture is None
    assert dims.torch_dtype is None
    # No torch_dtype: SGLang assumes float32 and runs it in float16.
    cell = cell_size_from_dims(dims, "auto")
    assert cell.bytes == 32 * 256 * 32 * 2
    assert "float16" in cell.explanation


def test_null_kv_lora_rank_is_mha(tmp_path: Path) -> None:
    config = dict(QWEN3_8B_LIKE, kv_lora_rank=None)
    assert load_model_dims(_write(tmp_path / "config.json", config)).attention == "MHA"


def test_explicit_v_head_dim(tmp_path: Path) -> None:
    config = dict(QWEN3_8B_LIKE, v_head_dim=64)
    dims = load_model_dims(_write(tmp_path / "config.json", config))
    assert cell_size_from_dims(dims, "bf16").bytes == 8 * (128 + 64) * 36 * 2


@pytest.mark.parametrize(
    "quant",
    [
        {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"},
        {"quant_method": "modelopt", "kv_cache_quant_algo": "fp8"},
        {"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}},
    ],
)
def test_fp8_kv_checkpoint(tmp_path: Path, quant: dict[str, Any]) -> None:
    config = dict(QWEN3_8B_LIKE, quantization_config=quant)
    dims = load_model_dims(_write(tmp_path / "config.json", config))
    assert dims.kv_cache_quant_fp8 is True
    assert cell_size_from_dims(dims, "auto").bytes == 147_456 // 2
    # An explicit --kv-cache-dtype overrides the checkpoint.
    assert cell_size_from_dims(dims, "bf16").bytes == 147_456


def test_fp8_hint_in_nested_config(tmp_path: Path) -> None:
    text = dict(KIMI_LIKE["text_config"], quantization_config={"kv_cache_quant_algo": "FP8"})
    dims = load_model_dims(_write(tmp_path / "config.json", dict(KIMI_LIKE, text_config=text)))
    assert dims.kv_cache_quant_fp8 is True


def test_not_fp8_without_kv_scheme(tmp_path: Path) -> None:
    config = dict(QWEN3_8B_LIKE, quantization_config={"kv_cache_scheme": None, "bits": 4})
    assert load_model_dims(_write(tmp_path / "config.json", config)).kv_cache_quant_fp8 is False


def test_runtime_dtype_overrides_config(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", QWEN3_8B_LIKE))
    assert cell_size_from_dims(dims, "auto", model_dtype="torch.float32").bytes == 147_456 * 2


def test_unknown_kv_dtype_is_an_error(tmp_path: Path) -> None:
    dims = load_model_dims(_write(tmp_path / "config.json", QWEN3_8B_LIKE))
    with pytest.raises(ValueError, match="int3"):
        cell_size_from_dims(dims, "int3")


def test_sglang_model_dtype() -> None:
    assert sglang_model_dtype(None) == "float16"
    assert sglang_model_dtype("float32") == "float16"
    assert sglang_model_dtype("bfloat16") == "bfloat16"


# --------------------------------------------------------------------------- errors


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "broken" / "config.json", "{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON") as info:
        load_model_dims(path)
    assert str(path) in str(info.value)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "config.json"
    with pytest.raises(ModelConfigError, match="cannot read") as info:
        load_model_dims(path)
    assert str(path) in str(info.value)


def test_missing_layers_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.json", {"hidden_size": 10, "num_attention_heads": 2})
    with pytest.raises(ModelConfigError, match="num_hidden_layers") as info:
        load_model_dims(path)
    assert str(path) in str(info.value)


def test_mla_without_rope_dim(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 3, "kv_lora_rank": 512}
    with pytest.raises(ModelConfigError, match="qk_rope_head_dim"):
        load_model_dims(_write(tmp_path / "config.json", config))


@pytest.mark.parametrize("bad", ["61", 61.5, True, -1])
def test_non_integer_field(tmp_path: Path, bad: object) -> None:
    config = dict(QWEN3_8B_LIKE, num_hidden_layers=bad)
    with pytest.raises(ModelConfigError, match="non-negative integer"):
        load_model_dims(_write(tmp_path / "config.json", config))


def test_json_array_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="not a JSON object"):
        load_model_dims(_write(tmp_path / "config.json", "[1, 2]"))


def test_model_config_error_is_value_error() -> None:
    assert issubclass(ModelConfigError, ValueError)


# --------------------------------------------------------------------------- finding


def test_find_local_directory(tmp_path: Path) -> None:
    path = _write(tmp_path / "models" / "Kimi-K2.5" / "config.json", KIMI_LIKE)
    assert find_config_json(str(tmp_path / "models" / "Kimi-K2.5"), env={}, home=tmp_path) == path
    assert find_config_json(str(tmp_path / "models" / "Kimi-K2.5") + "/", env={}) == path


def test_find_direct_config_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.json", QWEN3_8B_LIKE)
    assert find_config_json(str(path), env={}, home=tmp_path) == path


def _hf_snapshot(hub: Path, repo: str, revision: str, config: dict[str, Any]) -> Path:
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    return _write(repo_dir / "snapshots" / revision / "config.json", config)


def test_find_in_hf_home_prefers_refs_main(tmp_path: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    pinned = _hf_snapshot(hub, "moonshotai/Kimi-K2.5", "aaaa", KIMI_LIKE)
    newer = _hf_snapshot(hub, "moonshotai/Kimi-K2.5", "bbbb", KIMI_LIKE)
    os.utime(pinned, (1_000_000, 1_000_000))
    os.utime(newer, (2_000_000, 2_000_000))
    refs = hub / "models--moonshotai--Kimi-K2.5" / "refs" / "main"
    _write(refs, "aaaa\n")
    found = find_config_json(
        "moonshotai/Kimi-K2.5", env={"HF_HOME": str(tmp_path / "hf")}, home=tmp_path / "nohome"
    )
    assert found == pinned


def test_find_newest_snapshot_without_refs(tmp_path: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    older = _hf_snapshot(hub, "Qwen/Qwen3-8B", "1111", QWEN3_8B_LIKE)
    newer = _hf_snapshot(hub, "Qwen/Qwen3-8B", "2222", QWEN3_8B_LIKE)
    os.utime(older, (2_000_000, 2_000_000))
    os.utime(newer, (1_000_000, 1_000_000))
    env = {"HF_HOME": str(tmp_path / "hf")}
    assert find_config_json("Qwen/Qwen3-8B", env=env, home=tmp_path) == older


def test_find_refs_main_pointing_at_missing_snapshot_falls_back(tmp_path: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    only = _hf_snapshot(hub, "Qwen/Qwen3-8B", "1111", QWEN3_8B_LIKE)
    _write(hub / "models--Qwen--Qwen3-8B" / "refs" / "main", "deadbeef")
    env = {"HF_HOME": str(tmp_path / "hf")}
    assert find_config_json("Qwen/Qwen3-8B", env=env, home=tmp_path) == only


def test_hf_hub_cache_beats_hf_home(tmp_path: Path) -> None:
    in_hub_cache = _hf_snapshot(tmp_path / "hubcache", "Qwen/Qwen3-8B", "1", QWEN3_8B_LIKE)
    _hf_snapshot(tmp_path / "hf" / "hub", "Qwen/Qwen3-8B", "2", QWEN3_8B_LIKE)
    env = {"HF_HUB_CACHE": str(tmp_path / "hubcache"), "HF_HOME": str(tmp_path / "hf")}
    assert find_config_json("Qwen/Qwen3-8B", env=env, home=tmp_path) == in_hub_cache


def test_find_in_default_home_cache(tmp_path: Path) -> None:
    hub = tmp_path / ".cache" / "huggingface" / "hub"
    path = _hf_snapshot(hub, "Qwen/Qwen3-8B", "abc", QWEN3_8B_LIKE)
    assert find_config_json("Qwen/Qwen3-8B", env={}, home=tmp_path) == path
    # A different repo in the same cache is not mistaken for it.
    assert find_config_json("Qwen/Qwen3-32B", env={}, home=tmp_path) is None


def test_missing_model_is_none(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path / "hf")}
    assert find_config_json("moonshotai/Kimi-K2.5", env=env, home=tmp_path) is None
    assert find_config_json(str(tmp_path / "nowhere"), env=env, home=tmp_path) is None
    assert find_config_json(None, env=env, home=tmp_path) is None
    assert find_config_json("", env=env, home=tmp_path) is None


def test_directory_without_config_is_none(tmp_path: Path) -> None:
    (tmp_path / "empty-model").mkdir()
    assert find_config_json(str(tmp_path / "empty-model"), env={}, home=tmp_path) is None


def test_found_config_loads(tmp_path: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    _hf_snapshot(hub, "moonshotai/Kimi-K2.5", "cafe", KIMI_LIKE)
    found = find_config_json("moonshotai/Kimi-K2.5", env={"HF_HOME": str(tmp_path / "hf")})
    assert found is not None
    assert cell_size_from_dims(load_model_dims(found), "auto").bytes == 70_272


# --------------------------------------------------------------------------- inferred


def test_cell_size_inferred_from_kimi_log() -> None:
    cell = cell_size_inferred(10.42, 159_277)
    assert cell.source == "inferred"
    assert cell.bytes == pytest.approx(10.42 * 2**30 / 159_278)
    assert abs(cell.bytes - 70_272) < 34
    assert cell.explanation.startswith(
        "10.42 GiB × 2^30 / (159,277 + 1) tokens ≈ 70,244 B/token (inferred from the KV Cache "
        "line; ±0.005 GiB rounding"
    )


def test_cell_size_inferred_with_pages() -> None:
    cell = cell_size_inferred(1.0, 1000, page_size=64)
    assert cell.bytes == pytest.approx(2**30 / 1064)
    assert "(1,000 + 64)" in cell.explanation


# --------------------------------------------------------------------------- the session's read


def test_the_session_reads_the_config_in_a_thread_once_per_model_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, story_log: Path
) -> None:
    """config.json is read off the event loop, and again only when the model path (or
    --model-config) changes: every refresh of a live view must not touch the disk.

    The reader is wrapped (not replaced) to see which thread calls it and how often: the file
    and the Hugging Face cache it reads are real (tmp_path)."""
    import asyncio
    import threading

    import kvtop.session
    from kvtop.session import Options, Session

    hub = tmp_path / "hf" / "hub"
    found = _hf_snapshot(hub, "moonshotai/Kimi-K2.5", "aaaa", KIMI_LIKE)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    calls: list[str] = []
    real = kvtop.session.read_model_config

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(kvtop.session, "read_model_config", recorded)
    session = Session(Options(log_file=str(story_log), nvml=False, metrics=False))

    async def twice() -> tuple[Any, Any]:
        first = await session.collect_once()
        await session.read_model_config()  # the same model path: nothing read
        second = session.snapshot()
        await session.close()
        return first, second

    first, second = asyncio.run(twice())
    assert len(calls) == 1 and calls[0] != threading.main_thread().name
    assert first.analysis.cell.note == f"from {found}"
    assert second.analysis is first.analysis  # nothing changed: not analysed again
    assert first.analysis.cell.cell is not None and first.analysis.cell.cell.bytes == 70_272


def test_an_unreadable_config_is_said_and_the_kv_line_stands_in(tmp_path: Path) -> None:
    from kvtop.model.analysis import analyse
    from kvtop.sglang.startup import StartupTracker
    from kvtop.sglang.story import fold_lines
    from kvtop.sources.model_config_file import read_model_config

    missing = read_model_config(str(tmp_path / "nope.json"), None)
    assert missing is not None and missing.text is None
    assert "cannot read model config" in (missing.problem or "")
    assert read_model_config(None, None) is None  # nothing to look for: nothing read
    tracker = StartupTracker()
    with STORY_LOG.open(encoding="utf-8") as handle:
        fold_lines(handle, tracker)
    analysis = analyse(tracker, "story", model_config=missing)
    assert analysis.cell.note.startswith(f"cannot read model config {tmp_path / 'nope.json'}")
    assert "inferred from the KV Cache line" in analysis.cell.note


def test_parse_model_reads_the_config_once_into_dims_shape_and_a_view() -> None:
    from kvtop.model.sizing.model_config import ConfigView
    from kvtop.model.sizing.model_shape import parse_model

    parsed = parse_model(json.dumps(KIMI_LIKE), "/m/config.json")
    assert parsed.dims.attention == "MLA"
    assert parsed.dims.num_layers == parsed.shape.num_layers == 61
    assert parsed.shape.architecture == "KimiK25ForConditionalGeneration"
    assert (parsed.shape.vision_layers, parsed.shape.vision_hidden_size) == (27, 1152)
    assert isinstance(parsed.config, ConfigView)
    # The language model's own config first, then the top level.
    assert parsed.config.get("architectures") == ["DeepseekV3ForCausalLM"]
    assert parsed.config.get("missing_key", "model_type") == "kimi_k25"
    assert parsed.config.top["model_type"] == "kimi_k25"


def test_a_vision_config_without_sizes_leaves_them_to_the_engine() -> None:
    from kvtop.model.sizing.model_shape import parse_model

    config = {**QWEN3_8B_LIKE, "vision_config": {"model_type": "siglip"}}
    shape = parse_model(json.dumps(config), "c.json").shape
    assert shape.multimodal
    assert shape.vision_layers is None and shape.vision_hidden_size is None
