"""systemd's own lines about the unit, read from real journal files (systemd-journal-remote):
PID 1's `UNIT=` entries, which `journalctl -u UNIT` shows beside the server's output. An
OOM-killed server is failed (`oom_kill`, host RAM, not GPU memory), systemd's restart counter
counts, and a `systemctl stop` is a stop; in `--once`, through the journal reader on both
back-ends, and while following.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.journal import JournalSource
from kvtop.sources.log_reader import LogReader
from kvtop.sources.pacing import Pacer
from tests.support.journal_tools import (
    invocation,
    journal_remote_missing,
    sglang_entries,
    systemd_entry,
    write_journal,
)
from tests.support.offline import offline
from tests.support.paths import STORY_LOG

pytestmark = pytest.mark.skipif(
    journal_remote_missing() is not None, reason=str(journal_remote_missing())
)

UNIT = "sglang-kimi.service"
START_US = 1_772_183_000_000_000
STORY = STORY_LOG.read_text().splitlines()
RUN1_END = [
    f"{UNIT}: Main process exited, code=killed, status=9/KILL",
    f"{UNIT}: Failed with result 'signal'.",
    f"{UNIT}: Scheduled restart job, restart counter is at 3.",
    "Stopped SGLang Kimi-K2.5.",
]
OOM = [
    "[2026-02-27 09:09:30] Subprocess scheduler_3 (pid=41822) crashed with exit code -9. "
    "Triggering SIGQUIT for cleanup...",
]
OOM_UNIT = [
    f"{UNIT}: A process of this unit has been killed by the OOM killer.",
    f"{UNIT}: Main process exited, code=killed, status=9/KILL",
    f"{UNIT}: Failed with result 'oom-kill'.",
    f"{UNIT}: Consumed 12min 3.221s CPU time, 250.3G memory peak.",
]


def pid1(lines: list[str], inv: int, at_us: int) -> list[dict[str, str | bytes | int]]:
    return [systemd_entry(UNIT, invocation(inv), text, at_us + i) for i, text in enumerate(lines)]


def two_runs(directory: Path, *, oom: bool = True) -> Path:
    """Run 1 dies while loading (SIGKILL); systemd restarts it (counter 3); run 2 is ready,
    then the host's OOM killer ends it."""
    t2 = START_US + 60_000_000
    entries = [
        *sglang_entries(UNIT, invocation(1), STORY[:40], START_US),
        *pid1(RUN1_END, 1, START_US + 1_000_000),
        *pid1(["Starting SGLang Kimi-K2.5...", "Started SGLang Kimi-K2.5."], 2, t2 - 1000),
        *sglang_entries(UNIT, invocation(2), STORY, t2),
    ]
    if oom:
        later = t2 + 10_000_000
        entries += sglang_entries(UNIT, invocation(2), OOM, later)
        entries += pid1(OOM_UNIT, 2, later + 100_000)
    write_journal(directory, entries)
    return directory


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return offline("--once", *args)


def test_oom_killed_unit_is_failed_with_host_memory_words(tmp_path: Path) -> None:
    directory = two_runs(tmp_path / "journal")
    result = kvtop("--json", "--unit", "sglang-kimi", "--journal-dir", str(directory))
    assert result.returncode == 0, result.stderr
    startup = json.loads(result.stdout)["startup"]
    assert startup["state"] == "failed"
    assert startup["failure_kind"] == "oom_kill"
    assert startup["failed_phase"] == "serving"
    assert "OOM killer" in startup["failure"]
    assert "host memory, not GPU memory" in startup["failure"]
    assert "memory peak 250.3G" in startup["failure"]
    assert startup["unit_result"] == "oom-kill"
    # systemd's counter says 3 automatic restarts; the journal window shows one earlier run.
    assert startup["restarts"] == 3
    text = kvtop("--unit", "sglang-kimi", "--journal-dir", str(directory)).stdout
    assert "OOM killer" in " ".join(text.split())
    # The verdict pages on it, saying it was host RAM.
    verdict = json.loads(result.stdout)["verdict"]
    assert (verdict["level"], [a["name"] for a in verdict["alerts"]]) == (
        "critical",
        ["startup_failed"],
    )
    check = offline("--check", "--unit", "sglang-kimi", "--journal-dir", str(directory))
    assert check.returncode == 2, check.stdout + check.stderr
    assert check.stdout.startswith(
        "KVTOP CRITICAL - crashed while serving (killed by the host's OOM killer (host RAM, not "
        "GPU memory))"
    ), check.stdout


def test_systemctl_stop_is_a_stop(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    two_runs(directory, oom=False)
    at = START_US + 200_000_000
    stop = [
        "Stopping SGLang Kimi-K2.5...",
        f"{UNIT}: Deactivated successfully.",
        "Stopped SGLang Kimi-K2.5.",
    ]
    write_journal(directory, pid1(stop, 2, at))
    result = kvtop("--json", "--unit", "sglang-kimi", "--journal-dir", str(directory))
    startup = json.loads(result.stdout)["startup"]
    assert startup["state"] == "stopped"
    assert startup["failure"] is None
    assert startup["stopped_by"] == "Stopping SGLang Kimi-K2.5..."


@pytest.mark.parametrize("backend", ["python", "journalctl"])
async def test_the_reader_reads_pid1_lines_and_the_counter(tmp_path: Path, backend: str) -> None:
    directory = two_runs(tmp_path / "journal")
    source = JournalSource("sglang-kimi", directory=str(directory), backend=backend)
    latest = [line async for line in source.read_latest()]
    assert source.backend_used == backend
    assert {line.invocation_id for line in latest} == {invocation(2)}
    unit_lines = [line.text for line in latest if line.systemd]
    assert unit_lines == ["Starting SGLang Kimi-K2.5...", "Started SGLang Kimi-K2.5.", *OOM_UNIT]
    assert source.restart_counter == 3
    earlier = await source.read_earlier(latest[0])
    assert [line.text for line in earlier[0] if line.systemd] == RUN1_END


@pytest.mark.parametrize("backend", ["python", "journalctl"])
async def test_following_an_oom_kill(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live reader follows run 2 (ready); the OOM killer's lines arrive: failed."""
    import kvtop.sources.journal as journal

    original = journal.JournalSource.__init__

    def with_backend(self: JournalSource, *args: object, **kwargs: object) -> None:
        kwargs["backend"] = backend
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    # The reader builds its own JournalSource: the back-end under test is handed to it here.
    monkeypatch.setattr(journal.JournalSource, "__init__", with_backend)
    directory = two_runs(tmp_path / "journal", oom=False)
    tracker = StartupTracker()
    reader = LogReader(tracker, RawLines(), unit="sglang-kimi", journal_dir=str(directory))
    pacer = Pacer()
    pacer.interval_s = 0.05
    follow = asyncio.create_task(reader.follow(pacer.lane("log")))

    async def until(what: str, check: object) -> None:
        for _ in range(400):
            pacer.tick()
            await pacer.settled(1.0)
            if check():  # type: ignore[operator]
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"never {what}: {tracker.current.state}, {tracker.current.failure}")

    try:
        await until("ready", lambda: tracker.current.state == "ready")
        assert tracker.current.restarts == 3  # systemd's counter, read before the run
        later = START_US + 70_000_000
        entries = sglang_entries(UNIT, invocation(2), OOM, later) + pid1(OOM_UNIT, 2, later + 1)
        await asyncio.to_thread(write_journal, directory, entries, "later")
        await until(
            "oom_kill",
            lambda: (
                tracker.current.failure is not None
                and tracker.current.failure.kind == "oom_kill"
                and "250.3G" in (tracker.current.failure.cause or "")
            ),
        )
    finally:
        if reader.journal is not None:
            reader.journal.close()
        pacer.tick()
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    startup = tracker.current
    assert startup.state == "failed" and startup.failed_phase == "serving"
    assert startup.restarts == 3
