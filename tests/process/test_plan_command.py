"""The real `kvtop plan` command: text and JSON, calibrated by a fixture log, GPUs from
--gpu-memory and from NVML (the fake libnvidia-ml.so.1 through the real nvidia-ml-py), and bad
input as one sentence with the documented exit status."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.export_tools import fake_nvml_env
from tests.support.fake_nvml.build import eight_gpus, gcc_path, write_state
from tests.support.paths import FIXTURES, STORY_LOG

MODELS = FIXTURES / "models"


def plan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
        stdin=subprocess.DEVNULL,
    )


def test_from_log_text_names_the_minimum_rank_and_the_verdict() -> None:
    done = plan("--from-log", str(STORY_LOG))
    # Kimi's 159,277 tokens hold 0.61 of one request of its 262,144-token context: SGLang
    # starts, and the verdict says what it cannot serve (exit 3).
    assert done.returncode == 3, done.stderr
    assert "max_total_num_tokens  159,277" in done.stdout
    # The per-rank table marks where SGLang's minimum is (a column, or a row once transposed).
    assert "SGLang's minimum" in done.stdout
    assert "pre-load, post-load" in done.stdout
    assert "Verdict: pool_under_context" in done.stdout
    assert "mem_fraction_static   0.880  (log)" in done.stdout


def test_from_log_json_at_another_fraction() -> None:
    done = plan(
        "--model",
        str(MODELS / "kimi-k2.5"),
        "--from-log",
        str(STORY_LOG),
        "--json",
        "--",
        "--mem-fraction-static",
        "0.93",
    )
    assert done.returncode == 4, done.stderr  # oom_risk
    doc = json.loads(done.stdout)
    assert doc["schema"] == "kvtop-plan/1"
    assert doc["cell_bytes"] == 70272
    assert doc["mem_fraction_static"] == 0.93
    assert doc["mem_fraction_static_source"] == "given"
    assert doc["max_total_num_tokens"] > 159277
    assert len(doc["ranks"]) == 8
    assert doc["verdict"]["kind"] == "oom_risk"
    assert doc["verdict"]["fixes"][0].startswith("--mem-fraction-static 0.9")
    assert doc["max_running_requests"] == 48


def test_not_enough_memory_exit_status_and_least_fraction() -> None:
    done = plan("--from-log", str(STORY_LOG), "--json", "--", "--mem-fraction-static", "0.7")
    assert done.returncode == 5
    verdict = json.loads(done.stdout)["verdict"]
    assert verdict["kind"] == "not_enough_memory"
    assert verdict["minimum_mem_fraction_static"] == 0.769


@pytest.fixture
def qwen_dir(tmp_path: Path) -> Path:
    """Qwen3-8B's config with a weights index (16 GiB of bf16 weights: a round test figure)."""
    model = tmp_path / "qwen3-8b"
    model.mkdir()
    shutil.copy(MODELS / "qwen3-8b" / "config.json", model / "config.json")
    index = {"metadata": {"total_size": 16 << 30}, "weight_map": {}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model


def test_gpu_memory_without_nvml_uses_sglangs_default_fraction(qwen_dir: Path) -> None:
    done = plan(
        "--model",
        str(qwen_dir),
        "--gpu-memory",
        "80",
        "--sglang-version",
        "0.5.23",
        "--json",
        env={"LD_LIBRARY_PATH": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["mem_fraction_static_source"] == "SGLang default"
    assert doc["mem_fraction_static"] == doc["default_mem_fraction_static"]["value"] == 0.830
    assert doc["cell_bytes"] == 147456  # 8 KV heads × (128 + 128) × 36 layers × 2 B
    assert doc["ranks"][0]["weights_gib"] == 16.0
    assert doc["ranks"][0]["source"] == "estimate"
    assert doc["context_len"] == 40960


def test_text_report_without_log(qwen_dir: Path) -> None:
    done = plan(
        "--model",
        str(qwen_dir),
        "--gpu-memory",
        "80",
        "--",
        "--tp-size",
        "2",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--log-level",
        "info",
    )
    assert done.returncode == 0, done.stderr
    assert "cell size             36,864 B/token" in done.stdout  # 4 heads per rank, 1 B each
    assert "Not modelled (no effect on GPU memory): --log-level" in done.stdout
    assert "pre-load free memory is estimated" in done.stdout


@pytest.mark.skipif(gcc_path() is None, reason="gcc not found: cannot build the fake NVML")
def test_gpus_from_nvml(qwen_dir: Path, lib_dir: Path, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.json", eight_gpus())
    done = plan(
        "--model",
        str(qwen_dir),
        "--json",
        "--",
        "--tp-size",
        "8",
        env=fake_nvml_env(lib_dir, state),
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["gpus"] == {"count": 8, "total_gib": 140.4, "name": "NVIDIA H200", "source": "NVML"}
    assert doc["mem_fraction_static_source"] == "SGLang default"
    assert len(doc["ranks"]) == 8


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (["--model", "/nonexistent/model"], 1, "no such file or directory"),
        (
            ["--from-log", str(STORY_LOG), "--", "--mem-fraction-static", "abc"],
            2,
            "is not a number",
        ),
        (["--from-log", str(STORY_LOG), "--", "--kv-cache-dtype", "fp9"], 2, "must be one of"),
        ([], 2, "give --model DIR"),
        (["--from-log", str(STORY_LOG), "--gpu-memory", "-3"], 2, "--gpu-memory -3"),
    ],
)
def test_bad_input_is_one_sentence(args: list[str], status: int, said: str) -> None:
    done = plan(*args)
    assert done.returncode == status
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_lacking_fields_is_named(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["X"], "hidden_size": 10}))
    done = plan("--model", str(config), "--gpu-memory", "80")
    assert done.returncode == 1
    assert "has no 'num_hidden_layers'" in done.stderr
    assert "Traceback" not in done.stderr


def test_kvtop_help_mentions_plan() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "kvtop plan" in done.stdout


def test_ctrl_c_while_a_log_fifo_waits_for_a_writer_is_one_line_and_130(tmp_path: Path) -> None:
    """A named pipe no one writes blocks the read; Ctrl-C ends kvtop plan with one line."""
    fifo = tmp_path / "boot.log"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop", "plan", "--from-log", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        # Wait until kvtop blocks in open() on the FIFO (it has no writer yet).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _waits_on(proc.pid, fifo):
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out == ""
    assert err == "kvtop plan: interrupted before the plan was ready; nothing was printed.\n"


def _waits_on(pid: int, fifo: Path) -> bool:
    """Whether the process is blocked opening the FIFO: the kernel says so in wchan
    (wait_for_partner); where wchan is hidden, an openat that lasts 0.2 s (an import's openat
    returns at once)."""
    try:
        if Path(f"/proc/{pid}/wchan").read_text().strip() == "wait_for_partner":
            return True
    except OSError:
        pass
    for _ in range(10):
        try:
            syscall = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            return False
        # openat is syscall 257 on x86-64, 56 on arm64.
        if not syscall or syscall[0] not in ("257", "56"):
            return False
        time.sleep(0.02)
    return True
