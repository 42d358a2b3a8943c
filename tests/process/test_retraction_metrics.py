"""Retractions from a real HTTP /metrics on 127.0.0.1 (SGLang's sglang:num_retracted_reqs gauge
and its retraction counters) and from a log being written now: the metrics source, then the real
`kvtop --once --json`, `--once`, `--once --export` and `--check` commands."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from kvtop.export import families as ff
from kvtop.sources.metrics import MetricsSource
from tests.support.export_tools import kvtop_command, of, one, samples
from tests.support.paths import ROOT, STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang

# Two DP groups of four TP ranks, each having retracted 7 requests since the start.
RETRACTING = Deployment(version="0.5.8", tp_size=8, dp_size=2, retracted=7, retracted_latest=1)
# The 0.5.x line as a public benchmark posted it, logged again at other times.
BODY = (
    "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
    "#new_token_ratio: 0.0980 -> 0.3487"
)


async def test_the_metrics_source_reads_the_retraction_counter() -> None:
    with FakeSGLang(RETRACTING) as server:
        async with MetricsSource(server.url, timeout_s=2.0) as source:
            reading = await source.scrape()
    sample = reading.sample
    assert reading.status == "ok" and sample is not None
    assert sample.retracted_requests_total == 14  # one publisher per DP group, added
    assert sample.values["num_retracted_reqs"] == 2


def run(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        kvtop_command(*args), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_once_says_the_counter_and_no_rate_from_one_reading() -> None:
    with FakeSGLang(RETRACTING) as server:
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url).stdout)
        text = run("--once", "--no-gpus", "--url", server.url).stdout
        body = run("--once", "--no-gpus", "--export", "--url", server.url).stdout
        check = run("--check", "--no-gpus", "--url", server.url).stdout
    found = data["retractions"]
    assert {k: found[k] for k in ("count", "per_min", "in_window", "source", "rate_source")} == {
        "count": 14,
        "per_min": None,
        "in_window": None,
        "source": "metrics",
        "rate_source": None,
    }
    assert "retractions: 14 retracted since start · rate not known yet (from /metrics)" in text
    exported = samples(body)
    assert one(exported, ff.RETRACTED_REQUESTS) == 14
    assert of(exported, ff.RETRACTIONS_PER_MINUTE) == {}
    assert " retractions=14;;;0;" in check and "retractions_per_min" not in check


def test_a_server_before_its_first_retraction_and_one_without_the_families() -> None:
    with FakeSGLang(Deployment(version="0.5.8", retracted=0)) as server:
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url).stdout)
    assert data["retractions"]["count"] == 0
    with FakeSGLang(Deployment(version="0.5.8")) as server:  # as SGLang 0.4.6: none exported
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url).stdout)
    assert data["retractions"] is None


def test_check_warns_of_a_storm_in_a_log_written_now(tmp_path: Path) -> None:
    """12 retraction lines over the last four minutes of a log: 2.4 a minute over five."""
    now = datetime.now().replace(microsecond=0)
    storm = [
        f"[{now - timedelta(seconds=20 * i):%Y-%m-%d %H:%M:%S} TP0] {BODY}"
        for i in range(11, -1, -1)
    ]
    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text() + "\n".join(storm) + "\n")
    result = run("--check", "--log-file", str(log), "--no-gpus", "--no-metrics")
    assert result.returncode == 1, result.stdout
    words, _, perf = result.stdout.strip().partition(" | ")
    assert words.startswith(
        "KVTOP WARNING - 12 requests retracted in the last 5 min (2.4/min): the KV pool fills "
        "during decode"
    ), words
    assert "raise --schedule-conservativeness (now 1.0, try 1.3)" in words
    assert "lower --max-running-requests (now 48)" in words
    assert re.search(r"(^| )retractions=12;;;0; retractions_per_min=2\.40;2;;0;", perf), perf
