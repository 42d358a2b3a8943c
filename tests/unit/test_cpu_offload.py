"""--cpu-offload-gb: the weights SGLang keeps on the GPU, as OffloaderV1 leaves them.

utils/offloader.py (0.5.23) moves the parameters of the modules make_layers builds (the decoder
layers) to host RAM until cpu_offload_gb × 1024³ bytes; the embedding and lm_head are built
outside it and stay. Llama-3.1-8B's public config: vocabulary 128,256 × hidden 4,096, untied.
"""

from __future__ import annotations

import pytest

from kvtop.model.sizing.engine import Gpus, ModelInfo, build
from kvtop.model.sizing.launch_args import merge_launch_args, parse_launch_args
from kvtop.model.sizing.model_shape import parse_model
from kvtop.model.sizing.plan import PlanResult
from tests.support.paths import FIXTURES

CONFIG = FIXTURES / "models" / "llama-3.1-8b-instruct" / "config.json"
WEIGHTS = 16_060_522_496
GIB = 1 << 30
EMBED_AND_HEAD = 128_256 * 4_096 * 2 * 2  # two bf16 matrices


def _plan(words: list[str], gpu_gib: float = 32.0) -> PlanResult:
    parsed = parse_model(CONFIG.read_text(), CONFIG)
    model = ModelInfo(parsed.dims, parsed.shape, WEIGHTS, str(CONFIG))
    args = merge_launch_args(parse_launch_args(["--mem-fraction-static", "0.8", *words]), None)
    gpus = Gpus(args.tp, gpu_gib * 1024, None, "--gpu-memory")
    return build(model, None, args, gpus, (0, 5, 23), "given").planner.at(0.8)


def test_offload_past_the_layers_leaves_the_embedding_and_lm_head() -> None:
    result = _plan(["--cpu-offload-gb", "48"])
    weights = result.pre_load_free_gib - result.post_load_free_gib
    assert weights == pytest.approx(EMBED_AND_HEAD / GIB)  # 1.96 GiB, never 0


def test_offload_over_tp_leaves_each_rank_its_share_of_the_vocabulary() -> None:
    result = _plan(["--cpu-offload-gb", "48", "--tp-size", "2"])
    weights = result.pre_load_free_gib - result.post_load_free_gib
    assert weights == pytest.approx(EMBED_AND_HEAD / 2 / GIB)


def test_a_smaller_offload_takes_exactly_that_much() -> None:
    plain = _plan([])
    offloaded = _plan(["--cpu-offload-gb", "4"])
    assert offloaded.post_load_free_gib == pytest.approx(plain.post_load_free_gib + 4)
    assert offloaded.pools.tokens > plain.pools.tokens
