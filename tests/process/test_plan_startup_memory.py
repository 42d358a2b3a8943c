"""The real `kvtop plan` names what the platform takes before the weights (text and JSON), and
`--gpu-memory free` plans from the free memory NVML measures now (the fake libnvidia-ml.so.1
through the real nvidia-ml-py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.process.test_plan_command import plan
from tests.support.export_tools import fake_nvml_env
from tests.support.fake_nvml.build import eight_gpus, gcc_path, write_state
from tests.support.paths import FIXTURES, STORY_LOG


@pytest.fixture
def qwen_dir(tmp_path: Path) -> Path:
    """Qwen3-8B's config with a weights index of 16 GiB (a round test figure)."""
    model = tmp_path / "qwen3-8b"
    model.mkdir()
    shutil.copy(FIXTURES / "models" / "qwen3-8b" / "config.json", model / "config.json")
    index = {"metadata": {"total_size": 16 << 30}, "weight_map": {}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model


def test_json_and_text_name_the_row_and_its_spread(qwen_dir: Path) -> None:
    common = ("--model", str(qwen_dir), "--gpu-memory", "192", "--gpu-name", "MI300X")
    done = plan(*common, "--json", "--", "--tp-size", "8")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    row = doc["startup_memory"]
    assert (row["platform"], row["gib"], row["spread_gib"]) == ("rocm-tp", 5.15, 1.5)
    assert [b["total_gib"] for b in row["evidence"]] == [192.0, 192.0]
    assert doc["pre_load_free_gib"] == round(192 - 5.15, 2)
    text = plan(*common, "--width", "120", "--", "--tp-size", "8")
    assert "before the weights    5.15 GiB  ± 1.5 GiB: ROCm/HIP with TP" in text.stdout


def test_a_logged_boot_names_no_row() -> None:
    done = plan("--from-log", str(STORY_LOG), "--json")
    assert json.loads(done.stdout)["startup_memory"] is None
    assert "before the weights" not in plan("--from-log", str(STORY_LOG)).stdout


@pytest.mark.skipif(gcc_path() is None, reason="gcc not found: cannot build the fake NVML")
def test_gpu_memory_free_plans_from_nvmls_free_memory_now(
    qwen_dir: Path,
    lib_dir: Path,
    tmp_path: Path,
) -> None:
    # 143,771 MiB each, 130,000 + i used, 512 reserved: GPU 7 has the least free, 13,252 MiB.
    state = write_state(tmp_path / "state.json", eight_gpus())
    done = plan(
        "--model",
        str(qwen_dir),
        "--gpu-memory",
        "free",
        "--json",
        "--",
        "--tp-size",
        "8",
        env=fake_nvml_env(lib_dir, state),
    )
    assert done.returncode in (0, 3, 4), done.stderr
    doc = json.loads(done.stdout)
    assert doc["gpus"]["source"] == "NVML, free now"
    assert doc["pre_load_free_gib"] == round(13252 / 1024, 2)  # nothing subtracted
    row = doc["startup_memory"]
    assert (row["platform"], row["gib"], row["spread_gib"]) == ("measured", 0.0, 2.4)


@pytest.mark.parametrize(
    ("value", "env", "status", "said"),
    [
        ("free", {"LD_LIBRARY_PATH": "/nonexistent"}, 1, "--gpu-memory free measures"),
        ("lots", None, 2, "--gpu-memory 'lots' is neither a number nor 'free'"),
        ("2", None, 2, "--gpu-memory 2: give one GPU's memory in GiB"),
    ],
)
def test_bad_gpu_memory_is_one_sentence(
    qwen_dir: Path,
    value: str,
    env: dict[str, str] | None,
    status: int,
    said: str,
) -> None:
    done = plan("--model", str(qwen_dir), "--gpu-memory", value, env=env)
    assert done.returncode == status, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
