"""The TUI's tables at common terminal sizes, 80x24 to 200x60: GPU detail's breakdown and
processes, and the formula screen's steps and reserve table, keep every number whole at 80x24
as at 200x60 (labels may shorten, values never). The real app under Pilot on the demo scenario
(tui_support); what is scrolled off is scrolled to and read from the screen."""

from __future__ import annotations

import re

import pytest

from kvtop import fmt
from kvtop.live.screens.formula import FormulaScreen
from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.model.kv_usage import kv_usage
from kvtop.model.memory.gpu_detail import gpu_detail
from tests.support.tui_support import demo_snapshot, make_app, screen_text, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

SIZES = [(80, 24), (100, 30), (120, 40), (200, 60)]
CUT = re.compile(r"\d…|…\d")  # a number Rich cut to fit ("7.…", "…42")


async def _all_lines(pilot, scroller) -> list[str]:  # type: ignore[no-untyped-def]
    """Every line the scrolling region shows, page by page, without the status line and footer."""
    lines: list[str] = []
    while True:
        screen = screen_text(pilot.app).replace("│", " ")  # a modal's border
        lines += screen.split("\n")[1:-1]
        if scroller.scroll_y >= scroller.max_scroll_y:
            return lines
        target = min(scroller.max_scroll_y, scroller.scroll_y + max(1, scroller.size.height - 1))
        scroller.scroll_to(y=target, animate=False)
        await until(pilot, f"scrolled to {target}", lambda t=target: scroller.scroll_y == t)
        await pilot.pause()


def _row(lines: list[str], label: str, value: str) -> bool:
    pattern = re.compile(rf"(^|\s){re.escape(label)}\s+{re.escape(value)}(\s|$)")
    return any(pattern.search(line) for line in lines)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_gpu_detail_keeps_every_number(size: tuple[int, int]) -> None:
    snapshot = demo_snapshot()
    detail = gpu_detail(snapshot, 0)
    assert detail is not None
    app = make_app(snapshot)
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the overview", lambda: "GPU" in screen_text(app))
        await pilot.press("enter")
        await until(pilot, "GPU detail", lambda: isinstance(app.screen, GpuDetailScreen))
        body = app.screen.query_one("#detail-body")
        await until(pilot, "the breakdown", lambda: body.max_scroll_y > 0 or size[1] >= 60)
        lines = await _all_lines(pilot, body)
    assert not [line for line in lines if CUT.search(line)]
    assert _row(lines, "item", "GiB")  # the GiB column's header
    for row in detail.breakdown:
        assert _row(lines, row.item, fmt.gib(row.gib, 2)), (row.item, "\n".join(lines))
    for proc in detail.gpu.processes:
        assert any(
            str(proc.pid) in line and fmt.gib(proc.used_gib, 2) in line.split() for line in lines
        )
    for step in detail.waterfall:  # free after the phase and what it took, whole
        if step.avail_gib is not None:
            assert any(f"{step.avail_gib:.2f}" in line.split() for line in lines)
        if step.delta_gib is not None:
            assert any(f"−{step.delta_gib:.2f}" in line.split() for line in lines)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_formula_screen_keeps_every_number(size: tuple[int, int]) -> None:
    snapshot = demo_snapshot()
    explanation = snapshot.analysis.explanation
    assert explanation is not None
    app = make_app(snapshot)
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the overview", lambda: "GPU" in screen_text(app))
        await pilot.press("f")
        await until(pilot, "the formula", lambda: isinstance(app.screen, FormulaScreen))
        scroller = app.screen.query_one("#formula-scroll")
        await until(pilot, "the steps", lambda: "pre-load free" in screen_text(app))
        lines = await _all_lines(pilot, scroller)
    text = "\n".join(lines)
    assert not [line for line in lines if CUT.search(line)]
    for step in explanation.steps:
        assert step.result in text, (step.label, step.result, text)
        label = re.compile(rf"(^|\s){re.escape(step.label)}(\s|$)")  # whole, maybe shortened
        assert any(label.search(line) for line in lines), step.label
    derived = dict(explanation.reserve_derived)
    for name, value in explanation.reserve_spent:
        shown = f"{value:.2f}" + ("*" if name in derived else "")  # a computed row is marked
        assert _row(lines, name, shown), (name, value, text)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_gpu_rows_keep_their_numbers(size: tuple[int, int]) -> None:
    """The overview's GPU rows: used/total, free, util, temperature and power whole for every
    GPU (the bar gives up its width first)."""
    snapshot = demo_snapshot()
    app = make_app(snapshot)
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the GPU rows", lambda: "95.6" in screen_text(app))
        lines = screen_text(app).split("\n")
    for view in snapshot.gpus:
        s = view.sample
        numbers = [
            f"{fmt.gib(s.used_gib)}/{fmt.gib(s.total_gib)}",
            fmt.gib(view.memory.free_gib),
            fmt.pct(s.utilization_pct),
            f"{s.temperature_c}C",
            f"{s.power_w:.0f}W",
        ]
        row = [line for line in lines if _in_order(line.split(), numbers)]
        assert row, (numbers, lines)
        assert not CUT.search(row[0])


def _in_order(tokens: list[str], wanted: list[str]) -> bool:
    n = len(wanted)
    return any(tokens[i : i + n] == wanted for i in range(len(tokens) - n + 1))


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_host_kv_lane_keeps_its_numbers(size: tuple[int, int]) -> None:
    """The host KV lane wraps between words under its label: its per-rank and total GB, host RAM
    and the host pool's use (percent and tokens) stay whole at every size (at 80 columns it was
    cut to `32…`)."""
    snapshot = demo_snapshot()
    app = make_app(snapshot)
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the host KV lane", lambda: "host KV" in screen_text(app))
        lines = screen_text(app).split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("host KV"))
    lane = [lines[start]]
    lane += [line for line in lines[start + 1 : start + 3] if line.startswith(" " * 10)]
    words = " ".join(" ".join(lane).split())
    usage = kv_usage(snapshot)
    host = snapshot.host
    assert host is not None and usage.host_usage_pct is not None
    for number in (
        "44.77 GB per rank × 8 = 358.16 GB",
        f"host RAM {host.used_gb:,.0f} / {host.total_gb:,.0f} GB used",
        f"{fmt.pct(usage.host_usage_pct)} in use ({usage.host_used_tokens:,} / "
        f"{usage.host_total_tokens:,} tokens)",
    ):
        assert number in words, (number, lane)
    assert not CUT.search(words)
