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

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.paths import STORY_LOG

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    gcc_path() is None, reason="gcc not found: cannot build the fake libnvidia-ml.so.1"
)

PRELUDE = """
import asyncio, dataclasses, json, os, time
from tests.support.fake_nvml import eight_gpus, write_state
from kvtop.sources.nvml import NvmlSource
STATE = os.environ["KVTOP_FAKE_NVML_STATE"]
out = []
def emit(reading):
    out.append(dataclasses.asdict(reading))
"""


def run_scenario(
    body: str, lib_dir: Path | None, state: Path, timeout: float = 20.0
) -> list[dict[str, object]]:
    """Run BODY (after PRELUDE) in a fresh interpreter; return what it emit()ted."""
    env = dict(os.environ)
    env[STATE_ENV] = str(state)
    env["PYTHONPATH"] = str(ROOT)  # kvtop and tests.support
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


def test_eight_gpus_all_fields(lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        gpus = eight_gpus()
        gpus[0]["name"] = "NVIDIA RTX PRO 6000 Blackwell"
        write_state(STATE, gpus=gpus, procs=[(0, 1234, 90000), (1, 1235, None)], driver="580.65.06")
        emit(NvmlSource().poll())
        """,
        lib_dir,
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


def test_memory_v1_fallback_when_v2_missing(lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        write_state(STATE, gpus=eight_gpus(), absent=["nvmlDeviceGetMemoryInfo_v2"])
        emit(NvmlSource().poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    g0 = reading["gpus"][0]
    assert g0["status"] == "ok"
    assert g0["reserved_gib"] is None
    # v1 "used" counts the driver's reserve.
    assert g0["used_gib"] == pytest.approx((130000 + 512) / 1024)
    assert g0["field_errors"] == []


def test_power_not_supported_only_affects_power(lib_dir: Path, tmp_path: Path) -> None:
    (reading,) = run_scenario(
        """
        write_state(STATE, gpus=eight_gpus(), errors=[("nvmlDeviceGetPowerUsage", None, 3)])
        emit(NvmlSource().poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    for g in reading["gpus"]:
        assert g["status"] == "ok"
        assert g["power_w"] is None
        assert g["power_limit_w"] == pytest.approx(700.0)
        assert g["temperature_c"] is not None
        assert g["utilization_pct"] is not None
        assert g["field_errors"] == [["power", "Not Supported"]]


def test_gpu_lost_then_recovers(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
        tmp_path / "state",
    )
    assert before["gpus"][3]["status"] == "ok"
    assert lost["available"] is True
    g3 = lost["gpus"][3]
    assert g3["status"] == "lost"
    assert g3["name"] == "NVIDIA H200"  # what was known before it fell off the bus
    assert g3["field_errors"] == [["gpu", "GPU is lost"]]
    assert "GPU 3: lost" in lost["problem"]
    assert all(g["status"] == "ok" for i, g in enumerate(lost["gpus"]) if i != 3)
    assert lost["gpus"][0]["used_gib"] == pytest.approx(130000 / 1024)
    assert after["problem"] is None
    assert after["gpus"][3]["status"] == "ok"
    assert after["gpus"][3]["name"] == "NVIDIA H200 (replaced)"  # facts read again


def test_one_unreadable_handle_leaves_the_others_read(lib_dir: Path, tmp_path: Path) -> None:
    """GPU 3's handle answers Unknown Error (as after an Xid 79): GPU 3 is unreadable with the
    error named; the other seven keep their numbers; NVML stays available; it comes back."""
    before, failed, after = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        write_state(
            STATE, gpus=eight_gpus(), errors=[("nvmlDeviceGetHandleByIndex_v2", 3, 999)]
        )
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert before["gpus"][3]["status"] == "ok"
    assert failed["available"] is True
    g3 = failed["gpus"][3]
    assert g3["status"] == "error"
    assert g3["name"] == "NVIDIA H200"  # known from before
    assert g3["field_errors"] == [["handle", "Unknown Error, code 999"]]
    assert "GPU 3: unreadable through NVML (handle: Unknown Error, code 999)" in failed["problem"]
    assert "the other GPUs keep updating" in failed["problem"]
    others = [g for i, g in enumerate(failed["gpus"]) if i != 3]
    assert all(g["status"] == "ok" for g in others)
    assert others[0]["used_gib"] == pytest.approx(130000 / 1024)
    assert after["problem"] is None
    assert after["gpus"][3]["status"] == "ok"


def test_any_call_failing_marks_only_its_gpu(lib_dir: Path, tmp_path: Path) -> None:
    """A call other than memory failing with a real error (not "not supported") makes that GPU
    unreadable and names the call; "not supported" only blanks the cell."""
    (reading,) = run_scenario(
        """
        write_state(
            STATE,
            gpus=eight_gpus(),
            errors=[
                ("nvmlDeviceGetTemperature", 5, 999),
                ("nvmlDeviceGetPowerUsage", 1, 3),
            ],
        )
        emit(NvmlSource().poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    g5, g1 = reading["gpus"][5], reading["gpus"][1]
    assert g5["status"] == "error"
    assert ["temperature", "Unknown Error, code 999"] in g5["field_errors"]
    assert (
        "GPU 5: unreadable through NVML (temperature: Unknown Error, code 999)"
        in (reading["problem"])
    )
    assert g1["status"] == "ok" and g1["power_w"] is None
    assert [g["status"] for i, g in enumerate(reading["gpus"]) if i not in (1, 5)] == ["ok"] * 6


def test_clock_event_reasons_read_and_old_name_fallback(lib_dir: Path, tmp_path: Path) -> None:
    """The clocks event reasons bitmask per GPU; a driver before 12.535 has only the older
    name (throttle reasons), and a card without either leaves None."""
    new, old, neither = run_scenario(
        """
        gpus = eight_gpus()
        gpus[2]["throttle"] = "0x44"  # SW power cap + HW thermal slowdown
        write_state(STATE, gpus=gpus)
        emit(NvmlSource().poll())
        write_state(STATE, gpus=gpus, absent=["nvmlDeviceGetCurrentClocksEventReasons"])
        emit(NvmlSource().poll())
        write_state(
            STATE,
            gpus=gpus,
            absent=["nvmlDeviceGetCurrentClocksEventReasons"],
            errors=[("nvmlDeviceGetCurrentClocksThrottleReasons", None, 3)],
        )
        emit(NvmlSource().poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert [g["clock_event_reasons"] for g in new["gpus"]] == [0, 0, 0x44, 0, 0, 0, 0, 0]
    assert old["gpus"][2]["clock_event_reasons"] == 0x44
    assert all(g["status"] == "ok" for g in old["gpus"])
    assert all(g["clock_event_reasons"] is None and g["status"] == "ok" for g in neither["gpus"])


def test_processes_v3_missing_uses_v2(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
        tmp_path / "state",
    )
    g2 = reading["gpus"][2]
    assert g2["processes"] == [{"pid": 4242, "used_gib": 1.0}]
    assert g2["field_errors"] == []


def test_processes_refresh_on_their_own_interval(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
        tmp_path / "state",
    )
    assert first["gpus"][0]["processes"] == [{"pid": 100, "used_gib": 1.0}]
    assert cached["gpus"][0]["processes"] == [{"pid": 100, "used_gib": 1.0}]
    assert cached["gpus"][0]["used_gib"] == pytest.approx(1 / 1024)  # memory is live
    assert refreshed["gpus"][0]["processes"] == [{"pid": 200, "used_gib": 2.0}]


def test_device_count_drops_and_returns(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
        tmp_path / "state",
    )
    assert len(eight["gpus"]) == 8
    assert len(seven["gpus"]) == 7
    assert seven["available"] is True
    assert seven["problem"].startswith("NVML sees 7 GPUs now, 8 before")
    assert eight["problem"] is None and back["problem"] is None
    assert len(back["gpus"]) == 8
    assert back["gpus"][7]["name"] == "NVIDIA H200 NVL"
    assert back["gpus"][7]["status"] == "ok"


def test_impossible_numbers_are_refused_not_shown(lib_dir: Path, tmp_path: Path) -> None:
    """0xFFFFFFFF utilization and temperature, used above total: refused, blank, reported."""
    bad, good = run_scenario(
        """
        src = NvmlSource()
        gpus = eight_gpus()
        gpus[0].update(util=4294967295, temp=4294967295, power_mw=4294967295)
        gpus[1].update(used_mib=200000)  # more than its 143771 MiB
        gpus[2].update(free_mib=300000)
        write_state(STATE, gpus=gpus, procs=[(3, 77, 2**40)])
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    g0, g1, g2, g3 = bad["gpus"][:4]
    assert g0["utilization_pct"] is None and g0["temperature_c"] is None
    assert g0["power_w"] is None
    assert g0["memory_utilization_pct"] == 30 and g0["status"] == "ok"
    assert g0["rejected"] == [
        {"field": "utilization", "value": "4294967295", "reason": "out of range"},
        {"field": "temperature", "value": "4294967295", "reason": "out of range"},
        {"field": "power", "value": "4294967295", "reason": "out of range"},
    ]
    assert g1["status"] == "error" and g1["used_gib"] == 0
    assert g1["rejected"] == [
        {
            "field": "memory_used",
            "value": str(200000 * 2**20),
            "reason": f"more than the GPU's total ({143771 * 2**20} bytes)",
        }
    ]
    assert g1["utilization_pct"] == 61  # the rest of the reading stands
    assert [r["field"] for r in g2["rejected"]] == ["memory_free"]
    assert g3["processes"] == [{"pid": 77, "used_gib": None}]
    assert g3["rejected"][0]["field"] == "process 77 memory"
    assert all(g["rejected"] == [] for g in bad["gpus"][4:])
    problem = bad["problem"]
    assert "impossible numbers" in problem and "GPU 0: utilization 4294967295" in problem
    assert "and 1 more GPU." in problem and "nvidia-smi" in problem
    assert good["problem"] is None
    assert all(g["rejected"] == [] and g["status"] == "ok" for g in good["gpus"])


def test_gpu_count_drop_to_zero_is_said(lib_dir: Path, tmp_path: Path) -> None:
    eight, none, back, fresh = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        write_state(STATE, gpus={})
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        write_state(STATE, gpus={})
        emit(NvmlSource().poll())  # a host that never had a GPU: nothing dropped
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert eight["problem"] is None
    assert none["available"] is True and none["gpus"] == []
    assert none["problem"].startswith("NVML sees no GPU now, 8 before")
    assert back["problem"] is None
    assert fresh["problem"] is None and fresh["gpus"] == []


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


def test_driver_not_loaded_then_fixed(lib_dir: Path, tmp_path: Path) -> None:
    broken, still, fixed = run_scenario(
        """
        src = NvmlSource()
        write_state(STATE, gpus=eight_gpus(), init_error=9)
        emit(src.poll())
        emit(src.poll())
        write_state(STATE, gpus=eight_gpus())
        emit(src.poll())
        """,
        lib_dir,
        tmp_path / "state",
    )
    for reading in (broken, still):
        assert reading["available"] is False
        assert reading["problem"].startswith("NVIDIA driver not loaded")
        assert "kvtop retries each poll" in reading["problem"]
    assert fixed["available"] is True
    assert fixed["problem"] is None
    assert len(fixed["gpus"]) == 8


def test_driver_goes_away_after_init(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
        tmp_path / "state",
    )
    assert ok["available"] is True
    assert gone["available"] is False
    assert gone["problem"].startswith("NVIDIA driver not loaded")
    assert back["available"] is True and len(back["gpus"]) == 8


def test_a_poll_begun_early_answers_the_first_wait(lib_dir: Path, tmp_path: Path) -> None:
    """start_early() reads the GPUs at once in the library's thread: the first poll_async()
    hands back that reading (taken before the state changed), the next one reads again."""
    early, next_one = run_scenario(
        """
        gpu = eight_gpus()[0]
        write_state(STATE, gpus={0: {**gpu, "used_mib": 1024}})
        src = NvmlSource()
        src.start_early()
        deadline = time.monotonic() + 10
        while src.last is None and time.monotonic() < deadline:  # the early poll is done
            time.sleep(0.01)
        write_state(STATE, gpus={0: {**gpu, "used_mib": 2048}})

        async def main():
            emit(await src.poll_async())
            emit(await src.poll_async())
            src.close()

        asyncio.run(main())
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert [g["used_gib"] for g in early["gpus"]] == [1.0]
    assert [g["used_gib"] for g in next_one["gpus"]] == [2.0]


def test_hung_call_gives_stale_reading_without_blocking(lib_dir: Path, tmp_path: Path) -> None:
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
        lib_dir,
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


def kvtop_once(
    lib_dir: Path, state: Path, *args: str, code: int = 0
) -> tuple[dict[str, object], str]:
    """The real `kvtop --once` (JSON, then text) with the fake NVML; metrics off; `code`: its
    exit status (1 when no source could be read)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), **{STATE_ENV: str(state)})
    out = []
    for fmt in (["--json"], []):
        result = subprocess.run(
            [sys.executable, "-m", "kvtop", "--once", *fmt, "--no-metrics", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        out.append(result.stdout)
    return json.loads(out[0]), out[1]


def test_once_reports_refused_values(lib_dir: Path, tmp_path: Path) -> None:
    """Which GPU, field, raw value and reason, in the JSON and the text; marker degraded."""
    gpus = {
        0: dict(eight_gpus()[0], util=4294967295, temp=4294967295),
        1: dict(eight_gpus()[1], used_mib=200000),
    }
    state = write_state(tmp_path / "state", gpus=gpus)
    data, text = kvtop_once(lib_dir, state, "--log-file", str(STORY_LOG))
    g0, g1 = data["gpus"]  # type: ignore[misc]
    assert g0["utilization_pct"] is None and g0["temperature_c"] is None
    assert g1["status"] == "error" and g1["used_gib"] is None and g1["total_gib"] is None
    assert data["rejected_from_nvml"] == [
        {"gpu": 0, "field": "utilization", "value": "4294967295", "reason": "out of range"},
        {"gpu": 0, "field": "temperature", "value": "4294967295", "reason": "out of range"},
        {
            "gpu": 1,
            "field": "memory_used",
            "value": str(200000 * 2**20),
            "reason": f"more than the GPU's total ({143771 * 2**20} bytes)",
        },
    ]
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")  # type: ignore[union-attr]
    assert nvml["state"] == "degraded" and "impossible numbers" in nvml["detail"]
    flat = " ".join(text.split())
    assert "rejected from NVML (not used, shown blank): GPU 0 utilization 4294967295" in flat
    rows = [line for line in text.splitlines() if "NVIDIA H200" in line]
    assert len(rows) == 2 and not any("4294967295" in row for row in rows)  # no cell shows it


def test_once_no_gpu_here_for_the_log_ranks(lib_dir: Path, tmp_path: Path) -> None:
    """NVML answers with no GPU while the log has TP0-7: a note naming them, NVML not ok."""
    state = write_state(tmp_path / "state", gpus={})
    data, text = kvtop_once(lib_dir, state, "--log-file", str(STORY_LOG))
    assert data["gpus"] == []
    note = "TP0–7 from the log have no GPU here: NVML sees no GPU."
    assert any(n.startswith(note) for n in data["notes"])  # type: ignore[union-attr]
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")  # type: ignore[union-attr]
    assert nvml["state"] == "degraded" and nvml["detail"].startswith(note)
    assert note in " ".join(text.split())
    # A log without ranks: none miss a GPU, and NVML's empty answer stands as it is.
    empty = tmp_path / "empty.log"
    empty.write_text("")
    data, _ = kvtop_once(lib_dir, state, "--log-file", str(empty), code=1)  # nothing read
    assert not data["notes"]
    assert next(s for s in data["sources"] if s["name"] == "nvml")["state"] == "ok"  # type: ignore[union-attr]


def test_the_first_frame_looks_at_the_early_reading_without_taking_it(
    lib_dir: Path, tmp_path: Path
) -> None:
    """The live view's first frame draws the early poll's reading (with the rank a real
    process's title names); the session's first poll_async() still takes that same reading, and
    only the one after reads the driver again."""
    views, first, second = run_scenario(
        """
        from kvtop.early_gpus import early_gpu_views
        from kvtop.sources.gpu_sources import HostGpus
        from tests.support.sglang_procs import titled_process

        # A process titled as SGLang's schedulers are (argv[0], as setproctitle writes it).
        child = titled_process("sglang::scheduler_TP0")
        gpu = eight_gpus()[0]
        write_state(STATE, gpus={0: {**gpu, "used_mib": 1024}}, procs=[(0, child.pid, 900)])
        gpus = HostGpus()
        gpus.start_early()

        async def main():
            shown = await early_gpu_views(gpus, 10.0)
            out.append([
                {"ranks": list(v.ranks), "used": v.sample.used_gib,
                 "segments": [name for name, _ in v.memory.segments()],
                 "processes": [(p.pid == child.pid, p.rank) for p in v.processes]}
                for v in shown
            ])
            write_state(STATE, gpus={0: {**gpu, "used_mib": 2048}}, procs=[(0, child.pid, 900)])
            emit(await gpus.poll_async())
            emit(await gpus.poll_async())
            gpus.close()

        try:
            asyncio.run(main())
        finally:
            child.kill()
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert views == [
        {
            "ranks": ["TP0"],
            "used": 1.0,
            "segments": ["runtime", "free"],
            "processes": [[True, "TP0"]],
        }
    ]
    assert [g["used_gib"] for g in first["gpus"]] == [1.0]  # the early reading, taken now
    assert [g["used_gib"] for g in second["gpus"]] == [2.0]  # read again


def test_the_first_frame_does_not_wait_for_a_slow_driver(lib_dir: Path, tmp_path: Path) -> None:
    """A driver that takes longer to load than the first frame waits: the frame draws no GPU
    (rather than waiting), and the session's first poll still gets the reading when it comes."""
    (outcome,) = run_scenario(
        """
        from kvtop.early_gpus import early_gpu_views
        from kvtop.sources.gpu_sources import HostGpus

        slow = [(name, 1500) for name in ("nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit")]
        write_state(STATE, gpus={0: eight_gpus()[0]}, delays=slow)
        gpus = HostGpus()
        gpus.start_early()

        async def main():
            began = time.monotonic()
            shown = await early_gpu_views(gpus, 0.1)
            waited = time.monotonic() - began
            gpus.call_timeout_s = 10.0
            reading = await gpus.poll_async()
            out.append({"shown": len(shown), "waited_under_1s": waited < 1.0,
                        "then": len(reading.gpus)})
            gpus.close()

        asyncio.run(main())
        """,
        lib_dir,
        tmp_path / "state",
    )
    assert outcome == {"shown": 0, "waited_under_1s": True, "then": 1}
