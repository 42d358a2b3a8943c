"""A GPU NVML cannot read keeps its row in the process table: the installed `kvtop --once`
(text and JSON) on the fake libnvidia-ml (C) through the real nvidia-ml-py, GPU 3's handle
failing, with eight real processes titled as SGLang's schedulers (psutil reads them)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.sglang_procs import running_server

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
HANDLE_FAILS = ("nvmlDeviceGetHandleByIndex_v2", 3, 999)  # Unknown Error

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
]


@pytest.fixture
def ranks() -> Iterator[dict[str, int]]:
    with running_server() as children:
        yield {rank: child.pid for rank, child in children.items()}


def _state(directory: Path, ranks: dict[str, int], *errors: tuple[str, int, int]) -> Path:
    return write_state(
        directory / "nvml.state",
        eight_gpus(used_mib=135_700),
        procs=[(i, ranks[f"TP{i}"], 135_000) for i in range(8)],
        errors=errors,
    )


def test_once_keeps_a_row_for_the_lost_gpu(
    lib_dir: Path, tmp_path: Path, ranks: dict[str, int]
) -> None:
    state = _state(tmp_path, ranks, HANDLE_FAILS)
    data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
    rows = data["processes"]
    assert [r["gpu"] for r in rows] == list(range(8))
    lost = rows[3]
    # Its rank as the log places it, nothing NVML or the host would have to say about it.
    assert (lost["pid"], lost["rank"], lost["foreign"], lost["readable"]) == (
        None,
        "TP3",
        False,
        False,
    )
    assert (lost["gpu_memory_gib"], lost["command"], lost["user"]) == (None, None, None)
    assert all(r["pid"] == ranks[f"TP{r['gpu']}"] for r in rows if r["gpu"] != 3)

    text = kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout
    flat = re.sub(r"\s+", " ", text)
    assert "processes (7 processes on 7 of 8 GPUs; GPU 3 cannot be read;" in flat
    line = next(line for line in text.splitlines() if re.match(r"\s*3\s+—\s", line))
    assert line.split()[:4] == ["3", "—", "—", "TP3"]
    assert line.rstrip().endswith("cannot be read through NVML (handle: Unknown Error, code 999)")


def test_once_names_every_lost_gpu(lib_dir: Path, tmp_path: Path, ranks: dict[str, int]) -> None:
    state = _state(
        tmp_path,
        ranks,
        HANDLE_FAILS,
        ("nvmlDeviceGetHandleByIndex_v2", 4, 999),
        ("nvmlDeviceGetHandleByIndex_v2", 6, 999),
    )
    data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
    lost = [(r["gpu"], r["rank"]) for r in data["processes"] if r["pid"] is None]
    assert lost == [(3, "TP3"), (4, "TP4"), (6, "TP6")]
    flat = re.sub(r"\s+", " ", kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout)
    assert "processes (5 processes on 5 of 8 GPUs; GPU 3–4, 6 cannot be read;" in flat
