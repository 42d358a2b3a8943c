"""The KV panel says a hybrid model's state pool beside the KV usage, and nothing of it for a
plain model. The real app under Pilot on the demo's still, its /metrics sample given SGLang
0.5.14's state-pool gauges (a hybrid's, or a plain model's zeros)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.status.watch import judged
from tests.support.tui_support import demo_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]


def with_state_pool(used: int, slots: int) -> dict[str, float]:
    return {
        "mamba_usage": used / slots if slots else 0.0,
        "mamba_used_tokens": used,
        "mamba_available_tokens": slots - used,
        "mamba_evictable_tokens": 0,
    }


@pytest.mark.parametrize(
    ("used", "slots", "shown"), [(46, 64, "state pool 71.9% (46 / 64 slots)"), (0, 0, None)]
)
async def test_the_state_pool_is_beside_the_kv_usage(
    used: int, slots: int, shown: str | None
) -> None:
    base = demo_snapshot()
    assert base.metrics is not None
    values = {**base.metrics.values, **with_state_pool(used, slots)}
    snapshot = judged(replace(base, metrics=replace(base.metrics, values=values)))
    app = make_app(snapshot)
    async with app.run_test(size=(160, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's usage", lambda: "tokens (" in panel.render().plain)
        text = panel.render().plain
        if shown is None:
            assert "state pool" not in text, text
        else:
            assert shown in text, text
