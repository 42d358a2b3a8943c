"""The KV panel says the requests SGLang retracted once there were any, in the warning's colour
and glyph while they are frequent, and nothing of them before. The real app under Pilot on the
demo's still, given the retractions build_snapshot would set."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.retractions import Retractions
from kvtop.model.status.watch import judged
from tests.support.tui_support import demo_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]


def retracted(count: int, in_window: int) -> Retractions:
    return Retractions(
        count=count,
        per_min=in_window / 5,
        window_s=300.0,
        in_window=in_window,
        latest_at=None,
        source="metrics",
        rate_source="metrics",
    )


@pytest.mark.parametrize(
    ("found", "shown"),
    [
        (retracted(14, 14), "▲ retracted 14 · 2.8/min over 5 min"),
        (retracted(3, 1), "retracted 3 · 0.2/min over 5 min"),
        (retracted(0, 0), None),
        (None, None),
    ],
)
async def test_retractions_are_beside_the_kv_usage(
    found: Retractions | None, shown: str | None
) -> None:
    snapshot = judged(replace(demo_snapshot(), retractions=found))
    app = make_app(snapshot)
    async with app.run_test(size=(200, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's usage", lambda: "tokens (" in panel.render().plain)
        text = panel.render().plain
        if shown is None:
            assert "retracted" not in text, text
        else:
            assert shown in text, text
            assert ("▲" in shown) == ("▲ retracted" in text)
