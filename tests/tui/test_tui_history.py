"""Sparklines drawn over the range they show, the range named beside them: the real app on the
demo's snapshots 5 s apart (the feed hands them over; tests/support/still.py)."""

from __future__ import annotations

import math
import re

import pytest

from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.live.widgets.sparkline import TICKS
from tests.support.still import still_series
from tests.support.tui_support import make_app, screen_text, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

COUNT = 24
RANGE = r"(\d+\.\d)–(\d+\.\d) GiB"


async def test_gpu_detail_and_kv_panel_label_the_range_they_draw() -> None:
    snapshots = still_series(COUNT)
    used = [s.gpus[0].sample.used_gib for s in snapshots]
    assert len(set(used)) > 1
    app = make_app(*snapshots)
    async with app.run_test(size=(120, 50)) as pilot:
        await until(pilot, "every reading", lambda: app.state.snapshot is snapshots[-1])
        text = screen_text(app)
        usage = [v for v in app.state.history.token_usage_pct().values if math.isfinite(v)]
        low, high = round(min(usage)), round(max(usage))
        assert f"usage {low}–{high}%, last" in text, text
        await pilot.press("enter")
        await until(pilot, "GPU detail", lambda: isinstance(app.screen, GpuDetailScreen))
        await until(pilot, "its history", lambda: "used GiB" in screen_text(app))
        lines = [x.strip() for x in screen_text(app).splitlines()]
        line = next(x for x in lines if x.startswith("used GiB"))
        found = re.search(RANGE, line)
        assert found, line
        assert (float(found[1]), float(found[2])) == (round(min(used), 1), round(max(used), 1))
        ticks = set(line[len("used GiB") : found.start()]) & set(TICKS)
        # Scaled to the range shown: 0.2 GiB of change is visible (on 0 … 95.6 GiB it was one
        # flat height), yet within the 0.5 GiB floor, so not blown up to the full height.
        assert len(ticks) > 1 and not ticks & {"▁", "█"}, line
        util = next(x for x in lines if x.startswith("util %"))
        assert re.search(r"\(\d+–\d+%\)$", util), util
        assert {"▁", "█"} <= set(util), util  # a range wider than the floor: bottom to top
