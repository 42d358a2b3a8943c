"""AMD GPUs through the installed `kvtop`: the real amdsmi binding over the fake libamd_smi.so
(tests/support/fake_amdsmi, found through ROCM_PATH), with real SGLang rank processes this test
starts as the GPUs' processes. `--once` text and JSON, `--check`, the exporter, a host with both
vendors (the fake NVML beside it) and a host with neither library.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.export_tools import exporter, one, samples
from tests.support.fake_amdsmi import GIB, STATE_ENV, eight_mi300x, write_state
from tests.support.fake_nvml import eight_gpus, gcc_path
from tests.support.fake_nvml import write_state as write_nvml_state
from tests.support.paths import STORY_LOG
from tests.support.sglang_procs import start_server, stop_server

KVTOP = Path(sys.executable).with_name("kvtop")

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake libraries"),
    pytest.mark.skipif(
        importlib.util.find_spec("amdsmi") is None, reason="the amdsmi binding is in the test extra"
    ),
]


def amd_env(rocm: Path | None, state: Path | None, nvml_dir: Path | None = None) -> dict[str, str]:
    """This environment with AMD SMI found at `rocm` (None: nowhere) and NVML only where
    `nvml_dir` is given."""
    drop = ("ROCM_PATH", "ROCM_HOME", STATE_ENV, "LD_LIBRARY_PATH", "KVTOP_FAKE_NVML_STATE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["COLUMNS"] = "200"
    if rocm is not None:
        env["ROCM_PATH"] = str(rocm)
    if state is not None:
        env[STATE_ENV] = str(state)
    if nvml_dir is not None:
        env["LD_LIBRARY_PATH"] = str(nvml_dir)
    return env


def kvtop(
    env: dict[str, str], *args: str, mode: str = "--once"
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(KVTOP), mode, "--log-file", str(STORY_LOG), "--no-metrics", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


@pytest.fixture
def ranks() -> Iterator[dict[str, int]]:
    main, schedulers = start_server()
    try:
        yield {rank: child.pid for rank, child in schedulers.items()}
    finally:
        stop_server(main, schedulers)


def mi300x_state(path: Path, ranks: dict[str, int]) -> Path:
    """8 × MI300X, GPU i holding rank TPi's 180 GiB (the story's ranks on bigger cards)."""
    procs = {i: [(ranks[f"TP{i}"], 180 * GIB)] for i in range(8)}
    return write_state(path, eight_mi300x(), procs=procs, driver="6.10.5")


def test_once_json_on_eight_mi300x(rocm_path: Path, tmp_path: Path, ranks: dict[str, int]) -> None:
    state = mi300x_state(tmp_path / "amd.state", ranks)
    result = kvtop(amd_env(rocm_path, state), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    gpus = data["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["vendor"] for g in gpus} == {"amd"}
    assert {g["name"] for g in gpus} == {"AMD Instinct MI300X"}
    assert gpus[3]["total_gib"] == 192.0 and gpus[3]["status"] == "ok"
    assert gpus[3]["pci_bus_id"] == "0000:65:00.0"
    # The ranks are tied to the GPUs by their processes, not by order.
    assert data["rank_mapping"] == "process"
    rows = {p["pid"]: p for p in data["processes"]}
    for i in range(8):
        row = rows[ranks[f"TP{i}"]]
        assert (row["gpu"], row["rank"], row["foreign"]) == (i, f"TP{i}", False)
        assert row["gpu_memory_gib"] == 180.0
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")
    assert nvml["state"] == "ok"


def test_once_text_names_amd_smi(rocm_path: Path, tmp_path: Path, ranks: dict[str, int]) -> None:
    state = mi300x_state(tmp_path / "amd.state", ranks)
    result = kvtop(amd_env(rocm_path, state))
    assert result.returncode == 0, result.stderr
    assert "AMD SMI joined with the log" in result.stdout
    assert result.stdout.count("AMD Instinct MI300X") == 8


def test_a_gpu_amdsmi_cannot_read_is_named_in_its_words(
    rocm_path: Path, tmp_path: Path, ranks: dict[str, int]
) -> None:
    """amdsmi's I/O error on GPU 5's memory: that GPU is unreadable, in amdsmi's words, the
    others read, and --check says critical (exit 2)."""
    state = mi300x_state(tmp_path / "amd.state", ranks)
    lines = state.read_text() + "gpu.5.error.amdsmi_get_gpu_memory_usage=12\n"
    state.write_text(lines)
    result = kvtop(amd_env(rocm_path, state), "--json")
    data = json.loads(result.stdout)
    gpu5 = data["gpus"][5]
    assert gpu5["status"] == "error"
    assert "AMDSMI_STATUS_IO" in json.dumps(gpu5)
    assert [g["status"] for g in data["gpus"]].count("ok") == 7
    check = kvtop(amd_env(rocm_path, state), mode="--check")
    assert check.returncode == 2, check.stdout


def test_the_exporter_labels_amd_gpus(
    rocm_path: Path, tmp_path: Path, ranks: dict[str, int]
) -> None:
    state = mi300x_state(tmp_path / "amd.state", ranks)
    env = amd_env(rocm_path, state)
    args = ("--log-file", str(STORY_LOG), "--no-metrics")
    with exporter(*args, env=env, command=[str(KVTOP), "--export", "127.0.0.1:0", *args]) as run:
        _, found = run.scrape_until(
            "eight AMD GPUs", lambda f: sum(k[0] == "kvtop_gpu_total_bytes" for k in f) == 8
        )
        body = run.scrape().text
    assert one(found, "kvtop_gpu_total_bytes", gpu="2") == 192 * GIB
    info = [k for k in samples(body) if k[0] == "kvtop_gpu_info"]
    assert len(info) == 8
    assert all(dict(k[1])["vendor"] == "amd" for k in info)
    assert all(dict(k[1])["name"] == "AMD Instinct MI300X" for k in info)


def test_a_host_with_both_vendors_shows_both(
    rocm_path: Path, lib_dir: Path, tmp_path: Path, ranks: dict[str, int]
) -> None:
    amd = mi300x_state(tmp_path / "amd.state", ranks)
    two = {i: fields for i, fields in eight_gpus(used_mib=1000).items() if i < 2}
    nvml = write_nvml_state(tmp_path / "nvml.state", two)
    env = amd_env(rocm_path, amd, nvml_dir=lib_dir)
    env["KVTOP_FAKE_NVML_STATE"] = str(nvml)
    data = json.loads(kvtop(env, "--json").stdout)
    assert [(g["index"], g["vendor"]) for g in data["gpus"]] == [
        (0, "nvidia"),
        (1, "nvidia"),
        *((i, "amd") for i in range(2, 10)),
    ]


def test_neither_library_is_one_sentence_naming_both(tmp_path: Path) -> None:
    result = kvtop(amd_env(None, None), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["gpus"] == []
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")
    said = nvml["detail"]
    # Both libraries, each with its own words for how to get it (amdsmi is installed in the
    # test environment, its library is not; nvidia-ml-py likewise).
    assert said.startswith("no GPU library here: NVML library not found (libnvidia-ml.so.1)")
    assert "install the NVIDIA driver" in said
    assert "AMD SMI library not found (libamd_smi.so): install amd-smi-lib from ROCm" in said
    text = kvtop(amd_env(None, None)).stdout
    assert "no GPU library here: NVML library not found" in " ".join(text.split())


# -- the fault matrix's AMD rows (docs/reliability.md, "AMD SMI") -------------------------------
def test_amd_gpu_lost(rocm_path: Path, tmp_path: Path, ranks: dict[str, int]) -> None:
    """amdsmi no longer finds GPU 3 (AMDSMI_STATUS_NOT_FOUND): that GPU is lost, no number is
    made up for it, the other seven read, and --check is critical naming it."""
    state = mi300x_state(tmp_path / "amd.state", ranks)
    state.write_text(state.read_text() + "gpu.3.error.amdsmi_get_gpu_memory_usage=31\n")
    data = json.loads(kvtop(amd_env(rocm_path, state), "--json").stdout)
    gpu3 = data["gpus"][3]
    assert gpu3["status"] == "lost" and gpu3["used_gib"] is None
    assert [g["status"] for g in data["gpus"]].count("ok") == 7
    check = kvtop(amd_env(rocm_path, state), mode="--check")
    assert check.returncode == 2 and "GPU 3" in check.stdout, check.stdout


def test_amd_driver_not_loaded(rocm_path: Path, tmp_path: Path) -> None:
    """The amdgpu driver not loaded (amdsmi_init fails): the source is off with amdsmi's words
    and what to check; the log's report still comes."""
    env = amd_env(rocm_path, tmp_path / "no-such-state")
    result = kvtop(env, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")
    assert nvml["state"] == "off"
    assert "amdgpu driver not loaded" in nvml["detail"]
    assert "AMDSMI_STATUS_DRIVER_NOT_LOADED" in nvml["detail"]
    assert data["startup"]["state"] == "ready"


def test_amd_gpu_count_drops(rocm_path: Path, tmp_path: Path, ranks: dict[str, int]) -> None:
    """amdsmi enumerates 7 of the 8 GPUs: TP7 from the log has no GPU here, critical."""
    state = mi300x_state(tmp_path / "amd.state", ranks)
    state.write_text(state.read_text() + "gpu_count=7\n")
    data = json.loads(kvtop(amd_env(rocm_path, state), "--json").stdout)
    assert len(data["gpus"]) == 7
    assert data["verdict"]["level"] == "critical"
    assert "TP7" in json.dumps(data["notes"])


def test_amd_gpu_lost_then_back_in_the_exporter(
    rocm_path: Path, tmp_path: Path, ranks: dict[str, int]
) -> None:
    """A running exporter on AMD SMI: GPU 3 lost (kvtop_gpu_up 0, no memory samples), then
    found again (1, memory back) without a restart: the binding re-read on every poll."""
    state = mi300x_state(tmp_path / "amd.state", ranks)
    healthy = state.read_text()
    env = amd_env(rocm_path, state)
    args = ("--log-file", str(STORY_LOG), "--no-metrics")
    with exporter(*args, env=env, command=[str(KVTOP), "--export", "127.0.0.1:0", *args]) as run:
        run.scrape_until("GPU 3 up", lambda f: f.get(_up(3)) == 1)
        write_text(state, healthy + "gpu.3.error.amdsmi_get_gpu_memory_usage=31\n")
        _, lost = run.scrape_until("GPU 3 lost", lambda f: f.get(_up(3)) == 0)
        assert not [k for k in lost if k[0] == "kvtop_gpu_total_bytes" and ("gpu", "3") in k[1]]
        write_text(state, healthy)
        _, back = run.scrape_until("GPU 3 back", lambda f: f.get(_up(3)) == 1)
        assert one(back, "kvtop_gpu_total_bytes", gpu="3") == 192 * GIB


def _up(gpu: int) -> tuple[str, frozenset[tuple[str, str]]]:
    uuid = eight_mi300x()[gpu]["uuid"]
    return ("kvtop_gpu_up", frozenset({("gpu", str(gpu)), ("uuid", str(uuid))}))


def write_text(path: Path, text: str) -> None:
    """Atomically, as the fake re-reads the file on every call."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_the_amd_demo_script() -> None:
    """scripts/demo-amd.sh: the real R9700 boot on two simulated R9700s through the real
    binding, its ranks tied by their processes; the processes and files go with it."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        ["bash", "scripts/demo-amd.sh", "--once", "--json"],
        capture_output=True,
        text=True,
        env=amd_env(None, None),
        cwd=root,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(g["vendor"], g["name"]) for g in data["gpus"]] == [
        ("amd", "AMD Radeon AI PRO R9700")
    ] * 2
    assert data["rank_mapping"] == "process"
    assert [r["rank"] for r in data["processes"]] == ["TP0", "TP1"]
    left = subprocess.run(["pgrep", "-f", "sglang::scheduler_TP"], capture_output=True, text=True)
    assert not set(left.stdout.split()) & {str(p["pid"]) for p in data["processes"]}
