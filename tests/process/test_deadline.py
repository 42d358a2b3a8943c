"""`--check` and `--once` answer within their total deadline (--deadline, the config file's
`deadline`) whatever blocks: a FIFO without a writer as the log or as the config file. --check
says UNKNOWN (3) with what it was waiting for; every --check failure, a config file nested
thousands deep included, is one UNKNOWN line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

KVTOP = Path(sys.executable).with_name("kvtop")


def kvtop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KVTOP), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_check_on_a_log_fifo_without_writer_is_unknown_at_its_deadline(fifo: Path) -> None:
    started = time.monotonic()
    result = kvtop("--check", "--log-file", str(fifo), "--no-gpus", "--deadline", "2")
    assert time.monotonic() - started < 10
    assert result.returncode == 3, result
    assert result.stdout.startswith("KVTOP UNKNOWN - no result within 2 s: still waiting for ")
    assert f"the log {fifo}" in result.stdout and result.stdout.count("\n") == 1


def test_check_on_a_config_fifo_is_unknown_too(fifo: Path) -> None:
    result = kvtop("--check", "--demo", "--config", str(fifo), "--deadline", "2")
    assert result.returncode == 3, result
    assert f"waiting for the config file {fifo}" in result.stdout


def test_once_on_a_log_fifo_ends_at_its_deadline_with_a_sentence(fifo: Path) -> None:
    result = kvtop("--once", "--log-file", str(fifo), "--no-gpus", "--deadline", "2")
    assert result.returncode == 1, result
    assert f"still waiting for the log {fifo}" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_config_files_deadline(fifo: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("deadline = 1.5\n")
    result = kvtop("--check", "--log-file", str(fifo), "--no-gpus", "--config", str(config))
    assert result.returncode == 3 and "no result within 1.5 s" in result.stdout, result


@pytest.mark.parametrize("fleet", [False, True], ids=["single-host", "fleet"])
def test_a_config_nested_thousands_deep_is_one_unknown_line(tmp_path: Path, fleet: bool) -> None:
    config = tmp_path / "config.toml"
    config.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    where = ["--prometheus", "http://127.0.0.1:9"] if fleet else ["--demo"]
    result = kvtop("--check", *where, "--config", str(config))
    assert result.returncode == 3, result
    assert result.stdout.startswith("KVTOP UNKNOWN - config file: ")
    assert "nested too deep" in result.stdout and result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr
