"""The live feed's first frame: the GPUs as soon as NVML answers, before the log is read whole
or the first scrape is back, unjudged; the judged frame follows when the round is done.

Runs the session in a fresh interpreter on the fake libnvidia-ml.so.1 (the dynamic loader reads
LD_LIBRARY_PATH only at start-up, and pynvml keeps its library in module globals), against a
real loopback server whose /metrics answers late."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import FakeSGLang

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    gcc_path() is None, reason="gcc not found: cannot build the fake libnvidia-ml.so.1"
)

SCENARIO = """
import asyncio, json, sys
import kvtop.session
from kvtop.model.verdict import UNJUDGED
from kvtop.session import Options, Session

# A loaded machine must not turn NVML's answer into a missed first frame: the wait is long here
# (and /metrics later still), so what the test sees depends on order alone.
kvtop.session.FIRST_READING_WAIT_S = 3.0

async def main():
    session = Session(Options(log_file=sys.argv[1], url=sys.argv[2], interval_s=1.0))
    session.gpus_first = sys.argv[3] == "gpus-first"
    stream = session.snapshots()
    frames = []
    try:
        async for snapshot in stream:
            frames.append({
                "gpus": len(snapshot.gpus),
                "judged": snapshot.verdict is not UNJUDGED,
                "timeline": len(snapshot.timeline),
                "sources": {s.name: [s.state, s.cause] for s in snapshot.sources},
            })
            if len(frames) == 2:
                break
    finally:
        await stream.aclose()
    print(json.dumps(frames))

asyncio.run(main())
"""


def _two_frames(lib_dir: Path, tmp_path: Path, mode: str) -> list[dict[str, object]]:
    state = write_state(tmp_path / "state", gpus=eight_gpus())
    env = dict(os.environ, PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=str(lib_dir))
    env[STATE_ENV] = str(state)
    with FakeSGLang() as server:
        # Later than the first frame's whole wait: the second frame is judged without it.
        server.switches.delay_by_path["/metrics"] = 4.0
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SCENARIO), str(STORY_LOG), server.url, mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    frames: list[dict[str, object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return frames


def test_the_gpus_come_first_and_the_judged_frame_follows(lib_dir: Path, tmp_path: Path) -> None:
    first, second = _two_frames(lib_dir, tmp_path, "gpus-first")
    assert first["gpus"] == 8
    assert first["judged"] is False and first["timeline"] == 0
    assert first["sources"]["metrics"] == ["degraded", "not_yet"]  # the scrape is on its way
    assert first["sources"]["nvml"][0] == "ok"
    assert second["gpus"] == 8 and second["judged"] is True
    assert second["sources"]["log"][0] == "ok"  # read whole by the second frame


def test_without_a_screen_every_snapshot_is_judged(lib_dir: Path, tmp_path: Path) -> None:
    """The exporter's feed: a scrape never sees a verdict about readings not yet taken."""
    first, _ = _two_frames(lib_dir, tmp_path, "judged")
    assert first["judged"] is True and first["gpus"] == 8
