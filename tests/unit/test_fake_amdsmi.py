"""The fake libamd_smi.so read through the REAL amdsmi binding, and kvtop's amdsmi reader on it.

amdsmi loads its library and binds every function once, at import: each test runs its reads in
a fresh Python (ROCM_PATH and FAKE_AMDSMI_FILE set before the import) and hands back JSON. One
such child costs about 0.1 s (measured: the amdsmi import over the fake is ~0.05 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_amdsmi import (
    GIB,
    MI300X_VRAM_BYTES,
    STATE_ENV,
    eight_mi300x,
    write_state,
)

# Found, not imported: importing amdsmi here would load (and fail to find) the library.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("amdsmi") is None, reason="the amdsmi binding is in the test extra"
)

REPO = Path(__file__).resolve().parents[2]  # the children import tests.support from here


def run_child(code: str, rocm: Path | None, state: Path | None) -> Any:
    """CODE in a fresh Python over the fake; what it printed last, as JSON."""
    env = {k: v for k, v in os.environ.items() if k not in ("ROCM_PATH", "ROCM_HOME", STATE_ENV)}
    if rocm is not None:
        env["ROCM_PATH"] = str(rocm)
    if state is not None:
        env[STATE_ENV] = str(state)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


READ_ALL = """
    import json
    import amdsmi as a
    a.amdsmi_init()
    out = []
    for h in a.amdsmi_get_processor_handles():
        vram = a.AmdSmiMemoryType.VRAM
        hot = a.AmdSmiTemperatureType.HOTSPOT
        out.append({
            "name": a.amdsmi_get_gpu_asic_info(h)["market_name"],
            "uuid": a.amdsmi_get_gpu_device_uuid(h),
            "bdf": a.amdsmi_get_gpu_device_bdf(h),
            "total": a.amdsmi_get_gpu_memory_total(h, vram),
            "used": a.amdsmi_get_gpu_memory_usage(h, vram),
            "gfx": a.amdsmi_get_gpu_activity(h)["gfx_activity"],
            "temp": a.amdsmi_get_temp_metric(h, hot, a.AmdSmiTemperatureMetric.CURRENT),
            "power_w": a.amdsmi_get_power_info(h)["socket_power"],
            "cap_uw": a.amdsmi_get_power_cap_info(h)["power_cap"],
            "procs": [[p["pid"], p["memory_usage"]["vram_mem"]]
                      for p in a.amdsmi_get_gpu_process_list(h)],
        })
    a.amdsmi_shut_down()
    print(json.dumps(out))
"""

READER = """
    import json
    from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, NvmlReading
    from kvtop.sources.amdsmi_reader import AmdsmiSource
    source = AmdsmiSource()
    reading = source.poll()
    source.close()
    print(json.dumps({
        "types": [type(reading) is NvmlReading]
        + [type(g) is GpuSample for g in reading.gpus]
        + [type(p) is GpuProcess for g in reading.gpus for p in g.processes],
        "available": reading.available,
        "problem": reading.problem,
        "driver": reading.driver_version,
        "gpus": [
            {
                "name": g.name, "uuid": g.uuid, "bus": g.pci_bus_id, "status": str(g.status),
                "total_gib": g.total_gib, "used_gib": g.used_gib, "free_gib": g.free_gib,
                "util": g.utilization_pct, "mem_util": g.memory_utilization_pct,
                "temp": g.temperature_c, "power_w": g.power_w, "limit_w": g.power_limit_w,
                "procs": [[p.pid, p.used_gib] for p in g.processes],
                "errors": [list(e) for e in g.field_errors],
                "cause": list(g.cause) if g.cause else None,
            }
            for g in reading.gpus
        ],
    }))
"""


def test_struct_layouts_match_the_binding(rocm_path: Path, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state", eight_mi300x())
    sizes = run_child(
        """
        import ctypes, json
        from amdsmi import amdsmi_wrapper as w
        lib = w._libraries["libamd_smi.so"]
        lib.fake_amdsmi_struct_size.restype = ctypes.c_size_t
        lib.fake_amdsmi_struct_size.argtypes = [ctypes.c_char_p]
        names = ["amdsmi_asic_info_t", "amdsmi_vram_usage_t", "amdsmi_engine_usage_t",
                 "amdsmi_power_info_t", "amdsmi_power_cap_info_t", "amdsmi_proc_info_t",
                 "amdsmi_bdf_t", "amdsmi_driver_info_t", "amdsmi_version_t"]
        print(json.dumps({n: [lib.fake_amdsmi_struct_size(n.encode()),
                              ctypes.sizeof(getattr(w, n))] for n in names}))
        """,
        rocm_path,
        state,
    )
    assert all(fake == binding and fake > 0 for fake, binding in sizes.values()), sizes


def test_eight_mi300x_read_through_the_real_binding(rocm_path: Path, tmp_path: Path) -> None:
    procs = {0: [(4242, 150 * GIB)], 5: [(5000, 3 * GIB), (5001, 2**20, 64 * 2**20)]}
    state = write_state(tmp_path / "state", eight_mi300x(), procs=procs)
    gpus = run_child(READ_ALL, rocm_path, state)
    assert len(gpus) == 8
    for i, gpu in enumerate(gpus):
        assert gpu["name"] == "AMD Instinct MI300X"
        assert gpu["uuid"] == f"{i:02x}ff74a1-0000-1000-80b4-{0x5F3A00000000 + i:012x}"
        assert gpu["bdf"] == f"0000:{0x05 + i * 0x20:02x}:00.0"
        assert gpu["total"] == MI300X_VRAM_BYTES
        assert gpu["used"] == 180 * GIB + i * 2**20
        assert (gpu["gfx"], gpu["temp"]) == (60 + i, 50 + i)
        assert (gpu["power_w"], gpu["cap_uw"]) == (600 + i, 750_000_000)
    assert gpus[0]["procs"] == [[4242, 150 * GIB]]
    assert gpus[5]["procs"] == [[5000, 3 * GIB], [5001, 2**20]]
    assert all(g["procs"] == [] for i, g in enumerate(gpus) if i not in procs)


def test_a_changed_state_is_read_again(rocm_path: Path, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state", eight_mi300x())
    changed = eight_mi300x(mem_used=10 * GIB, util_gpu=5)
    code = f"""
        import json
        import amdsmi as a
        from tests.support.fake_amdsmi import write_state
        a.amdsmi_init()
        vram = a.AmdSmiMemoryType.VRAM
        h = a.amdsmi_get_processor_handles()[2]
        before = [a.amdsmi_get_gpu_memory_usage(h, vram), a.amdsmi_get_gpu_activity(h)["gfx_activity"]]
        write_state({str(state)!r}, {changed!r}, procs={{2: [(77, 4096)]}}, gpu_count=3)
        after = [a.amdsmi_get_gpu_memory_usage(h, vram), a.amdsmi_get_gpu_activity(h)["gfx_activity"]]
        print(json.dumps({{"before": before, "after": after,
                          "count": len(a.amdsmi_get_processor_handles()),
                          "procs": [p["pid"] for p in a.amdsmi_get_gpu_process_list(h)]}}))
    """
    seen = run_child(code, rocm_path, state)
    assert seen["before"] == [180 * GIB + 2 * 2**20, 62]
    assert seen["after"] == [10 * GIB, 5]
    assert seen["count"] == 3
    assert seen["procs"] == [77]


def test_an_error_on_one_gpu_is_named_in_amdsmis_words(rocm_path: Path, tmp_path: Path) -> None:
    errors = [("amdsmi_get_gpu_activity", 3, 12), ("amdsmi_get_gpu_fan_speed", None, 6)]
    state = write_state(tmp_path / "state", eight_mi300x(), errors=errors)
    raw = run_child(
        """
        import json
        import amdsmi as a
        a.amdsmi_init()
        hs = a.amdsmi_get_processor_handles()
        out = {}
        for name, call in [("activity", lambda: a.amdsmi_get_gpu_activity(hs[3])),
                           ("fan", lambda: a.amdsmi_get_gpu_fan_speed(hs[0], 0)),
                           ("edge", lambda: a.amdsmi_get_temp_metric(
                               hs[0], a.AmdSmiTemperatureType.EDGE,
                               a.AmdSmiTemperatureMetric.CURRENT))]:
            try:
                call()
                out[name] = None
            except a.AmdSmiLibraryException as exc:
                out[name] = [exc.get_error_code(), exc.get_error_info()]
        out["others"] = [a.amdsmi_get_gpu_activity(h)["gfx_activity"] for h in hs if h is not hs[3]]
        print(json.dumps(out))
        """,
        rocm_path,
        state,
    )
    assert raw["activity"] == [12, "AMDSMI_STATUS_IO - I/O Error"]
    assert raw["fan"] == [6, "AMDSMI_STATUS_DRM_ERROR - Error when called libdrm"]
    # A generated stub and a sensor the board lacks: "not supported".
    assert raw["edge"] == [2, "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"]
    assert raw["others"] == [60, 61, 62, 64, 65, 66, 67]

    reading = run_child(READER, rocm_path, state)
    statuses = [g["status"] for g in reading["gpus"]]
    assert statuses == ["ok"] * 3 + ["error"] + ["ok"] * 4
    bad = reading["gpus"][3]
    assert bad["errors"] == [["utilization", "AMDSMI_STATUS_IO - I/O Error, code 12"]]
    assert bad["cause"] == ["utilization", "AMDSMI_STATUS_IO - I/O Error, code 12"]
    assert bad["util"] is None and bad["used_gib"] == pytest.approx(180 + 3 / 1024)
    assert reading["problem"].startswith(
        "GPU 3: unreadable through amdsmi (utilization: AMDSMI_STATUS_IO - I/O Error, code 12)"
    )
    assert [g["util"] for g in reading["gpus"] if g["status"] == "ok"] == raw["others"]


def test_the_reader_returns_kvtops_sample_types(rocm_path: Path, tmp_path: Path) -> None:
    procs = {0: [(4242, 150 * GIB, 8 * GIB)]}
    state = write_state(
        tmp_path / "state", eight_mi300x(), procs=procs, driver="6.10.5", gpu_count=8
    )
    reading = run_child(READER, rocm_path, state)
    assert reading["types"] == [True] * (1 + 8 + 1)
    assert (reading["available"], reading["problem"], reading["driver"]) == (True, None, "6.10.5")
    first = reading["gpus"][0]
    assert first == {
        "name": "AMD Instinct MI300X",
        "uuid": "00ff74a1-0000-1000-80b4-5f3a00000000",
        "bus": "0000:05:00.0",
        "status": "ok",
        "total_gib": 192.0,
        "used_gib": 180.0,
        "free_gib": 12.0,
        "util": 60,
        "mem_util": 30,
        "temp": 50,
        "power_w": 600.0,
        "limit_w": 750.0,
        # VRAM only: the 8 GiB of GTT (system memory) is not the GPU's memory.
        "procs": [[4242, 150.0]],
        # No edge sensor on MI300X: the hotspot reading is used and nothing is missing.
        "errors": [],
        "cause": None,
    }


def test_a_gpu_amdsmi_no_longer_finds_is_lost(rocm_path: Path, tmp_path: Path) -> None:
    state = write_state(
        tmp_path / "state", eight_mi300x(), errors=[("amdsmi_get_gpu_memory_total", 6, 31)]
    )
    reading = run_child(READER, rocm_path, state)
    lost = reading["gpus"][6]
    assert lost["status"] == "lost"
    assert lost["errors"] == [["gpu", "AMDSMI_STATUS_NOT_FOUND - Device Not found, code 31"]]
    assert reading["problem"].startswith("GPU 6: lost (amdsmi no longer finds it)")
    assert sum(g["status"] == "ok" for g in reading["gpus"]) == 7


def test_without_driver_or_library_the_reader_says_so(rocm_path: Path, tmp_path: Path) -> None:
    code = """
        import contextlib, io, json
        from kvtop.sources.amdsmi_reader import AmdsmiSource
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            reading = AmdsmiSource().poll()
        print(json.dumps([reading.available, reading.problem, printed.getvalue()]))
    """
    no_driver = run_child(code, rocm_path, None)  # no state file: the driver is not loaded
    assert no_driver[0] is False
    assert no_driver[1].startswith(
        "amdgpu driver not loaded (amdsmi: AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded)"
    )
    no_library = run_child(code, tmp_path / "no-rocm", None)
    assert no_library[0] is False
    assert no_library[1].startswith("AMD SMI library not found (libamd_smi.so)")
    # The binding's own "Could not load libamd_smi.so" line never reaches the screen.
    assert no_library[2] == ""
