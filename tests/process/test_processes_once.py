"""The processes through the installed `kvtop --once` on the fake libnvidia-ml (C) loaded by
the real nvidia-ml-py: real processes this test starts are the GPU processes (eight SGLang
schedulers under their main process, a busy foreign `python3 train.py`), psutil reads them,
and a pid that does not exist here (as a container's process would be) cannot be read."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.sglang_procs import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
TRAINER = "python3 train.py"

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
]


def _absent_pid() -> int:
    """A pid no process has here, as a process of another PID namespace looks to kvtop."""
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[dict[str, int]]:
    main, schedulers = start_server()
    # A foreign trainer that keeps a core busy: `python3 train.py`, as an operator starts one.
    (tmp_path / "train.py").write_text("while True:\n    pass\n")
    python = shlex.quote(sys.executable)
    trainer = subprocess.Popen(["bash", "-c", f"exec -a python3 {python} train.py"], cwd=tmp_path)
    try:
        yield {key: child.pid for key, child in schedulers.items()} | {"trainer": trainer.pid}
    finally:
        trainer.kill()
        trainer.wait()
        stop_server(main, schedulers)


def test_once_lists_every_gpu_process(lib_dir: Path, tmp_path: Path, procs: dict[str, int]) -> None:
    ghost = _absent_pid()
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=135_700),
        procs=[
            *((i, procs[f"TP{i}"], 135_000) for i in range(8)),
            (2, procs["trainer"], 4096),
            (5, ghost, 1536),
        ],
    )
    data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
    rows = {(p["gpu"], p["pid"]): p for p in data["processes"]}
    assert len(rows) == 10
    assert set(data["processes"][0]) == {
        "gpu", "pid", "user", "gpu_memory_gib", "cpu_percent", "rss_gib", "elapsed_s",
        "command", "rank", "foreign", "readable",
    }  # fmt: skip
    me = psutil.Process().username()
    for i in range(8):
        rank = rows[(i, procs[f"TP{i}"])]
        assert (rank["rank"], rank["foreign"], rank["readable"], rank["user"]) == (
            f"TP{i}",
            False,
            True,
            me,
        )
        assert rank["command"].startswith(f"sglang::scheduler_TP{i}")
        assert rank["gpu_memory_gib"] == pytest.approx(135_000 / 1024, abs=0.001)
    trainer = rows[(2, procs["trainer"])]
    assert (trainer["foreign"], trainer["readable"], trainer["rank"], trainer["user"]) == (
        True,
        True,
        None,
        me,
    )
    assert trainer["command"].startswith(TRAINER) and trainer["gpu_memory_gib"] == 4.0
    # Read twice, about 0.2 s apart: a CPU % of its own (a busy loop: well above idle), its RSS.
    assert trainer["cpu_percent"] is not None and trainer["cpu_percent"] >= 0
    assert 0 < trainer["rss_gib"] < 1
    assert 0 <= trainer["elapsed_s"] < 120
    absent = rows[(5, ghost)]
    assert (absent["readable"], absent["user"], absent["command"]) == (False, None, None)
    assert (absent["cpu_percent"], absent["rss_gib"], absent["elapsed_s"]) == (None, None, None)
    assert absent["foreign"] is True  # on a GPU of the server's and not its rank
    host = data["host"]
    assert host["cpu_percent"] is not None and 0 <= host["cpu_percent"] <= 100
    assert host["swap_total_gb"] is not None

    text = kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout
    flat = re.sub(r"\s+", " ", text)
    assert "processes (10 processes on 8 GPUs, 2 foreign, the largest: python3 train.py" in flat
    assert "1 unreadable here; host CPU" in flat
    trainer_line = next(line for line in text.splitlines() if f" {procs['trainer']} " in line)
    assert "foreign" in trainer_line and "4.00" in trainer_line and TRAINER in trainer_line
    ghost_line = next(line for line in text.splitlines() if f" {ghost} " in line)
    assert "(cannot be read here)" in ghost_line and "1.50" in ghost_line
