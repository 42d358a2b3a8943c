"""The live view of the installed `kvtop` under tmux on AMD GPUs: the real amdsmi binding over
the fake libamd_smi.so, eight real SGLang scheduler processes holding the eight MI300X. The
status line names the library that reads the GPUs (AMD SMI), the rows carry the ranks tied by
their processes, Enter opens GPU 0's detail with its vendor, and a GPU amdsmi stops finding is
drawn lost and back without a restart."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_amdsmi import GIB, STATE_ENV, eight_mi300x, write_state
from tests.support.fake_nvml import gcc_path
from tests.support.paths import STORY_LOG
from tests.support.sglang_procs import start_server, stop_server
from tests.support.tmux_tools import Tmux

KVTOP = Path(sys.executable).with_name("kvtop")

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake AMD SMI"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(
        importlib.util.find_spec("amdsmi") is None, reason="the amdsmi binding is in the test extra"
    ),
]


@pytest.fixture
def ranks() -> Iterator[dict[str, int]]:
    main, schedulers = start_server()
    try:
        yield {rank: child.pid for rank, child in schedulers.items()}
    finally:
        stop_server(main, schedulers)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_live_view_on_eight_mi300x(
    rocm_path: Path, tmp_path: Path, ranks: dict[str, int], tmux: Tmux
) -> None:
    procs = {i: [(ranks[f"TP{i}"], 180 * GIB)] for i in range(8)}
    state = write_state(tmp_path / "amd.state", eight_mi300x(), procs=procs, driver="6.10.5")
    healthy = state.read_text()
    settings = {"ROCM_PATH": str(rocm_path), STATE_ENV: str(state)}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = ["--log-file", str(STORY_LOG), "--no-metrics", "--interval", "0.5"]
    unset = "-u COLUMNS -u LINES -u LD_LIBRARY_PATH -u KVTOP_FAKE_NVML_STATE -u ROCM_HOME"
    line = f"env {unset} {assign} {shlex.quote(str(KVTOP))} {shlex.join(args)}"
    tmux.new_session("amd", "sh -c " + shlex.quote(line), 120, 40)
    screen = tmux.wait_for(
        "amd", "the AMD SMI marker and eight ranks", lambda s: "●AMD" in s and "TP7" in s
    )
    assert "NVML" not in screen
    tmux.send("amd", "Enter")
    screen = tmux.wait_for("amd", "GPU 0's detail", lambda s: "read by AMD SMI" in s)
    assert "AMD Instinct MI300X" in " ".join(screen.split())
    tmux.send("amd", "Escape")
    tmux.wait_for("amd", "the overview again", lambda s: "read by AMD SMI" not in s and "TP7" in s)
    _replace(state, healthy + "gpu.3.error.amdsmi_get_gpu_memory_usage=31\n")
    screen = tmux.wait_for("amd", "GPU 3 lost", lambda s: "lost: fell off the bus (AMD SMI)" in s)
    assert "check dmesg for amdgpu errors" in " ".join(screen.split())
    _replace(state, healthy)
    tmux.wait_for("amd", "GPU 3 back", lambda s: "fell off the bus" not in s and "TP3" in s)
    tmux.send("amd", "q")
