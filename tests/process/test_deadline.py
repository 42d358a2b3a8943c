"""`--check` and `--once` answer within their total deadline (--deadline, the config file's
`deadline`) whatever blocks: a FIFO without a writer as the log or as the config file. --check
says UNKNOWN (3) with what it was waiting for; every --check failure, a config file nested
thousands deep included, is one UNKNOWN line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.fixture
def silent_writer(fifo: Path) -> Iterator[Path]:
    """The FIFO with a writer that holds it open and never writes: a reader waits for ever."""
    writer = subprocess.Popen(["bash", "-c", f'exec 3>"{fifo}"; exec sleep 120'])
    try:
        yield fifo
    finally:
        writer.kill()
        writer.wait()


def test_check_on_a_log_fifo_without_writer_is_unknown_at_once(fifo: Path) -> None:
    # Said at once (the FIFO has no writer: nothing would arrive), well before the deadline.
    result = kvtop("--check", "--log-file", str(fifo), "--no-gpus", "--deadline", "60")
    assert result.returncode == 3, result
    assert result.stdout.startswith(
        f"KVTOP UNKNOWN - the log {fifo} is a named pipe (FIFO) no one writes to"
    )
    assert "no result within" not in result.stdout and result.stdout.count("\n") == 1


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_log_that_is_a_device_is_said_at_once(device: str) -> None:
    check = kvtop("--check", "--log-file", device, "--no-gpus", "--deadline", "60")
    assert check.returncode == 3, check
    assert f"the log {device} is a character device, not a log file" in check.stdout


def test_a_small_pipe_whose_writer_finished_is_read(tmp_path: Path) -> None:
    # `<(cat small.log)`: the writer is gone, its bytes wait in the pipe: read, not refused.
    log = tmp_path / "small.log"
    log.write_text("[2026-02-27 09:02:05] server_args=ServerArgs(model_path='/m', tp_size=1)\n")
    done = subprocess.run(
        ["bash", "-c", f"{KVTOP} --check --no-gpus --log-file <(cat {log}) --deadline 30"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "named pipe" not in done.stdout and "no result within" not in done.stdout, done


def test_check_on_a_silent_log_fifo_is_unknown_at_its_deadline(silent_writer: Path) -> None:
    result = kvtop("--check", "--log-file", str(silent_writer), "--no-gpus", "--deadline", "2")
    assert result.returncode == 3, result
    assert result.stdout.startswith("KVTOP UNKNOWN - no result within 2 s: still waiting for ")
    assert f"the log {silent_writer}" in result.stdout and result.stdout.count("\n") == 1


def test_checks_default_deadline_is_inside_plugin_timeouts(silent_writer: Path) -> None:
    # check_nrpe gives a plugin 10 s: --check answers UNKNOWN by itself first.
    result = kvtop("--check", "--log-file", str(silent_writer), "--no-gpus")
    assert result.returncode == 3, result
    assert result.stdout.startswith("KVTOP UNKNOWN - no result within 8 s: still waiting for ")


def test_check_on_a_config_fifo_is_unknown_too(fifo: Path) -> None:
    result = kvtop("--check", "--demo", "--config", str(fifo), "--deadline", "2")
    assert result.returncode == 3, result
    assert f"waiting for the config file {fifo}" in result.stdout


def test_once_on_a_log_fifo_ends_at_its_deadline_with_a_sentence(fifo: Path) -> None:
    # --once waits for a writer still to come (its deadline, or a signal, ends the wait).
    result = kvtop("--once", "--log-file", str(fifo), "--no-gpus", "--deadline", "2")
    assert result.returncode == 1, result
    assert f"still waiting for the log {fifo}" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_config_files_deadline(silent_writer: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("deadline = 1.5\n")
    result = kvtop(
        "--check", "--log-file", str(silent_writer), "--no-gpus", "--config", str(config)
    )
    assert result.returncode == 3 and "no result within 1.5 s" in result.stdout, result


def test_once_with_nothing_readable_exits_1() -> None:
    # No log, no GPUs, nothing listens at --url: the report says UNKNOWN and why, and the exit
    # status says the input could not be read (README: 1).
    result = kvtop("--once", "--no-gpus", "--url", "http://127.0.0.1:9")
    assert result.returncode == 1, result
    assert result.stdout.startswith("verdict: UNKNOWN - no source could be read")
    assert "· starting" not in result.stdout and "no server start read" in result.stdout


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
