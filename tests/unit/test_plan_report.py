"""kvtop plan's report through the report layer: the text fits the width it is given (60 to 200
columns) without cutting a number, says "—" for what is unknown, explains why rest for KV and
the KV pool differ from the plan's own figures, shows the version as the log narrows it, and
keeps ASCII where asked; the JSON carries byte and token counts as integers."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from kvtop.model.sizing.calibration import calibrate
from kvtop.model.sizing.engine import Gpus, build
from kvtop.model.sizing.launch_args import merge_launch_args, parse_launch_args
from kvtop.plan.gather import read_boot, read_model
from kvtop.plan.report import PlanContext, plan_json, plan_text
from tests.support.paths import FIXTURES, REAL_LOGS, STORY_LOG

MODELS = FIXTURES / "models"
WIDTHS = (60, 80, 120, 200)
GRANITE_LOG = REAL_LOGS / "50-pr18040-granite-4h-micro-mamba-single-gpu.log"
# A figure as the report writes it: 1,234 · 11.02 GiB · 0.880 · 70,272 B/token.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _from_log(model: str, log: Path, words: list[str] | None = None) -> PlanContext:
    startup = read_boot(str(log), None)
    calib = calibrate(startup)
    info = read_model(str(MODELS / model))
    args = merge_launch_args(
        parse_launch_args(words or []), calib.server_args, {"tp_size": calib.tp_size}
    )
    built = build(info, calib, args, None, calib.version, "log")
    result = built.planner.at(built.mem_fraction_static)
    return PlanContext(built, result, args, info, None, str(log), calib.reference_rank)


def _without_log(tmp_path: Path, words: list[str]) -> PlanContext:
    model = tmp_path / "qwen3-8b"
    model.mkdir()
    shutil.copy(MODELS / "qwen3-8b" / "config.json", model / "config.json")
    index = {"metadata": {"total_size": 16 << 30}, "weight_map": {}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    info = read_model(str(model))
    args = merge_launch_args(parse_launch_args(words), None, None)
    gpus = Gpus(1, 80 * 1024, None, "--gpu-memory")
    built = build(info, None, args, gpus, (0, 5, 23), "given")
    result = built.planner.at(built.mem_fraction_static)
    return PlanContext(built, result, args, info, gpus, None, None)


@pytest.fixture(scope="module")
def kimi() -> PlanContext:
    return _from_log("kimi-k2.5", STORY_LOG)


def _numbers(text: str) -> list[str]:
    return NUMBER.findall(" ".join(text.split()))


@pytest.mark.parametrize("width", WIDTHS)
def test_no_line_is_wider_than_the_width(kimi: PlanContext, width: int) -> None:
    text = plan_text(kimi, width)
    for line in text.splitlines():
        # A single word wider than the line (the log's path) keeps its own line, whole.
        if len(line) > width:
            assert len(line.split()) == 1, line


@pytest.mark.parametrize("width", WIDTHS)
def test_no_number_is_cut(kimi: PlanContext, width: int) -> None:
    """Every figure of the widest layout is in the narrow one too, whole."""
    wide = plan_text(kimi, 1000)
    narrow = plan_text(kimi, width)
    words = narrow.split()
    for figure in ("159,277", "70,272", "11.02 GiB", "10.42 GiB", "93.17", "159,747"):
        assert figure in " ".join(words)
    assert sorted(_numbers(wide)) == sorted(_numbers(narrow))


def test_the_width_comes_from_the_context_and_else_the_report_rule(
    kimi: PlanContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "70")
    assert max(map(len, plan_text(kimi).splitlines()[5:])) <= 70
    narrow = dataclasses.replace(kimi, width=60)
    assert plan_text(narrow) == plan_text(kimi, 60)


def test_the_rest_and_the_pool_are_explained_with_the_plans_figures(kimi: PlanContext) -> None:
    text = " ".join(plan_text(kimi, 200).split())
    # SGLang 0.5.8 sizes the EAGLE draft's pool outside the budget: rest 10.42, pool 11.02.
    assert (
        "rest for KV 10.42 GiB is what SGLang divides by 70,272 B/token; the KV pool 11.02 GiB "
        "is 159,277 tokens × 70,272 B (10.42 GiB) plus one page of padding rows (0.00 GiB) "
        "and the draft's pool (0.60 GiB, 4,045 B/token, outside the budget at SGLang "
    ) in text


def test_a_mamba_plan_says_the_state_comes_out_of_the_rest_first() -> None:
    ctx = _from_log("granite-4.0-h-micro", GRANITE_LOG)
    text = " ".join(plan_text(ctx, 120).split())
    assert (
        "rest for KV 5.75 GiB is what SGLang divides by 8,192 B/token once the Mamba state" in text
    )
    assert "(2.71 GiB) is taken from it; the KV pool 3.05 GiB is 399,740 tokens" in text


def test_the_version_is_shown_as_the_log_narrows_it(kimi: PlanContext) -> None:
    shown = dataclasses.replace(kimi.built, version_text="0.5.3–0.5.8")
    ctx = dataclasses.replace(kimi, built=shown)
    assert plan_text(ctx, 80).splitlines()[0] == "kvtop plan · SGLang 0.5.3–0.5.8 (log)"
    doc = plan_json(ctx)
    assert doc["sglang_version"] == "0.5.8"  # as before: the version whose rules applied
    assert doc["sglang_version_range"] == "0.5.3–0.5.8"
    bare = dataclasses.replace(kimi, built=dataclasses.replace(kimi.built, version_text=""))
    assert plan_json(bare)["sglang_version_range"] == "0.5.8"


def test_unknown_figures_are_a_dash(tmp_path: Path) -> None:
    ctx = _without_log(tmp_path, [])
    rank = ctx.result.ranks[0]
    unknown = dataclasses.replace(rank, memory=dataclasses.replace(rank.memory, weights_gib=None))
    result = dataclasses.replace(
        ctx.result, ranks=(unknown,), free_after_startup_gib=None, max_running_requests=None
    )
    text = plan_text(dataclasses.replace(ctx, result=result), 120)
    assert "?" not in text
    assert re.search(r"free after startup\s+—", text)
    assert re.search(r"max_running_requests\s+—", text)
    assert "—" in text.split("Per rank")[1].split("figures")[0]


def test_ascii_when_asked(kimi: PlanContext) -> None:
    text = plan_text(dataclasses.replace(kimi, ascii=True), 80)
    text.encode("ascii")  # no UnicodeEncodeError
    assert "pre-load free x (1 - mfs)" in text


def test_the_json_counts_bytes_and_tokens_as_integers(kimi: PlanContext) -> None:
    doc = plan_json(kimi)
    assert doc["cell_bytes"] == 70272 and isinstance(doc["cell_bytes"], int)
    pools = doc["cell_bytes_by_pool"]
    assert isinstance(pools, dict)
    assert isinstance(pools["full"], int)
    assert pools["draft"] == 4044.8  # the logged draft's cell is no whole number: kept as is
    assert isinstance(doc["max_total_num_tokens"], int)
    ranks = doc["ranks"]
    assert isinstance(ranks, list)
    assert all(isinstance(r["max_total_num_tokens_alone"], int) for r in ranks)
    assert isinstance(doc["rest_gib"], float)  # GiB stay rounded floats
    assert "70272.0" not in json.dumps(doc)


def test_existing_json_fields_are_kept(kimi: PlanContext) -> None:
    doc = plan_json(kimi)
    for field in (
        "schema",
        "sglang_version",
        "sglang_version_source",
        "cell_bytes",
        "cell_bytes_by_pool",
        "max_total_num_tokens",
        "rest_gib",
        "kv_pool_gib",
        "ranks",
        "verdict",
        "notes",
    ):
        assert field in doc


def test_the_plan_without_a_log_reads_at_80_columns(tmp_path: Path) -> None:
    ctx = _without_log(tmp_path, ["--tp-size", "2", "--kv-cache-dtype", "fp8_e4m3"])
    text = plan_text(ctx, 80)
    assert "cell size             36,864 B/token" in text
    assert all(len(line) <= 80 for line in text.splitlines())
