"""The processes view in the installed `kvtop` under tmux: real processes on the fake
libnvidia-ml (C) through the real nvidia-ml-py (eight SGLang schedulers and a foreign trainer,
each a real pid psutil reads), `t` opens the table, `o` sorts, a resize relays it at once and
`t` goes back."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.sglang_procs import start_server, stop_server
from tests.support.tmux_tools import Tmux

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
TRAINER = "kvtop-test-trainer"

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.fixture
def procs() -> Iterator[dict[str, int]]:
    main, schedulers = start_server()
    trainer = subprocess.Popen(["bash", "-c", f"exec -a '{TRAINER}' sleep 60"])
    try:
        yield {key: child.pid for key, child in schedulers.items()} | {"trainer": trainer.pid}
    finally:
        trainer.kill()
        trainer.wait()
        stop_server(main, schedulers)


def _header(screen: str) -> list[str]:
    return next((line.split() for line in screen.splitlines() if "WHOSE" in line), [])


def _row(screen: str, pid: int) -> list[str]:
    return next((line.split() for line in screen.splitlines() if f" {pid} " in line), [])


def test_processes_view_in_a_terminal(
    lib_dir: Path, tmp_path: Path, procs: dict[str, int], tmux: Tmux
) -> None:
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=135_700),
        procs=[*((i, procs[f"TP{i}"], 135_000) for i in range(8)), (2, procs["trainer"], 4096)],
    )
    settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = ["--log-file", str(STORY_LOG), "--no-metrics", "--interval", "0.5"]
    line = f"env -u COLUMNS -u LINES {assign} {shlex.quote(str(KVTOP))} {shlex.join(args)}"
    tmux.new_session("procs", "sh -c " + shlex.quote(line), 120, 40)
    trainer = procs["trainer"]
    try:
        screen = tmux.wait_for(
            "procs", "the processes line", lambda s: "1 foreign: " + TRAINER in s
        )
        assert "processes (t) 9 processes on 8 GPUs, 1 foreign: " in screen
        tmux.send("procs", "t")
        screen = tmux.wait_for("procs", "the table", lambda s: len(_row(s, trainer)) > 4)
        assert _header(screen) == [
            "GPU", "PID", "USER", "WHOSE", "GPU-MEM▼", "%CPU", "RSS", "TIME", "COMMAND",
        ]  # fmt: skip
        me = psutil.Process().username()
        assert _row(screen, trainer)[:4] == ["2", str(trainer), me, "foreign"]
        assert _row(screen, trainer)[-2:] == [TRAINER, "60"]  # its command line: `sleep 60`
        for i in range(8):
            assert _row(screen, procs[f"TP{i}"])[:4] == [
                str(i),
                str(procs[f"TP{i}"]),
                "root",
                f"TP{i}",
            ]
        assert "host CPU " in screen and " MEM " in screen and " SWP " in screen
        tmux.send("procs", "o")
        tmux.wait_for("procs", "sorted by CPU", lambda s: "%CPU▼" in _header(s))
        tmux.run("resize-window", "-t", "procs", "-x", "80", "-y", "24")
        screen = tmux.wait_for(
            "procs",
            "the table for 80 columns",
            lambda s: "COMMAND" in _header(s) and "TIME" not in _header(s),
        )
        assert "RSS" in _header(screen)
        assert all(len(line) <= 80 for line in screen.splitlines())
        tmux.send("procs", "t")
        tmux.wait_for("procs", "the overview again", lambda s: "processes (t)" in s)
    finally:
        tmux.kill_session("procs")
