"""The lifecycle: a stopped server (SIGTERM, Ctrl-C, uvicorn's shutdown, the process
group killed), the phase in progress while starting, and earlier runs of a systemd unit counted
as restarts in `--once` too, a crash loop called one.

Real excerpts (tests/fixtures/sglang-logs/40-43, their sidecars say what a careful reader takes
from them) and lines in the exact formats of SGLang's and uvicorn's source for each version
(their shutdown handlers), appended to the story log (a real-format 0.5.8 startup, ready at
09:06:31). The journal tests write real journal files with systemd-journal-remote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.alert_rule import evaluate
from kvtop.model.status.levels import Level
from kvtop.model.status.server_status import header_state, server_status
from kvtop.report.json_report import to_json
from kvtop.report.text import render_snapshot
from kvtop.sglang.lifecycle import crash_loop, phase_in_progress
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from kvtop.sources.journal import JournalSource
from tests.support.journal_tools import (
    invocation,
    journal_remote_missing,
    sglang_entries,
    write_journal,
)
from tests.support.paths import REAL_LOGS, ROOT, STORY_LOG
from tests.support.tui_support import analysis_snapshot

STORY = STORY_LOG.read_text().splitlines()
READY_LINE = next(i for i, line in enumerate(STORY) if "fired up and ready" in line)
LIFECYCLE_LOGS = sorted(REAL_LOGS.glob("4[0-9]-*.log"))


def fold(lines: list[str]) -> StartupTracker:
    return fold_lines(lines)


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "--no-gpus", "--no-metrics", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def _plain(analysis: object) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=300, highlight=False, soft_wrap=False).print(
        render_snapshot(analysis_snapshot(analysis))
    )  # type: ignore[arg-type]
    return out.getvalue()


# -- real excerpts -------------------------------------------------------------------------------
@pytest.mark.parametrize("log", LIFECYCLE_LOGS, ids=[p.stem[:2] for p in LIFECYCLE_LOGS])
def test_real_shutdown_excerpts(log: Path) -> None:
    expected = json.loads(log.with_suffix(".json").read_text())["lifecycle"]
    startup = fold(log.read_text().splitlines()).current
    assert startup.state == expected["state"]
    stopped_at = startup.stopped_at.isoformat(sep=" ") if startup.stopped_at else None
    assert stopped_at == expected["stopped_at"]
    assert startup.stop_how == expected["stop_how"]
    assert startup.drain_remaining == expected["drain_remaining"]
    assert startup.shutdown_finished == expected["shutdown_finished"]
    assert phase_in_progress(startup) is expected["phase_in_progress"]
    assert startup.restarts == expected["restarts"]
    assert startup.failure is expected["failure"]


def test_sigterm_excerpt_through_the_cli() -> None:
    """40: SIGTERM after serving, via `kvtop --once --json` and the text report."""
    log = REAL_LOGS / "40-sigterm-drain-hybrid-decode.log"
    result = kvtop("--once", "--json", "--log", str(log))
    assert result.returncode == 0, result.stderr
    startup = json.loads(result.stdout)["startup"]
    assert startup["state"] == "stopped"
    assert startup["stopped_at"] == "2026-09-14 20:17:38"
    assert startup["stopped_by"].startswith("SIGTERM received. signum=None frame=None.")
    assert startup["phase_in_progress"] is None
    assert startup["failure"] is None and startup["restarts"] == 0
    text = kvtop("--once", "--log", str(log))
    assert text.returncode == 0, text.stderr
    words = " ".join(text.stdout.split())  # the report wraps its sentences at 80 columns
    assert "stopped 20:17:38 while serving (its ready line is not in this log)" in words


def test_group_kill_is_a_shutdown_not_a_crash() -> None:
    """41: the child's -15 and the SIGQUIT after the SIGTERM line; a failure line of a child the
    shutdown ended (as the failures helper may parse it) is counted, not a failure."""
    lines = [
        *(REAL_LOGS / "41-sigterm-group-kill-child-exit-15.log").read_text().splitlines(),
        "[2026-09-20 15:33:22 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    ]
    startup = fold(lines).current
    assert startup.state == "stopped"
    assert startup.failure is None and startup.failures == []
    # The child's `crashed with exit code -15`, the SIGQUIT line and the added exception line.
    assert startup.after_stop_failures == 3
    assert startup.stopped_at == datetime(2026, 9, 20, 15, 33, 22)


# -- synthetic lines in SGLang's and uvicorn's formats -----------------------------------------
SIGTERM = "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
SHUTDOWNS = {
    # 0.4.6–0.5.2: the drain's line in lower case, then kill_process_tree (exit 137, no line)
    "0.5.2 sigterm": [
        f"[2026-02-27 11:20:35] {SIGTERM}",
        "[2026-02-27 11:20:35] Gracefully exiting... remaining number of requests 0",
    ],
    # 0.5.14–0.5.23: the drain, then kill_process_tree's own line
    "0.5.14 sigterm": [
        f"[2026-02-27 11:20:35] {SIGTERM}",
        "[2026-02-27 11:20:35] Gracefully exiting... Remaining number of requests 0. "
        "Remaining requests remaining_rids=[].",
        "[2026-02-27 11:20:36] kill_process_tree called: parent_pid=4242, include_parent=True, "
        "pid=4242",
    ],
    # 0.5.10+, the whole process group signalled (systemd KillMode=control-group)
    "0.5.10 group": [
        f"[2026-02-27 11:20:35] {SIGTERM}",
        "[2026-02-27 11:20:35] Subprocess scheduler_0 (pid=4300) crashed with exit code -15. "
        "Triggering SIGQUIT for cleanup...",
        "[2026-02-27 11:20:35] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed.",
    ],
    # uvicorn's own shutdown (a SIGINT/SIGTERM reaching uvicorn before SGLang's handler)
    "uvicorn": [
        "[2026-02-27 11:20:35] INFO:     Shutting down",
        "[2026-02-27 11:20:35] INFO:     Waiting for application shutdown.",
        "[2026-02-27 11:20:35] INFO:     Application shutdown complete.",
        "[2026-02-27 11:20:35] INFO:     Finished server process [12345]",
    ],
    # 0.5.23 worker node
    "0.5.23 worker": [
        "[2026-02-27 11:20:35] SIGTERM received on node_rank 1; waiting for the rank-0 "
        "ShutdownReq broadcast to stop the schedulers.",
    ],
    # Ctrl-C: uvicorn's line, then each child's traceback ending in a bare KeyboardInterrupt
    "ctrl-c": [
        "[2026-02-27 11:20:35] INFO:     Shutting down",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        "KeyboardInterrupt",
    ],
}


@pytest.mark.parametrize("name", SHUTDOWNS)
def test_stop_after_ready(name: str) -> None:
    startup = fold([*STORY, *SHUTDOWNS[name]]).current
    assert startup.state == "stopped"
    assert startup.stopped_at == datetime(2026, 2, 27, 11, 20, 35)
    assert startup.failure is None
    status = server_status(startup, datetime(2026, 2, 27, 12, 0))
    assert status.state == "stopped"
    assert status.text == "stopped 11:20:35 after 2h14m ready"  # ready at 09:06:31
    analysis = analyse(fold([*STORY, *SHUTDOWNS[name]]), "story")
    verdict = analysis_snapshot(analysis).verdict  # server_stopped
    header = header_state(status, (), 2.0, verdict)
    assert header.level == Level.CRITICAL
    assert header.text == "✖ stopped 11:20:35 after 2h14m ready · ✖1"
    data = to_json(analysis)
    assert data["startup"]["state"] == "stopped"  # type: ignore[index]
    assert data["startup"]["stopped_at"] == "2026-02-27 11:20:35"  # type: ignore[index]


def test_drain_in_progress_says_stopping() -> None:
    lines = [
        *STORY,
        f"[2026-02-27 11:20:35] {SIGTERM}",
        "[2026-02-27 11:20:35] Gracefully exiting... Remaining number of requests 3. "
        "Remaining requests remaining_rids=['a', 'b', 'c'].",
    ]
    startup = fold(lines).current
    assert startup.state == "stopped" and startup.drain_remaining == 3
    status = server_status(startup, datetime(2026, 2, 27, 11, 21))
    assert status.text == "stopping since 11:20:35 (3 requests to drain)"


def test_a_failed_server_killed_stays_failed() -> None:
    lines = [
        *STORY[:60],
        "[2026-02-27 09:02:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-02-27 09:02:41] INFO:     Shutting down",
        "[2026-02-27 09:02:41] INFO:     Finished server process [12345]",
    ]
    startup = fold(lines).current
    assert startup.state == "failed" and startup.stopped_at is None


def test_start_after_stop_is_a_restart() -> None:
    tracker = fold([*STORY, f"[2026-02-27 11:20:35] {SIGTERM}", *STORY])
    startup = tracker.current
    assert startup.state == "ready" and startup.restarts == 1 and startup.stopped_at is None
    (before,) = startup.earlier
    assert before.state == "stopped" and before.stopped_at == datetime(2026, 2, 27, 11, 20, 35)
    assert crash_loop(startup) is None  # the earlier start was ready: no crash loop


def test_ctrl_c_during_startup() -> None:
    lines = [*STORY[:60], "KeyboardInterrupt"]
    startup = fold(lines).current
    assert startup.state == "stopped" and startup.stop_how == "ctrl-c"
    assert startup.stopped_at == datetime(2026, 2, 27, 9, 2, 14)  # the last dated line
    assert server_status(startup, datetime(2026, 2, 27, 9, 3)).text == (
        "stopped 09:02:14 during startup (load weights)"
    )


# -- the phase in progress ------------------------------------------------------------------------
def _cut_after(text: str, last: bool = True) -> list[str]:
    found = [i for i, line in enumerate(STORY) if text in line]
    return STORY[: (found[-1] if last else found[0]) + 1]


@pytest.mark.parametrize(
    ("cut", "phase", "since"),
    [
        (
            "TP0] Load weight begin. avail mem=93.17",
            "load weights",
            datetime(2026, 2, 27, 9, 2, 14),
        ),
        (
            "TP4] Memory pool end. avail mem=11.20",
            "cuda graph",
            None,
        ),  # since: the last rank's pool end (below)
        ("Uvicorn running on", "warmup", datetime(2026, 2, 27, 9, 6, 27)),
    ],
)
def test_phase_in_progress(cut: str, phase: str, since: datetime | None) -> None:
    startup = fold(_cut_after(cut)).current
    assert startup.state == "starting"
    step = phase_in_progress(startup)
    assert step is not None and step.phase == phase
    if since is None:  # the pool ends at 09:05:50 on the first ranks, 09:05:51 on the last
        since = datetime(2026, 2, 27, 9, 5, 50)
    assert step.since == since


def test_starting_header_names_the_phase_and_since_when() -> None:
    startup = fold(_cut_after("TP0] Load weight begin. avail mem=93.17")).current
    status = server_status(startup, datetime(2026, 2, 27, 9, 5, 19))
    assert status.text == "starting: load weights since 09:02:14 (3m05s)"


def test_phase_in_progress_through_the_cli_and_no_after_startup_words(tmp_path: Path) -> None:
    """Cut after the target's memory pool: JSON phase_in_progress, the report's state line, and
    no figure called "after startup" (the what-if has no free-after-startup figure yet)."""
    log = tmp_path / "starting.log"
    log.write_text("\n".join(_cut_after("TP4] Memory pool end. avail mem=11.20")) + "\n")
    result = kvtop("--once", "--json", "--log", str(log))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["startup"]["state"] == "starting"
    assert data["startup"]["phase_in_progress"] == {
        "phase": "cuda graph",
        "since": "2026-02-27 09:05:50",
    }
    assert all(w["headroom_after_graphs_gib"] is None for w in data["formula"]["what_if"])
    assert not any("after startup" in insight for insight in data["insights"])
    text = kvtop("--once", "--log", str(log))
    assert text.returncode == 0, text.stderr
    assert "starting: cuda graph since 09:05:50" in text.stdout
    assert "after startup" not in text.stdout
    assert "free so far" in text.stdout
    ready = kvtop("--once", "--log", str(STORY_LOG))
    assert "free after startup" in ready.stdout  # once ready, the words come back


# -- alerts and --check -------------------------------------------------------------------------
def test_stopped_is_critical_in_the_alert_rule() -> None:
    analysis = analyse(fold([*STORY, f"[2026-02-27 11:20:35] {SIGTERM}"]), "story")
    snapshot = Snapshot(
        taken_at=0.0,
        analysis=analysis,
        gpus=(),
        rank_mapping="none",
        metrics=None,
        server_info=None,
        host=None,
        sources=(),
    )
    found = evaluate(snapshot)
    stopped = [a for a in found if a.kind == "server_stopped"]
    assert [a.level for a in stopped] == [Level.CRITICAL]
    assert stopped[0].text.startswith("server stopped 11:20:35 after 2h14m ready: SIGTERM")


def test_check_says_server_stopped(tmp_path: Path) -> None:
    log = tmp_path / "stopped.log"
    log.write_text("\n".join([*STORY, f"[2026-02-27 11:20:35] {SIGTERM}"]) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--check", "--no-gpus", "--no-metrics", "--log", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout.startswith("KVTOP CRITICAL - server stopped 11:20:35 after 2h14m ready")


# -- restarts with --unit: earlier invocations of the unit ---------------------------------------
START_US = 1_772_183_000_000_000
UNIT = "sglang-kimi.service"
OOM = (
    "[2026-02-27 09:02:40 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.02 "
    "GiB is free."
)
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def _shifted(lines: list[str], minutes: int) -> list[str]:
    def moved(match: re.Match[str]) -> str:
        when = datetime.fromisoformat(match.group(1)) + timedelta(minutes=minutes)
        return "[" + when.isoformat(sep=" ")

    return [STAMP.sub(moved, line) for line in lines]


FAILING = [*STORY[:60], OOM]  # server_args, init, every rank's `Load weight begin`, an OOM


def _crash_loop_journal(directory: Path) -> Path:
    """Four invocations 10 minutes apart, each failing while loading weights, plus noise."""
    entries = []
    for n in range(4):
        lines = _shifted(FAILING, 10 * n)
        entries += sglang_entries(UNIT, invocation(n + 1), lines, START_US + n * 600 * 10**6)
    entries += sglang_entries("nginx.service", invocation(9), ["GET / 200"] * 20, START_US + 5)
    write_journal(directory, sorted(entries, key=lambda e: int(e["__REALTIME_TIMESTAMP"])))
    return directory


needs_journal = pytest.mark.skipif(
    journal_remote_missing() is not None, reason=str(journal_remote_missing())
)


@needs_journal
def test_once_with_unit_counts_earlier_invocations_as_a_crash_loop(tmp_path: Path) -> None:
    directory = _crash_loop_journal(tmp_path / "journal")
    result = kvtop("--once", "--json", "--unit", "sglang-kimi", "--journal-dir", str(directory))
    assert result.returncode == 0, result.stderr
    startup = json.loads(result.stdout)["startup"]
    assert startup["restarts"] == 3
    assert startup["state"] == "failed"
    assert startup["crash_loop"]["restarts"] == 3
    assert startup["crash_loop"]["phases"] == ["load weights"] * 4
    assert startup["crash_loop"]["text"] == "restarted 3× in 30 min, each failing in load weights"
    text = kvtop("--once", "--unit", "sglang-kimi", "--journal-dir", str(directory))
    assert "restarted 3× in 30 min, each failing in load weights" in text.stdout


@needs_journal
@pytest.mark.parametrize("backend", ["python", "journalctl"])
async def test_read_earlier_groups_the_runs(tmp_path: Path, backend: str) -> None:
    directory = _crash_loop_journal(tmp_path / "journal")
    source = JournalSource("sglang-kimi", directory=str(directory), backend=backend)
    latest = [line async for line in source.read_latest()]
    assert {line.invocation_id for line in latest} == {invocation(4)}
    runs = await source.read_earlier(latest[0])
    assert [{line.invocation_id for line in run} for run in runs] == [
        {invocation(1)},
        {invocation(2)},
        {invocation(3)},
    ]
    assert [line.text for line in runs[0]] == FAILING  # in order, nothing of nginx
    assert source.backend_used == backend


# -- the live header ----------------------------------------------------------------------------
async def test_live_header_turns_stopped_in_the_error_colour(tmp_path: Path) -> None:
    """The real app on the real session following a real log file: the story (ready), then the
    SIGTERM line appended: the header says stopped, drawn in the critical colour."""
    from kvtop.live.app import KvtopApp
    from kvtop.live.widgets.status_line import StatusLine
    from kvtop.session import Options, Session
    from tests.support.tui_support import screen_text, until, utc

    def header(app: KvtopApp) -> str:
        return screen_text(app).splitlines()[0]

    def critical(app: KvtopApp) -> bool:
        line, facts = app.screen.query_one(StatusLine), app.state.status
        if facts is None:
            return False
        text = line.render()
        start = text.plain.find(facts.state)
        wanted = line.component_style("status--critical")
        return any(span.start == start and span.style == wanted for span in text.spans)

    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text())
    with utc():
        session = Session(Options(log_file=str(log), nvml=False, metrics=False, interval_s=0.25))
        noon = datetime(2026, 2, 27, 12, 0).timestamp()
        app = KvtopApp(session, source_label="sglang.log", clock=lambda: noon, host_name="gpu")
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, "the ready header", lambda: "· ready " in header(app))
            with log.open("a") as handle:
                handle.write(f"[2026-02-27 11:20:35] {SIGTERM}\n")
            await until(
                pilot,
                "the stopped header in the critical colour",
                lambda: "✖ stopped 11:20:35 after 2h14m ready" in header(app) and critical(app),
            )


def test_crash_loop_in_one_log_and_what_breaks_it() -> None:
    """Three starts in one log that die while loading weights (the log just stops: killed), then
    a fourth: "ending", not "failing"; a start stopped by its operator is no part of a loop."""
    dying = STORY[:60]
    tracker = fold([*dying, *_shifted(dying, 5), *_shifted(dying, 10), *_shifted(STORY[:60], 15)])
    startup = tracker.current
    assert startup.restarts == 3
    loop = crash_loop(startup)
    assert loop is not None
    assert loop.text == "restarted 3× in 15 min, each ending in load weights"
    later = [*_shifted(dying, 5), *_shifted(dying, 10), *_shifted(dying, 15)]
    stopped = fold([*dying, "KeyboardInterrupt", *later]).current
    assert stopped.restarts == 3
    loop = crash_loop(stopped)
    assert loop is not None  # the two starts after the stopped one, up to the latest
    assert loop.text == "restarted 2× in 10 min, each ending in load weights"
