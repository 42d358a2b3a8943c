"""The first frame of the installed `kvtop` in a tmux pane, on the fake libnvidia-ml (C) through
the real nvidia-ml-py with real processes titled as SGLang's schedulers.

A driver that takes 1.5 s to load (nvmlInit, as on a host without persistence mode): the status
line is on the terminal before it answers (the first frame waits for the GPUs a moment, not for
the driver), and the GPUs with their ranks come when it does, the overview around them.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.paths import STORY_LOG
from tests.support.sglang_procs import start_server, stop_server
from tests.support.tmux_tools import Tmux

KVTOP = Path(sys.executable).with_name("kvtop")
DRIVER_LOAD_MS = 1500
GPU_ROW = re.compile(r"^\S?\s*\d+\s+(TP\d+)\s.*?\d+\.\d/\d+\.\d", re.MULTILINE)

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def schedulers() -> Iterator[dict[str, int]]:
    main, ranks = start_server()
    try:
        yield {rank: child.pid for rank, child in ranks.items()}
    finally:
        stop_server(main, ranks)


def test_the_status_line_first_then_the_gpus_when_the_driver_answers(
    lib_dir: Path, tmp_path: Path, schedulers: dict[str, int], tmux: Tmux
) -> None:
    slow = [(name, DRIVER_LOAD_MS) for name in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit")]
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=135_700),
        procs=[(i, schedulers[f"TP{i}"], 135_000) for i in range(8)],
        delays=slow,
    )
    settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = ["--log-file", str(STORY_LOG), "--no-metrics"]
    line = f"env -u COLUMNS -u LINES {assign} {shlex.quote(str(KVTOP))} {shlex.join(args)}"
    tmux.new_session("first", "sh -c " + shlex.quote(line), 120, 40)
    # Waits for the status line alone: its first words (the first frame's or the overview's).
    screen = tmux.wait_for("first", "the status line", lambda s: s.lstrip().startswith("kvtop"))
    # The driver has not answered yet: no GPU row on the screen that shows the status line.
    assert GPU_ROW.search(screen) is None, screen
    screen = tmux.wait_for("first", "the eight GPUs", lambda s: len(GPU_ROW.findall(s)) == 8)
    assert GPU_ROW.findall(screen) == [f"TP{i}" for i in range(8)]
    # The overview around them once the log is read: its KV panel and events.
    tmux.wait_for("first", "the overview", lambda s: "KV cache" in s and "events" in s)
