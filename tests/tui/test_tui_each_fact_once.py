"""Each fact once and every word whole, at every width: the KV panel's line, the key bar, the
status line (the worst alert named, the alert counts kept, a starting state shortened by whole
words). The real app under Pilot on the demo's still and the story log cut before ready."""

from __future__ import annotations

import re

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from tests.support.tui_support import demo_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

WIDTHS = (80, 100, 120, 160, 200)
CONTEXT_LEN = 262_144  # the demo's context length


def _segments(text: str) -> list[str]:
    """A panel's text cut where it separates its facts: runs of spaces, ` · `, line ends."""
    parts = re.split(r"\n|\s{2,}| · ", text)
    return [p.strip() for p in parts if re.search(r"\w", p)]


@pytest.mark.parametrize("width", WIDTHS)
async def test_kv_panel_says_each_fact_once(width: int) -> None:
    # The length asked (--request-len, the formula) is the context length: one capacity.
    app = make_app(demo_snapshot())
    app.state.request_len = CONTEXT_LEN
    async with app.run_test(size=(width, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's capacity", lambda: "fits" in panel.render().plain)
        text = panel.render().plain
        segments = _segments(text)
        repeated = {s for s in segments if segments.count(s) > 1}
        assert not repeated, text
        assert text.count("262,144") == 1, text
