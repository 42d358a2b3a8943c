"""Hybrid models' memory: sliding-window sub-pools, Mamba state, pools over budget.

Real excerpts (fixtures 50–52, their sidecars name their sources) and synthetic startups written
in the exact formats of SGLang's source for each version (its memory and pool lines), whose
numbers were computed with SGLang's own rule for that version (the arithmetic is in each log's
docstring).
Every test states the values it expects.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from kvtop.live.screens.formula import explanation_text
from kvtop.model.analysis import Analysis, analyse
from kvtop.model.memory.gpu_memory import reconcile
from kvtop.model.status.insights import insights
from kvtop.report.json_report import to_json
from kvtop.report.text import render_snapshot
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.process.test_cli import _json, kvtop
from tests.support.paths import REAL_LOGS
from tests.support.tui_support import analysis_snapshot

GRANITE = REAL_LOGS / "50-pr18040-granite-4h-micro-mamba-single-gpu.log"
MIMO_15464 = REAL_LOGS / "51-pr15464-mimo-v2-flash-swa-tp4.log"
MIMO_18039 = REAL_LOGS / "52-pr18039-mimo-v2-flash-swa-page64-tp4.log"
HYBRID_REAL = (GRANITE, MIMO_15464, MIMO_18039)


def fold_text(text: str) -> StartupTracker:
    return fold_lines(text.splitlines(keepends=True))


def analysis_of(text: str, **options: object) -> Analysis:
    return analyse(fold_text(text), "synthetic", **options)  # type: ignore[arg-type]


def pools(model) -> list[tuple[str, int | None, float | None]]:  # type: ignore[no-untyped-def]
    return [(p.kind, p.tokens, None if p.gib is None else round(p.gib, 2)) for p in model.pools()]


# --------------------------------------------------------------------------- synthetic startups

# gpt-oss-20b shape: 12 full + 12 sliding-window layers, 8 KV heads × 64, bf16: 2,048 B per
# token and layer in both kinds. pre 78.50, post 65.20, mfs 0.85 -> rest = 65.20 − 78.50 × 0.15
# = 53.425 GiB. SGLang 0.5.14+ (HybridSWAPoolConfigurator): cell = 2048·12 + 0.8·2048·12 =
# 44,236.8 B; full = int(53.425 × 2^30) // 44,236.8 = 1,296,763; swa = int(full × 0.8) =
# 1,037,410. K size full = 1,296,764 × 8 × 64 × 2 B × 12 / 2^30 = 14.84 GiB (V the same), SWA
# 1,037,411 × 12,288 B / 2^30 = 11.87 GiB; SWAKVPool total 2 × 14.8403 + 2 × 11.8722 = 53.43 GiB,
# all of rest (SGLang's request-to-token table then comes out of the reserve: 11.65 GiB free).
SWA_0519 = """\
[2026-09-10 10:00:00] server_args={'model_path': 'openai/gpt-oss-20b', 'tp_size': 1, \
'mem_fraction_static': 0.85, 'page_size': 1, 'context_length': 131072, 'swa_full_tokens_ratio': 0.8}
[2026-09-10 10:00:05] Load weight begin. avail mem=78.50 GB
[2026-09-10 10:00:17] Load weight end. elapsed=12.31 s, type=GptOssForCausalLM, quant=mxfp4, \
avail mem=65.20 GB, mem usage=13.30 GB.
[2026-09-10 10:00:18] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1296763, \
K size: 14.84 GB, V size: 14.84 GB
[2026-09-10 10:00:18] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1037410, \
K size: 11.87 GB, V size: 11.87 GB
[2026-09-10 10:00:18] SWAKVPool mem usage: 53.43 GB, swa size: 1037410, full size: 1296763
[2026-09-10 10:00:18] Memory pool end. avail mem=11.65 GB
[2026-09-10 10:00:19] Capture target decode CUDA graph begin. backend=full, \
num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=11.58 GB
[2026-09-10 10:00:24] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=5.12 s, \
mem usage=0.67 GB, avail mem=10.91 GB.
[2026-09-10 10:00:25] max_total_num_tokens=1296763, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, \
available_gpu_mem=10.91 GB
[2026-09-10 10:00:30] The server is fired up and ready to roll!
"""

# The same model and memory under 0.5.8: profile as if all 24 layers were full (T = int(53.425 ×
# 2^30) // (2048 × 24) = 1,167,086), then full = int(T × 24 / (0.8 × 12 + 12)) = 1,296,762,
# swa = int(full × 0.8) = 1,037,409; the SWA sub-pool is allocated first, both unlabelled.
SWA_058 = """\
[2026-02-10 10:00:00] server_args=ServerArgs(model_path='openai/gpt-oss-20b', tp_size=1, \
mem_fraction_static=0.85, page_size=1, context_length=131072, swa_full_tokens_ratio=0.8)
[2026-02-10 10:00:05] Load weight begin. avail mem=78.50 GB
[2026-02-10 10:00:17] Load weight end. type=GptOssForCausalLM, dtype=torch.bfloat16, \
avail mem=65.20 GB, mem usage=13.30 GB.
[2026-02-10 10:00:18] Use sliding window memory pool. full_layer_tokens=1296762, \
swa_layer_tokens=1037409
[2026-02-10 10:00:18] KV Cache is allocated. #tokens: 1037409, K size: 11.87 GB, V size: 11.87 GB
[2026-02-10 10:00:18] KV Cache is allocated. #tokens: 1296762, K size: 14.84 GB, V size: 14.84 GB
[2026-02-10 10:00:18] SWAKVPool mem usage: 53.43 GB, swa size: 1037409, full size: 1296762
[2026-02-10 10:00:18] Memory pool end. avail mem=11.65 GB
[2026-02-10 10:00:25] max_total_num_tokens=1296762, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, \
available_gpu_mem=10.91 GB
"""

# Qwen3-Next shape on TP2, SGLang 0.5.8 (handle_max_mamba_cache, ratio split): per request
# 39,518,208 B of state; pre 74.30, post 36.85, mfs 0.8 -> rest 21.99 GiB; state budget
# 21.99 × 0.9 / 1.9 = 10.416 GiB -> 283 slots; conv (283 + 1) × 1,769,472 B = 0.47 GiB, ssm
# (283 + 1) × 37,748,736 B = 9.98 GiB; KV tokens = (21.99 × 2^30 − 283 × 39,518,208) // 12,288
# = 1,011,387 (12 attention layers × 1 KV head × 256 × 2 × bf16); K size 5.79 GiB. A context of
# 2,048 tokens, so the 283 state slots, not the KV cache, limit the requests.
MAMBA_058 = """\
[2026-02-10 11:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-Next-80B-A3B-Instruct', \
tp_size=2, mem_fraction_static=0.8, page_size=1, context_length=2048, \
mamba_full_memory_ratio=0.9, max_mamba_cache_size=None)
[2026-02-10 11:00:05 TP0] Load weight begin. avail mem=74.30 GB
[2026-02-10 11:00:05 TP1] Load weight begin. avail mem=74.30 GB
[2026-02-10 11:01:05 TP0] Load weight end. type=Qwen3NextForCausalLM, dtype=torch.bfloat16, \
avail mem=36.85 GB, mem usage=37.45 GB.
[2026-02-10 11:01:05 TP1] Load weight end. type=Qwen3NextForCausalLM, dtype=torch.bfloat16, \
avail mem=36.85 GB, mem usage=37.45 GB.
[2026-02-10 11:01:06 TP0] Mamba Cache is allocated. max_mamba_cache_size: 283, \
conv_state size: 0.47GB, ssm_state size: 9.98GB \n\
[2026-02-10 11:01:06 TP1] Mamba Cache is allocated. max_mamba_cache_size: 283, \
conv_state size: 0.47GB, ssm_state size: 9.98GB \n\
[2026-02-10 11:01:06 TP0] KV Cache is allocated. #tokens: 1011387, K size: 5.79 GB, V size: 5.79 GB
[2026-02-10 11:01:06 TP1] KV Cache is allocated. #tokens: 1011387, K size: 5.79 GB, V size: 5.79 GB
[2026-02-10 11:01:06 TP0] Memory pool end. avail mem=14.70 GB
[2026-02-10 11:01:06 TP1] Memory pool end. avail mem=14.70 GB
[2026-02-10 11:01:07 TP0] Capture cuda graph begin. This can take up to several minutes. \
avail mem=14.62 GB
[2026-02-10 11:01:07 TP1] Capture cuda graph begin. This can take up to several minutes. \
avail mem=14.62 GB
[2026-02-10 11:01:16 TP0] Capture cuda graph end. Time elapsed: 9.42 s. mem usage=0.64 GB. \
avail mem=13.98 GB.
[2026-02-10 11:01:16 TP1] Capture cuda graph end. Time elapsed: 9.40 s. mem usage=0.64 GB. \
avail mem=13.98 GB.
[2026-02-10 11:01:17 TP0] max_total_num_tokens=1011387, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=94, context_len=2048, available_gpu_mem=13.98 GB
[2026-02-10 11:01:20] The server is fired up and ready to roll!
"""

# The same line with the speculative intermediate caches (0.5.8+ with MTP): their own segment.
MAMBA_SPEC_LINE = (
    "[2026-02-10 11:01:06 TP0] Mamba Cache is allocated. max_mamba_cache_size: 64, "
    "conv_state size: 0.07GB, ssm_state size: 3.05GB intermediate_ssm_state_cache size: 48.75GB "
    "intermediate_conv_window_cache size: 0.43GB \n"
)

# DeepSeek-V3.2 with an fp8 DSA pool on TP8, SGLang 0.5.8: the budget counts (576 + 132) B per
# layer but the pool stores 788 (sglang.md f.3). pre 139.50, post 55.00, mfs 0.88 -> rest 38.26
# GiB; tokens = int(38.26 × 2^30) // (708 × 61) = 951,168 (page 64); the pool is
# (951,168 + 64) × 788 × 61 / 2^30 = 42.58 GiB, 4.3 GiB more than rest.
DSA_FP8_058 = """\
[2026-02-12 09:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3.2-Exp', \
tp_size=8, mem_fraction_static=0.88, page_size=64, kv_cache_dtype='fp8_e4m3', context_length=163840)
[2026-02-12 09:00:10 TP0] Load weight begin. avail mem=139.50 GB
[2026-02-12 09:03:10 TP0] Load weight end. type=DeepseekV32ForCausalLM, dtype=torch.bfloat16, \
avail mem=55.00 GB, mem usage=84.50 GB.
[2026-02-12 09:03:11 TP0] KV Cache is allocated. #tokens: 951168, KV size: 42.58 GB
[2026-02-12 09:03:11 TP0] Memory pool end. avail mem=12.30 GB
[2026-02-12 09:03:40 TP0] max_total_num_tokens=951168, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=2048, context_len=163840, \
available_gpu_mem=11.10 GB
"""


# --------------------------------------------------------------------------- real excerpts


@pytest.mark.parametrize("log", HYBRID_REAL, ids=[p.stem[:2] for p in HYBRID_REAL])
def test_real_hybrid_pools_per_rank_match_the_sidecar(log: Path) -> None:
    """Every rank's pools (kind, tokens, GiB) and Mamba state as the sidecar lists them."""
    sidecar = json.loads(log.with_suffix(".json").read_text())
    startup = fold_text(log.read_text()).current
    hybrid = sidecar["hybrid"]
    for name, expected in hybrid["pools_per_rank"].items():
        model = startup.ranks[name].target
        got = [
            {"kind": p.kind, "tokens": p.tokens, "gib": None if p.gib is None else round(p.gib, 2)}
            | ({"inferred": True} if p.inferred else {})
            for p in model.pools()
        ]
        assert got == expected, name
        assert model.mamba_gib == hybrid["mamba_gib"]


def test_granite_mamba_state_is_its_own_item_not_other() -> None:
    """PR 18040: state 0.03 + 2.74 = 2.77 GiB for 38 slots beside a 3.04 GiB KV cache; the
    itemised startup leaves 0.47 GiB other startup allocations (15.24 − 2.89 − 11.88), not 3.24."""
    report = analyse(fold_text(GRANITE.read_text()), GRANITE.name)
    rank = report.startup.ranks["TP0"]
    assert rank.target.mamba_gib == pytest.approx(2.77)
    assert rank.target.mamba_slots == 38
    assert pools(rank.target) == [("full", 399_740, 3.04), ("mamba", None, 2.77)]
    breakdown = next(b for b in report.breakdowns if b.rank == "TP0")
    assert breakdown.mamba_gib == pytest.approx(2.77)
    assert breakdown.kv_cache_gib == pytest.approx(3.04)
    assert breakdown.startup_other_gib == pytest.approx(0.47)
    # The formula: the KV bytes per token are the full-attention pool's own, not KV + state.
    steps = {s.label: s for s in report.explanation.steps}  # type: ignore[union-attr]
    assert steps["Mamba state"].result == "2.77 GiB"
    assert steps["KV bytes per token"].result == "8,166 B/token"  # 3.04 × 2^30 / 399,741
    text = render_text(report)
    assert "Mamba state: 38 request slots, 2.77 GiB" in text
    table = text.split("Memory per rank")[1]
    assert "mamba" in "".join(table.splitlines()[1:4])  # a column of its own
    # K + V and conv + ssm state: computed, marked derived.
    assert "TP0         15.24    5.98 3.04* 2.77*" in table


def test_mimo_swa_total_fills_the_missing_sub_pool() -> None:
    """PR 15464, TP0 shows only the full sub-pool (8.03 GiB) and SWAKVPool's 77.63 GiB total:
    the SWA sub-pool is 77.63 − 8.03 = 69.60 GiB of 1,496,958 tokens, and the KV cache is
    77.63 GiB, not 8.03 GiB; kv_tokens stays the full pool's 1,496,958."""
    startup = fold_text(MIMO_15464.read_text()).current
    tp0 = startup.ranks["TP0"].target
    assert tp0.kv_gib == pytest.approx(77.63)
    assert tp0.kv_tokens == 1_496_958
    assert pools(tp0) == [("full", 1_496_958, 8.03), ("swa", 1_496_958, 69.6)]
    assert [p.inferred for p in tp0.pools()] == [False, True]


def test_mimo_unlabelled_swa_line_is_told_apart_by_its_tokens() -> None:
    """PR 18039 (0.5.8 era): the KV line of 300,288 tokens is the SWA sub-pool
    (swa_layer_tokens=300288), the full pool is 375,360 tokens: max_total_num_tokens."""
    startup = fold_text(MIMO_18039.read_text()).current
    tp1 = startup.ranks["TP1"].target
    assert tp1.kv_tokens == 375_360
    assert pools(tp1) == [("full", 375_360, None), ("swa", 300_288, 13.97)]


# --------------------------------------------------------------------------- SWA formula


def test_swa_0519_sub_pools_and_formula() -> None:
    """Labelled pools (0.5.19+): full 1,296,763 tokens 29.68 GiB, SWA 1,037,410 tokens
    23.74 GiB; the formula predicts the full pool from rest / (F + 0.8 × S) within rounding."""
    report = analysis_of(SWA_0519)
    target = report.startup.ranks[""].target
    assert pools(target) == [("full", 1_296_763, 29.68), ("swa", 1_037_410, 23.74)]
    assert target.kv_tokens == 1_296_763
    assert target.kv_gib == pytest.approx(53.42)  # 29.68 + 23.74 (SWAKVPool: 53.43)
    explanation = report.explanation
    assert explanation is not None and explanation.hybrid is not None
    assert explanation.hybrid.swa_ratio == pytest.approx(0.8)
    steps = {s.label: s for s in explanation.steps}
    assert steps["rest for KV cache"].result == "53.42 GiB"  # 53.425 (float: 53.42499…)
    assert steps["SWA/full token ratio"].result == "0.800"
    # 29.68 × 2^30 / 1,296,764 = 24,576 B and 23.74 × 2^30 / 1,037,411 = 24,571 B: 24,576 +
    # 0.8 × 24,571 = 44,233 B vs SGLang's 44,236.8 (the logged GiB are rounded): the prediction
    # is 1,296,885 tokens, 122 from the log, within rounding.
    assert steps["rest per full-pool token"].result == "44,233 B/token"
    assert steps["max_total_num_tokens"].result == "1,296,885 tokens predicted · 1,296,763 logged"
    assert explanation.over_budget is None
    assert any("sliding-window hybrid" in n for n in explanation.notes)
    assert any("within 122 tokens" in n for n in explanation.notes)


def test_swa_what_if_follows_the_hybrid_rule() -> None:
    """mfs 0.85 -> 0.87 adds 78.50 × 0.02 = 1.57 GiB of rest: SGLang gives the full pool
    1.57 × 2^30 / 44,236.8 = 38,108 more tokens (kvtop, with the logged pool sizes: 38,112), not
    1.57 GiB / the full pool's 24,576 B = 68,597; requests at the context length use the full
    pool: 1,334,875 / 131,072 = 10.18."""
    report = analysis_of(SWA_0519, what_if_mfs=(0.87,))
    what_if = next(w for w in report.explanation.what_ifs if w.mem_fraction_static == 0.87)  # type: ignore[union-attr]
    assert what_if.delta_tokens == 38_112
    assert what_if.tokens == 1_334_875
    assert what_if.requests_at_context == pytest.approx(1_334_875 / 131_072)
    current = next(w for w in report.explanation.what_ifs if w.mem_fraction_static == 0.85)  # type: ignore[union-attr]
    assert current.delta_tokens == 0


def test_swa_058_unlabelled_sub_pools_swa_first() -> None:
    """0.5.8: two unlabelled KV lines, the first (1,037,409 tokens) is the SWA sub-pool; the
    version rule's caveat is said (≤0.5.8 sizes every layer as a full one)."""
    report = analysis_of(SWA_058, version_override="0.5.8")
    target = report.startup.ranks[""].target
    assert pools(target) == [("full", 1_296_762, 29.68), ("swa", 1_037_409, 23.74)]
    assert target.kv_tokens == 1_296_762
    explanation = report.explanation
    assert explanation is not None and explanation.over_budget is None
    steps = {s.label: s for s in explanation.steps}
    assert steps["max_total_num_tokens"].result == "1,296,884 tokens predicted · 1,296,762 logged"
    assert any("SGLang ≤0.5.8 profiles a sliding-window model" in n for n in explanation.notes)


def test_swa_0_5_2_capital_s_line_is_read() -> None:
    """0.5.2 writes `Use Sliding window memory pool.` (capital S)."""
    line = (
        "[2025-09-12 10:00:00 TP0] Use Sliding window memory pool. full_layer_tokens=500000, "
        "swa_layer_tokens=400000\n"
    )
    tp0 = fold_text(line).current.ranks["TP0"].target
    assert (tp0.full_tokens_logged, tp0.swa_tokens_logged) == (500_000, 400_000)
    assert tp0.kv_tokens == 500_000


# --------------------------------------------------------------------------- Mamba formula


def test_mamba_ratio_split_formula_and_requests_limited_by_slots() -> None:
    """Qwen3-Next TP2 0.5.8: state 0.47 + 9.98 = 10.45 GiB (283 slots), KV 11.58 GiB of
    1,011,387 tokens; rest 21.99 GiB and the state is 47.5 % of it (0.9 / 1.9 = 47.4 %: the
    ratio split). The engine's KV cache: 283 slots of the ratio split (0.5.8 keeps the padding
    slot beside the budget: 10.41 GiB), floor((21.99 − 10.41) × 2^30 / 12,294.1) = 1,011,108
    tokens (the logged 1,011,387 is within the figures' rounding). At context 2,048 the
    KV cache would hold 493.8 requests but the 283 state slots limit them to 283."""
    report = analysis_of(MAMBA_058)
    tp0 = report.startup.ranks["TP0"].target
    assert pools(tp0) == [("full", 1_011_387, 11.58), ("mamba", None, 10.45)]
    assert tp0.mamba_slots == 283
    explanation = report.explanation
    assert explanation is not None and explanation.hybrid is not None
    assert explanation.over_budget is None
    steps = {s.label: s for s in explanation.steps}
    assert steps["rest for KV cache"].result == "21.99 GiB"
    assert steps["state share of rest"].result == "10.42 GiB"
    assert steps["max_total_num_tokens"].result == "1,011,108 tokens predicted · 1,011,387 logged"
    assert "10.41 state of 283 slots" in steps["max_total_num_tokens"].arithmetic
    current = next(w for w in explanation.what_ifs if w.mem_fraction_static == 0.8)
    assert current.requests_at_context == 283
    assert current.kv_pool_gib == pytest.approx(11.58, abs=0.005)  # the KV cache, not + state
    # mfs 0.82: the engine anchored on the logged pool (its rest to within a page, the logged
    # state's 0.01 GiB rounding included) + 74.30 × 0.02 = 1.486 GiB, split again 0.9 : 1 into
    # whole slots and the KV cache: 68,726 more tokens (1.486 × 2^30 / (12,294 × 1.9) = 68,308
    # before the re-split); the slots grow alike, 283 × 1,080,113 // 1,011,387 = 302, and still
    # limit the 2,048-token requests (1,080,113 / 2,048 = 527).
    higher = next(w for w in explanation.what_ifs if w.mem_fraction_static == 0.82)
    assert (higher.tokens, higher.delta_tokens) == (1_080_113, 68_726)
    assert higher.kv_pool_gib == pytest.approx(12.37, abs=0.005)
    assert higher.requests_at_context == 302
    assert (
        "the 283 Mamba state slots, not the KV cache, limit concurrent requests: the KV cache "
        "holds 493.8 requests of 2,048 tokens." in " ".join(report.insights)
    )
    breakdown = next(b for b in report.breakdowns if b.rank == "TP0")
    # 74.30 − 13.98 − (37.45 + 11.58 + 10.45 + 0.64) = 0.20 other (not 10.65 with the state)
    assert breakdown.startup_other_gib == pytest.approx(0.20)
    assert breakdown.mamba_gib == pytest.approx(10.45)


def test_mamba_0_5_2_line_without_slot_count() -> None:
    """0.5.2 (Qwen3-Next only) logs no max_mamba_cache_size: the state is 0.20 + 8.45 GiB."""
    line = (
        "[2025-09-12 10:00:00 TP0] Mamba Cache is allocated. conv_state size: 0.20GB, "
        "ssm_state size: 8.45GB \n"
    )
    tp0 = fold_text(line).current.ranks["TP0"].target
    assert tp0.mamba_gib == pytest.approx(8.65)
    assert tp0.mamba_slots is None
    assert pools(tp0) == [("mamba", None, 8.65)]


def test_mamba_intermediate_caches_are_other_caches() -> None:
    """With MTP the line adds intermediate states: 48.75 + 0.43 = 49.18 GiB of other caches
    beside the 0.07 + 3.05 = 3.12 GiB state, each its own bar segment, before the reserve."""
    startup = fold_text(MAMBA_SPEC_LINE).current
    tp0 = startup.ranks["TP0"].target
    assert tp0.mamba_gib == pytest.approx(3.12)
    assert tp0.mamba_intermediate_gib == pytest.approx(49.18)
    assert [p.kind for p in tp0.pools()] == ["mamba", "mamba_intermediate"]


# --------------------------------------------------------------------------- over budget


def test_pool_over_budget_says_so_with_both_numbers_and_no_reserve_finding() -> None:
    """DSA fp8 under 0.5.8: the pool (951,168 tokens, 42.58 GiB = 48,064 B/token) is larger
    than rest 38.26 GiB allows at that cell size: floor(38.26 × 2^30 / 48,064) // 64 × 64 =
    854,720 tokens. kvtop says so, with the formula's number beside the logged one, and does
    not call the 12.30 GiB left after the pool SGLang's reserve (139.50 × 0.12 = 16.74)."""
    report = analysis_of(DSA_FP8_058)
    over = report.explanation.over_budget  # type: ignore[union-attr]
    assert over is not None
    assert (over.formula_tokens, over.logged_tokens) == (854_720, 951_168)
    assert over.extra_tokens == 96_448
    assert over.extra_gib == pytest.approx(4.32, abs=0.01)
    found = insights(report.startup, report.explanation)
    assert any("854,720 tokens" in f and "951,168 tokens" in f for f in found)
    assert not any("is SGLang's reserve" in f for f in found)
    assert over.sentence() in report.explanation.notes  # type: ignore[union-attr]
    screen = render_text_of(explanation_text(report, "TP0"))
    assert "96,448 more than SGLang's own formula" in " ".join(screen.split())


def test_pool_within_budget_keeps_the_reserve_finding() -> None:
    """The gpt-oss startup matches its formula: the reserve finding is there (11.65 GiB free
    after the KV cache, reserve 78.50 × 0.15 = 11.78 GiB)."""
    report = analysis_of(SWA_0519)
    found = insights(report.startup, report.explanation)
    assert any(f.startswith("11.65 GiB free after the KV cache is SGLang's reserve") for f in found)
    assert not any("more than SGLang's own formula" in f for f in found)


# --------------------------------------------------------------------------- JSON and bar


def test_plain_model_json_has_one_full_pool() -> None:
    """A plain pool: `pools` is one "full" entry with the KV line's tokens and GiB, mamba null."""
    report = analysis_of(DSA_FP8_058)
    rank = to_json(report)["ranks"][0]  # type: ignore[index]
    assert rank["target"]["pools"] == [
        {"kind": "full", "tokens": 951_168, "gib": 42.58, "derived": []}  # the line's KV size
    ]
    assert rank["target"]["mamba_gib"] is None


def test_once_json_cli_pools_and_mamba_gib() -> None:
    """`kvtop --once --json` on the Granite excerpt: per rank and model, pools and mamba_gib."""
    data = _json(kvtop("--once", "--json", "--no-gpus", "--no-metrics", "--log-file", GRANITE))
    tp0 = next(r for r in data["ranks"] if r["rank"] == "TP0")  # type: ignore[union-attr]
    assert tp0["target"]["pools"] == [
        {"kind": "full", "tokens": 399_740, "gib": 3.04, "derived": ["gib"]},  # K + V
        {"kind": "mamba", "tokens": None, "gib": 2.77, "derived": ["gib"]},  # conv + ssm
    ]
    assert tp0["target"]["mamba_gib"] == 2.77
    assert tp0["draft"] is None
    memory = next(m for m in data["memory"] if m["rank"] == "TP0")  # type: ignore[union-attr]
    assert memory["mamba_gib"] == 2.77
    assert memory["other_caches_gib"] is None


def test_bar_segments_mamba_and_other_caches_follow_the_kv_cache() -> None:
    """The bar: … KV cache, mamba, other caches, draft … (inside the budget, before the
    reserve mark); runtime no longer holds them."""
    report = analysis_of(MAMBA_058)
    log = next(b for b in report.breakdowns if b.rank == "TP0")
    # An 80 GiB card, 66.02 GiB in use: baseline 5.70 + 37.45 + 11.58 + 10.45 + 0.64 = 65.82
    memory = reconcile(80.0, 13.98, log)
    names = [name for name, _ in memory.segments()]
    assert names[:6] == ["baseline", "weights", "KV cache", "mamba", "CUDA graphs", "runtime"]
    assert dict(memory.segments())["mamba"] == pytest.approx(10.45)
    assert memory.runtime_gib == pytest.approx(0.2)


def render_text_of(renderable: RenderableType) -> str:
    console = Console(width=140, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def render_text(report: Analysis) -> str:
    return render_text_of(render_snapshot(analysis_snapshot(report)))
