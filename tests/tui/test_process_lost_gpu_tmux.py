"""A GPU NVML cannot read in the live view (the installed `kvtop` under tmux): the overview's
processes line counts it and the table (`t`) keeps its row, as `--once` does; the fake
libnvidia-ml (C) through the real nvidia-ml-py fails GPU 3's handle, eight real processes carry
SGLang's scheduler titles."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.sglang_procs import running_server
from tests.support.tmux_tools import Tmux

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
SUMMARY = "7 processes on 7 of 8 GPUs; GPU 3 cannot be read"
WORDS = "cannot be read through NVML (handle: Unknown Error, code 999)"

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def ranks() -> Iterator[dict[str, int]]:
    with running_server() as children:
        yield {rank: child.pid for rank, child in children.items()}


def _gpu3(screen: str) -> list[str]:
    """GPU 3's row in the processes table on screen, as words (none until the table is drawn:
    the overview's own row for GPU 3 also begins `3 —`)."""
    lines = screen.splitlines()
    header = next((i for i, line in enumerate(lines) if "WHOSE" in line), None)
    if header is None:
        return []
    return next((ln.split() for ln in lines[header + 1 :] if ln.split()[:2] == ["3", "—"]), [])


def test_live_view_keeps_the_lost_gpu(
    lib_dir: Path, tmp_path: Path, ranks: dict[str, int], tmux: Tmux
) -> None:
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=135_700),
        procs=[(i, ranks[f"TP{i}"], 135_000) for i in range(8)],
        errors=[("nvmlDeviceGetHandleByIndex_v2", 3, 999)],
    )
    settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = ["--log-file", str(STORY_LOG), "--no-metrics", "--interval", "0.5"]
    line = f"env -u COLUMNS -u LINES {assign} {shlex.quote(str(KVTOP))} {shlex.join(args)}"
    tmux.new_session("lost", "sh -c " + shlex.quote(line), 140, 40)
    # The first frame draws the GPUs before the log is read (GPU 3's rank unknown, `—`): the
    # table is opened once the log's ranks are in, the overview's GPU 3 row showing TP3.
    screen = tmux.wait_for(
        "lost",
        "the processes line and the log's ranks",
        lambda s: (
            "processes (t)" in s and any(ln.split()[:2] == ["3", "TP3"] for ln in s.splitlines())
        ),
    )
    assert f"processes (t) {SUMMARY}" in screen
    tmux.send("lost", "t")
    screen = tmux.wait_for("lost", "GPU 3's row", lambda s: bool(_gpu3(s)))
    assert _gpu3(screen)[:4] == ["3", "—", "—", "TP3"]
    assert " ".join(_gpu3(screen)).endswith(WORDS)
    assert SUMMARY in screen
    for i in (0, 1, 2, 4, 5, 6, 7):
        assert f" {ranks[f'TP{i}']} " in screen
