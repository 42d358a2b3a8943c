"""A log rotated while the server writes it is the same run: the state and the restart count
never change, whether the rotation copies and truncates, renames and creates, deletes and
restores, or rewrites the file with `sed -i`. Checked on the live follower (the real
LogFollower on a real file) and on the real `kvtop --export` process
(`kvtop_startup_state`, `kvtop_restarts_total`), while a writer appends batch lines.

A log that begins mid-run (batch lines, no startup) is `ready`: "the startup is not in this
log", and `--check` never calls it a startup in progress.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvtop.export import families as ff
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from kvtop.sources.log_follow import LogFollower
from tests.support import export_tools as et
from tests.support.offline import offline
from tests.support.paths import STORY_LOG

BATCH = (
    "[2026-02-27 09:10:{sec:02d} TP0] Decode batch, #running-req: 12, #token: {tokens}, "
    "token usage: 0.30, cuda graph: True, gen throughput (token/s): 512.34, #queue-req: 0, \n"
)
STOP = "[2026-02-27 09:11:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"


class Writer:
    """Appends a batch line every 20 ms, opening the path each time (as a shell's `>>` does,
    so its lines reach whatever file is at the path). `paused()` holds it while a rotation
    moves files."""

    def __init__(self, path: Path) -> None:
        self.path, self.n = path, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            with self._lock:
                self.append(BATCH.format(sec=self.n % 60, tokens=40_000 + self.n))
                self.n += 1

    def append(self, text: str) -> None:
        with self.path.open("a") as out:
            out.write(text)

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            yield

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def copytruncate(path: Path) -> None:
    shutil.copyfile(path, path.with_suffix(".log.1"))
    with path.open("r+") as f:
        f.truncate(0)


def rename_and_create(path: Path) -> None:
    os.rename(path, path.with_suffix(".log.1"))
    path.write_text("")


def delete_and_restore(path: Path) -> None:
    backup = path.with_suffix(".bak")
    shutil.copyfile(path, backup)
    path.unlink()
    time.sleep(0.3)  # the follower sees the file gone
    os.replace(backup, path)


def sed_in_place(path: Path) -> None:
    """A no-op `sed -i`: the same text in a new file renamed over the old one."""
    subprocess.run(["sed", "-i", "s/^$//", str(path)], check=True, timeout=30)


ROTATIONS: dict[str, Callable[[Path], None]] = {
    "copytruncate": copytruncate,
    "rename-and-create": rename_and_create,
    "delete-and-restore": delete_and_restore,
    "sed-i": sed_in_place,
}


def rotate_while_writing(log: Path, rotate: Callable[[Path], None], writer: Writer) -> None:
    time.sleep(0.3)
    with writer.paused():
        rotate(log)
    time.sleep(0.3)
    with writer.paused():
        writer.append(STOP)  # the last line: once it is read, everything before it was


@pytest.mark.parametrize("how", list(ROTATIONS))
async def test_live_follower_keeps_state_and_restarts(tmp_path: Path, how: str) -> None:
    log = tmp_path / "server.log"
    shutil.copyfile(STORY_LOG, log)
    tracker, raw = StartupTracker(), RawLines()
    follower = LogFollower(str(log), poll_interval_s=0.02)
    states: set[tuple[str, int]] = set()

    async def follow() -> None:
        async for line in follower.lines():
            fold_lines([line], tracker, raw)
            states.add((tracker.current.state, tracker.current.restarts))
            if line == STOP:
                return

    with Writer(log) as writer:
        task = asyncio.create_task(follow())
        await asyncio.to_thread(rotate_while_writing, log, ROTATIONS[how], writer)
        try:
            await asyncio.wait_for(task, 30)
        finally:
            follower.close()
    # Ready all along, then the stop line; never a second start.
    assert states <= {("starting", 0), ("ready", 0), ("stopped", 0)}, states
    assert tracker.current.state == "stopped" and tracker.current.restarts == 0
    assert tracker.current.ready_at is not None


@pytest.mark.parametrize("how", list(ROTATIONS))
def test_exporter_keeps_state_and_restarts(tmp_path: Path, how: str) -> None:
    log = tmp_path / "server.log"
    shutil.copyfile(STORY_LOG, log)
    seen: list[tuple[float, float]] = []

    def stopped(found: dict[et.Key, float]) -> bool:
        restarts = et.of(found, ff.RESTARTS)
        ready = et.of(found, ff.STARTUP_STATE, state="ready")
        if restarts and ready:
            seen.append((next(iter(ready.values())), next(iter(restarts.values()))))
        return et.of(found, ff.STARTUP_STATE, state="stopped") == {
            frozenset({("state", "stopped")}): 1.0
        }

    with et.exporter("--log-file", str(log), "--no-gpus", "--no-metrics") as running:
        running.scrape_until(
            "ready",
            lambda f: (
                et.of(f, ff.STARTUP_STATE, state="ready") != {}
                and any(v == 1.0 for v in et.of(f, ff.STARTUP_STATE, state="ready").values())
            ),
        )
        with Writer(log) as writer:
            rotate = threading.Thread(
                target=rotate_while_writing, args=(log, ROTATIONS[how], writer)
            )
            rotate.start()
            _, found = running.scrape_until("the stop line", stopped, timeout_s=40)
            rotate.join(10)
        running.stop()
    assert et.one(found, ff.RESTARTS) == 0
    assert all(restarts == 0 for _, restarts in seen), seen


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return offline("--once", *args)


def test_a_log_that_begins_mid_run_is_ready(tmp_path: Path) -> None:
    log = tmp_path / "mid-run.log"
    log.write_text("".join(BATCH.format(sec=i, tokens=40_000 + i) for i in range(20)))
    data = json.loads(kvtop("--json", "--log-file", str(log)).stdout)["startup"]
    assert data["state"] == "ready"
    assert data["startup_in_log"] is False
    assert data["note"] == "the startup is not in this log"
    assert data["phase_in_progress"] is None
    check = kvtop("--check", "--log-file", str(log))
    assert "startup still in progress" not in check.stdout + check.stderr
    text = kvtop("--log-file", str(log)).stdout
    assert "ready (the startup is not in this log)" in " ".join(text.split())
