"""Orphans through the installed `kvtop --once` on the fake libnvidia-ml: real processes titled
as SGLang titles its children (`sglang::scheduler_TP0`, `sglang::detokenizer`) hold GPU memory
with no server running them, either adopted by PID 1 (their main process is gone) or under a
main process while the log says the server stopped. kvtop names them with the command that
ends them, and never signals them itself."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest

from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.sglang_procs import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
]


def _wait_for_title(pid: int) -> None:
    """Until the child has exec'd under its SGLang title (bash prints its pid before)."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(psutil.Error, IndexError):
            if psutil.Process(pid).cmdline()[0].startswith("sglang::"):
                return
        assert time.monotonic() < deadline, f"pid {pid} never took its SGLang title"
        time.sleep(0.02)


@pytest.fixture
def adopted() -> Iterator[dict[str, int]]:
    """A scheduler and a detokenizer whose parent exited at once: PID 1 (or the nearest
    subreaper) takes them in, as when a server's main process dies before its children."""
    script = (
        "(exec -a sglang::scheduler_TP0 sleep 60 >/dev/null 2>&1 </dev/null) & echo $!; "
        "(exec -a sglang::detokenizer sleep 60 >/dev/null 2>&1 </dev/null) & echo $!"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    scheduler, detokenizer = (int(w) for w in out.stdout.split())
    try:
        for pid in (scheduler, detokenizer):
            _wait_for_title(pid)
        yield {"TP0": scheduler, "detokenizer": detokenizer}
    finally:
        for pid in (scheduler, detokenizer):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_adopted_sglang_processes_are_orphans(
    lib_dir: Path, tmp_path: Path, adopted: dict[str, int]
) -> None:
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=72_000),
        procs=[(0, adopted["TP0"], 71_680), (0, adopted["detokenizer"], 512)],
    )
    data = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
    orphans = {o["pid"]: o for o in data["orphans"]}
    assert set(orphans) == set(adopted.values())
    scheduler = orphans[adopted["TP0"]]
    assert set(scheduler) == {"pid", "gpu", "gib", "age_s", "title", "kill"}
    assert (scheduler["gpu"], scheduler["gib"], scheduler["title"]) == (
        0,
        70.0,
        "sglang::scheduler_TP0 60",
    )
    assert scheduler["kill"] == f"kill {adopted['TP0']}"
    assert 0 <= scheduler["age_s"] < 60
    (alert,) = [a for a in data["verdict"]["alerts"] if a["name"] == "orphans"]
    assert alert["severity"] == "warning"
    pids = " ".join(str(p) for p in sorted(adopted.values()))
    assert f"kill {pids} (then kill -9 {pids}" in alert["summary"]
    assert "70.50 GiB of GPU memory" in alert["summary"]

    text = kvtop_once(lib_dir, state, STORY_LOG).stdout
    assert f"orphans: sglang::scheduler_TP0 60 pid {adopted['TP0']} on GPU 0, 70.00 GiB" in text
    row = re.compile(rf"^\s*0\s+{adopted['TP0']}\s")  # the process table's row: GPU, pid, …
    (line,) = [line for line in text.splitlines() if row.match(line)]
    assert " orphan " in line, line

    check = subprocess.run(
        [str(KVTOP), "--check", "--log-file", str(STORY_LOG), "--no-metrics"],
        capture_output=True,
        text=True,
        env=dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), KVTOP_FAKE_NVML_STATE=str(state)),
        timeout=60,
        check=False,
    )
    assert "orphans=2;0;;0;" in check.stdout, check.stdout
    assert check.returncode >= 1
    for pid in adopted.values():  # kvtop signals nothing: they still run
        assert psutil.pid_exists(pid)


def _stopped_log(tmp_path: Path) -> Path:
    """The story's log, then its operator's Ctrl-C a minute from now (after the processes of
    this test started): the server stopped."""
    at = (datetime.now() + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    log = tmp_path / "stopped.log"
    stop = (
        f"[{at}] SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
    )
    log.write_text(STORY_LOG.read_text() + stop + "\n")
    return log


def test_schedulers_after_the_log_says_stopped_are_orphans(lib_dir: Path, tmp_path: Path) -> None:
    main, ranks = start_server(2)
    try:
        pids = [ranks["TP0"].pid, ranks["TP1"].pid]
        procs = [(0, pids[0], 71_680), (1, pids[1], 71_680)]
        state = write_state(tmp_path / "nvml.state", eight_gpus(used_mib=72_000), procs=procs)
        ready = json.loads(kvtop_once(lib_dir, state, STORY_LOG, "--json").stdout)
        assert ready["orphans"] == []  # their main process runs them and the log says ready
        stopped = json.loads(kvtop_once(lib_dir, state, _stopped_log(tmp_path), "--json").stdout)
        assert [(o["pid"], o["gpu"]) for o in stopped["orphans"]] == [(pids[0], 0), (pids[1], 1)]
        (alert,) = [a for a in stopped["verdict"]["alerts"] if a["name"] == "orphans"]
        assert "2 SGLang processes with no server running them" in alert["summary"]
    finally:
        stop_server(main, ranks)
