"""The KV panel's usage never reads as a threshold it is not on: from /metrics, 94.6 % and
94.99 % of the pool read as themselves beside the ▲, never the 95 % critical edge. The real
app under Pilot on the demo's still, its /metrics sample set to those counts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.status.watch import judged
from tests.support.tui_support import demo_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

POOL = 159_277  # the demo's


@pytest.mark.parametrize(
    ("used", "shown"), [(150_676, "94.6%"), (151_297, "94.99%"), (151_313, ">94.99%")]
)
async def test_a_usage_under_the_critical_edge_never_reads_as_it(used: int, shown: str) -> None:
    base = demo_snapshot()
    assert base.metrics is not None
    values = {**base.metrics.values, "num_used_tokens": used, "token_usage": used / POOL}
    metrics = replace(base.metrics, values=values)
    snapshot = judged(replace(base, metrics=metrics))
    assert snapshot.verdict.level_of("kv_usage") == "warning"
    app = make_app(snapshot)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's usage", lambda: "tokens (" in panel.render().plain)
        text = panel.render().plain
        assert f"(▲ {shown})" in text, text
        assert "95%" not in text.replace(">94.99%", "")
