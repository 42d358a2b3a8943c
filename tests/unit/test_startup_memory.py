"""What each platform takes before the weights (startup_memory.py): every row holds the boots it
cites within its spread, the cited fixture logs say what the rows say they do, the GPU's name
picks the row, the plan's estimate and its verdict use the row's figure and spread."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvtop.model.sizing import startup_memory as sm
from kvtop.model.sizing.engine import Gpus, ModelInfo, build
from kvtop.model.sizing.launch_args import LaunchArgs, merge_launch_args, parse_launch_args
from kvtop.model.sizing.plan import FITS, OOM_RISK, verdict_kind, within_spread
from kvtop.plan.gather import read_model
from tests.support.paths import FIXTURES, STORY_LOG

REPO = Path(__file__).resolve().parents[2]
_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
_END = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")


def _logged_pre_load_free(path: Path) -> float:
    """The least rank's free memory before the weights, as the log itself says it: `Load
    weight begin`'s avail mem (the target's: before its weights end), else `Load weight end`'s avail mem plus the weights' usage."""
    text = path.read_text(encoding="utf-8", errors="replace")
    first_end = _END.search(text)
    target = text[: first_end.start()] if first_end else text  # a draft model loads later
    begins = [float(m.group(1)) for m in _BEGIN.finditer(target)]
    if begins:
        return min(begins)
    ends = [float(a) + float(u) for a, u in _END.findall(text)]
    assert ends, f"{path.name} has no Load weight line"
    return min(ends)


@pytest.mark.parametrize("row", sm.ROWS, ids=lambda r: r.platform)
def test_each_row_holds_its_boots_within_its_spread(row: sm.StartupRow) -> None:
    assert row.evidence, "a row without boots behind it is a guess"
    assert row.spread_gib >= sm.MIN_SPREAD_GIB or len(row.evidence) > 1
    for boot in row.evidence:
        assert abs(boot.taken_gib - row.gib) <= row.spread_gib, boot.where


_CITED = [
    (row, boot)
    for row in sm.ROWS
    for boot in row.evidence
    if boot.where.startswith(("tests/fixtures/", "tui/kvtop/data/"))
]


@pytest.mark.parametrize(
    ("row", "boot"), _CITED, ids=[f"{r.platform}:{b.where.split()[0]}" for r, b in _CITED]
)
def test_cited_fixture_logs_say_what_the_rows_say(row: sm.StartupRow, boot: sm.Boot) -> None:
    path = REPO / boot.where.split()[0]
    logged = _logged_pre_load_free(path)
    assert logged == pytest.approx(boot.pre_load_free_gib, abs=0.005)
    assert abs(boot.total_gib - logged - row.gib) <= row.spread_gib


def test_the_fixtures_cited_cover_cuda_rocm_and_ascend() -> None:
    platforms = {row.platform for row, _ in _CITED}
    assert {"cuda", "cuda-tp2-4", "cuda-tp8", "rocm-tp", "ascend"} <= platforms


@pytest.mark.parametrize(
    ("name", "ranks", "device", "platform"),
    [
        ("NVIDIA H200", 8, None, "cuda-tp8"),
        ("NVIDIA H100 80GB HBM3", 1, None, "cuda"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 4, None, "cuda-tp2-4"),
        (None, 2, None, "cuda-tp2-4"),  # --gpu-memory alone: CUDA
        ("AMD Instinct MI300X", 8, None, "rocm-tp"),
        ("MI355X", 1, None, "rocm"),
        ("NVIDIA GB10", 1, None, "unified"),
        ("Ascend 910B", 4, None, "ascend"),
        (None, 4, "npu", "ascend"),  # SGLang's --device npu
    ],
)
def test_the_gpu_name_picks_the_row(
    name: str | None, ranks: int, device: str | None, platform: str
) -> None:
    assert sm.row_for(name, ranks, device).platform == platform


def _args(*words: str) -> LaunchArgs:
    return merge_launch_args(parse_launch_args(words), None)


def _qwen(tmp_path: Path) -> ModelInfo:
    """Qwen3-8B's config with 16 GiB of weights (a round test figure)."""
    return read_model(str(FIXTURES / "models" / "qwen3-8b"), 16.0)


def test_the_estimate_takes_the_rows_figure_and_names_it(tmp_path: Path) -> None:
    args = _args("--tp-size", "8")
    gpus = Gpus(8, 192 * 1024, "AMD Instinct MI300X", "--gpu-memory")
    built = build(_qwen(tmp_path), None, args, gpus, (0, 5, 23), "given")
    assert built.startup is sm.ROCM_TP
    assert built.planner.ranks[0].pre_load_free_gib == pytest.approx(192 - sm.ROCM_TP.gib)
    assert built.planner.startup_spread_gib == sm.ROCM_TP.spread_gib
    assert any("ROCm/HIP with TP" in note for note in built.notes)


def test_free_memory_measured_now_is_not_reduced(tmp_path: Path) -> None:
    args = _args("--tp-size", "8")
    gpus = Gpus(8, 140.40 * 1024, "NVIDIA H200", "NVML, free now", free_mib=120.5 * 1024)
    built = build(_qwen(tmp_path), None, args, gpus, (0, 5, 23), "given")
    assert built.planner.ranks[0].pre_load_free_gib == pytest.approx(120.5)
    assert built.startup is not None and built.startup.platform == "measured"
    # SGLang's own context comes after the reading: up to the platform's figure is unsure.
    assert built.startup.spread_gib == sm.CUDA_TP_LARGE.gib


def test_a_logged_boot_has_no_row(tmp_path: Path) -> None:
    from kvtop.model.sizing.calibration import calibrate
    from kvtop.plan.gather import read_boot

    calib = calibrate(read_boot(str(STORY_LOG), None))
    built = build(
        None,
        calib,
        merge_launch_args(parse_launch_args([]), calib.server_args),
        None,
        (0, 5, 8),
        "log",
    )
    assert built.startup is None
    assert built.planner.startup_spread_gib == 0.0


# ---------------------------------------------------------------------------- the verdict


def test_verdict_kind_calls_a_risk_only_beyond_the_spread() -> None:
    assert verdict_kind(1000, 4.5, 5.0) == OOM_RISK  # measured: under the margin is a risk
    assert verdict_kind(1000, 4.5, 5.0, spread_gib=0.75) == FITS  # estimated: cannot tell
    assert verdict_kind(1000, 4.0, 5.0, spread_gib=0.75) == OOM_RISK  # under it either way
    assert within_spread(4.5, 5.0, 0.75) and within_spread(5.5, 5.0, 0.75)
    assert not within_spread(6.0, 5.0, 0.75) and not within_spread(4.5, 5.0, 0.0)


def test_a_plan_within_the_spread_says_it_cannot_tell(tmp_path: Path) -> None:
    args = _args("--tp-size", "8")
    gpus = Gpus(8, 140.40 * 1024, "NVIDIA H200", "NVML")
    built = build(_qwen(tmp_path), None, args, gpus, (0, 5, 23), "given")
    planner = built.planner
    spread = planner.startup_spread_gib
    assert spread == sm.CUDA_TP_LARGE.spread_gib
    # A fraction whose free memory after startup lies under the margin, within the spread.
    band = [
        m / 1000
        for m in range(500, 999)
        if (free := planner.headroom_at(m / 1000)[1]) is not None
        and planner.safe_margin_gib - spread < free < planner.safe_margin_gib
    ]
    assert band, "no fraction lands within the spread under the margin"
    unsure = planner.at(band[0]).verdict
    assert unsure.kind != OOM_RISK
    assert not unsure.firm
    assert any("within ±0.75 GiB of the 5 GiB safe margin" in r for r in unsure.reasons)
    # The same figures measured by a log (no spread): the margin decides alone.
    measured = replace(planner, startup_spread_gib=0.0).at(band[0]).verdict
    assert measured.kind == OOM_RISK
    assert measured.firm
