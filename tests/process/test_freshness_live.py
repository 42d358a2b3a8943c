"""Freshness with real parts: the real app on the real session, following a real log file and
scraping a real loopback server (tests/support/sglang_http.py); `kvtop --once --json` as a
subprocess, with the fake libnvidia-ml behind the real nvidia-ml-py for the GPUs.

A server that stops answering, a followed log that is removed or replaced by a directory: the
header turns from `ready` (green) to `▲ ready 2h00m · metrics down 3s` (warning) and back, the
source's marker shows its age; `sources[].age_s` is null before a first good reading."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvtop.live.app import KvtopApp
from kvtop.live.widgets.status_line import StatusLine
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Level
from kvtop.report.json_report import snapshot_json
from kvtop.session import Options, Session
from kvtop.sources import metrics
from tests.support.fake_nvml.build import STATE_ENV, eight_gpus, write_state
from tests.support.paths import ROOT, STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang
from tests.support.tui_support import screen_text, until

pytestmark = pytest.mark.usefixtures("utc_zone")

# The story log's server got ready at 09:06:31 (local time, pinned to UTC here): the app's
# clock two hours later says "ready 2h00m".
READY_AT = datetime(2026, 2, 27, 9, 6, 31, tzinfo=timezone.utc).timestamp()
INTERVAL_S = 0.25  # stale after 0.75 s

# The story log's server: the same version, so the sources agree (no mismatch in the header).
STORY_SERVER = Deployment(version="0.5.8")


def _app(session: Session) -> KvtopApp:
    return KvtopApp(
        session, source_label="sglang.log", clock=lambda: READY_AT + 7200, host_name="gpu-host"
    )


def _header(app: KvtopApp) -> str:
    return screen_text(app).splitlines()[0]


def _state_style(app: KvtopApp) -> str | None:
    """The component class the status line draws the state with (its colour)."""
    line = app.screen.query_one(StatusLine)
    facts = app.state.status
    if facts is None:
        return None
    text = line.render()
    start = text.plain.find(facts.state)
    for span in text.spans:
        if span.start == start:
            for name in ("status--ready", "status--warning", "status--critical"):
                if span.style == line.component_style(name):
                    return name
    return None


async def test_a_server_that_stops_answering_turns_ready_into_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hung fetch is cut at 2 s instead of kvtop's 5 s: still long after the header has
    # gone stale (three refreshes, 0.75 s), the warning this test is about, and the recovery
    # that follows the cut is the same.
    monkeypatch.setattr(metrics, "FETCH_TIMEOUT_S", 2.0)
    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text())
    with FakeSGLang(STORY_SERVER) as server:
        session = Session(
            Options(log_file=str(log), url=server.url, nvml=False, interval_s=INTERVAL_S)
        )
        app = _app(session)
        async with app.run_test(size=(200, 40)) as pilot:
            await until(
                pilot,
                "a green ready header with metrics answering",
                lambda: (
                    re.search(r"· ready 2h00m · .*●metrics ?$", _header(app)) is not None
                    and _state_style(app) == "status--ready"
                ),
            )
            server.switches.delay_s = 30.0  # hangs: no answer until the test ends
            await until(
                pilot,
                "metrics down in the header, its age beside the marker",
                lambda: (
                    re.search(r"▲ ready 2h00m · metrics down \d+s · ", _header(app)) is not None
                    and re.search(r"◐metrics \d+s", _header(app)) is not None
                    and _state_style(app) == "status--warning"
                ),
            )
            assert app.state.status is not None and app.state.status.level == Level.WARNING
            server.switches.delay_s = 0.0  # answers again (after the hung fetch times out)
            await until(
                pilot,
                "the header green again",
                lambda: (
                    "metrics down" not in _header(app)
                    and re.search(r"●metrics ?$", _header(app)) is not None
                    and _state_style(app) == "status--ready"
                ),
                timeout_s=20.0,
            )
            assert app.state.status is not None and app.state.status.level == Level.OK


async def test_a_followed_log_that_is_removed_goes_stale_and_recovers(tmp_path: Path) -> None:
    """Without /metrics the log is what says the server is ready: while kvtop reads it, the
    header stays green however quiet it is; removed, it ages."""
    log = tmp_path / "sglang.log"
    story = STORY_LOG.read_text()
    log.write_text(story)
    session = Session(Options(log_file=str(log), nvml=False, metrics=False, interval_s=INTERVAL_S))
    app = _app(session)
    async with app.run_test(size=(200, 40)) as pilot:
        await until(
            pilot,
            "a green ready header",
            lambda: (
                re.search(r"· ready 2h00m · .*●log ○NVML ?$", _header(app)) is not None
                and _state_style(app) == "status--ready"
            ),
        )
        log.unlink()
        await until(
            pilot,
            "the log stale in the header, its age beside the marker",
            lambda: (
                re.search(r"▲ ready 2h00m · log stale \d+s · ", _header(app)) is not None
                and re.search(r"◐log \d+s", _header(app)) is not None
                and _state_style(app) == "status--warning"
            ),
        )
        log.write_text(story)  # back (read anew: the same server's start, as a restart)
        await until(
            pilot,
            "the header green again",
            lambda: (
                "stale" not in _header(app)
                and re.search(r"●log ○NVML ?$", _header(app)) is not None
                and _state_style(app) == "status--ready"
            ),
        )


async def _until_snapshot(stream, what: str, predicate, timeout_s: float = 10.0) -> Snapshot:  # type: ignore[no-untyped-def]
    async def find() -> Snapshot:
        async for snapshot in stream:
            if predicate(snapshot):
                return snapshot
        raise AssertionError("the stream ended")

    try:
        return await asyncio.wait_for(find(), timeout_s)
    except asyncio.TimeoutError:
        raise AssertionError(f"no {what} within {timeout_s:g} s") from None


def _source(snapshot: Snapshot, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in snapshot.sources if s.name == name)


async def test_a_log_replaced_by_a_directory_ages_and_the_json_says_so(tmp_path: Path) -> None:
    """A followed file that cannot be read any more (a directory took its place; permissions
    cannot be taken from root, who runs the tests): its age grows, its state says why."""
    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text())
    session = Session(Options(log_file=str(log), nvml=False, metrics=False, interval_s=INTERVAL_S))
    stream = session.snapshots()
    try:
        first = await _until_snapshot(
            stream, "a read log", lambda s: s.analysis.startup.state == "ready"
        )
        assert _source(first, "log").age_s is not None and _source(first, "log").age_s < 0.75
        assert _source(first, "nvml").age_s is None  # --no-gpus: never a reading
        log.unlink()
        log.mkdir()
        stale = await _until_snapshot(
            stream,
            "the log aging behind a directory",
            lambda s: (
                "is a directory" in (_source(s, "log").detail or "")
                and (_source(s, "log").age_s or 0.0) > 3 * INTERVAL_S
            ),
        )
        assert _source(stale, "log").state == "degraded"
        ages = {s["name"]: s["age_s"] for s in snapshot_json(stale)["sources"]}  # type: ignore[union-attr]
        assert isinstance(ages["log"], float) and ages["log"] > 3 * INTERVAL_S
        assert ages["nvml"] is None
    finally:
        await stream.aclose()


# -- kvtop --once --json: null before a first good reading, a number after ---------------------
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _once_json(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def _ages(data: dict[str, object]) -> dict[str, object]:
    return {s["name"]: s["age_s"] for s in data["sources"]}  # type: ignore[union-attr,index]


def test_once_json_ages_null_before_a_reading_and_a_number_after() -> None:
    nobody = f"http://127.0.0.1:{_closed_port()}"
    ages = _ages(_once_json("--no-gpus", "--log-file", str(STORY_LOG), "--url", nobody))
    assert ages["metrics"] is None and ages["nvml"] is None  # nothing answered, nothing off
    assert isinstance(ages["log"], float) and 0.0 <= ages["log"] < 60
    with FakeSGLang(STORY_SERVER) as server:
        ages = _ages(_once_json("--no-gpus", "--log-file", str(STORY_LOG), "--url", server.url))
    assert isinstance(ages["metrics"], float) and 0.0 <= ages["metrics"] < 60
    assert ages["metrics"] == round(ages["metrics"], 1)  # tenths of a second


def test_once_json_nvml_age_needs_a_gpu_that_answers(lib_dir: Path, tmp_path: Path) -> None:
    state = write_state(tmp_path / "nvml.state", gpus=eight_gpus())
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), **{STATE_ENV: str(state)})
    ages = _ages(_once_json("--no-metrics", "--log-file", str(STORY_LOG), env=env))
    assert isinstance(ages["nvml"], float) and 0.0 <= ages["nvml"] < 60
    # Every GPU fallen off the bus (NVML_ERROR_GPU_IS_LOST): NVML answered, no GPU did.
    write_state(state, gpus=eight_gpus(), errors=[("nvmlDeviceGetMemoryInfo_v2", None, 15)])
    data = _once_json("--no-metrics", "--log-file", str(STORY_LOG), env=env)
    assert {g["status"] for g in data["gpus"]} == {"lost"}  # type: ignore[union-attr,index]
    assert _ages(data)["nvml"] is None
