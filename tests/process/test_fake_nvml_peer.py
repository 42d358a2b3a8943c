"""The fake libnvidia-ml.so.1 answers the NVML functions peer tools call (nvitop 1.7.2).

Functions the state file cannot answer are exported and return NVML_ERROR_NOT_SUPPORTED, like a
driver on a card without the feature, instead of being missing (nvidia-ml-py would raise
NVMLError_FunctionNotFound, which tools such as nvitop treat as a broken install and retry).

As in test_nvml_source.py, pynvml runs in a fresh interpreter with the fake on LD_LIBRARY_PATH
(pynvml keeps its library handle in module globals; the loader reads LD_LIBRARY_PATH at start-up);
the child evaluates each call and prints the outcomes as JSON. nvitop itself is not needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state

pytestmark = pytest.mark.skipif(
    gcc_path() is None, reason="gcc not found: cannot build the fake libnvidia-ml.so.1"
)

MIB = 1024 * 1024

# Every C function nvitop 1.7.2 looked up (`nvitop --once` and the monitor with its process,
# tree, environment, help and display-mode screens), recorded on an 8-GPU state with and without
# the stubs (some lookups are only probes that pick which variant nvitop calls).
NVITOP_FUNCTIONS = [
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetDriverModel",
    "nvmlDeviceGetDriverModel_v2",
    "nvmlDeviceGetConfComputeMemSizeInfo",
    "nvmlDeviceGetRunningProcessDetailList",
]

# (C function, the nvidia-ml-py call that reaches it) for the NOT_SUPPORTED stubs.
# pynvml.nvmlDeviceGetDriverModel calls the _v2 symbol, so the unversioned one is called raw.
STUBBED = [
    ("nvmlDeviceGetFanSpeed", "pynvml.nvmlDeviceGetFanSpeed(h())"),
    ("nvmlDeviceGetPerformanceState", "pynvml.nvmlDeviceGetPerformanceState(h())"),
    ("nvmlDeviceGetPersistenceMode", "pynvml.nvmlDeviceGetPersistenceMode(h())"),
    ("nvmlDeviceGetDisplayActive", "pynvml.nvmlDeviceGetDisplayActive(h())"),
    ("nvmlDeviceGetComputeMode", "pynvml.nvmlDeviceGetComputeMode(h())"),
    ("nvmlDeviceGetClockInfo", "pynvml.nvmlDeviceGetClockInfo(h(), pynvml.NVML_CLOCK_SM)"),
    (
        "nvmlDeviceGetTotalEccErrors",
        "pynvml.nvmlDeviceGetTotalEccErrors(h(), pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,"
        " pynvml.NVML_VOLATILE_ECC)",
    ),
    ("nvmlDeviceGetMigMode", "pynvml.nvmlDeviceGetMigMode(h())"),
    ("nvmlDeviceGetEncoderUtilization", "pynvml.nvmlDeviceGetEncoderUtilization(h())"),
    ("nvmlDeviceGetDecoderUtilization", "pynvml.nvmlDeviceGetDecoderUtilization(h())"),
    ("nvmlDeviceGetProcessUtilization", "pynvml.nvmlDeviceGetProcessUtilization(h(), 0)"),
    ("nvmlDeviceGetDriverModel", "raw('nvmlDeviceGetDriverModel', h(), uint_ref(), uint_ref())"),
    ("nvmlDeviceGetDriverModel_v2", "pynvml.nvmlDeviceGetDriverModel_v2(h())"),
    ("nvmlDeviceGetConfComputeMemSizeInfo", "pynvml.nvmlDeviceGetConfComputeMemSizeInfo(h())"),
    (
        "nvmlDeviceGetRunningProcessDetailList",
        "pynvml.nvmlDeviceGetRunningProcessDetailList(h(), pynvml.nvmlProcessDetailList_v1,"
        " pynvml.NVML_PROCESS_MODE_COMPUTE)",
    ),
]

# Calls that return data from the state file (eight_gpus(), one process on GPU 0).
IMPLEMENTED = {
    "count": ("pynvml.nvmlDeviceGetCount()", 8),
    "name": ("pynvml.nvmlDeviceGetName(h(7))", "NVIDIA H200"),
    "memory_v2_used": (
        "pynvml.nvmlDeviceGetMemoryInfo(h(), version=pynvml.nvmlMemory_v2).used",
        130000 * MIB,
    ),
    "temperature": ("pynvml.nvmlDeviceGetTemperature(h(7), pynvml.NVML_TEMPERATURE_GPU)", 57),
    "temperature_v": ("pynvml.nvmlDeviceGetTemperatureV(h(7), pynvml.NVML_TEMPERATURE_GPU)", 57),
    "is_mig_device_handle": ("pynvml.nvmlDeviceIsMigDeviceHandle(h(3)).value", 0),
    "process_pids": (
        "[p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h())]",
        [4242],
    ),
}

CHILD = textwrap.dedent(
    """
    import ctypes, json, sys
    import pynvml

    spec = json.loads(sys.argv[1])
    pynvml.nvmlInit()

    def h(index=0):
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def uint_ref():
        return ctypes.byref(ctypes.c_uint())

    def raw(name, *args):
        pynvml._nvmlCheckReturn(pynvml._nvmlGetFunctionPointer(name)(*args))

    out = {"exported": {n: hasattr(pynvml.nvmlLib, n) for n in spec["symbols"]}, "calls": {}}
    for label, expr in spec["calls"].items():
        try:
            value = eval(expr)
        except pynvml.NVMLError as e:
            out["calls"][label] = {
                "error": type(e).__name__,
                "code": e.value,
                "not_supported": isinstance(e, pynvml.NVMLError_NotSupported),
            }
        else:
            if isinstance(value, bytes):
                value = value.decode()
            out["calls"][label] = {"value": value}
    pynvml.nvmlShutdown()
    print(json.dumps(out))
    """
)


def run_calls(
    lib_dir: Path, state: Path, calls: dict[str, str], symbols: Sequence[str] = ()
) -> dict[str, dict]:
    """Evaluate CALLS (label -> expression) with pynvml over the fake in a fresh interpreter."""
    env = dict(os.environ)
    env[STATE_ENV] = str(state)
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    spec = json.dumps({"calls": calls, "symbols": list(symbols)})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, spec],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def default_results(lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    state = tmp_path_factory.mktemp("peer-state") / "state"
    write_state(state, gpus=eight_gpus(), procs=[(0, 4242, 1000)])
    calls = {name: expr for name, expr in STUBBED}
    calls.update({label: expr for label, (expr, _) in IMPLEMENTED.items()})
    return run_calls(lib_dir, state, calls, NVITOP_FUNCTIONS)


def test_every_function_nvitop_requests_is_exported(default_results: dict) -> None:
    missing = [name for name, present in default_results["exported"].items() if not present]
    assert missing == []


@pytest.mark.parametrize(("function", "call"), STUBBED, ids=[name for name, _ in STUBBED])
def test_stub_raises_not_supported(default_results: dict, function: str, call: str) -> None:
    assert default_results["calls"][function] == {
        "error": "NVMLError_NotSupported",
        "code": 3,
        "not_supported": True,
    }, call


@pytest.mark.parametrize("label", sorted(IMPLEMENTED))
def test_implemented_functions_return_state_data(default_results: dict, label: str) -> None:
    expected = IMPLEMENTED[label][1]
    assert default_results["calls"][label] == {"value": expected}


def test_state_rules_apply_to_stubs(lib_dir: Path, tmp_path: Path) -> None:
    """absent/error lines reach the stubs too; other GPUs keep answering NOT_SUPPORTED."""
    state = tmp_path / "state"
    write_state(
        state,
        gpus=eight_gpus(),
        absent=["nvmlDeviceGetFanSpeed"],
        errors=[("nvmlDeviceGetMigMode", 2, 15)],
    )
    results = run_calls(
        lib_dir,
        state,
        {
            "fan": "pynvml.nvmlDeviceGetFanSpeed(h())",
            "mig_gpu2": "pynvml.nvmlDeviceGetMigMode(h(2))",
            "mig_gpu1": "pynvml.nvmlDeviceGetMigMode(h(1))",
        },
    )["calls"]
    assert results["fan"]["error"] == "NVMLError_FunctionNotFound"
    assert results["mig_gpu2"]["error"] == "NVMLError_GpuIsLost"
    assert results["mig_gpu1"]["not_supported"] is True
