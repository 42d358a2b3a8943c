"""--safe-margin through the real commands: `kvtop --once` and `kvtop plan` judge the story's
log (7.40 GiB free after startup) by the margin given, and a margin out of range is one
sentence and the usage status."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import STORY_LOG


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _once(*extra: str) -> dict[str, object]:
    done = kvtop(
        "--once", "--json", "--log-file", str(STORY_LOG), "--no-gpus", "--no-metrics", *extra
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _headroom(doc: dict[str, object]) -> list[str]:
    verdict = doc["verdict"]
    assert isinstance(verdict, dict)
    return [a["summary"] for a in verdict["alerts"] if a["name"] == "headroom"]


def test_once_takes_the_margin_from_the_flag() -> None:
    assert _headroom(_once()) == []
    (said,) = _headroom(_once("--safe-margin", "8"))
    assert "7.40 GiB free after startup, under the 8 GiB safe margin" in said


def test_plan_takes_the_margin_from_the_flag() -> None:
    quiet = json.loads(kvtop("plan", "--from-log", str(STORY_LOG), "--json").stdout)
    assert (quiet["verdict"]["kind"], quiet["safe_headroom_gib"]) == ("pool_under_context", 5.0)
    done = kvtop("plan", "--from-log", str(STORY_LOG), "--json", "--safe-margin", "8")
    assert done.returncode == 4, done.stderr  # oom_risk
    doc = json.loads(done.stdout)
    assert (doc["verdict"]["kind"], doc["safe_headroom_gib"]) == ("oom_risk", 8.0)


@pytest.mark.parametrize("command", [["--once", "--demo"], ["plan", "--from-log", str(STORY_LOG)]])
@pytest.mark.parametrize("value", ["-1", "nan", "2000"])
def test_a_margin_out_of_range_is_one_sentence(command: list[str], value: str) -> None:
    done = kvtop(*command, "--safe-margin", value)
    assert done.returncode == 2
    assert "--safe-margin takes free GiB per GPU from 0 to 1024" in done.stderr
    assert "Traceback" not in done.stderr
