"""A GPU process's command line as the table and GPU detail show it: each argument quoted as a
shell would need it, so that an argv[0] holding a space does not read as two words (real
processes psutil reads, and the installed `kvtop --once` on the fake NVML)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kvtop.sources.gpu_processes import command_words, record_of_pid
from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["python3", "train.py", "--epochs", "3"], "python3 train.py --epochs 3"),
        (["my prog", "100"], "'my prog' 100"),
        (["python3", "-c", "print('a b')"], "python3 -c 'print('\"'\"'a b'\"'\"')'"),
        (["run", "$HOME", "a;b", "x|y", ""], "run '$HOME' 'a;b' 'x|y' ''"),
        (["sglang::scheduler_TP3"], "sglang::scheduler_TP3"),
        # A title a process set for itself is one string: its spaces are its own (as nvitop).
        (["sglang::scheduler_TP3 ready"], "sglang::scheduler_TP3 ready"),
        ([], ""),
    ],
)
def test_command_words(argv: list[str], words: str) -> None:
    assert command_words(argv) == words


def _titled(title: str, *args: str) -> Iterator[int]:
    child = subprocess.Popen(["bash", "-c", 'exec -a "$0" sleep "$@"', title, *args])
    try:
        deadline = time.monotonic() + 5  # until bash has exec'd sleep under its new argv[0]
        while psutil.Process(child.pid).cmdline()[:1] != [title]:
            assert time.monotonic() < deadline, psutil.Process(child.pid).cmdline()
            time.sleep(0.01)
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def spaced() -> Iterator[int]:
    """A real process whose argv[0] holds a space: `my prog 100` as three words would lie."""
    yield from _titled("my prog", "100")


def test_info_quotes_an_argument_with_a_space(spaced: int) -> None:
    assert record_of_pid(spaced).info.command == "'my prog' 100"


@pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")
@pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing")
def test_once_table_and_json_quote_the_command(lib_dir: Path, tmp_path: Path, spaced: int) -> None:
    state = write_state(tmp_path / "nvml.state", eight_gpus(), procs=[(2, spaced, 4096)])
    data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
    row = next(p for p in data["processes"] if p["pid"] == spaced)
    assert row["command"] == "'my prog' 100"
    gpu = next(g for g in data["gpus"] if g["index"] == 2)
    assert next(p for p in gpu["processes"] if p["pid"] == spaced)["command"] == "'my prog' 100"
    text = kvtop_once(lib_dir, state, STORY_LOG, columns=160).stdout
    line = next(line for line in text.splitlines() if f" {spaced} " in line)
    assert line.rstrip().endswith("'my prog' 100")
