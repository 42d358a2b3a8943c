"""NvmlSource against a fake libnvidia-ml.so.1 (C) served through the real nvidia-ml-py.

pynvml keeps its library handle in module globals and the dynamic loader reads LD_LIBRARY_PATH
only at start-up, so each scenario runs in a fresh Python process with the fake on the path; the
child prints the readings as JSON and the assertions run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_nvml import STATE_ENV, build_fake_nvml, gcc_path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

pytestmark = pytest.mark.skipif(
    gcc_path() is None, reason="gcc not found: cannot build the fake libnvidia-ml.so.1"
)

PRELUDE = """
import asyncio, dataclasses, json, os, time
from fake_nvml import eight_gpus, write_state
from tui.sources.nvml import NvmlSource
STATE = os.environ["KVTOP_FAKE_NVML_STATE"]
out = []
def emit(reading):
    out.append(dataclasses.asdict(reading))
"""


@pytest.fixture(scope="session")
def fake_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml")).parent


def run_scenario(
    body: str, lib_dir: Path | None, state: Path, timeout: float = 20.0
) -> list[dict[str, object]]:
    """Run BODY (after PRELUDE) in a fresh interpreter; return what it emit()ted."""
    env = dict(os.environ)
    env[STATE_ENV] = str(state)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    env.pop("LD_LIBRARY_PATH", None)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_eight_gpus_all_fields(fake_lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        gpus = eight_gpus()
        gpus[0]["name"] = "NVIDIA RTX PRO 6000 Blackwell"
        write_state(STATE, gpus=gpus, procs=[(0, 1234, 90000), (1, 1235, None)], driver="580.65.06")
        emit(NvmlSource().poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert reading["available"] is True
    assert reading["problem"] is None
    assert reading["stale"] is False
    assert reading["driver_version"] == "580.65.06"
    gpus = reading["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    g0 = gpus[0]
    assert g0["name"] == "NVIDIA RTX PRO 6000 Blackwell"
    assert g0["uuid"] == "GPU-00000000-1111-2222-3333-444455556666"
    assert g0["pci_bus_id"] == "00000000:18:00.0"
    assert g0["total_gib"] == pytest.approx(143771 / 1024)
    assert g0["used_gib"] == pytest.approx(130000 / 1024)
    assert g0["reserved_gib"] == pytest.approx(0.5)
    assert g0["free_gib"] == pytest.approx((143771 - 130000 - 512) / 1024)
    assert g0["utilization_pct"] == 60
    assert g0["memory_utilization_pct"] == 30
    assert g0["temperature_c"] == 50
    assert g0["power_w"] == pytest.approx(400.0)
    assert g0["power_limit_w"] == pytest.approx(700.0)
    assert g0["processes"] == [{"pid": 1234, "used_gib": pytest.approx(90000 / 1024)}]
    assert g0["status"] == "ok"
    assert g0["field_errors"] == []
    assert gpus[1]["processes"] == [{"pid": 1235, "used_gib": None}]
    assert gpus[7]["name"] == "NVIDIA H200"
    assert gpus[7]["temperature_c"] == 57
    assert all(g["processes"] == [] for g in gpus[2:])


def test_memory_v1_fallback_when_v2_missing(fake_lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        write_state(STATE, gpus=eight_gpus(), absent=["nvmlDeviceGetMemoryInfo_v2"])
        emit(NvmlSource().poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    g0 = reading["gpus"][0]
    assert g0["status"] == "ok"
    assert g0["reserved_gib"] is None
    # v1 "used" counts the driver's reserve.
    assert g0["used_gib"] == pytest.approx((130000 + 512) / 1024)
    assert g0["field_errors"] == []


def test_power_not_supported_only_affects_power(fake_lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        write_state(STATE, gpus=eight_gpus(), errors=[("nvmlDeviceGetPowerUsage", None, 3)])
        emit(NvmlSource().poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    for g in reading["gpus"]:
        assert g["status"] == "ok"
        assert g["power_w"] is None
        assert g["power_limit_w"] == pytest.approx(700.0)
        assert g["temperature_c"] is not None
        assert g["utilization_pct"] is not None
        assert g["field_errors"] == [["power", "Not Supported"]]


def test_gpu_lost_then_recovers(fake_lib_dir: Path, tmp_path: Path) -> None:
    before, lost, after = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus(), errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15)])
        emit(src.poll())
        gpus = eight_gpus()
        gpus[3]["name"] = "NVIDIA H200 (replaced)"
        write_state(STATE, gpus=gpus)
        emit(src.poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert before["gpus"][3]["status"] == "ok"
    assert lost["available"] is True
    g3 = lost["gpus"][3]
    assert g3["status"] == "lost"
    assert g3["name"] == "NVIDIA H200"  # what was known before it fell off the bus
    assert g3["field_errors"] == [["gpu", "GPU is lost"]]
    assert "GPU 3 is lost" in lost["problem"]
    assert all(g["status"] == "ok" for i, g in enumerate(lost["gpus"]) if i != 3)
    assert lost["gpus"][0]["used_gib"] == pytest.approx(130000 / 1024)
    assert after["problem"] is None
    assert after["gpus"][3]["status"] == "ok"
    assert after["gpus"][3]["name"] == "NVIDIA H200 (replaced)"  # facts read again


def test_processes_v3_missing_uses_v2(fake_lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        write_state(
            STATE,
            gpus=eight_gpus(),
            procs=[(2, 4242, 1024)],
            absent=["nvmlDeviceGetComputeRunningProcesses_v3"],
        )
        emit(NvmlSource().poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    g2 = reading["gpus"][2]
    assert g2["processes"] == [{"pid": 4242, "used_gib": 1.0}]
    assert g2["field_errors"] == []


def test_processes_refresh_on_their_own_interval(fake_lib_dir: Path, tmp_path: Path) -> None:
    first, cached, refreshed = run_scenario(
        """
        src = NvmlSource(process_interval_s=3600)
        write_state(STATE, gpus=eight_gpus(), procs=[(0, 100, 1024)])
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus(used_mib=1), procs=[(0, 200, 2048)])
        emit(src.poll())
        src.process_interval_s = 0
        emit(src.poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert first["gpus"][0]["processes"] == [{"pid": 100, "used_gib": 1.0}]
    assert cached["gpus"][0]["processes"] == [{"pid": 100, "used_gib": 1.0}]
    assert cached["gpus"][0]["used_gib"] == pytest.approx(1 / 1024)  # memory is live
    assert refreshed["gpus"][0]["processes"] == [{"pid": 200, "used_gib": 2.0}]


def test_device_count_drops_and_returns(fake_lib_dir: Path, tmp_path: Path) -> None:
    eight, seven, back = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        gpus = eight_gpus()
        del gpus[7]
        write_state(STATE, gpus=gpus)
        emit(src.poll())
        gpus = eight_gpus()
        gpus[7]["name"] = "NVIDIA H200 NVL"
        write_state(STATE, gpus=gpus)
        emit(src.poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert len(eight["gpus"]) == 8
    assert len(seven["gpus"]) == 7
    assert seven["available"] is True
    assert len(back["gpus"]) == 8
    assert back["gpus"][7]["name"] == "NVIDIA H200 NVL"
    assert back["gpus"][7]["status"] == "ok"


def _system_has_nvml() -> bool:
    """Whether the dynamic loader finds a libnvidia-ml.so.1 for a fresh process without our
    fake: asked in a child, because this pytest process may already hold the fake library
    (other tests load it under its soname with RTLD_GLOBAL, and dlopen then finds that one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    probe = "import ctypes\ntry:\n    ctypes.CDLL('libnvidia-ml.so.1')\nexcept OSError:\n    raise SystemExit(1)"
    return subprocess.run([sys.executable, "-c", probe], env=env, check=False).returncode == 0


def test_library_missing(tmp_path: Path) -> None:
    if _system_has_nvml():  # a machine with the NVIDIA driver: nothing to simulate here
        pytest.skip("this machine has the NVIDIA driver's libnvidia-ml.so.1: it cannot be missing")
    first, second = run_scenario(
        """
        src = NvmlSource()
        emit(src.poll())
        emit(src.poll())
        """,
        None,
        tmp_path / "state",
    )
    for reading in (first, second):
        assert reading["available"] is False
        assert reading["gpus"] == []
        assert reading["problem"] == (
            "NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver, or run "
            "kvtop where the GPUs are; kvtop keeps going with logs and metrics."
        )


def test_driver_not_loaded_then_fixed(fake_lib_dir: Path, tmp_path: Path) -> None:
    broken, still, fixed = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus(), init_error=9)
        emit(src.poll())
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    for reading in (broken, still):
        assert reading["available"] is False
        assert reading["problem"].startswith("NVIDIA driver not loaded")
        assert "kvtop retries each poll" in reading["problem"]
    assert fixed["available"] is True
    assert fixed["problem"] is None
    assert len(fixed["gpus"]) == 8


def test_driver_goes_away_after_init(fake_lib_dir: Path, tmp_path: Path) -> None:
    ok, gone, back = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus(), errors=[("nvmlDeviceGetCount_v2", None, 9)])
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert ok["available"] is True
    assert gone["available"] is False
    assert gone["problem"].startswith("NVIDIA driver not loaded")
    assert back["available"] is True and len(back["gpus"]) == 8


def test_hung_call_gives_stale_reading_without_blocking(fake_lib_dir: Path, tmp_path: Path) -> None:
    fresh, stale, still_stale, recovered, timing = run_scenario(
        """
        one_gpu = {0: eight_gpus()[0]}
        write_state(STATE, gpus=one_gpu)

        async def main():
            src = NvmlSource(call_timeout_s=0.5)
            emit(await src.poll_async())
            write_state(
                STATE,
                gpus=one_gpu,
                delays=[("nvmlDeviceGetMemoryInfo_v2", 4000), ("nvmlDeviceGetMemoryInfo", 4000)],
            )
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.02)
                    ticks += 1

            task = asyncio.create_task(ticker())
            t0 = time.monotonic()
            emit(await src.poll_async())
            first_wait = time.monotonic() - t0
            ticks_during_wait = ticks
            t1 = time.monotonic()
            emit(await src.poll_async())  # the hung call still runs: stale at once
            second_wait = time.monotonic() - t1
            write_state(STATE, gpus=one_gpu)
            deadline = time.monotonic() + 10
            while True:
                reading = await src.poll_async()
                if not reading.stale or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            emit(reading)
            task.cancel()
            src.close()
            out.append(
                {"first": first_wait, "second": second_wait, "ticks": ticks_during_wait}
            )

        asyncio.run(main())
        """,
        fake_lib_dir,
        tmp_path / "state",
    )
    assert fresh["stale"] is False and fresh["available"] is True
    for reading in (stale, still_stale):
        assert reading["stale"] is True
        assert reading["problem"] == (
            "NVML did not answer within 0.5 s (a hung driver call); readings are stale. Check "
            "nvidia-smi and dmesg; kvtop keeps the last readings and asks again."
        )
        assert reading["gpus"] == fresh["gpus"]  # the previous reading, marked stale
    assert recovered["stale"] is False
    assert recovered["problem"] is None
    # Behaviour, not speed: both answers came back long before the 4 s hang ended (the first
    # after the 0.5 s call timeout, the second at once), with margins wide enough for a loaded
    # 2-core machine, and the event loop kept running while the worker was stuck in the driver.
    assert timing["first"] < 3.0
    assert timing["second"] < 2.0
    assert timing["ticks"] >= 5
