"""`--url`: http or https with a host; credentials, other schemes, queries refused, never echoed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.model.server_target import FROM_DEFAULT, FROM_FLAG, FROM_LOG, ServerTarget
from kvtop.report.json_report import snapshot_json
from kvtop.server_url import is_loopback, url_problem
from kvtop.session import Options, Session
from tests.support.sglang_http import Deployment, FakeSGLang

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"


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


def _kvtop(*args: str, api_key: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real command; SGLANG_API_KEY is API_KEY when given, else unset."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_API_KEY"}
    if api_key is not None:
        env["SGLANG_API_KEY"] = api_key
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
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


# -- the API key goes only where the user sent it ------------------------------------------------
API_KEY = "sk-kvtop-url-test-5e1f0c9a"


def _log_naming(tmp_path: Path, host: str, port: int) -> Path:
    """The story log with its server_args naming HOST:PORT."""
    text = STORY_LOG.read_text()
    assert text.count("host='0.0.0.0', port=30000") == 1
    log = tmp_path / "sglang.log"
    log.write_text(text.replace("host='0.0.0.0', port=30000", f"host='{host}', port={port}"))
    return log


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:30000",
        "http://127.0.0.2:30000",
        "http://127.255.255.254",
        "http://[::1]:30000",
        "http://localhost:30000",
        "http://LOCALHOST.:30000",
    ],
)
def test_loopback(url: str) -> None:
    assert is_loopback(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://192.0.2.1:30000",
        "http://10.0.0.5:30000",
        "http://0.0.0.0:30000",  # kvtop maps it to 127.0.0.1 itself; as a URL it is not loopback
        "http://gpu-host:30000",
        "http://127.0.0.1.attacker.example:30000",
        "http://localhost.attacker.example:30000",
        "http://127.1:30000",  # inet_aton would say loopback; not an address written out
        "http://[fe80::1%25eth0]:30000",
        "http://[::1",
        "not a url",
    ],
)
def test_not_loopback(url: str) -> None:
    assert not is_loopback(url)


@pytest.mark.parametrize(
    ("source", "loopback", "key_sent"),
    [
        (FROM_FLAG, False, True),  # the user named it
        (FROM_FLAG, True, True),
        (FROM_DEFAULT, True, True),
        (FROM_LOG, True, True),
        (FROM_LOG, False, False),  # the log's say alone: no key
    ],
)
def test_key_decision(source: str, loopback: bool, key_sent: bool) -> None:
    target = ServerTarget("http://h:1", source, loopback, key_given=True, contacted=True)
    assert target.api_key_sent is key_sent
    assert target.key_withheld is not key_sent
    assert ("API key is not sent" in target.sentence()) is not key_sent
    no_key = ServerTarget("http://h:1", source, loopback, key_given=False, contacted=True)
    assert not no_key.api_key_sent and not no_key.key_withheld
    assert "no API key given" in no_key.sentence()


def test_a_log_naming_another_host_gets_no_key(tmp_path: Path) -> None:
    """The live session's plan for a log whose server_args names a host that is not loopback:
    the metrics source is built without the key, and the snapshot says so. Nothing is fetched
    (the only addresses a test may reach are loopback), so the plan is checked, not traffic:
    the source is the one every scrape uses."""
    log = _log_naming(tmp_path, "192.0.2.1", 30000)  # TEST-NET-1: documentation only
    session = Session(Options(log_file=str(log), api_key=API_KEY, nvml=False))
    session._read_whole_log()
    target = session.server_target()
    assert (target.url, target.url_source, target.loopback) == (
        "http://192.0.2.1:30000",
        FROM_LOG,
        False,
    )
    source = session._metrics()
    assert source.url == "http://192.0.2.1:30000"
    assert "api_key=none" in repr(source)
    snapshot = session.snapshot()
    assert snapshot.server == target
    note = next(n for n in snapshot.notes if "API key" in n)
    assert "not loopback" in note and "--url" in note
    data = snapshot_json(snapshot)
    assert data["server"] == {
        "url": "http://192.0.2.1:30000",
        "url_source": "log server_args",
        "loopback": False,
        "contacted": True,
        "api_key_sent": False,
    }
    # --url naming the same host is the user's say: the key goes with it.
    named = Session(Options(log_file=str(log), url=target.url, api_key=API_KEY, nvml=False))
    named._read_whole_log()
    assert "api_key=set" in repr(named._metrics())
    assert named.server_target().url_source == FROM_FLAG


def test_once_report_for_a_log_naming_another_host(tmp_path: Path) -> None:
    """`--once --no-metrics`: nothing is contacted; the report names the URL the log gave, why,
    and that the key would not be sent there."""
    log = _log_naming(tmp_path, "192.0.2.1", 30000)
    key_file = tmp_path / "key"
    key_file.write_text(API_KEY + "\n")
    args = ("--once", "--no-gpus", "--no-metrics", "--log-file", str(log))
    args += ("--api-key-file", str(key_file))
    text = _kvtop(*args)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert (
        "server: http://192.0.2.1:30000 (from the log's server_args), not contacted "
        "(--no-metrics); the API key would not be sent to http://192.0.2.1:30000: that address "
        "comes from the log's server_args and is not loopback."
    ) in flat
    data = json.loads(_kvtop(*args, "--json").stdout)
    assert data["server"] == {
        "url": "http://192.0.2.1:30000",
        "url_source": "log server_args",
        "loopback": False,
        "contacted": False,
        "api_key_sent": False,
    }
    assert API_KEY not in text.stdout + text.stderr


@pytest.mark.parametrize("where", ["log", "--url", "config", "default"])
def test_the_key_reaches_a_loopback_server(tmp_path: Path, where: str) -> None:
    """End to end on loopback: a log naming 127.0.0.1 (the story's 0.0.0.0 is read as
    127.0.0.1 too), or --url, or the config file's url, or (with no port in the log) SGLang's
    default: the key goes to /server_info, and the report says which URL and why."""
    with FakeSGLang(Deployment(version="0.5.8.post1")) as server:
        server.switches.api_key = API_KEY
        port = int(server.url.rsplit(":", 1)[1])
        log = _log_naming(tmp_path, "127.0.0.1", port)
        args = ["--once", "--json", "--no-gpus", "--log-file", str(log)]
        if where == "--url":
            args += ["--url", server.url]
        elif where == "config":
            config = tmp_path / "config.toml"
            config.write_text(f'url = "{server.url}"\n')
            args += ["--config", str(config)]
        elif where == "default":  # nothing may be contacted: 30000 is not the test's server
            log.write_text(log.read_text().replace(f"port={port}", "port=None"))
            args.append("--no-metrics")
        done = _kvtop(*args, api_key=API_KEY)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        if where == "default":
            assert data["server"] == {
                "url": "http://127.0.0.1:30000",
                "url_source": "default loopback",
                "loopback": True,
                "contacted": False,
                "api_key_sent": False,
            }
            assert server.requests == []
            return
        sources = {"--url": "--url", "config": "config.toml", "log": "log server_args"}
        assert data["server"] == {
            "url": server.url,
            "url_source": sources[where],
            "loopback": True,
            "contacted": True,
            "api_key_sent": True,
        }
        # The server says its version (within the log's 0.5.3–0.5.8): one version string, as
        # the server says it, in every view.
        assert data["sglang_version"]["shown"] == "0.5.8.post1"
        text = _kvtop(*[a for a in args if a != "--json"], api_key=API_KEY).stdout
        assert "SGLang 0.5.8.post1 · ready" in text and "0.5.3–0.5.8 ·" not in text
        sent = [h.get("authorization") for path, h in server.requests if path == "/server_info"]
        assert sent and all(h == f"Bearer {API_KEY}" for h in sent)
        assert not any("authorization" in h for path, h in server.requests if path == "/metrics")
        assert API_KEY not in done.stdout + done.stderr
