"""The sizing engine against SGLang's own rules, on a grid of models, versions and flags.

Each expected value comes from tests/support/sglang_oracle.py: SGLang's functions transcribed
from its released wheels with their own structure (each names the function and wheel). The
engine's free memory before and after the weights is an input to both, as it is to SGLang: what
is compared is what SGLang computes from it. The models' configs are public (tests/fixtures/
models/, read here with plain json, not kvtop's parser); their weights are the published
checkpoints' sizes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtop.model.sizing.engine import Gpus, ModelInfo, build
from kvtop.model.sizing.launch_args import merge_launch_args, parse_launch_args
from kvtop.model.sizing.model_shape import parse_model
from kvtop.model.sizing.plan import PlanResult
from tests.support import sglang_oracle as sglang
from tests.support.paths import FIXTURES

MODELS = FIXTURES / "models"
GIB = 1 << 30
# The weights are inputs like the free memory: the grid compares SGLang's arithmetic on them.
# Published checkpoint sizes where tests/unit/test_weights_estimate.py keeps their sources;
# Qwen3-8B's and Granite-4.0-H-Micro's are figures near their checkpoints.
WEIGHTS = {
    "llama-3.1-8b-instruct": 16_060_522_496,
    "qwen3-8b": 16_381_470_720,
    "qwen3-30b-a3b": 61_064_245_248,
    "deepseek-v3": 688_586_727_753,
    "gpt-oss-20b": 13_761_264_768,
    "medgemma-27b-it": 54_864_813_280,
    "granite-4.0-h-micro": 6_388_937_728,
}
V046, V058, V0510, V0514, V0519, V0523 = (
    (0, 4, 6),
    (0, 5, 8),
    (0, 5, 10),
    (0, 5, 14),
    (0, 5, 19),
    (0, 5, 23),
)


def _config(name: str) -> dict[str, object]:
    top = json.loads((MODELS / name / "config.json").read_text())
    text = top.get("text_config")
    return text if isinstance(text, dict) else top


@dataclass(frozen=True)
class Run:
    result: PlanResult
    pre: float
    post: float
    mfs: float


def _run(
    name: str, gpu_gib: float, version: tuple[int, int, int], words: list[str], mfs: float = 0.85
) -> Run:
    path = MODELS / name / "config.json"
    parsed = parse_model(path.read_text(), path)
    model = ModelInfo(parsed.dims, parsed.shape, WEIGHTS[name], str(path))
    args = merge_launch_args(parse_launch_args(["--mem-fraction-static", str(mfs), *words]), None)
    gpus = Gpus(args.tp * args.pp, gpu_gib * 1024, None, "--gpu-memory")
    built = build(model, None, args, gpus, version, "given")
    result = built.planner.at(mfs)
    return Run(result, result.pre_load_free_gib, result.post_load_free_gib, mfs)


def _rest(run: Run) -> float:
    return sglang.rest_memory(run.post, run.pre, run.mfs)


# --------------------------------------------------------------------------- plain pools

PLAIN = [
    # model, GPU GiB, version, launch words
    ("llama-3.1-8b-instruct", 80, V046, []),
    ("llama-3.1-8b-instruct", 80, V058, ["--page-size", "64"]),
    ("llama-3.1-8b-instruct", 24, V0523, ["--max-total-tokens", "20000"]),
    ("llama-3.1-8b-instruct", 80, V0523, ["--tp-size", "2"]),
    ("qwen3-8b", 48, V0510, ["--page-size", "16"]),
    ("qwen3-30b-a3b", 80, V058, ["--tp-size", "8"]),  # 4 KV heads over 8: replicated
    ("qwen3-30b-a3b", 80, V0523, ["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"]),
    ("deepseek-v3", 141, V058, ["--tp-size", "8"]),
    ("deepseek-v3", 141, V0523, ["--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3"]),
]


@pytest.mark.parametrize(("name", "gpu", "version", "words"), PLAIN)
def test_plain_pool_is_sglangs(
    name: str, gpu: float, version: tuple[int, int, int], words: list[str]
) -> None:
    run = _run(name, gpu, version, words)
    cfg = _config(name)
    args = merge_launch_args(parse_launch_args(words), None)
    kv_size = 1 if "fp8_e4m3" in words else 2
    layers = int(cfg["num_hidden_layers"])  # type: ignore[arg-type]
    if cfg.get("kv_lora_rank"):
        # get_cell_size_per_token's MLA branch: every rank holds the whole latent.
        cell = sglang.mla_cell_size(
            int(cfg["kv_lora_rank"]),  # type: ignore[arg-type]
            int(cfg["qk_rope_head_dim"]),  # type: ignore[arg-type]
            layers,
            kv_size,
        )
    else:
        cell = sglang.mha_cell_size(
            int(cfg["num_key_value_heads"]),  # type: ignore[arg-type]
            int(cfg["head_dim"]),  # type: ignore[arg-type]
            int(cfg["head_dim"]),  # type: ignore[arg-type]
            layers,
            kv_size,
            args.attn_tp,
        )
    page = args.int_of("page_size", 1) or 1
    expected = sglang.plain_tokens(_rest(run), cell, page, args.int_of("max_total_tokens"))
    assert run.result.cells.budget_bytes == cell
    assert run.result.pools.tokens == expected


def test_pipeline_stages_size_by_the_fullest() -> None:
    # Llama-3.1-8B's 32 layers over PP3: get_pp_indices gives 10, 11, 11; each stage sizes its
    # own pool, the world takes the MIN: the 11-layer stages decide.
    run = _run("llama-3.1-8b-instruct", 24, V058, ["--pp-size", "3"])
    stages = [sglang.get_pp_indices(32, rank, 3) for rank in range(3)]
    assert [end - start for start, end in stages] == [10, 11, 11]
    per_stage = [
        sglang.plain_tokens(
            _rest(run), sglang.mha_cell_size(8, 128, 128, end - start, 2, 1), 1, None
        )
        for start, end in stages
    ]
    assert run.result.pools.tokens == sglang.pp_min_tokens(per_stage)


# --------------------------------------------------------------------------- sliding window


@pytest.mark.parametrize("version", [V058, V0523])
@pytest.mark.parametrize("page", [1, 64])
def test_gpt_oss_swa_split_is_sglangs(version: tuple[int, int, int], page: int) -> None:
    run = _run("gpt-oss-20b", 80, version, ["--tp-size", "2", "--page-size", str(page)])
    per_layer = sglang.mha_cell_size(8, 64, 64, 1, 2, 2)  # 4 KV heads per rank
    rest = _rest(run)
    if version == V058:
        # Profiled as if all 24 layers were full, then split (set_num_tokens_hybrid_swa).
        profiled = sglang.plain_tokens(rest, per_layer * 24, page, None)
        full, swa = sglang.swa_tokens_058(profiled, 24, 12, 12, 0.8, page)
        assert run.result.cells.profile_bytes == per_layer * 24
    else:
        full, swa = sglang.swa_tokens_0523(int(rest * GIB), per_layer, per_layer, 12, 12, 0.8, page)
    assert (run.result.pools.tokens, run.result.pools.swa_tokens) == (full, swa)


@pytest.mark.parametrize("version", [V058, V0523])
@pytest.mark.parametrize("tp", ["1", "2"])
def test_gemma3_has_no_swa_pool_every_layer_is_full(version: tuple[int, int, int], tp: str) -> None:
    # Gemma2/3's model overrides set disable_hybrid_swa_memory: 62 full layers, no SWA pool.
    run = _run("medgemma-27b-it", 80, version, ["--tp-size", tp])
    cell = sglang.mha_cell_size(16, 128, 128, 62, 2, int(tp))
    rest = _rest(run)
    if version >= V0519:
        rest -= 100 / 1024  # mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB
    assert run.result.pools.swa_tokens is None
    assert run.result.pools.tokens == sglang.plain_tokens(rest, cell, 1, None)


def test_swa_layers_keep_the_whole_context_before_0_5_2() -> None:
    run = _run("gpt-oss-20b", 80, V046, ["--tp-size", "2"])
    per_layer = sglang.mha_cell_size(8, 64, 64, 1, 2, 2)
    assert run.result.pools.swa_tokens is None
    assert run.result.pools.tokens == sglang.plain_tokens(_rest(run), per_layer * 24, 1, None)


# --------------------------------------------------------------------------- Mamba


@pytest.mark.parametrize("version", [V058, V0514, V0523])
def test_mamba_slots_and_pool_are_sglangs(version: tuple[int, int, int]) -> None:
    run = _run("granite-4.0-h-micro", 48, version, [])
    per_req = run.result.cells.mamba_state_bytes
    assert per_req  # its size per slot is checked against a logged boot in test_plan.py
    kinds = _config("granite-4.0-h-micro")["layer_types"]
    attention = sum(1 for kind in kinds if kind != "mamba")  # type: ignore[union-attr]
    cell = sglang.mha_cell_size(8, 2048 // 32, 2048 // 32, attention, 2, 1)
    if version < V0519:
        kv_rest, slots = sglang.handle_max_mamba_cache_058(_rest(run), per_req)
    else:
        kv_rest, slots = sglang.handle_max_mamba_cache_0523(_rest(run), per_req)
    assert run.result.pools.mamba_slots == slots
    assert run.result.pools.tokens == sglang.plain_tokens(kv_rest, cell, 1, None)


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("version", [V046, V058, V0510, V0514, V0523])
@pytest.mark.parametrize("given", [None, 64, 8192])
@pytest.mark.parametrize("dp_attention", [False, True])
def test_max_running_requests_is_sglangs(
    version: tuple[int, int, int], given: int | None, dp_attention: bool
) -> None:
    words = ["--tp-size", "4"]
    if dp_attention:
        words += ["--dp-size", "4", "--enable-dp-attention"]
    if given is not None:
        words += ["--max-running-requests", str(given)]
    run = _run("qwen3-30b-a3b", 80, version, words)
    tokens = run.result.pools.tokens
    expected = sglang.max_running_requests(version, tokens, 40960, given, 4 if dp_attention else 1)
    assert run.result.max_running_requests == expected


# --------------------------------------------------------------------------- default fraction


@pytest.mark.parametrize("gpu_mib", [81_559, 97_871, 143_771, 183_359])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_default_fraction_0_4_6(gpu_mib: int, tp: int) -> None:
    # An H200 (143,771 MiB): 0.907 (the GPU less 13 GiB), not 0.872.
    run = _default("llama-3.1-8b-instruct", gpu_mib, V046, ["--tp-size", str(tp)])
    assert run == sglang.default_mfs_046(gpu_mib, tp)


@pytest.mark.parametrize("gpu_mib", [81_559, 97_871, 143_771, 183_359])
@pytest.mark.parametrize("words", [["--tp-size", "2"], ["--speculative-algorithm", "EAGLE"]])
def test_default_fraction_0_4_7(gpu_mib: int, words: list[str]) -> None:
    tp = 2 if "--tp-size" in words else 1
    spec = "EAGLE" if "--speculative-algorithm" in words else None
    run = _default("llama-3.1-8b-instruct", gpu_mib, (0, 4, 7), words)
    assert run == sglang.default_mfs_047(gpu_mib, tp, 1, spec)


@pytest.mark.parametrize("gpu_mib", [24_564, 81_559, 97_871, 143_771, 183_359])
@pytest.mark.parametrize("tp", [1, 8])
def test_default_fraction_0_4_9(gpu_mib: int, tp: int) -> None:
    run = _default("llama-3.1-8b-instruct", gpu_mib, (0, 4, 9), ["--tp-size", str(tp)])
    assert run == sglang.default_mfs_049(gpu_mib, tp)
    vlm = _default("medgemma-27b-it", gpu_mib, (0, 4, 9), ["--tp-size", str(tp)])
    assert vlm == pytest.approx(sglang.default_mfs_049(gpu_mib, tp, is_multimodal=True))


@pytest.mark.parametrize("gpu_mib", [24_564, 46_068, 81_559, 143_771, 183_359])
@pytest.mark.parametrize("words", [[], ["--tp-size", "8"], ["--max-running-requests", "64"]])
def test_default_fraction_0_5_8(gpu_mib: int, words: list[str]) -> None:
    # 0.5.8 does not lower the decode graphs' batch to --max-running-requests (0.5.23 does).
    tp = int(words[1]) if words[:1] == ["--tp-size"] else 1
    assert _default("llama-3.1-8b-instruct", gpu_mib, V058, words) == sglang.default_mfs_058(
        gpu_mib, tp
    )


@pytest.mark.parametrize("tp", [1, 2])
def test_default_fraction_of_a_multimodal_model_0_5_8(tp: int) -> None:
    # MedGemma's SigLIP tower: 27 layers of 1152: × 0.95 × 0.9576.
    expected = sglang.default_mfs_058(81_920, tp, vision=(27, 1152))
    assert _default("medgemma-27b-it", 81_920, V058, ["--tp-size", str(tp)]) == pytest.approx(
        expected, abs=1e-12
    )


def _default(name: str, gpu_mib: int, version: tuple[int, int, int], words: list[str]) -> float:
    path = MODELS / name / "config.json"
    parsed = parse_model(path.read_text(), path)
    model = ModelInfo(parsed.dims, parsed.shape, WEIGHTS[name], str(path))
    args = merge_launch_args(parse_launch_args(words), None)
    gpus = Gpus(args.tp, gpu_mib, None, "--gpu-memory")
    built = build(model, None, args, gpus, version, "given")
    assert built.mfs_source == "SGLang default"
    return built.mem_fraction_static


# --------------------------------------------------------------------------- weights off the GPU


def test_cpu_offload_takes_weights_off_each_rank() -> None:
    plain = _run("qwen3-8b", 24, V0523, [])
    offloaded = _run("qwen3-8b", 24, V0523, ["--cpu-offload-gb", "10"])
    # utils/offloader.py: cpu_offload_gb × 1024³ bytes of each rank's weights stay in host RAM.
    assert offloaded.post == pytest.approx(plain.post + 10, abs=1e-9)
    assert offloaded.result.pools.tokens > plain.result.pools.tokens


def test_every_model_of_the_grid_has_its_config() -> None:
    assert sorted(WEIGHTS) == sorted(
        p.name for p in MODELS.iterdir() if p.is_dir() and p.name in WEIGHTS
    )
    assert all(Path(MODELS / name / "config.json").is_file() for name in WEIGHTS)
