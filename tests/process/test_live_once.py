"""`kvtop --once` joining real parts: the fake NVML library, a loopback SGLang server, the log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml.build import (
    STATE_ENV,
    eight_gpus,
    gcc_path,
    write_state,
)
from tests.support.paths import ROOT, STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build the fake NVML")

TOTAL_MIB = 97_887  # RTX PRO 6000 Blackwell, 95.59 GiB
RESERVED_MIB = 512
FREE_GIB = 7.40


@pytest.fixture
def schedulers() -> Iterator[list[int]]:
    """Eight real processes titled like SGLang's schedulers (`sglang::scheduler_TP3`)."""
    procs = [
        subprocess.Popen(["bash", "-c", f"exec -a sglang::scheduler_TP{i} sleep 60"])
        for i in range(8)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def state_for(path: Path, pids: list[int]) -> Path:
    used_mib = TOTAL_MIB - RESERVED_MIB - round(FREE_GIB * 1024)
    gpus = eight_gpus(
        name="NVIDIA RTX PRO 6000 Blackwell",
        total_mib=TOTAL_MIB,
        used_mib=used_mib,
        reserved_mib=RESERVED_MIB,
    )
    write_state(path, gpus=gpus, procs=[(i, pid, used_mib - 600) for i, pid in enumerate(pids)])
    return path


def kvtop_json(lib_dir: Path, state: Path, *args: str) -> dict[str, object]:
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), **{STATE_ENV: str(state)})
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def test_gpus_ranks_metrics_joined(lib_dir: Path, tmp_path: Path, schedulers: list[int]) -> None:
    state = state_for(tmp_path / "nvml.state", schedulers)
    with FakeSGLang() as server:
        data = kvtop_json(lib_dir, state, "--log-file", str(STORY_LOG), "--url", server.url)
    sources = {s["name"]: s for s in data["sources"]}  # type: ignore[union-attr]
    assert {name: s["state"] for name, s in sources.items()} == {
        "log": "ok",
        "nvml": "ok",
        "metrics": "ok",
    }
    assert data["rank_mapping"] == "process"
    gpus = data["gpus"]
    assert len(gpus) == 8  # type: ignore[arg-type]
    for i, gpu in enumerate(gpus):  # type: ignore[arg-type]
        assert gpu["ranks"] == [f"TP{i}"]
        assert gpu["processes"][0]["pid"] == schedulers[i]
        assert gpu["processes"][0]["rank"] == f"TP{i}"
        b = gpu["breakdown"]
        assert b["weights_gib"] == 71.57 and b["kv_cache_gib"] == 10.42
        assert b["draft_weights_gib"] == 0.95 and b["draft_kv_gib"] == 0.6
        assert b["free_gib"] == pytest.approx(FREE_GIB, abs=0.01)
        # the segments add up to the card: baseline + items + runtime + free = total
        items = [
            b[k]
            for k in (
                "baseline_gib",
                "weights_gib",
                "kv_cache_gib",
                "draft_weights_gib",
                "draft_kv_gib",
                "graphs_gib",
                "runtime_gib",
            )
        ]
        assert sum(items) + b["free_gib"] == pytest.approx(b["total_gib"], abs=0.01)
        # the reserve (pre-load free × 0.12) starts that far from the end of the card
        assert b["total_gib"] - b["reserve_starts_at_gib"] == pytest.approx(b["reserve_gib"])
    tp0 = gpus[0]["breakdown"]  # type: ignore[index]
    assert tp0["baseline_gib"] == pytest.approx(TOTAL_MIB / 1024 - 93.17, abs=0.01)
    metrics = data["metrics"]
    assert metrics["max_total_num_tokens"] == 159277  # type: ignore[index]
    assert metrics["num_used_tokens"] == 48211  # type: ignore[index]


def test_untitled_processes_map_by_order(lib_dir: Path, tmp_path: Path) -> None:
    plain = [subprocess.Popen(["sleep", "60"]) for _ in range(8)]
    try:
        state = state_for(tmp_path / "nvml.state", [p.pid for p in plain])
        data = kvtop_json(lib_dir, state, "--log-file", str(STORY_LOG), "--no-metrics")
    finally:
        for p in plain:
            p.kill()
            p.wait()
    assert data["rank_mapping"] == "order"
    assert [g["ranks"] for g in data["gpus"]] == [[f"TP{i}"] for i in range(8)]  # type: ignore[union-attr]
    assert any("by order" in n for n in data["notes"])  # type: ignore[union-attr]
    assert [s["name"] for s in data["sources"]] == ["log", "nvml"]  # type: ignore[union-attr]


def test_server_info_fills_a_log_without_server_args(lib_dir: Path, tmp_path: Path) -> None:
    """An excerpt without `server_args=`: mem_fraction_static comes from /server_info."""
    excerpt = tmp_path / "excerpt.log"
    lines = STORY_LOG.read_text().splitlines()
    excerpt.write_text("\n".join(line for line in lines if "server_args=" not in line) + "\n")
    state = state_for(tmp_path / "nvml.state", [])
    # The log's server (its formats are 0.5.3-0.5.8): another version's args are not taken.
    with FakeSGLang(Deployment(version="0.5.8")) as server:
        data = kvtop_json(lib_dir, state, "--log-file", str(excerpt), "--url", server.url)
    assert data["mismatches"] == []
    assert data["server_args"]["mem_fraction_static"] is not None  # type: ignore[index]
    assert data["sizing"], "the reserve is computed once mem_fraction_static is known"
