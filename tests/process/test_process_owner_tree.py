"""Whose a GPU process is when the ranks' parent is not SGLang's own: real process trees
(tests/support/server_trees.py) read by psutil, and the installed `kvtop --once --json` on the
fake libnvidia-ml (C) through the real nvidia-ml-py.

A shell, PID 1 or a subreaper that took in orphaned ranks holds whatever else runs on the host:
it is not the server's main process, so a `python3 train.py` it also started is foreign, and
the ranks stay the server's (by their titles) with no main process. SGLang's own launcher
(`python -m sglang.launch_server`) is the server's, and so is its child without a title."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from kvtop.model.memory.process_owner import is_servers, server_identity
from kvtop.sources.gpu_processes import is_sglang_command, record_of_pid
from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.server_trees import (
    orphaned_to_a_subreaper,
    under_a_shell,
    under_sglang,
)

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")

Tree = Callable[[Path], AbstractContextManager[dict[str, int]]]
FOREIGN_PARENTS: dict[str, Tree] = {
    "shell": under_a_shell,
    "subreaper": orphaned_to_a_subreaper,
}


@pytest.mark.parametrize(
    ("argv", "sglang"),
    [
        (["sglang::scheduler_TP0"], True),
        (["sglang::data_parallel_controller"], True),
        (["/usr/bin/python3", "-m", "sglang.launch_server", "--tp", "8"], True),
        (["python3", "-u", "-W", "ignore", "-m", "sglang.launch_server"], True),
        (["python", "-msglang.launch_server"], True),
        (["python3", "-m", "sglang_router.launch_server", "--dp", "2"], True),
        (["/opt/venv/bin/sglang", "serve", "--model-path", "m"], True),
        (["/opt/venv/bin/python3", "/opt/venv/bin/sglang", "serve"], True),
        (["python3", "/src/sglang/python/sglang/launch_server.py"], True),
        (["bash", "-c", "python3 -m sglang.launch_server"], False),
        (["/bin/sh", "run_sglang.sh"], False),
        (["/sbin/init"], False),
        (["/usr/lib/systemd/systemd", "--system"], False),
        (["tini", "--", "python3", "-m", "sglang.launch_server"], False),
        (["python3", "train.py", "--log", "sglang.log"], False),
        (["python3", "-c", "import sglang"], False),
        (["python3", "-m", "pytest", "tests/sglang"], False),
        ([], False),
    ],
)
def test_sglang_command(argv: list[str], sglang: bool) -> None:
    assert is_sglang_command(argv) is sglang


def _owners(pids: dict[str, int]) -> dict[str, bool]:
    """Whether each named process is the server's, by what psutil reads of it now."""
    ranks = {pid: record_of_pid(pid).rank for pid in pids.values()}
    infos = {pid: record_of_pid(pid).info for pid in pids.values()}
    server = server_identity(ranks, infos)
    return {
        name: is_servers(pid, ranks[pid], infos[pid], server)
        for name, pid in pids.items()
        if name != "parent"
    }


@pytest.mark.parametrize("parent", sorted(FOREIGN_PARENTS))
def test_a_parent_not_sglangs_is_no_server_root(parent: str, tmp_path: Path) -> None:
    with FOREIGN_PARENTS[parent](tmp_path) as pids:
        ranks = {pid: record_of_pid(pid).rank for pid in pids.values()}
        infos = {pid: record_of_pid(pid).info for pid in pids.values()}
        assert server_identity(ranks, infos).roots == frozenset()
        assert _owners(pids) == {"TP0": True, "TP1": True, "trainer": False}


def test_sglangs_launcher_is_the_server_root(tmp_path: Path) -> None:
    with under_sglang(tmp_path) as pids:
        ranks = {pid: record_of_pid(pid).rank for pid in pids.values()}
        infos = {pid: record_of_pid(pid).info for pid in pids.values()}
        assert server_identity(ranks, infos).roots == {pids["parent"]}
        assert _owners(pids) == {"TP0": True, "TP1": True, "server_child": True, "trainer": False}


TREES: dict[str, Tree] = {**FOREIGN_PARENTS, "sglang": under_sglang}


def _state(directory: Path, pids: dict[str, int]) -> Path:
    """TP0 and TP1 on GPUs 0 and 1, the trainer's 4 GiB on GPU 2, the launcher's child (if
    any) on GPU 0 beside TP0."""
    procs: list[tuple[int, int, int | None]] = [
        (0, pids["TP0"], 135_000),
        (1, pids["TP1"], 135_000),
        (2, pids["trainer"], 4096),
    ]
    if "server_child" in pids:
        procs.append((0, pids["server_child"], 512))
    return write_state(directory / "nvml.state", eight_gpus(used_mib=135_700), procs=procs)


@pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")
@pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing")
@pytest.mark.parametrize("tree", sorted(TREES))
def test_once_counts_only_the_servers_processes(tree: str, lib_dir: Path, tmp_path: Path) -> None:
    with TREES[tree](tmp_path) as pids:
        state = _state(tmp_path, pids)
        data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
        rows = {p["pid"]: p for p in data["processes"]}
        assert {(rows[pids[r]]["rank"], rows[pids[r]]["foreign"]) for r in ("TP0", "TP1")} == {
            ("TP0", False),
            ("TP1", False),
        }
        trainer = rows[pids["trainer"]]
        assert (trainer["foreign"], trainer["rank"]) == (True, None)
        assert trainer["command"].startswith("python3 train.py")
        if "server_child" in pids:
            assert rows[pids["server_child"]]["foreign"] is False
        text = kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout
        flat = re.sub(r"\s+", " ", text)
        assert "1 foreign: python3 train.py 4.00 GiB on GPU 2" in flat
