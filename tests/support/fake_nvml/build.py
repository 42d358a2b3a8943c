"""Compile the fake libnvidia-ml.so.1 and write its state file.

`build_fake_nvml(directory)` compiles fake_nvml.c with gcc into DIRECTORY/libnvidia-ml.so.1,
reusing the build when the source has not changed (a hash of the source is kept beside it).
`write_state(path, gpus=..., procs=..., ...)` writes the text file the library re-reads on every
call (named by the environment variable KVTOP_FAKE_NVML_STATE).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.support.shared_library import compile_library

SOURCE = Path(__file__).resolve().parent / "fake_nvml.c"
LIB_NAME = "libnvidia-ml.so.1"
STATE_ENV = "KVTOP_FAKE_NVML_STATE"


class FakeNvmlBuildError(RuntimeError):
    """gcc is missing or failed; the message says which."""


def gcc_path() -> str | None:
    return shutil.which("gcc")


def build_fake_nvml(directory: str | os.PathLike[str]) -> Path:
    """Compile the fake into DIRECTORY/libnvidia-ml.so.1 (cached by source hash); return its path."""
    lib = Path(directory) / LIB_NAME
    compile_library(SOURCE, lib, "NVML", FakeNvmlBuildError)
    return lib


def gpu_line(index: int, **fields: object) -> str:
    """One `gpu` line: gpu_line(0, name="NVIDIA H200", total_mib=143771, used_mib=1000)."""
    parts = [f"gpu {index}"] + [f"{k}={v}" for k, v in fields.items()]
    return " ".join(parts)


def write_state(
    path: str | os.PathLike[str],
    gpus: Mapping[int, Mapping[str, object]] | None = None,
    procs: Iterable[tuple[int, int, int | None]] = (),
    errors: Iterable[tuple[str, int | None, int]] = (),
    absent: Iterable[str] = (),
    delays: Iterable[tuple[str, int]] = (),
    init_error: int | None = None,
    driver: str | None = "580.65.06",
) -> Path:
    """Write the fake's state file atomically.

    gpus: index -> fields (name, uuid, bus, total_mib, used_mib, reserved_mib, free_mib (else
    total - used - reserved), util, mem_util, temp, power_mw, limit_mw, throttle: the clocks
    event reasons bitmask); an empty mapping is a host where NVML answers with no GPU.
    procs: (gpu, pid, used_mib or None). errors: (function, gpu or None for all, NVML code;
    ("nvmlDeviceGetHandleByIndex_v2", 3, 999) fails GPU 3's handle with Unknown Error).
    absent: functions that answer "function not found". delays: (function, milliseconds).
    """
    lines: list[str] = []
    if driver is not None:
        lines.append(f"driver {driver}")
    if init_error is not None:
        lines.append(f"init_error code={init_error}")
    for index, fields in sorted((gpus or {}).items()):
        lines.append(gpu_line(index, **fields))
    for gpu, pid, used in procs:
        lines.append(f"proc {gpu} pid={pid}" + ("" if used is None else f" used_mib={used}"))
    for fn, gpu, code in errors:
        lines.append(f"error {fn}" + ("" if gpu is None else f" gpu={gpu}") + f" code={code}")
    lines.extend(f"absent {fn}" for fn in absent)
    lines.extend(f"delay {fn} ms={ms}" for fn, ms in delays)
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, target)
    return target


def eight_gpus(**overrides: object) -> dict[int, dict[str, object]]:
    """A simulated 8 x H200 host (same fields on each GPU, distinct UUIDs and bus ids)."""
    gpus: dict[int, dict[str, object]] = {}
    for i in range(8):
        fields: dict[str, object] = {
            "name": "NVIDIA H200",
            "uuid": f"GPU-{i:08x}-1111-2222-3333-444455556666",
            "bus": f"00000000:{0x18 + i * 0x10:02X}:00.0",
            "total_mib": 143771,
            "used_mib": 130000 + i,
            "reserved_mib": 512,
            "util": 60 + i,
            "mem_util": 30,
            "temp": 50 + i,
            "power_mw": 400000 + i * 1000,
            "limit_mw": 700000,
        }
        fields.update(overrides)
        gpus[i] = fields
    return gpus


def kvtop_once(
    lib_dir: Path, state: Path, log: Path, *extra: str, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    """The installed `kvtop --once --log-file LOG --no-metrics` on the fake NVML in `lib_dir`
    with the GPUs of `state`; it must succeed without a traceback."""
    kvtop = Path(sys.executable).with_name("kvtop")
    env = dict(
        os.environ, LD_LIBRARY_PATH=str(lib_dir), COLUMNS=str(columns), **{STATE_ENV: str(state)}
    )
    result = subprocess.run(
        [str(kvtop), "--once", "--log-file", str(log), "--no-metrics", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return result
