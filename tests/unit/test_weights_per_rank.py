"""The weights one rank holds, from the model's structure: what SGLang splits over TP, over
the attention's TP under DP attention, over the experts' ranks, and what every rank holds
whole. Checked against the `Load weight end. ... mem usage=` of real boots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtop.model.sizing.engine import Gpus, _estimated_ranks
from kvtop.model.sizing.launch_args import LaunchArgs, parse_launch_args
from kvtop.model.sizing.weights_estimate import (
    DictConfigView,
    RankLayout,
    estimate_from_config,
    rank_share,
)
from kvtop.plan.gather import read_model

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"
GIB = 1 << 30
# Qwen/Qwen3-30B-A3B's model.safetensors.index.json metadata.total_size.
QWEN3_30B_TOTAL = 61_064_245_248


def _args(*words: str) -> LaunchArgs:
    given = parse_launch_args(list(words))
    return LaunchArgs(given.values, frozenset(given.values), frozenset(), given.ignored)


def _model(tmp_path: Path, name: str, total: int) -> Path:
    where = tmp_path / name
    where.mkdir(exist_ok=True)
    (where / "config.json").write_text((MODELS / name / "config.json").read_text())
    (where / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": {}})
    )
    return where


def _logged_weights_gib(log: str) -> float:
    sidecar = json.loads((LOGS / log).with_suffix(".json").read_text())
    usages = {r["weight_mem_usage_gb"] for r in sidecar["ranks"].values()}
    assert len(usages) == 1
    return float(usages.pop())


def _per_rank_gib(tmp_path: Path, *launch: str) -> float:
    model = read_model(str(_model(tmp_path, "qwen3-30b-a3b", QWEN3_30B_TOTAL)))
    ranks = _estimated_ranks(model, Gpus(4, 141 * 1024, "H200", "--gpu-memory"), _args(*launch))
    assert len({r.weights_gib for r in ranks}) == 1
    return ranks[0].weights_gib


DP_ATTENTION_EP = ("--tp", "4", "--dp", "4", "--ep-size", "4", "--enable-dp-attention")


def test_dp_attention_keeps_attention_and_embeddings_whole_on_every_rank(tmp_path: Path) -> None:
    # DP4 TP4 EP4: attention TP 1, so the attention and the embeddings are whole on each rank;
    # only the experts (and lm_head) are split. The total over 4 said 14.22 GiB (13 % under).
    logged = _logged_weights_gib("02-pr17392-dp4-tp4-ep4-qwen3moe-a.log")
    assert logged == 16.39
    per_rank = _per_rank_gib(tmp_path, *DP_ATTENTION_EP)
    total_over_tp = QWEN3_30B_TOTAL / 4 / GIB
    assert total_over_tp == pytest.approx(14.22, abs=0.01)
    assert per_rank == pytest.approx(15.94, abs=0.01)
    assert abs(per_rank / logged - 1) < 0.03
    # With lm_head over the attention's TP too (--enable-dp-lm-head) every rank holds it
    # whole: the logged figure to 0.1 %.
    whole_head = _per_rank_gib(tmp_path, *DP_ATTENTION_EP, "--enable-dp-lm-head")
    assert abs(whole_head / logged - 1) < 0.02
    assert whole_head == pytest.approx(16.37, abs=0.01)


def test_plain_tp_splits_everything_but_norms_routers_and_few_kv_heads(tmp_path: Path) -> None:
    # TP4 (EP or not: the experts are split over all four ranks either way).
    tp4 = _per_rank_gib(tmp_path, "--tp", "4")
    assert _per_rank_gib(tmp_path, "--tp", "4", "--ep-size", "4") == tp4
    # Left whole: the 48 routers (128 × 2048) and the norms, a few MiB over the quarter.
    assert QWEN3_30B_TOTAL / 4 / GIB < tp4 < QWEN3_30B_TOTAL / 4 / GIB + 0.03


def test_tp8_keeps_a_whole_kv_head_per_rank() -> None:
    # Qwen3-30B-A3B has 4 KV heads: under TP8 each rank holds one whole, so k_proj and v_proj
    # are over 4, not 8.
    view = DictConfigView(json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text()))
    tp8 = rank_share(view, RankLayout(tp=8, attn_tp=8))
    kv_extra = 48 * 2 * (4 * 128 * 2048) * 2 * (1 / 4 - 1 / 8)
    routers_norms = 48 * 128 * 2048 * 2 * (7 / 8)
    assert tp8.bytes == pytest.approx(tp8.total_bytes / 8 + kv_extra + routers_norms, rel=1e-3)


def test_pipeline_stages_hold_their_layers_and_the_fullest_counts() -> None:
    view = DictConfigView(json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text()))
    tp4 = rank_share(view, RankLayout(tp=4, attn_tp=4))
    pp2 = rank_share(view, RankLayout(tp=4, pp=2, attn_tp=4))
    # 24 layers a stage; the embeddings on one end, lm_head (the same size) on the other.
    assert pp2.bytes == pytest.approx(tp4.bytes / 2, rel=0.01)
    assert pp2.bytes < tp4.bytes


def test_awq_keeps_embeddings_and_head_in_fp16_and_splits_them_by_tp() -> None:
    config = json.loads((MODELS / "qwen2.5-7b-instruct-awq" / "config.json").read_text())
    view = DictConfigView(config)
    whole = estimate_from_config(config)
    one = rank_share(view, RankLayout())
    assert one.total_bytes == one.bytes == pytest.approx(whole.bytes, rel=1e-6)
    # The fp16 embeddings and lm_head (152064 × 3584 × 2 B each) are 2.03 GiB of the 5.2:
    # split over TP like the 4-bit layers, so TP2 halves all but the norms.
    tp2 = rank_share(view, RankLayout(tp=2, attn_tp=2))
    fp16 = 2 * 152064 * 3584 * 2
    assert fp16 / whole.bytes > 0.35
    assert tp2.bytes == pytest.approx(whole.bytes / 2, rel=0.002)
    # With DP attention over 2 (attention TP 1) the embeddings and attention stay whole.
    dp2 = rank_share(view, RankLayout(tp=2, attn_tp=1))
    extra = fp16 / 4 + _awq_attention() / 2
    assert dp2.bytes - tp2.bytes == pytest.approx(extra, rel=0.02)


def _awq_attention() -> float:
    """Qwen2.5-7B's attention in AWQ 4-bit with groups of 128 (scales and zeros), fp16 biases."""
    layers, h = 28, 3584
    q, kv = 28 * 128, 4 * 128
    weights = layers * (q * h + 2 * kv * h + h * q)
    groups = layers * ((h // 128) * (q + 2 * kv) + (q // 128) * h)
    biases = layers * (q + 2 * kv) * 2
    return weights / 2 + groups * (2 + 0.5) + biases


def test_without_a_structure_the_total_is_split_over_tp_and_pp(tmp_path: Path) -> None:
    # Qwen3-8B's fixture config holds no vocab_size: the structure cannot be counted, and
    # the checkpoint's total over TP is what is left.
    model = read_model(str(_model(tmp_path, "qwen3-8b", 16 << 30)))
    ranks = _estimated_ranks(model, Gpus(2, 80 * 1024, None, "--gpu-memory"), _args("--tp", "2"))
    assert ranks[0].weights_gib == 8.0
