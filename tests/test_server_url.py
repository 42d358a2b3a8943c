"""`--url`: http or https with a host; credentials, other schemes, queries refused, never echoed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sglang_http import FakeSGLang
from tui.server_url import url_problem

ROOT = Path(__file__).resolve().parent.parent
STORY_LOG = ROOT / "tui" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:30000",
        "http://127.0.0.1:30000/",
        "https://sglang.internal",
        "HTTP://GPU-HOST:30000",
        "http://[::1]:30000",
        "http://[fe80::1%25eth0]:30000",
        "http://10.0.0.5:30000/sglang",  # behind a path-routing proxy
        "http://gpu-host",
    ],
)
def test_accepted(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("ftp://127.0.0.1:30000", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("unix:/run/sglang.sock", "http:// or https://"),
        ("http+unix://%2Frun%2Fsglang.sock/", "http:// or https://"),
        ("ws://127.0.0.1:30000", "http:// or https://"),
        ("127.0.0.1:30000", "http:// or https://"),  # no scheme
        ("localhost:30000", "http:// or https://"),
        ("//127.0.0.1:30000", "http:// or https://"),
        ("http:127.0.0.1:30000", "http:// or https://"),
        ("http:/127.0.0.1:30000", "http:// or https://"),
        ("http://", "no host"),
        ("http://:30000", "no host"),
        ("https:///metrics", "no host"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:http", "port"),
        ("http://127.0.0.1:0", "port"),
        ("http://[::1", "not a valid URL"),
        ("http://127.0.0.1:30000/?x=1", "?query"),
        ("http://127.0.0.1:30000#top", "#fragment"),
        ("http://127.0.0.1:30000?", "?query"),
        ("http://127.0.0.1 :30000", "spaces"),
        ("http://127.0.0.1:30000\n", "control"),
        ("", "spaces"),
    ],
)
def test_refused(url: str, needle: str) -> None:
    problem = url_problem(url)
    assert problem is not None and needle in problem
    assert problem.startswith("--url") and problem.endswith(".")
    assert "\n" not in problem


@pytest.mark.parametrize(
    "url",
    [
        "http://admin:s3cret-Pa55@127.0.0.1:30000",
        "https://admin:s3cret-Pa55@gpu-host",
        "http://s3cret-Pa55@127.0.0.1:30000",  # a token as the user name
        "http://admin:s3cret-Pa55@",
        "ftp://admin:s3cret-Pa55@127.0.0.1",  # credentials win over the scheme: still not echoed
        "http://admin:s3cret-Pa55@[::1",
    ],
)
def test_credentials_refused_and_not_echoed(url: str) -> None:
    problem = url_problem(url)
    assert problem is not None
    assert "s3cret" not in problem and "Pa55" not in problem and "admin" not in problem
    if "[" not in url:
        assert "--api-key-file" in problem


def _kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "tui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "127.0.0.1:30000", "http://user:Pa55word@127.0.0.1:30000", "http://"],
)
def test_the_command_refuses_before_reading_anything(url: str) -> None:
    with FakeSGLang() as server:
        # --url comes last: the refusal must not depend on where it stands; the log is not read.
        result = _kvtop("--once", "--json", "--no-gpus", "--log-file", "/nonexistent", "--url", url)
        assert server.methods == []
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("usage: kvtop")
    assert lines[-1].startswith("kvtop: --url")
    assert "Pa55word" not in result.stderr and "Traceback" not in result.stderr


def test_the_live_view_refuses_too() -> None:
    """Checked before the terminal check: the answer is the URL, not 'needs a terminal'."""
    result = _kvtop("--url", "ftp://127.0.0.1:30000")
    assert result.returncode == 2
    assert "http:// or https://" in result.stderr


def test_a_good_url_is_used(tmp_path: Path) -> None:
    with FakeSGLang() as server:
        result = _kvtop("--once", "--json", "--no-gpus", "--url", server.url + "/")
        assert result.returncode == 0, result.stderr
        assert ("GET", "/metrics") in server.methods
