"""DeepSeek-V4's pool lines: parsed by version, folded into the model's pools, shown in the
report and the JSON, and no sizing formula claimed for them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.model.analysis import analyse
from kvtop.model.sizing.model_config import CellSize
from kvtop.model.sizing.replay import CellSizeChoice, explain, rank_sizing, sglang_version
from kvtop.report.json_report import to_json
from kvtop.report.text import print_snapshot
from kvtop.sglang import events as ev
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS
from tests.support.tui_support import analysis_snapshot

# A saved Ascend NPU log of DeepSeek-V4-Flash on 4 NPUs, SGLang 0.5.19's text (the fixture's
# sidecar says where it was found): each rank sizes its pools from its budget, then again
# under --max-total-tokens 32768.
NPU_LOG = REAL_LOGS / "18-npu-dsv4-flash-tp4-pool-sizes.log"
# Its server_args line is 17 KB; these are its own values for what the sizing reads.
NPU_ARGS = (
    "[2026-08-10 09:16:10] server_args=ServerArgs(model_path='/home/w00580100/model/"
    "DeepSeek-V4-Flash-0731-w4a8', context_length=32768, mem_fraction_static=0.7, "
    "max_running_requests=4, max_total_tokens=32768, page_size=128, swa_full_tokens_ratio=0.1, "
    "tp_size=4, dp_size=1, device='npu', attention_backend='dsv4')"
)

POOLS_519 = (  # the fixture's, verbatim
    "[2026-08-10 09:19:13 TP0] DSV4 pool sizes: full=209280, swa=20864, c4=52320, c128=1635, "
    "c4_state=1304, c128_state=0"
)
MEMORY_519 = (  # the fixture's, verbatim
    "[2026-08-10 09:19:13 TP0] DSV4 memory calculation: bytes_per_full_token=7705.45, "
    "available_bytes=1.57 GB, c128_state_fixed=0.07 GB, full_token=209280"
)
# 0.5.14's f-string has no fixed part (built from pool_configurator.py, no public line found
# in this spelling); an earlier build spelled it "DSv4" (a public DeepSeek-V4 TP8 log, found by
# the search index's find_string, hit id 54684172587, verbatim).
MEMORY_514 = (
    "[2026-05-15 08:39:53 TP0] DSV4 memory calculation: bytes_per_full_token=15955.85, "
    "available_bytes=45.78 GB, full_token=3080960"
)
MEMORY_EARLY = (
    "[2026-05-15 08:39:53 TP0] DSv4 memory calculation: bytes_per_full_token=15955.85, "
    "available_bytes=45.78 GB, full_token=3080960"
)
# 0.5.23's f-string (pool_configurator.py), with numbers of the fixture's order: no public
# line of this version was found.
MEMORY_523 = (
    "[2026-09-20 10:00:00 TP0] DSV4 memory calculation: unified=False, unified_fp8=False, "
    "dspark_draft_bf16=False, bytes_per_full_token=13735.12, available_bytes=105.08 GB, "
    "c128_state_fixed=0.11 GB, c2_state_fixed=0.00 GB, swa_fixed=0.00 GB, "
    "swa_ring_fixed=0.00 GB, c4_state_fixed=0.00 GB, full_token=8135424"
)


def test_pool_sizes_line() -> None:
    event = parse_line(POOLS_519)
    assert isinstance(event, ev.Dsv4PoolSizes)
    assert (event.full_tokens, event.swa_tokens, event.c4_tokens, event.c128_tokens) == (
        209280,
        20864,
        52320,
        1635,
    )
    assert (event.c4_state_rows, event.c128_state_rows) == (1304, 0)
    assert event.prefix.rank == "TP0"


@pytest.mark.parametrize(
    ("line", "per_token", "budget", "tokens", "fixed", "unified"),
    [
        (MEMORY_514, 15955.85, 45.78, 3080960, (), None),
        (MEMORY_EARLY, 15955.85, 45.78, 3080960, (), None),
        (MEMORY_519, 7705.45, 1.57, 209280, (("c128_state", 0.07),), None),
        (
            MEMORY_523,
            13735.12,
            105.08,
            8135424,
            (
                ("c128_state", 0.11),
                ("c2_state", 0.0),
                ("swa", 0.0),
                ("swa_ring", 0.0),
                ("c4_state", 0.0),
            ),
            False,
        ),
    ],
    ids=["0.5.14", "DSv4", "0.5.19", "0.5.23"],
)
def test_memory_calculation_line_by_version(
    line: str,
    per_token: float,
    budget: float,
    tokens: int,
    fixed: tuple[tuple[str, float], ...],
    unified: bool | None,
) -> None:
    event = parse_line(line)
    assert isinstance(event, ev.Dsv4MemoryCalculation)
    assert event.bytes_per_full_token == per_token
    assert event.available_gib == budget
    assert event.full_tokens == tokens
    assert event.fixed_gib == fixed
    assert event.unified is unified
    assert event.rejected == ()


def test_impossible_numbers_are_refused_and_named() -> None:
    event = parse_line(
        "[2026-08-10 09:19:13 TP0] DSV4 memory calculation: bytes_per_full_token=nan, "
        "available_bytes=-1.57 GB, c128_state_fixed=0.07 GB, full_token=209280"
    )
    assert isinstance(event, ev.Dsv4MemoryCalculation)
    assert event.bytes_per_full_token is None and event.available_gib is None
    assert event.rejected == (
        "bytes_per_full_token=nan (not a finite number)",
        "available_bytes=-1.57 (negative memory)",
    )


def _fold(*lines: str, log: Path | None = NPU_LOG) -> StartupTracker:
    text = list(lines) + (log.read_text(encoding="utf-8").splitlines() if log else [])
    return fold_lines(io.StringIO("\n".join(text) + "\n"))


def test_the_latest_line_of_each_rank_is_its_pools() -> None:
    startup = _fold().current
    assert sorted(startup.ranks) == ["TP0", "TP1", "TP2", "TP3"]
    for rank in startup.ranks.values():
        model = rank.target
        pools = [(p.kind, p.tokens, p.gib) for p in model.pools()]
        # re-sized under --max-total-tokens 32768: no line gives a sub-pool's GiB
        assert pools == [
            ("full", 32768, None),
            ("swa", 3200, None),
            ("c4", 8192, None),
            ("c128", 256, None),
        ]
        assert model.kv_tokens == 32768 and model.kv_gib is None
        assert model.hybrid
        assert model.dsv4 is not None
        assert (model.dsv4.budget_gib, model.dsv4.bytes_per_full_token) == (1.57, 7705.45)
        assert model.dsv4.fixed_gib == (("c128_state", 0.07),)
        assert rank.draft is None


def test_json_lists_the_sub_pools_and_the_budget() -> None:
    data = to_json(analyse(_fold(NPU_ARGS), NPU_LOG.name))
    ranks = data["ranks"]
    assert isinstance(ranks, list)
    target = ranks[0]["target"]
    assert [(p["kind"], p["tokens"], p["gib"]) for p in target["pools"]] == [
        ("full", 32768, None),
        ("swa", 3200, None),
        ("c4", 8192, None),
        ("c128", 256, None),
    ]
    assert target["dsv4"] == {
        "budget_gib": 1.57,
        "bytes_per_full_token": 7705.45,
        "fixed_gib": {"c128_state": 0.07},
        "c4_state_rows": 200,
        "c128_state_rows": 0,
    }


def test_report_names_each_pool_and_no_invented_size() -> None:
    snapshot = analysis_snapshot(analyse(_fold(NPU_ARGS), NPU_LOG.name))
    console = Console(file=io.StringIO(), width=140, color_system=None)
    print_snapshot(snapshot, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "  full-attention KV cache: 32,768 tokens, size not logged" in text
    assert "  sliding-window (SWA) KV cache: 3,200 tokens, size not logged" in text
    assert "  c4 compressed KV cache (an entry per 4 tokens): 8,192 tokens, size not logged" in text
    assert (
        "  c128 compressed KV cache (an entry per 128 tokens): 256 tokens, size not logged" in text
    )
    assert (
        "  all DSV4 pools together: 1.57 GiB, 7,705.45 B per full-pool token "
        "(set aside first: c128_state 0.07 GiB)"
    ) in text


def test_no_formula_claimed_for_dsv4_even_with_a_cell_size() -> None:
    """With a cell size from a config, rest / cell capped at --max-total-tokens lands on the
    logged 32,768 by the cap alone: kvtop must not call that a reproduction."""
    startup = _fold(NPU_ARGS).current
    cell = CellSize(50_000, "config.json", "a cell size that does not apply to DeepSeek-V4")
    choice = CellSizeChoice(cell, "from config.json")
    explanation = explain(startup, choice, sglang_version(startup), what_if_mfs=(0.8,))
    assert explanation is not None
    assert not any(step.label == "max_total_num_tokens" for step in explanation.steps)
    assert not any("cell size" in step.label for step in explanation.steps)
    assert explanation.what_ifs == () and explanation.over_budget is None
    assert not any("prediction" in note for note in explanation.notes)
    assert any(
        note.startswith("DeepSeek-V4 compressed attention: SGLang sizes its full, SWA, c4 and c128")
        and "kvtop does not model that arithmetic" in note
        for note in explanation.notes
    )
    assert all(rank_sizing(rank, startup, cell) is None for rank in startup.ranks.values())


def test_a_plan_is_not_calibrated_from_a_dsv4_boot() -> None:
    """`kvtop plan --from-log` on DeepSeek-V4: refused with the reason, not planned by rules
    that do not apply (the plain cell size would take the full pool's tokens for the model's)."""
    from kvtop.model.sizing.calibration import CalibrationError, calibrate

    with NPU_LOG.open(encoding="utf-8") as handle:
        startup = fold_lines(handle).current
    with pytest.raises(CalibrationError, match="DeepSeek-V4 compressed attention"):
        calibrate(startup)
