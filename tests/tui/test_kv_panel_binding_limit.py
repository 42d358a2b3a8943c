"""The KV panel says the pool's evictable share beside the used share, and which limit holds
requests back while they wait (nothing of it while none wait). The real app under Pilot on the
demo's still, its /metrics sample given SGLang 0.5.12's pool gauges and a queue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.status.watch import judged
from tests.support.tui_support import demo_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]


@pytest.mark.parametrize(
    ("used", "evictable", "running", "queued", "said"),
    [
        # Most of the pool held by running requests while 5 wait: the pool.
        (0.92, 0.03, 20, 5, "held back by the KV pool: 92.0% used, 5 queued"),
        # The pool mostly evictable cache and room for more: the prefill budget.
        (0.02, 0.72, 6, 9, "held back by the prefill budget"),
        (0.30, 0.40, 12, 0, None),
    ],
)
async def test_the_kv_panel_says_the_evictable_share_and_the_limit(
    used: float, evictable: float, running: int, queued: int, said: str | None
) -> None:
    base = demo_snapshot()
    assert base.metrics is not None
    pool = base.metrics.values["max_total_num_tokens"]
    values = {
        **base.metrics.values,
        "num_used_tokens": round(used * pool),
        "token_usage": used,
        "kv_used_tokens": round(used * pool),
        "kv_evictable_tokens": round(evictable * pool),
        "kv_available_tokens": pool - round((used + evictable) * pool),
        "num_running_reqs": running,
        "num_queue_reqs": queued,
    }
    snapshot = judged(replace(base, metrics=replace(base.metrics, values=values)))
    app = make_app(snapshot)
    async with app.run_test(size=(200, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's usage", lambda: "tokens (" in panel.render().plain)
        text = " ".join(panel.render().plain.split())
        assert f"· evictable {evictable * 100:.1f}%" in text, text
        if said is None:
            assert "held back" not in text, text
        else:
            assert said in text, text
