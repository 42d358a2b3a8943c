"""`kvtop --check` run as a monitoring system runs it: the installed `kvtop` command in a
subprocess, its one line on stdout and its exit status, against real parts (log fixtures, a
loopback SGLang server, the fake libnvidia-ml through the real nvidia-ml-py)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_nvml.build import (
    STATE_ENV,
    eight_gpus,
    gcc_path,
    write_state,
)
from tests.support.logs import log_dated_now
from tests.support.paths import REAL_LOGS, ROOT, STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang

KVTOP = Path(sys.executable).with_name("kvtop")
FAILED_LOG = REAL_LOGS / "17-inferencex2128-dsv4-pro-h200-tp8-mfs-valueerror.log"
POOL = 159_277  # the fake server's max_total_num_tokens
# The plugin line: `KVTOP STATE - words` then, when known, ` | ` and performance data.
LINE = re.compile(r"^KVTOP (OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+( \| [^\n]+)?\n$")
PERF_ITEM = re.compile(r"^[a-z0-9_]+=-?[0-9.]+(%|GB)?;[0-9.:]*;[0-9.]*;[0-9.]*;[0-9.]*$")
EXIT = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}


def check(
    *args: str | os.PathLike[str], config_home: Path, env: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    """(exit status, the status line's words, performance data by label)."""
    assert KVTOP.exists(), f"no kvtop console script next to {sys.executable}"
    environment = {**os.environ, **(env or {}), "XDG_CONFIG_HOME": str(config_home)}
    result = subprocess.run(
        [str(KVTOP), "--check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    match = LINE.match(result.stdout)
    assert match, repr(result.stdout)
    assert result.returncode == EXIT[match.group(1)], result.stdout
    words, _, perf = result.stdout.strip().partition(" | ")
    data = {}
    for item in perf.split():
        assert PERF_ITEM.match(item), item
        label, _, value = item.partition("=")
        data[label] = value
    return result.returncode, words, data


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An XDG_CONFIG_HOME of the test's own: no config file unless the test writes one."""
    folder = tmp_path / "config-home"
    folder.mkdir()
    return folder


def closed_port_url() -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- OK ----------------------------------------------------------------------------------------
@pytest.fixture
def story_now(tmp_path: Path) -> Path:
    """The story log as if its last line were written now: its batch lines are current."""
    return log_dated_now(STORY_LOG, tmp_path / "story-now.log")


def test_ok_on_a_ready_log(home: Path, story_now: Path) -> None:
    code, words, perf = check(
        "--log-file", story_now, "--no-gpus", "--no-metrics", config_home=home
    )
    assert code == 0
    # The log's latest batch line: 48,211 tokens of 159,277 (its usage rounded: 0.30).
    assert words.startswith("KVTOP OK - ready") and words.endswith("KV cache 30.3% full")
    assert perf["kv_usage"] == "30.27%;85;95;0;100"
    assert perf["kv_tokens_used"] == f"48211;;;0;{POOL}"
    assert perf["kv_tokens_max"] == f"{POOL};;;0;"
    assert perf["headroom"] == "7.40GB;5:;;0;"


def test_ok_from_a_loopback_server_with_low_usage(home: Path) -> None:
    with FakeSGLang() as server:  # 48,211 of 159,277 tokens
        code, words, perf = check("--url", server.url, "--no-gpus", config_home=home)
    assert code == 0, words
    assert words == "KVTOP OK - server answers /metrics, KV cache 30.3% full"  # 30.27
    assert perf["kv_tokens_used"] == f"48211;;;0;{POOL}"


# -- WARNING -----------------------------------------------------------------------------------
def test_warning_when_kv_usage_is_over_the_warning_threshold(home: Path) -> None:
    busy = Deployment(num_used_tokens=(140_000,))  # 87.897 %
    with FakeSGLang(busy) as server:
        code, words, perf = check("--url", server.url, "--no-gpus", config_home=home)
    assert code == 1
    assert words == (
        "KVTOP WARNING - KV cache 87.9% full (140,000 of 159,277 tokens, warning from 85%)"
    )
    assert perf["kv_usage"] == "87.90%;85;95;0;100"


def test_old_batch_lines_are_not_the_usage_now(home: Path) -> None:
    """The story log's batch lines are months old: the last known usage is not judged (nor
    reported as a measurement) against the thresholds."""
    (home / "kvtop").mkdir()
    (home / "kvtop" / "config.toml").write_text("[thresholds]\nkv_usage_warning_pct = 25\n")
    code, words, perf = check(
        "--log-file", STORY_LOG, "--no-gpus", "--no-metrics", config_home=home
    )
    assert code == 0, words
    assert "KV cache" not in words and "kv_usage" not in perf


def test_warning_from_a_low_threshold_in_the_config_file(home: Path, story_now: Path) -> None:
    (home / "kvtop").mkdir()
    (home / "kvtop" / "config.toml").write_text("[thresholds]\nkv_usage_warning_pct = 25\n")
    code, words, perf = check(
        "--log-file", story_now, "--no-gpus", "--no-metrics", config_home=home
    )
    assert code == 1
    assert "KV cache 30.3% full" in words and "warning from 25%" in words
    assert perf["kv_usage"].endswith("%;25;95;0;100")


def test_warning_from_a_config_file_given_with_config(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "check.toml"
    config.write_text("[thresholds]\nsafe_margin_gib = 8\n")
    code, words, perf = check(
        "--log-file", STORY_LOG, "--no-gpus", "--no-metrics", "--config", config, config_home=home
    )
    assert code == 1
    assert "7.40 GiB free after startup, under the 8 GiB safe margin" in words
    assert perf["headroom"] == "7.40GB;8:;;0;"


# -- CRITICAL ----------------------------------------------------------------------------------
def test_critical_when_the_startup_failed(home: Path) -> None:
    code, words, _ = check("--log-file", FAILED_LOG, "--no-gpus", "--no-metrics", config_home=home)
    assert code == 2
    assert words.startswith("KVTOP CRITICAL - startup failed (not enough memory): ValueError")


def test_critical_when_kv_usage_is_over_the_critical_threshold(home: Path) -> None:
    full = Deployment(num_used_tokens=(155_000,))  # 97.3 %
    with FakeSGLang(full) as server:
        code, words, _ = check("--url", server.url, "--no-gpus", config_home=home)
    assert code == 2
    assert "KV cache 97.3% full" in words and "critical from 95%" in words


def test_critical_when_the_server_stops_after_ready(home: Path) -> None:
    code, words, _ = check(
        "--log-file", STORY_LOG, "--no-gpus", "--url", closed_port_url(), config_home=home
    )
    assert code == 2
    assert words.startswith("KVTOP CRITICAL - server stopped or unreachable after the log said")


@pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build the fake NVML")
def test_critical_when_a_gpu_is_lost(
    home: Path, lib_dir: Path, tmp_path: Path, story_now: Path
) -> None:
    state = write_state(
        tmp_path / "nvml.state",
        gpus=eight_gpus(),
        errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15)],  # NVML_ERROR_GPU_IS_LOST
    )
    env = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
    code, words, perf = check("--log-file", story_now, "--no-metrics", config_home=home, env=env)
    assert code == 2
    assert words.startswith("KVTOP CRITICAL - GPU 3 (TP3) is lost")
    assert "gpu3_free" not in perf  # a lost GPU has no numbers
    assert sorted(perf) == sorted(
        [f"gpu{i}_free" for i in range(8) if i != 3]
        + ["kv_usage", "kv_tokens_used", "kv_tokens_max", "queued", "headroom"]
        + ["retractions", "retractions_per_min"]  # the log read: none retracted, 0 a minute
    )
    assert perf["gpu0_free"].endswith("GB;5:;;0;140.40")


# -- UNKNOWN -----------------------------------------------------------------------------------
def test_unknown_when_no_source_could_be_read(home: Path) -> None:
    url = closed_port_url()
    code, words, perf = check("--url", url, "--no-gpus", config_home=home)
    assert code == 3 and perf == {}
    assert words.startswith("KVTOP UNKNOWN - no source could be read (metrics: nothing listens")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log-file", "/nonexistent/sglang.log"], "/nonexistent/sglang.log"),
        (["--once", "--demo"], "leave out --once and --json"),
        (["--demo", "--json"], "leave out --once and --json"),
        ([], "--check needs --log-file"),
        (["--demo", "--interval", "0"], "--interval"),
        (["--demo", "--no-such-flag"], "command line is not valid"),
        (["--demo", "--config", "/nonexistent/kvtop.toml"], "/nonexistent/kvtop.toml"),
    ],
)
def test_unknown_on_every_error(home: Path, args: list[str], needle: str) -> None:
    code, words, _ = check(*args, config_home=home)
    assert code == 3
    assert needle in words


def test_unknown_on_a_bad_config_file(home: Path) -> None:
    (home / "kvtop").mkdir()
    (home / "kvtop" / "config.toml").write_text('url = "http://127.0.0.1:1"\ninterval = "fast"\n')
    code, words, _ = check("--demo", config_home=home)
    assert code == 3
    assert words.startswith("KVTOP UNKNOWN - config file: ")
    assert "config.toml, line 2: interval must be a number" in words
