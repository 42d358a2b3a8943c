"""`kvtop --prometheus URL --once`: the fleet as text (tui/kvtop/fleet/text_report.py) at every width
from 40 to 200 columns: nothing wider than the width, every number whole, problems as
sentences. Fleets built directly (tests/support/fleet_examples.py: known numbers)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from kvtop.fleet.model import Fleet
from kvtop.fleet.text_report import print_fleet
from tests.support.fleet_examples import (
    down_fleet,
    kimi_deployment,
    kimi_gpu,
    kimi_host,
    story_fleet,
)

WIDTHS = (40, 80, 100, 120, 200)
NUMBERS = ("30.3%", "51.2%", "7.40", "705.5/764.7", "176.4/191.2", "gpu-node-01", "gpu-node-02")


def text_of(fleet: Fleet, width: int) -> str:
    out = io.StringIO()
    print_fleet(fleet, Console(file=out, width=width, highlight=False, soft_wrap=False))
    return out.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_fits_the_width_and_keeps_every_number(width: int) -> None:
    text = text_of(story_fleet(), width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    for number in NUMBERS:
        assert re.search(rf"(^|\s){re.escape(number)}(\s|$)", text, re.M), (number, text)
    assert "…" not in text


def test_one_block_per_deployment_with_its_hosts() -> None:
    text = text_of(story_fleet(), 120)
    kimi = text.index("moonshotai/Kimi-K2.5 · TP16 · 2 nodes · ready · KV 30.3% · headroom 7.40")
    qwen = text.index("Qwen/Qwen3-32B")
    assert kimi < text.index("gpu-node-01") < text.index("gpu-node-02") < qwen
    assert "2 deployments on 3 hosts · no alerts" in text
    assert text.splitlines()[0].startswith("kvtop fleet · Prometheus http://127.0.0.1:9090")


def test_alerts_are_sentences_under_their_deployment() -> None:
    hot = kimi_host(1, gpus=(kimi_gpu(0, 1, temp=95),))
    fleet = story_fleet(deployments=(kimi_deployment(kimi_host(0), hot),))
    for width in (40, 80):
        flat = " ".join(text_of(fleet, width).split())
        assert "✖ gpu-node-02 GPU 0 at 95 °C (critical from 90 °C)" in flat
        assert "✖ 1 critical" in flat


def test_prometheus_down_is_a_sentence() -> None:
    flat = " ".join(text_of(down_fleet(), 80).split())
    assert "✖ Prometheus: nothing listens on http://127.0.0.1:9090 (connection refused)" in flat
    assert "Traceback" not in flat


def test_an_empty_fleet_says_what_to_check() -> None:
    empty = story_fleet(deployments=(), selector='job="nope"')
    flat = " ".join(text_of(empty, 80).split())
    assert 'No kvtop, DCGM or SGLang host matching job="nope" in this Prometheus' in flat
    assert 'selector job="nope"' in flat
