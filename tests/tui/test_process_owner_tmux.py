"""The live processes view (`t`, the installed `kvtop` under tmux) and `kvtop --once --json`
agree on whose each GPU process is when the ranks' parent is not SGLang's own: real process
trees (tests/support/server_trees.py: the ranks under a shell, or orphaned to a subreaper, each
beside a foreign `python3 train.py`) on the fake libnvidia-ml (C) through the real nvidia-ml-py."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.server_trees import orphaned_to_a_subreaper, under_a_shell
from tests.support.tmux_tools import Tmux

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
SUMMARY = "3 processes on 3 GPUs, 1 foreign: python3 train.py 4.00 GiB on GPU 2"

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

TREES: dict[str, Callable[[Path], AbstractContextManager[dict[str, int]]]] = {
    "shell": under_a_shell,
    "subreaper": orphaned_to_a_subreaper,
}


def _whose(screen: str, pid: int) -> str | None:
    """The WHOSE cell of PID's row in the table on screen (GPU PID USER WHOSE …)."""
    for line in screen.splitlines():
        words = line.split()
        if len(words) > 4 and words[1] == str(pid):
            return words[3]
    return None


@pytest.mark.parametrize("tree", sorted(TREES))
def test_live_table_and_json_agree(tree: str, lib_dir: Path, tmp_path: Path, tmux: Tmux) -> None:
    with TREES[tree](tmp_path) as pids:
        state = write_state(
            tmp_path / "nvml.state",
            eight_gpus(used_mib=135_700),
            procs=[
                (0, pids["TP0"], 135_000),
                (1, pids["TP1"], 135_000),
                (2, pids["trainer"], 4096),
            ],
        )
        data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
        json_whose = {
            p["pid"]: p["rank"] or ("foreign" if p["foreign"] else "server")
            for p in data["processes"]
        }
        named = {pids[n]: n for n in ("TP0", "TP1", "trainer")}
        assert {named[pid]: word for pid, word in json_whose.items()} == {
            "TP0": "TP0",
            "TP1": "TP1",
            "trainer": "foreign",
        }
        once_text = re.sub(r"\s+", " ", kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout)
        assert f"processes ({SUMMARY};" in once_text

        settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
        assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
        args = ["--log-file", str(STORY_LOG), "--no-metrics", "--interval", "0.5"]
        line = f"env -u COLUMNS -u LINES {assign} {shlex.quote(str(KVTOP))} {shlex.join(args)}"
        tmux.new_session("owner", "sh -c " + shlex.quote(line), 140, 40)
        screen = tmux.wait_for("owner", "the processes line", lambda s: "1 foreign: " in s)
        assert f"processes (t) {SUMMARY}" in screen
        tmux.send("owner", "t")
        screen = tmux.wait_for(
            "owner", "the table", lambda s: all(_whose(s, pid) for pid in json_whose)
        )
        assert {pid: _whose(screen, pid) for pid in json_whose} == json_whose
        assert SUMMARY in screen
