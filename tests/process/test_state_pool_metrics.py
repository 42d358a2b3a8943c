"""A hybrid model's state pool from a real HTTP /metrics on 127.0.0.1 (sglang:mamba_usage and,
from 0.5.14, its slot gauges): the metrics source, then the real `kvtop --once --json` and
`kvtop --once --export` commands against the same server."""

from __future__ import annotations

import json
import subprocess

import pytest

from kvtop.export import families as ff
from kvtop.sources.metrics import MetricsSource
from tests.support.export_tools import kvtop_command, of, one, samples
from tests.support.paths import ROOT
from tests.support.sglang_http import Deployment, FakeSGLang

# A leak's last reading: 46 of 64 slots taken while 16 requests run.
HYBRID = Deployment(version="0.5.14", tp_size=2, mamba_slots=64, mamba_used=46, running=16)


async def test_the_metrics_source_reads_the_state_pool() -> None:
    with FakeSGLang(HYBRID) as server:
        async with MetricsSource(server.url, timeout_s=2.0) as source:
            reading = await source.scrape()
    sample = reading.sample
    assert reading.status == "ok" and sample is not None
    assert (sample.mamba_usage, sample.mamba_slots_used, sample.mamba_slots) == (0.71875, 46, 64)


async def test_dp_groups_add_their_slots_and_average_their_share() -> None:
    dp = Deployment(version="0.5.14", tp_size=2, dp_size=2, mamba_slots=64, mamba_used=32)
    with FakeSGLang(dp) as server:
        async with MetricsSource(server.url, timeout_s=2.0) as source:
            sample = (await source.scrape()).sample
    assert sample is not None
    assert (sample.mamba_usage, sample.mamba_slots_used, sample.mamba_slots) == (0.5, 64, 128)


async def test_before_0_5_14_only_the_share_is_sent() -> None:
    old = Deployment(version="0.5.8", mamba_slots=64, mamba_used=16)
    with FakeSGLang(old) as server:
        async with MetricsSource(server.url, timeout_s=2.0) as source:
            sample = (await source.scrape()).sample
    assert sample is not None
    assert (sample.mamba_usage, sample.mamba_slots_used, sample.mamba_slots) == (0.25, None, None)


def run(*args: str) -> str:
    result = subprocess.run(
        kvtop_command("--once", "--no-gpus", *args),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("deployment", "expected"),
    [
        (HYBRID, {"usage_pct": 71.88, "slots_used": 46, "slots": 64, "source": "metrics"}),
        (Deployment(version="0.5.14", mamba_slots=0), None),  # a plain model's zeros
        (Deployment(version="0.5.14"), None),
    ],
)
def test_once_json_and_export_say_the_state_pool(
    deployment: Deployment, expected: dict[str, object] | None
) -> None:
    with FakeSGLang(deployment) as server:
        data = json.loads(run("--json", "--url", server.url))
        body = run("--export", "--url", server.url)
    assert data["state_pool"] == expected
    found = samples(body)
    if expected is None:
        assert of(found, ff.STATE_POOL_USAGE) == {}
    else:
        assert one(found, ff.STATE_POOL_USAGE) == 0.71875
