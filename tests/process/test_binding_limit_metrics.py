"""Which limit holds requests back, and the pool's evictable share, from a real HTTP /metrics
and /server_info on 127.0.0.1: the real `kvtop --once --json`, `--once`, `--export` and
`--check` commands against the same server."""

from __future__ import annotations

import json
import subprocess

import pytest

from kvtop.export import families as ff
from tests.support.export_tools import kvtop_command, one, samples
from tests.support.paths import ROOT
from tests.support.sglang_http import Deployment, FakeSGLang

POOL = 100_000
# 2 % of the pool in use while 72 % holds radix-cached prefixes: requests wait all the same.
CACHED = Deployment(
    version="0.5.14",
    tp_size=1,
    max_total_num_tokens=POOL,
    num_used_tokens=(2_000,),
    evictable_tokens=72_000,
    running=6,
    queued=9,
    max_running_requests=50,
)
# SGLang runs 50 requests per worker (it lowered the 128 asked for): all 50 run, 11 wait.
AT_CAP = Deployment(
    version="0.5.14",
    tp_size=1,
    max_total_num_tokens=POOL,
    num_used_tokens=(31_200,),
    evictable_tokens=40_800,
    running=50,
    queued=11,
    max_running_requests=50,
)
# Two DP groups of 25 each: /metrics adds the running requests up, the cap is 2 x 25.
DP_AT_CAP = Deployment(
    version="0.5.14",
    tp_size=2,
    dp_size=2,
    max_total_num_tokens=POOL,
    num_used_tokens=(30_000,),
    running=25,
    queued=3,
    max_running_requests=25,
)
# Most of the pool held by running requests, below the cap.
POOL_HELD = Deployment(
    version="0.5.14",
    tp_size=1,
    max_total_num_tokens=POOL,
    num_used_tokens=(91_000,),
    evictable_tokens=4_000,
    running=30,
    queued=5,
    max_running_requests=50,
)
IDLE = Deployment(version="0.5.14", tp_size=1, running=12, queued=0, max_running_requests=50)


def run(*args: str, codes: tuple[int, ...] = (0, 1)) -> str:
    result = subprocess.run(
        kvtop_command(*args), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode in codes, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("deployment", "limit", "words"),
    [
        (CACHED, "prefill_budget", "most of what the pool holds is evictable cache"),
        (AT_CAP, "max_running_requests", "50 running of max_running_requests 50"),
        (DP_AT_CAP, "max_running_requests", "50 running of max_running_requests 50 (25 per DP"),
        (POOL_HELD, "kv_pool", "5 queued for room in the KV pool: the pool is 91.0% used"),
        (IDLE, None, "no limit binds: 12 running, none queued"),
    ],
)
def test_once_names_the_binding_limit(
    deployment: Deployment, limit: str | None, words: str
) -> None:
    with FakeSGLang(deployment) as server:
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url))
        text = run("--once", "--no-gpus", "--url", server.url)
    found = data["binding_limit"]
    assert found["limit"] == limit
    assert words in found["text"]
    assert found["numbers"]["queued_requests"] == deployment.queued * deployment.dp_size
    assert f"binding limit: {found['text']}" in " ".join(text.split())


def test_the_evictable_share_beside_the_used_share_everywhere() -> None:
    with FakeSGLang(CACHED) as server:
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url))
        text = run("--once", "--no-gpus", "--url", server.url)
        body = run("--once", "--no-gpus", "--export", "--url", server.url)
        check = run("--check", "--no-gpus", "--url", server.url, codes=(0, 1, 2))
    assert data["kv_evictable_pct"] == 72.0
    assert data["binding_limit"]["numbers"]["evictable_pct"] == 72.0
    assert data["binding_limit"]["numbers"]["free_pct"] == 26.0
    assert "KV pool: used 2.0% · evictable 72.0%" in text
    assert one(samples(body), ff.KV_EVICTABLE) == 0.72
    assert "kv_evictable=72.00%;;;0;100" in check


def test_before_0_5_12_there_is_no_evictable_share() -> None:
    old = Deployment(version="0.5.8", tp_size=1, running=12, queued=0)
    with FakeSGLang(old) as server:
        data = json.loads(run("--once", "--no-gpus", "--json", "--url", server.url))
        body = run("--once", "--no-gpus", "--export", "--url", server.url)
    assert data["kv_evictable_pct"] is None
    assert ff.KV_EVICTABLE not in {name for name, _ in samples(body)}
