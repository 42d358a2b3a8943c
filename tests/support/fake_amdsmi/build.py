"""Compile the fake libamd_smi.so and write its state file.

`build_fake_amdsmi(directory)` compiles fake_amdsmi.c with gcc into DIRECTORY/lib/libamd_smi.so
(set ROCM_PATH=DIRECTORY for the amdsmi binding to load it), reusing the build when neither the
source nor the stubs generated from the installed binding changed (their hash is kept beside it).
`write_state(path, gpus=..., errors=...)` writes the key=value file the library re-reads on every
call (named by the environment variable FAKE_AMDSMI_FILE). build.sh does the same build by hand.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.support.shared_library import compile_library

from .stubs import SOURCE, stubs_header

LIB_NAME = "libamd_smi.so"
ROCM_CORE_NAME = "librocm-core.so"
STATE_ENV = "FAKE_AMDSMI_FILE"
STUBS_NAME = "fake_amdsmi_stubs.h"
GIB = 2**30


class FakeAmdsmiBuildError(RuntimeError):
    """gcc or the amdsmi package is missing, or gcc failed; the message says which."""


def build_fake_amdsmi(directory: str | os.PathLike[str]) -> Path:
    """Compile the fake into DIRECTORY/lib/libamd_smi.so (cached by source hash); return
    DIRECTORY, the value for ROCM_PATH."""
    root = Path(directory)
    lib_dir = root / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    header = stubs_header()
    (lib_dir / STUBS_NAME).write_text(header)
    compile_library(
        SOURCE,
        lib_dir / LIB_NAME,
        "amdsmi",
        FakeAmdsmiBuildError,
        also_hashed=header.encode(),
        include=lib_dir,
    )
    core = lib_dir / ROCM_CORE_NAME
    if not core.is_symlink():
        core.unlink(missing_ok=True)
        core.symlink_to(LIB_NAME)
    return root


def write_state(
    path: str | os.PathLike[str],
    gpus: Mapping[int, Mapping[str, object]] | None = None,
    procs: Mapping[int, Iterable[tuple[int, ...]]] | None = None,
    errors: Iterable[tuple[str, int | None, int]] = (),
    gpu_count: int | None = None,
    driver: str | None = None,
) -> Path:
    """Write the fake's state file atomically.

    gpus: index -> fields (name, uuid, bus_id, mem_total, mem_used, gtt_total, gtt_used (bytes),
    util_gpu, util_mem (%), temp (hotspot °C), temp_edge, power_mw, power_limit_mw).
    procs: index -> (pid, VRAM bytes[, GTT bytes]) each. errors: (function, gpu or None for
    every GPU, amdsmi status code); ("amdsmi_get_gpu_activity", 3, 12) fails GPU 3's activity
    with AMDSMI_STATUS_IO. gpu_count: how many GPUs are enumerated (default: as many as given).
    """
    lines: list[str] = []
    if gpu_count is not None:
        lines.append(f"gpu_count={gpu_count}")
    if driver is not None:
        lines.append(f"driver={driver}")
    for index, fields in sorted((gpus or {}).items()):
        lines.extend(f"gpu.{index}.{key}={value}" for key, value in fields.items())
    for index, entries in sorted((procs or {}).items()):
        listed = ",".join(":".join(str(part) for part in entry) for entry in entries)
        lines.append(f"gpu.{index}.procs={listed}")
    for fn, gpu, code in errors:
        lines.append(f"error.{fn}={code}" if gpu is None else f"gpu.{gpu}.error.{fn}={code}")
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, target)
    return target


# An MI300X's VRAM as amdsmi reports it: 192 GiB.
MI300X_VRAM_BYTES = 192 * GIB


def eight_mi300x(**overrides: object) -> dict[int, dict[str, object]]:
    """A simulated 8 x MI300X host (same fields on each GPU, distinct UUIDs and bus ids)."""
    gpus: dict[int, dict[str, object]] = {}
    for i in range(8):
        fields: dict[str, object] = {
            "name": "AMD Instinct MI300X",
            "uuid": f"{i:02x}ff74a1-0000-1000-80b4-{0x5F3A00000000 + i:012x}",
            "bus_id": f"0000:{0x05 + i * 0x20:02x}:00.0",
            "mem_total": MI300X_VRAM_BYTES,
            "mem_used": 180 * GIB + i * 2**20,
            "util_gpu": 60 + i,
            "util_mem": 30,
            "temp": 50 + i,
            "power_mw": 600000 + i * 1000,
            "power_limit_mw": 750000,
        }
        fields.update(overrides)
        gpus[i] = fields
    return gpus
