"""DeepSeek sparse attention's KV cells (DeepSeek-V3.2, GLM-5) against SGLang's own code path.

The model is tests/fixtures/models/deepseek-v3's public config with DeepSeek-V3.2's three
indexer fields added (index_head_dim 128, index_n_heads 64, index_topk 2048): V3.2 keeps V3's
dimensions, and SGLang loads its config as DeepseekV3ForCausalLM (_load_deepseek_v32_model).
The expected bytes come from tests/support/sglang_oracle.py, transcribed from the wheels.
"""

from __future__ import annotations

import json

import pytest

from kvtop.model.sizing.engine import Gpus, ModelInfo, build
from kvtop.model.sizing.launch_args import merge_launch_args, parse_launch_args
from kvtop.model.sizing.model_shape import parse_model
from kvtop.model.sizing.plan import PoolCells
from tests.support import sglang_oracle as sglang
from tests.support.paths import FIXTURES

CONFIG = FIXTURES / "models" / "deepseek-v3" / "config.json"
WEIGHTS = 688_586_727_753
GIB = 1 << 30
LAYERS, RANK, ROPE, INDEX = 61, 512, 64, 128


def _v32_config(**extra: object) -> str:
    config = json.loads(CONFIG.read_text())
    config.update(index_head_dim=INDEX, index_n_heads=64, index_topk=2048, **extra)
    return json.dumps(config)


def _cells(
    version: tuple[int, int, int], gpu: str | None, words: list[str], **extra: object
) -> PoolCells:
    parsed = parse_model(_v32_config(**extra), CONFIG)
    model = ModelInfo(parsed.dims, parsed.shape, WEIGHTS, str(CONFIG))
    args = merge_launch_args(parse_launch_args(["--tp-size", "8", *words]), None)
    built = build(model, None, args, Gpus(8, 180 * 1024, gpu, "NVML"), version, "given")
    return built.planner.cells


def test_a_public_v32_boot_on_b200_logs_the_fp8_pool_kvtop_sizes() -> None:
    # sgl-project/sglang PR 11309 (8×B200, --tp 8 --dp 8 --enable-dp-attention, no
    # --kv-cache-dtype): "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB", page 64.
    cells = _cells((0, 5, 8), "NVIDIA B200", ["--dp-size", "8", "--enable-dp-attention"])
    assert cells.full_bytes == (656 + 132) * LAYERS
    assert round((975_424 + 64) * cells.full_bytes / GIB, 2) == 43.67


CASES = [
    # version, GPU, compute capability major, launch words
    ((0, 5, 8), "NVIDIA B200", 10, []),
    ((0, 5, 10), "NVIDIA B200", 10, []),
    ((0, 5, 14), "NVIDIA H200", 9, ["--kv-cache-dtype", "fp8_e4m3"]),
    ((0, 5, 14), "NVIDIA H200", 9, []),
    ((0, 5, 19), "NVIDIA H200", 9, ["--kv-cache-dtype", "fp8_e4m3"]),
    ((0, 5, 19), "NVIDIA B200", 10, []),
    ((0, 5, 23), "NVIDIA B300", 10, []),
    ((0, 5, 23), "NVIDIA H100 80GB HBM3", 9, []),
]


@pytest.mark.parametrize(("version", "gpu", "major", "words"), CASES)
def test_dsa_cell_is_sglangs(
    version: tuple[int, int, int], gpu: str, major: int, words: list[str]
) -> None:
    given = words[1] if words else "auto"
    dtype = sglang.default_dsa_kv_cache_dtype(version, given, major)
    backend = sglang.default_dsa_backends(version, dtype, major)
    cells = _cells(version, gpu, words)
    shape = (version, RANK, ROPE, INDEX, LAYERS, dtype, backend)
    assert cells.budget_bytes == sglang.dsa_profile_cell_size(*shape)
    assert cells.full_bytes == sglang.dsa_pool_bytes_per_token(*shape)


def test_default_kv_dtype_is_fp8_on_blackwell_only() -> None:
    blackwell = _cells((0, 5, 23), "NVIDIA B200", [])
    hopper = _cells((0, 5, 23), "NVIDIA H200", [])
    assert blackwell.full_bytes == (576 + 132) * LAYERS  # fp8, trtllm's plain layout
    assert hopper.full_bytes == (576 * 2 + 132) * LAYERS
    assert blackwell.steps[0][2] == "fp8_e4m3"


def test_learnable_sinks_keep_bf16_from_0_5_23() -> None:
    sinks = _cells((0, 5, 23), "NVIDIA B200", [], learnable_sink=True)
    older = _cells((0, 5, 19), "NVIDIA B200", [], learnable_sink=True)
    assert sinks.full_bytes == (576 * 2 + 132) * LAYERS
    assert older.full_bytes == (576 + 132) * LAYERS


def test_unknown_gpu_says_the_default_is_unknown() -> None:
    cells = _cells((0, 5, 23), None, [])
    assert cells.full_bytes == (576 * 2 + 132) * LAYERS
    assert "not known" in cells.steps[0][1]
