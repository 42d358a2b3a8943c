"""A fake libnvidia-ml.so.1 (C) served through the real nvidia-ml-py bindings; see build.py."""

from .build import (
    LIB_NAME,
    STATE_ENV,
    FakeNvmlBuildError,
    build_fake_nvml,
    eight_gpus,
    gcc_path,
    kvtop_once,
    write_state,
)

__all__ = [
    "LIB_NAME",
    "STATE_ENV",
    "FakeNvmlBuildError",
    "build_fake_nvml",
    "eight_gpus",
    "gcc_path",
    "kvtop_once",
    "write_state",
]
